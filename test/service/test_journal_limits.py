"""Crash-recovery journal (append-only, compacted, locked) and the inbound limits of the planner."""

import json
import math

import pytest

from timely_llm_ros.core import limits
from timely_llm_ros.core.task import TaskRejected
from timely_llm_ros.service.journal import Journal, JournalError, default_path


def test_open_tasks_survive_a_crash_and_ended_ones_are_compacted_away(tmp_path):
    path = tmp_path / "j" / "planner.journal"
    j = Journal(path)
    assert j.open() == []
    j.accepted("a", {"task_id": "a", "agent_id": "d1", "instruction": "go"})
    j.segment("a", 0, "mu(40)", 1.0, 2.0)
    j.started("a", 0, 100.0)
    j.done("a", 0, 101.5)
    j.segment("a", 1, ";tp;", 0.5, 0.7)
    j.accepted("b", {"task_id": "b", "agent_id": "d2"})
    j.ended("b", "COMPLETED")
    j.segment("ghost", 0, "x", 0, 0)  # never accepted here: not followed
    # kill -9: no close(); a torn last line from a crash mid-write
    with open(path, "a", encoding="utf-8") as f:
        f.write('{"e":"done","id":"a","se')
    j2 = Journal(path)
    with pytest.raises(JournalError, match="in use by another planner"):
        j2.open()
    j._lock.close()  # the crashed process's lock dies with it
    j._lock = None
    (task,) = j2.open()
    assert task.task_id == "a" and task.task["agent_id"] == "d1"
    assert [(s.text, s.started, s.done) for s in task.segments[:1]] == [("mu(40)", 100.0, 101.5)]
    assert task.segments[1].text == ";tp;" and math.isnan(task.segments[1].done)
    assert j2.stats["skipped_lines"] == 1
    lines = path.read_text().splitlines()  # compacted: only task a's lines remain
    assert {json.loads(x)["id"] for x in lines} == {"a"} and len(lines) == 5
    j2.ended("a", "FAILED", "planner restarted")
    j2.close()
    j3 = Journal(path)
    assert j3.open() == [] and path.read_text() == ""
    j3.close()


def test_the_journal_compacts_itself_when_it_grows(tmp_path):
    j = Journal(tmp_path / "p.journal", compact_bytes=2000)
    j.open()
    for i in range(100):
        j.accepted(f"t{i}", {"task_id": f"t{i}", "text": "x" * 50})
        j.ended(f"t{i}", "COMPLETED")
    assert (tmp_path / "p.journal").stat().st_size < 2000 and j.stats["compactions"] > 1
    j.close()


def test_default_path_follows_ros_home(monkeypatch, tmp_path):
    monkeypatch.setenv("ROS_HOME", str(tmp_path))
    monkeypatch.setenv("ROS_DOMAIN_ID", "42")
    assert default_path("planner") == tmp_path / "timely_llm_ros" / "42_planner.journal"
    assert default_path("/fleet/planner", 7).name == "7_fleet.planner.journal"


def fields(**kw):
    base = dict(
        task_id="t",
        agent_id="d1",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="go",
        scene="",
        task_class="",
        max_tokens=0,
        ert=1.0,
        alpha=-2.0,
        beta=1.0,
    )
    return limits.TaskFields(**{**base, **kw})


@pytest.mark.parametrize(
    "kw,why",
    [
        (dict(agent_id="a" * 232), "agent_id is 232 characters long; the limit is 64"),
        (dict(task_id="t" * 1000), "task_id is 1000 characters"),
        (dict(instruction="x" * 10**6), "instruction is 1000000 characters"),
        (dict(scene="s" * 20_000), "scene is 20000"),
        (dict(skill_set="\x00set"), "skill_set contains control characters"),
        (dict(ert=1e12), "ERT must be within [0, 86400] s"),
        (dict(alpha=-1e-12), "utility horizon ERT + beta/-alpha = 1e+12 s exceeds 1e+06 s"),
        (dict(alpha=-1e300), "alpha must be within"),
        (dict(alpha=0.5), "alpha must be <= 0"),
        (dict(beta=1e300), "beta must be within"),
        (dict(beta=math.inf), "beta must be finite"),
        (dict(ert=math.nan), "ert must be finite"),
        (dict(max_tokens=2**32 - 1), "max_tokens 4294967295 is out of range"),
    ],
)
def test_fields_beyond_their_limits_are_rejected_with_the_limit(kw, why):
    with pytest.raises(TaskRejected) as err:
        limits.check_task_fields(fields(**kw))
    assert why in err.value.reason


def test_legal_extremes_pass_and_keep_every_derived_time_finite():
    from timely_llm_ros.core.tuf import TUF

    for kw in (
        dict(alpha=0.0),
        dict(ert=limits.MAX_ERT_S, alpha=-1.0),
        dict(alpha=-limits.MAX_ABS_ALPHA),
        dict(agent_id="a" * 64, task_id="é" * 128, instruction="ü🙂" * 3000),
    ):
        limits.check_task_fields(fields(**kw))
        f = fields(**kw)
        tuf = TUF(f.ert, f.alpha, f.beta)
        assert tuf.zero_time == math.inf or tuf.zero_time <= limits.MAX_HORIZON_S
        assert math.isfinite(tuf(1e9))


def test_clip_rate_limiter_and_recent_ids():
    assert limits.clip("abc", 5) == "abc"
    clipped = limits.clip("x" * 10**6, 100)
    assert clipped == "x" * 70 + "… [999930 more characters cut]" and len(clipped) == 100
    assert limits.clip(clipped, 100) == clipped  # idempotent
    now = [0.0]
    rl = limits.RateLimiter(5.0, lambda: now[0])
    assert rl.allow("k") == 0 and rl.allow("k") is None and rl.allow("j") == 0
    now[0] = 5.1
    assert rl.allow("k") == 1  # one suppressed since the last line
    ids = limits.RecentIds(2)
    for k in "abc":
        ids.add(k)
    assert "a" not in ids and "c" in ids and len(ids) == 2


def test_rate_limiter_forgets_keys_of_agents_gone():
    """Issue 27: warnings keyed by agent (ghost feedback, rejections) must not keep an entry per ghost
    until max_keys: a key that suppressed nothing goes once its period ends; one that suppressed
    events keeps its count (for the next report) for STALE_PERIODS periods, then goes too."""
    now = [0.0]
    rl = limits.RateLimiter(5.0, lambda: now[0])
    for i in range(100):
        assert rl.allow(f"feedback:ghost_{i}") == 0
    assert rl.allow("feedback:ghost_0") is None  # suppressed: its count is kept
    assert len(rl) == 100
    now[0] = 4.9
    rl.prune()
    assert len(rl) == 100  # still within the period
    now[0] = 5.1
    rl.prune()
    assert len(rl) == 1  # only the key with a suppressed event
    now[0] = 6.0
    assert rl.allow("feedback:ghost_0") == 1  # its count still reported
    now[0] = 11.2
    rl.prune()
    assert len(rl) == 0  # reported at 6.0, nothing suppressed since
    assert rl.allow("stale") == 0 and rl.allow("stale") is None
    now[0] = 11.2 + 5.0 * rl.STALE_PERIODS - 0.1
    rl.prune()
    assert len(rl) == 1  # its suppressed count waits for a report
    now[0] += 0.2
    rl.prune()
    assert len(rl) == 0  # ... but not forever
