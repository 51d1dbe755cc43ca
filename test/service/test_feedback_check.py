"""Robot feedback is checked and idempotent (a repeated DONE for segment 0
marked the task COMPLETED while the robot still ran segment 1); segment timers follow the robot."""

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.service.liveness import SegmentTimers


def planner_with_two_segments():
    sent = []
    p = PlannerCore(SimEngine(), "timely", dispatch=sent.append)
    rec = p.submit(
        TaskSpec("t", "d1", "drone", "tello_minispec", "[A] look", NORMAL_TUF, reference_plan="mu(40);tp;")
    )
    while p.has_work():
        p.step()
    assert [d.seg for d in sent if not d.closing_marker] == [0, 1]
    return p, rec


def test_a_repeated_done_for_segment_0_does_not_complete_the_task():
    p, rec = planner_with_two_segments()
    assert p.feedback("t", 0, ev.STARTED, 1.0, agent="d1") is None
    assert p.feedback("t", 0, ev.DONE, 2.0, agent="d1") is None
    assert p.feedback("t", 1, ev.STARTED, 2.0, agent="d1") is None
    # the robot runs segment 1 now; a duplicate (or forged) DONE for segment 0 changes nothing
    assert p.feedback("t", 0, ev.DONE, 2.003, agent="d1") == "duplicate DONE: segment 0 is already DONE"
    assert rec.state == ev.EXECUTING and rec.segments[0].exec_end == 2.0
    assert p.feedback("t", 1, ev.STARTED, 2.1, agent="d1") == "duplicate STARTED for segment 1"
    assert p.feedback("t", 1, ev.DONE, 4.15, agent="d1") is None
    assert rec.state == ev.COMPLETED and rec.completion_time == pytest.approx(4.15)
    assert p.feedback("t", 1, ev.DONE, 5.0, agent="d1") == "the task is already COMPLETED"


@pytest.mark.parametrize(
    "seg,state,agent,why",
    [
        (0, ev.DONE, "intruder", "sent by 'intruder', but the task belongs to robot 'd1'"),
        (1, ev.DONE, "d1", "segment 1 is not the robot's current segment (0)"),
        (1, ev.STARTED, "d1", "segment 1 is not the robot's current segment (0)"),
        (1, ev.PROGRESS, "d1", "segment 1 is not the robot's current segment (0)"),
        (2, ev.DONE, "d1", "segment 2 was never dispatched"),  # the closing marker has no feedback
        (-1, ev.FEEDBACK_FAILED, "d1", "segment -1 was never dispatched"),
        (0, "EXPLODED", "d1", "unknown feedback state"),
    ],
)
def test_forged_and_out_of_order_feedback_is_ignored(seg, state, agent, why):
    p, rec = planner_with_two_segments()
    before = (rec.state, [(s.exec_start, s.exec_end) for s in rec.segments])
    assert why in p.feedback("t", seg, state, 1.0, agent=agent)
    assert (rec.state, [(s.exec_start, s.exec_end) for s in rec.segments]) == before
    assert p.feedback("nope", 0, ev.DONE, 1.0) == "unknown task"


def test_failed_is_accepted_for_a_queued_segment_and_progress_changes_no_estimate():
    p, rec = planner_with_two_segments()
    gen = p._tasks["t"]
    assert p.feedback("t", 0, ev.STARTED, 1.0, agent="d1") is None
    ref = gen.ref
    assert p.feedback("t", 0, ev.PROGRESS, 1.5, agent="d1") is None and gen.ref == ref
    # a robot shutting down fails the segments still queued on it: that stops the task
    assert p.feedback("t", 1, ev.FEEDBACK_FAILED, 1.6, "robot shut down", agent="d1") is None
    assert rec.state == ev.FAILED and rec.reason == "robot shut down"


def test_retained_records_are_bounded_and_finished_tasks_say_so():
    sent = []
    p = PlannerCore(SimEngine(), "timely", dispatch=sent.append, retain_records=3)
    for i in range(6):
        p.submit(
            TaskSpec(
                f"t{i}", f"d{i}", "drone", "tello_minispec", "[A] look", NORMAL_TUF, reference_plan="tp;"
            )
        )
    while p.has_work():
        p.step()
    for d in sent:
        if not d.closing_marker:
            p.feedback(d.task_id, d.seg, ev.DONE, p.clock(), agent=d.agent_id)
    assert not p._tasks and len(p.records) == 3 and len(p._finished) == 3
    assert p.feedback("t5", 0, ev.DONE, 9.0) == "the task is already COMPLETED"
    assert p.feedback("t0", 0, ev.DONE, 9.0) == "unknown task"  # forgotten long ago


# --------------------------------------------------------------------------------------- timers
def timers(limit=10.0, beat=3.0):
    return SegmentTimers(lambda expected: limit, lambda: beat)


def test_a_segment_must_start_within_the_limit_from_when_it_became_current():
    w = timers()
    w.dispatched("d1", "a", 0, t=0.0, expected=1.0)
    w.dispatched("d1", "a", 1, t=1.0, expected=1.0)
    assert w.expired(10.0) == []
    w.started("d1", "a", 0, 5.0)
    w.done("d1", "a", 0, 14.0)  # the next segment's timer starts only now
    assert w.expired(23.9) == []
    (exp,) = w.expired(24.1)
    assert (exp.task_id, exp.seg) == ("a", 1) and "did not start it within 10.0 s" in exp.reason
    assert w.pending("d1") == 0 and w.expired(100.0) == []


def test_heartbeats_keep_a_long_segment_alive():
    w = timers(limit=10.0, beat=3.0)
    w.dispatched("d1", "a", 0, 0.0, 1.0)
    w.started("d1", "a", 0, 1.0)
    for t in range(2, 40, 2):
        w.progress("d1", "a", 0, float(t))
        assert w.expired(t + 2.9) == []
    (exp,) = w.expired(38.0 + 3.1)
    assert "no PROGRESS heartbeat for 3.1 s" in exp.reason
    w.dispatched("d2", "b", 0, 0.0, 1.0)
    w.started("d2", "b", 0, 0.5)
    (exp,) = w.expired(10.6)
    assert "did not finish it within 10.0 s of its start (no DONE, no PROGRESS" in exp.reason


def test_a_terminal_task_frees_its_robots_timers():
    w = timers()
    w.dispatched("d1", "a", 0, 0.0, 1.0)
    w.forget_task("d1", "a", 1.0)
    w.dispatched("d1", "b", 0, 50.0, 1.0)  # the next task's timer starts at its own dispatch
    assert w.expired(59.0) == [] and len(w.expired(60.5)) == 1
