"""Issue 18 findings, pinned on real DDS against a planner process (robots played by the test peer):
a 5000-task burst in one second fully accounted for, one message cannot crash the planner (long
agent id, extreme TUF), a repeated DONE does not complete a task early, a fuzz over every field of
Task and SegmentFeedback, and engine options in the forms users write them.

One planner process for the module (simulated engine in real time); each test uses its own agents
and task ids. Nothing is timed: waits poll with generous bounds (2 busy cores).
"""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import pytest
from planner_testkit import make_task, planner_graph, set_params, wait_for, write_params

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 120.0
BURST_ROBOTS = [f"sb_r{i}" for i in range(10)]


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    robots = {a: "done" for a in BURST_ROBOTS}
    robots.update(
        {
            "sf_ok": "done",
            "sd_arm": "silent",
            "fz_ok": "done",
            "fz_live": "silent",
            "sp_idle": "done",
            "so_busy": "silent",
            "hb_bot": "silent",
            "cl_bot": "silent",
        }
    )
    tmp = tmp_path_factory.mktemp("planner_safety")
    with planner_graph(
        tmp,
        {
            "robot_grace_period": 3.0,
            "agent_queue_depth": 4,
            "segment_timeout_margin": 60.0,
            "journal": str(tmp / "planner.journal"),
            "publisher_idle_timeout": 3.0,
        },
        robots,
        "safety_peer",
    ) as pair:
        yield pair


task = make_task


def terminal_count(peer, task_id: str) -> int:
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.ros import convert

    with peer.lock:
        return sum(convert.status_name(s) in ev.TERMINAL_STATES for s in peer.statuses.get(task_id, []))


def test_a_burst_of_5000_tasks_in_one_second_is_fully_accounted_for(graph):
    """Finding 4: 3000 tasks in 1 s lost 1799 with no status; now every task gets one final state."""
    peer, proc = graph
    wait_for(
        lambda: all(peer.node.count_subscribers(f"/{a}/skill_segments") for a in BURST_ROBOTS),
        WAIT,
        "robots discovered",
    )
    ids = [f"sb-{i:04d}" for i in range(5000)]
    t0 = time.monotonic()
    for i, task_id in enumerate(ids):
        peer.task_pub.publish(task(task_id, BURST_ROBOTS[i % len(BURST_ROBOTS)]))
        ahead = t0 + (i + 1) / 5000 - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    wait_for(
        lambda: all(peer.final_state(t) for t in ids),
        600.0,
        "a final status for all 5000 tasks",
        period=1.0,
        procs=(proc,),
    )
    finals = {t: peer.final(t) for t in ids}
    assert all(terminal_count(peer, t) == 1 for t in ids)  # exactly one final state each
    states = [peer.final_state(t) for t in ids]
    assert set(states) <= {"COMPLETED", "REJECTED"}, {s: states.count(s) for s in set(states)}
    rejected = [f.reason for f in finals.values() if peer.final_state(f.task_id) == "REJECTED"]
    assert all("open tasks" in r or "overloaded" in r for r in rejected), set(r[:60] for r in rejected)
    # at least the first depth-full of every robot was accepted and completed
    assert states.count("COMPLETED") >= 4 * len(BURST_ROBOTS)


def test_one_message_cannot_crash_the_planner(graph):
    """Finding 2: an agent_id of > 231 characters or an extreme TUF killed the planner."""
    peer, proc = graph
    cases = {
        "sf-long-agent": task("sf-long-agent", "a" * 300),
        "sf-231-agent": task("sf-231-agent", "b" * 232),
        "sf-ert": task("sf-ert", "sf_ok", tuf=(1e12, -2.0, 1.0)),
        "sf-alpha": task("sf-alpha", "sf_ok", tuf=(1.0, -1e-12, 1.0)),
        "sf-long-id": task("sf-" + "x" * 5000, "sf_ok"),
        "sf-huge-text": task("sf-huge-text", "sf_ok", instruction="y" * 1_000_000),
    }
    for msg in cases.values():
        peer.task_pub.publish(msg)
    expected = {
        "sf-long-agent": "agent_id is 300 characters long; the limit is 64",
        "sf-231-agent": "agent_id is 232 characters",
        "sf-ert": "ERT must be within",
        "sf-alpha": "utility horizon",
        "sf-huge-text": "instruction is 1000000 characters",
    }
    wait_for(
        lambda: all(peer.final_state(t) for t in expected), WAIT, "answers to the bad tasks", procs=(proc,)
    )
    for task_id, why in expected.items():
        assert peer.final_state(task_id) == "REJECTED" and why in peer.final(task_id).reason
    long_id = [t for t in peer.statuses if t.startswith("sf-xxx")]
    assert long_id and "task_id is 5003 characters" in peer.final(long_id[0]).reason
    peer.task_pub.publish(task("sf-after", "sf_ok"))
    wait_for(lambda: peer.final_state("sf-after"), WAIT, "a normal task afterwards", procs=(proc,))
    assert peer.final_state("sf-after") == "COMPLETED" and proc.poll() is None


def test_a_repeated_done_does_not_complete_a_task_early(graph):
    """Finding 3: a duplicate (or forged) DONE for segment 0 marked the task COMPLETED 3 ms later
    while the robot still ran segment 1."""
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.interfaces.mapping import from_stamp
    from timely_llm_ros.ros import convert

    peer, proc = graph
    agent = "sd_arm"  # a silent robot: the test sends its feedback by hand
    peer.task_pub.publish(task("sd-1", agent, "[A] Climb, turn and take a picture."))

    def segments():
        with peer.lock:
            return [s for s in peer.segments[agent] if s.task_id == "sd-1"]

    def send(seg, state, who=agent):
        nonce = peer.nonce(agent, "sd-1", seg)  # the robot echoes it
        peer._send(convert.feedback_to_msg("sd-1", who, seg, state, time.time(), 0.01, nonce=nonce))

    wait_for(lambda: len(segments()) >= 1, WAIT, "segment 0", procs=(proc,))
    send(0, ev.STARTED)
    send(0, ev.DONE)
    wait_for(lambda: len(segments()) >= 2, WAIT, "segment 1", procs=(proc,))
    send(1, ev.STARTED)
    wait_for(lambda: "EXECUTING" in peer.states("sd-1"), WAIT, "EXECUTING", procs=(proc,))
    for _ in range(3):
        send(0, ev.DONE)  # duplicates
    send(1, ev.DONE, who="intruder")  # forged: wrong robot
    send(2, ev.DONE)  # not the robot's current segment
    wait_for(lambda: len(segments()) >= 3, WAIT, "segment 2", procs=(proc,))
    time.sleep(1.0)  # give the planner time to (wrongly) complete it: it must not
    assert peer.final_state("sd-1") is None, peer.states("sd-1")
    last_done = time.time()
    send(1, ev.DONE)
    send(2, ev.STARTED)
    send(2, ev.DONE)
    wait_for(lambda: peer.final_state("sd-1"), WAIT, "sd-1 completed", procs=(proc,))
    final = peer.final("sd-1")
    assert peer.final_state("sd-1") == "COMPLETED" and from_stamp(final.stamp) >= last_done - 0.5
    ends = [e for e in peer.events_of("sd-1") if convert.EVENT_KIND_NAME[e.kind] == "EXEC_END"]
    wait_for(
        lambda: (
            len([e for e in peer.events_of("sd-1") if convert.EVENT_KIND_NAME[e.kind] == "EXEC_END"]) >= 3
        ),
        WAIT,
        "EXEC_END events",
    )
    ends = [e for e in peer.events_of("sd-1") if convert.EVENT_KIND_NAME[e.kind] == "EXEC_END"]
    assert sorted(e.segment_index for e in ends) == [0, 1, 2]  # one per segment, none for a duplicate


def test_one_segment_publisher_per_robot_removed_when_the_robot_is_idle(graph):
    """Finding 7: one publisher per (agent, lifespan) forever — 200 on one topic."""
    peer, proc = graph
    topic = "/sp_idle/skill_segments"
    for i, tuf in enumerate([(1.0, -2.0, 1.0), (0.2, -6.67, 2.0), (3.0, -0.1, 1.0), (1.0, 0.0, 1.0)]):
        peer.task_pub.publish(task(f"sp-{i}", "sp_idle", tuf=tuf))  # four TUFs, four old lifespans
    wait_for(lambda: peer.node.count_publishers(topic) == 1, WAIT, "the robot's publisher", procs=(proc,))
    wait_for(
        lambda: all(peer.final_state(f"sp-{i}") for i in range(4)), WAIT, "the four tasks", procs=(proc,)
    )
    assert peer.node.count_publishers(topic) <= 1
    wait_for(
        lambda: peer.node.count_publishers(topic) == 0, WAIT, "publisher removed when idle", procs=(proc,)
    )
    peer.task_pub.publish(task("sp-again", "sp_idle"))  # a new task brings it back
    wait_for(lambda: peer.final_state("sp-again"), WAIT, "a task after the removal", procs=(proc,))
    assert peer.final_state("sp-again") == "COMPLETED"


def test_an_overloaded_planner_says_so_with_its_queue_state(graph):
    peer, proc = graph
    set_params(peer, max_queued_tasks=3)
    try:
        ids = [f"so-{i}" for i in range(8)]
        for i, task_id in enumerate(ids):  # a silent robot: accepted tasks stay open
            peer.task_pub.publish(task(task_id, "so_busy" if i < 4 else "sf_ok"))
        wait_for(
            lambda: sum(bool(peer.final_state(t)) for t in ids) >= 5,
            WAIT,
            "the overload answers",
            procs=(proc,),
        )
        over = [peer.final(t).reason for t in ids if peer.final_state(t) == "REJECTED"]
        assert over and all(
            r.startswith("overloaded: ") and "open tasks (limit max_queued_tasks = 3)" in r for r in over
        ), over
    finally:
        set_params(peer, max_queued_tasks=100_000)


def test_heartbeats_keep_a_long_segment_alive_and_their_absence_times_it_out(graph):
    """Liveness follows the robot: PROGRESS every heartbeat period keeps a segment that runs far longer
    than its timeout alive; when the heartbeats stop, the task FAILS with that reason."""
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.ros import convert

    peer, proc = graph
    set_params(peer, segment_timeout=4.0, heartbeat_timeout=1.5)
    try:
        peer.task_pub.publish(task("hb-1", "hb_bot"))
        wait_for(
            lambda: any(s.task_id == "hb-1" for s in peer.segments["hb_bot"]),
            WAIT,
            "hb-1 segment",
            procs=(proc,),
        )
        t0 = time.monotonic()
        nonce = peer.nonce("hb_bot", "hb-1", 0)
        peer._send(convert.feedback_to_msg("hb-1", "hb_bot", 0, ev.STARTED, time.time(), nonce=nonce))
        while time.monotonic() - t0 < 12.0:  # three times the segment timeout
            peer._send(
                convert.feedback_to_msg(
                    "hb-1",
                    "hb_bot",
                    0,
                    ev.PROGRESS,
                    time.time(),
                    time.monotonic() - t0,
                    nonce=nonce,
                )
            )
            time.sleep(0.4)
        assert peer.final_state("hb-1") is None, peer.final("hb-1").reason
        wait_for(
            lambda: peer.final_state("hb-1"), WAIT, "the timeout after the heartbeats stopped", procs=(proc,)
        )
        assert (
            peer.final_state("hb-1") == "FAILED" and "no PROGRESS heartbeat for" in peer.final("hb-1").reason
        )
    finally:
        set_params(peer, segment_timeout=0.0, heartbeat_timeout=5.0)


def test_a_huge_failure_detail_is_clipped_before_it_is_forwarded(graph):
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.ros import convert

    peer, proc = graph
    peer.task_pub.publish(task("cl-1", "cl_bot"))
    wait_for(
        lambda: any(s.task_id == "cl-1" for s in peer.segments["cl_bot"]), WAIT, "cl-1 segment", procs=(proc,)
    )
    peer._send(
        convert.feedback_to_msg(
            "cl-1",
            "cl_bot",
            0,
            ev.FEEDBACK_FAILED,
            time.time(),
            0.1,
            "z" * 1_000_000,
            nonce=peer.nonce("cl_bot", "cl-1", 0),
        )
    )
    wait_for(lambda: peer.final_state("cl-1"), WAIT, "cl-1 failed", procs=(proc,))
    reason = peer.final("cl-1").reason
    assert peer.final_state("cl-1") == "FAILED" and len(reason) <= 1000
    assert reason.startswith("zzz") and reason.endswith(" more characters cut]")


# --------------------------------------------------------------------------------------- fuzz
STRINGS = [
    "",
    " ",
    "x" * 70_000,
    "🙂ü\u202eé" * 50,
    "\x00\x01\x7f",
    "/../",
    "a/b",
    "__ns",
    "0abc",
    "rt/x",
    "é" * 65,
    "drone_1" * 40,
]
FLOATS = [math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0, 0.0, 1e12, -1e-12, 1e6, -1e6, 2.0]
UINTS = [0, 1, 2**31, 2**32 - 1]


def fuzz_tasks(rng: random.Random, n_random: int):
    """Every Task field at every extreme value once (others valid), then random combinations."""
    from timely_llm_ros.msg import Task

    fields = {
        name: STRINGS
        for name in (
            "task_id",
            "agent_id",
            "robot_type",
            "skill_set",
            "instruction",
            "scene",
            "task_class",
            "overrun",
        )
    }
    fields.update(
        {
            "tuf.ert": FLOATS,
            "tuf.alpha": FLOATS,
            "tuf.beta": FLOATS,
            "max_tokens": UINTS,
            "trace_id": UINTS,
            "header.stamp.sec": [-(2**31), 2**31 - 1, 0],
            "header.stamp.nanosec": UINTS,
            "header.frame_id": STRINGS,
        }
    )
    assert set(Task.get_fields_and_field_types()) == {k.split(".")[0] for k in fields}

    def setf(msg, path, value):
        *parents, last = path.split(".")
        obj = msg
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, last, value)

    out = []
    for path, values in fields.items():
        for v in values:
            msg = task("", "fz_ok")
            setf(msg, path, v)
            out.append(msg)
    for _ in range(n_random):
        msg = task("", "fz_ok")
        for path in rng.sample(sorted(fields), 3):
            setf(msg, path, rng.choice(fields[path]))
        out.append(msg)
    for i, msg in enumerate(out):  # an id to match the answer by, unless the id itself is fuzzed
        if not msg.task_id.strip():
            msg.task_id = f"fz-{i:04d}"
    return out


def test_fuzz_every_field_of_every_inbound_message(graph):
    from timely_llm_ros.msg import SegmentFeedback

    peer, proc = graph
    rng = random.Random(18)
    msgs = fuzz_tasks(rng, 150)
    peer.task_pub.publish(task("fz-live", "fz_live", "[A] Climb, turn and take a picture."))
    wait_for(
        lambda: any(s.task_id == "fz-live" for s in peer.segments["fz_live"]),
        WAIT,
        "fz-live running",
        procs=(proc,),
    )
    for msg in msgs:
        peer.task_pub.publish(msg)
    # every SegmentFeedback field at every extreme (states 0..255, the live task from other robots)
    assert set(SegmentFeedback.get_fields_and_field_types()) == {
        "task_id",
        "agent_id",
        "index",
        "state",
        "stamp",
        "duration",
        "detail",
        "nonce",
    }
    for _ in range(400):
        fb = SegmentFeedback(
            task_id=rng.choice(STRINGS + ["fz-live"]),
            agent_id=rng.choice(STRINGS + ["fz_ok"]),
            index=rng.choice(UINTS),
            state=rng.randrange(256),
            duration=rng.choice(FLOATS),
            detail=rng.choice(STRINGS + ["y" * 2_000_000]),
            nonce=rng.choice(STRINGS + ["0" * 16, "z" * 100_000]),
        )
        fb.stamp.sec = rng.choice([-(2**31), 0, 2**31 - 1])
        fb.stamp.nanosec = rng.choice(UINTS)
        peer.fb_pub.publish(fb)
    # the answer names the task as received: DDS strings end at a NUL character
    answerable = {m.task_id.split("\x00")[0] for m in msgs}
    answerable = {t for t in answerable if t.strip() and len(t) <= 128}
    try:
        wait_for(
            lambda: all(peer.final_state(t) for t in answerable),
            300.0,
            "an answer to every fuzzed task",
            period=0.5,
            procs=(proc,),
        )
    except AssertionError:
        raise AssertionError(
            f"no answer for {[t for t in answerable if not peer.final_state(t)]!r}"
        ) from None
    assert proc.poll() is None
    # forged feedback did not move the live task: its robot never answered, so it is not COMPLETED
    assert peer.final_state("fz-live") in (None, "FAILED"), peer.states("fz-live")
    peer.task_pub.publish(task("fz-after", "fz_ok"))
    wait_for(lambda: peer.final_state("fz-after"), WAIT, "a normal task after the fuzz", procs=(proc,))
    assert peer.final_state("fz-after") == "COMPLETED"


# --------------------------------------------------------------------------------------- engine options
def _planner_exit(args: list[str], tmp_path: Path) -> subprocess.CompletedProcess:
    cmd = [
        sys.executable,
        "-m",
        "timely_llm_ros.nodes.planner",
        "--ros-args",
        *args,
        "-p",
        f"journal:={tmp_path / 'j.journal'}",
    ]
    return subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=180)


def test_engine_options_in_every_form_users_write_them(tmp_path):
    """Finding 6: the README's -p engine_options:={model_path: ...} died with an rcl YAML traceback; a
    mapping in a fleet/parameter YAML was silently ignored (the default model ran instead)."""
    missing = tmp_path / "no_such_model.gguf"
    # 1. the README form: the shell removes the double quotes, rcl sees a YAML mapping
    out = _planner_exit(
        ["-p", "engine:=llamacpp", "-p", f"engine_options:={{model_path: {missing}}}"], tmp_path
    )
    assert out.returncode == 2 and "Traceback" not in out.stderr
    assert f"model file not found: {missing}" in out.stderr, out.stderr
    # 2. a mapping in a parameter file (what `timely-llm fleet` writes from a fleet YAML)
    params = write_params(
        tmp_path / "p.yaml", {"engine": "llamacpp", "engine_options": {"model_path": str(missing)}}
    )
    out = _planner_exit(["--params-file", str(params)], tmp_path)
    assert out.returncode == 2 and f"model file not found: {missing}" in out.stderr, out.stderr
    # 3. not a mapping at all: one line saying how
    out = _planner_exit(["-p", "engine:=llamacpp", "-p", "engine_options:='[1, 2]'"], tmp_path)
    assert out.returncode == 2 and "must be a YAML/JSON mapping such as" in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    # 4. any other -p value rcl cannot parse: one line, no traceback
    out = _planner_exit(["-p", "policy:={a: [}"], tmp_path)
    assert out.returncode == 2 and "the ROS arguments cannot be parsed" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_fleet_passes_an_engine_options_mapping_to_the_planner(tmp_path):
    from timely_llm_ros.fleet import fleet_nodes, load_fleet

    cfg = tmp_path / "fleet.yaml"
    cfg.write_text(
        "planner: {parameters: {engine: llamacpp, engine_options: {model_path: /m.gguf, n_threads: 2}}}\n"
        "robots: [{agent: drone_1, type: drone}]\n"
    )
    (planner,) = [n for n in fleet_nodes(load_fleet(cfg)) if n.role == "planner"]
    assert planner.params["engine_options"] == {"model_path": "/m.gguf", "n_threads": 2}
