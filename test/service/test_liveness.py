"""The segment watchdog (service/liveness.py) on a fake clock: every deadline below is computed by hand
from the ``segment_timeout`` rule (fixed, or factor × expected + margin) and the heartbeat limit."""

from __future__ import annotations

import pytest

from timely_llm_ros.service.liveness import SegmentTimers, feedback_time, segment_limit


def test_segment_limit_is_fixed_when_set_else_factor_times_expected_plus_margin():
    assert segment_limit(3.0, 0.0, 2.0, 1.0) == 7.0  # 3 × 2 + 1
    assert segment_limit(0.0, 0.0, 2.0, 1.0) == 1.0  # an instant skill still gets the margin
    assert segment_limit(3.0, 4.5, 2.0, 1.0) == 4.5  # a fixed timeout wins whatever is expected


def timers(fixed: float = 0.0, heartbeat: float = 1.5) -> SegmentTimers:
    return SegmentTimers(lambda expected: segment_limit(expected, fixed, 2.0, 1.0), lambda: heartbeat)


def test_a_segment_never_started_expires_just_after_its_limit_from_dispatch():
    w = timers()
    w.dispatched("d1", "t1", 0, 10.0, 3.0)  # limit 3 × 2 + 1 = 7 s: it must start by 17.0
    assert w.expired(17.0) == []  # exactly at the limit: still in time
    (exp,) = w.expired(17.01)
    assert (exp.agent, exp.task_id, exp.seg) == ("d1", "t1", 0)
    assert exp.reason == "segment 0 timed out: robot 'd1' did not start it within 7.0 s (no SegmentFeedback)"
    assert w.expired(100.0) == [] and w.pending("d1") == 0  # reported once, then forgotten


def test_a_started_segment_has_its_limit_from_the_start_and_heartbeats_extend_it():
    w = timers()
    w.dispatched("d1", "t1", 0, 10.0, 3.0)
    w.started("d1", "t1", 0, 12.0)  # must finish by 12 + 7 = 19.0
    assert w.expired(18.9) == []
    w.progress("d1", "t1", 0, 18.8)  # alive until max(19.0, 18.8 + 1.5 = 20.3)
    assert w.expired(20.3) == []
    (exp,) = w.expired(20.4)
    assert exp.reason == (
        "segment 0 timed out: robot 'd1' sent no PROGRESS heartbeat for 1.6 s (limit 1.5 s) and no DONE"
    )


def test_started_without_heartbeat_names_the_missing_done():
    w = timers(fixed=4.0)  # fixed 4 s whatever is expected
    w.dispatched("a1", "t9", 2, 0.0, 100.0)
    w.started("a1", "t9", 2, 1.0)  # must finish by 5.0
    assert w.expired(5.0) == []
    (exp,) = w.expired(5.5)
    assert exp.reason == (
        "segment 2 timed out: robot 'a1' did not finish it within 4.0 s of its start "
        "(no DONE, no PROGRESS heartbeat)"
    )


def test_the_next_segment_timer_starts_at_the_done_of_the_one_before():
    w = timers()
    w.dispatched("d1", "t1", 0, 10.0, 3.0)
    w.dispatched("d1", "t1", 1, 11.0, 0.5)  # limit 0.5 × 2 + 1 = 2 s, counted from when it is current
    w.started("d1", "t1", 0, 10.5)
    w.done("d1", "t1", 0, 15.0)  # segment 1 is current from 15.0: it must start by 17.0
    assert w.expired(16.9) == []  # counted from its dispatch (11.0) it would have expired at 13.0
    (exp,) = w.expired(17.1)
    assert (exp.seg, exp.reason) == (
        1,
        "segment 1 timed out: robot 'd1' did not start it within 2.0 s (no SegmentFeedback)",
    )


def test_each_robot_has_its_own_current_segment_and_a_terminal_task_is_forgotten():
    w = timers()
    w.dispatched("d1", "t1", 0, 0.0, 1.0)  # 3 s
    w.dispatched("d2", "t2", 0, 0.0, 4.0)  # 9 s
    w.forget_task("d1", "t1", 1.0)
    assert w.pending("d1") == 0
    assert w.expired(8.0) == []
    assert [e.agent for e in w.expired(9.5)] == ["d2"]


@pytest.mark.parametrize("feedback", ["started", "progress"])
def test_feedback_for_an_unknown_segment_changes_nothing(feedback):
    w = timers()
    w.dispatched("d1", "t1", 0, 0.0, 1.0)
    getattr(w, feedback)("d1", "other", 0, 0.5)
    getattr(w, feedback)("nobody", "t1", 0, 0.5)
    assert [e.task_id for e in w.expired(3.5)] == ["t1"]


def test_feedback_time_trusts_the_robot_stamp_only_within_the_tolerance():
    assert feedback_time(100.0, 99.5, 1.0) == 99.5  # the robot's own stamp
    assert feedback_time(100.0, 100.4, 1.0) == 100.0  # never later than the planner's reading
    assert feedback_time(100.0, 98.0, 1.0) == 100.0  # skewed clock: the receipt time
    assert feedback_time(100.0, float("nan"), 1.0) == 100.0  # no stamp


def test_a_resumed_task_watches_only_what_its_robot_still_holds_from_the_resume():
    from timely_llm_ros.core.generation import Segment

    nan = float("nan")
    done = Segment(0, "mf(100);", dispatch=50.0, exec_start=1.0, exec_end=3.0, expected_exec=2.0)
    running = Segment(1, "tc(90);", dispatch=50.0, exec_start=4.0, exec_end=nan, expected_exec=1.0)
    w = timers()
    w.resumed("d1", "t1", [done, running])
    assert w.pending("d1") == 1  # the DONE one is not waited for
    # started, counted from the resume (50.0), limit 1 × 2 + 1 = 3 s: alive until 53.0
    assert w.expired(53.0) == []
    (exp,) = w.expired(53.5)
    assert exp.seg == 1 and "did not finish it within 3.0 s of its start" in exp.reason
