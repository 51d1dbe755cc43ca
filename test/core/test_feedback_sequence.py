"""Feedback must follow the robot's own sequence (issue: a forged DONE 0, DONE 1, DONE 2 … with the
right robot id completed an in-flight task at once); dead robots end all their tasks at once."""

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.feedback import FeedbackRules, SegmentNonces, TooEarly
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.robot_liveness import RobotLiveness
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF
from timely_llm_ros.engines.sim import SimEngine

STRICT = FeedbackRules(require_started=True, min_exec_fraction=0.5)
PLAN = "mu(40);tp;mf(30);"


def planner(rules=STRICT, plan=PLAN, tasks=("t",)):
    sent = []
    p = PlannerCore(SimEngine(), "timely", dispatch=sent.append, feedback_rules=rules)
    for tid in tasks:
        p.submit(TaskSpec(tid, "d1", "drone", "tello_minispec", "[A] look", NORMAL_TUF, reference_plan=plan))
    while p.has_work():
        p.step()
    return p, sent


def test_a_forged_in_order_done_sequence_does_not_complete_the_task():
    p, sent = planner()
    rec = p._tasks["t"].record
    n = len(rec.segments)
    assert n >= 2 and all(s.min_exec > 0 for s in rec.segments)
    t = p.clock()
    for i in range(n):  # the forger: DONE for segment 0, 1, 2 … with the right robot id
        why = p.feedback("t", i, ev.DONE, t + 0.001 * i, agent="d1")
        assert why is not None
    assert "never reported STARTED" in p.feedback("t", 0, ev.DONE, t, agent="d1")
    assert rec.state not in ev.TERMINAL_STATES and all(s.exec_end != s.exec_end for s in rec.segments)
    # STARTED then an instant DONE: too early for the segment's minimum execution time
    assert p.feedback("t", 0, ev.STARTED, t, agent="d1") is None
    why = p.feedback("t", 0, ev.DONE, t + 0.01, agent="d1")
    assert isinstance(why, TooEarly) and "no robot executes it in less than" in why
    assert why.at == pytest.approx(t + 0.5 * rec.segments[0].min_exec)  # when it may count
    # the real robot: STARTED, then DONE after a plausible time, segment by segment
    clock = t
    for i, seg in enumerate(rec.segments):
        if i:
            assert p.feedback("t", i, ev.STARTED, clock, agent="d1") is None
        clock += seg.min_exec
        assert p.feedback("t", i, ev.DONE, clock, agent="d1") is None
    assert rec.state == ev.COMPLETED


def test_the_old_rules_stay_for_in_process_robots():
    p, _ = planner(rules=FeedbackRules())
    rec = p._tasks["t"].record
    for i in range(len(rec.segments)):
        assert p.feedback("t", i, ev.DONE, p.clock(), agent="d1") is None
    assert rec.state == ev.COMPLETED


def test_nonces_refuse_guessed_and_replayed_feedback():
    n = SegmentNonces()
    a0, a1 = n.issue("a", 0), n.issue("a", 1)
    assert a0 != a1 and len(a0) == 16
    assert n.check("a", 0, a0) is None
    assert "wrong nonce" in n.check("a", 1, a0)  # replayed from another segment
    assert "wrong nonce" in n.check("a", 0, "0" * 16)  # guessed
    assert n.check("a", 0, "") == "no nonce"
    assert n.check("b", 0, "") is None  # nothing issued (sent before a restart): not judged here
    n.forget("a")
    assert len(n) == 0


def test_a_dead_robot_ends_all_its_tasks_at_once_and_is_used_again_when_back():
    live = RobotLiveness(timeout=3.0)
    live.heard("d1", 0.0)
    live.heard("d2", 0.0)
    assert live.newly_down(2.9) == []
    live.heard("d2", 2.5)
    (down,) = live.newly_down(3.5)
    assert down[0] == "d1" and down[1] == pytest.approx(3.5)
    assert live.newly_down(10.0) == [("d2", pytest.approx(7.5))]  # each reported once
    assert live.is_down("d1") and "robot 'd1' is down: no heartbeat for" in live.reason("d1", 10.0)
    assert live.heard("d1", 11.0) is True and not live.is_down("d1")
    assert live.heard("d1", 11.5) is False and live.heard("d1", 5.0) is False

    p, sent = planner(rules=STRICT, tasks=("a", "b", "c"))
    states = {t: p._tasks[t].record.state for t in "abc"}
    assert states["a"] == ev.EXECUTING and states["b"] != ev.EXECUTING
    dispatched = len(sent)
    failed = p.fail_agent("d1", "robot 'd1' is down: no heartbeat for 5.0 s")
    assert sorted(failed) == ["a", "b", "c"]
    for t in "abc":
        rec = p._tasks[t].record
        assert rec.state == ev.FAILED and "robot 'd1' is down" in rec.reason
    assert len(sent) == dispatched  # nothing was sent to the dead robot on the way


def test_a_block_body_is_not_held_to_its_minimum_time_robots_run_it_when_the_block_closes():
    """MiniSpec ``?cond{ ... }`` and ``n{ ... }``: the robot runs the body when ``}`` arrives, so the
    body segment's DONE comes at once (found by the fleet test: such tasks timed out)."""
    p, _ = planner(plan="?s('cat')==True{g('cat')};")
    rec = p._tasks["t"].record
    texts = [s.text for s in rec.segments]
    assert any("{" in x for x in texts) and any(x.startswith("}") for x in texts), texts
    t = p.clock()
    for i, seg in enumerate(rec.segments):
        assert p.feedback("t", i, ev.STARTED, t, agent="d1") is None
        inside = sum(x.count("{") - x.count("}") for x in texts[: i + 1]) > 0
        t += 0.0 if inside else seg.min_exec  # the body: at once; the rest: its real time
        assert p.feedback("t", i, ev.DONE, t, agent="d1") is None, (i, seg.text)
    assert rec.state == ev.COMPLETED


def test_feedback_never_makes_a_robot_without_heartbeats_subject_to_the_down_rule():
    """A robot node that sends feedback but no beats (an older or third-party node) was declared
    down 5 s after its last feedback, failing its next task; feedback only refreshes beating robots."""
    from timely_llm_ros.core.robot_liveness import RobotLiveness

    live = RobotLiveness(5.0)
    assert live.alive("quiet", 1.0) is False
    assert live.newly_down(100.0) == [] and not live.is_down("quiet")
    live.heard("beater", 1.0)
    live.alive("beater", 4.0)  # feedback keeps a beating robot up
    assert live.newly_down(8.0) == []
    assert live.newly_down(9.5) == [("beater", 5.5)]
