"""TaskQueue: one task at a time per robot, by index, with bounded waits (no ROS, virtual clock)."""

from __future__ import annotations

import threading

import pytest

from timely_llm_ros.robots import task_queue as tq
from timely_llm_ros.robots.task_queue import SegmentItem, TaskQueue


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def make(**kw) -> tuple[TaskQueue, Clock]:
    clock = Clock()
    args = {"gap_timeout": 10.0, "busy_wait": 5.0, "idle_release": 60.0, **kw}
    return TaskQueue(clock=clock, **args), clock


def put(q: TaskQueue, clock: Clock, task: str, index: int, text: str = "tp", final: bool = False) -> None:
    assert q.put(SegmentItem(task, index, text, final, received=clock()))


def take(q: TaskQueue) -> tuple[str, str, int] | None:
    h = q.poll()
    return None if h is None else (h.kind, h.item.task_id, h.item.index)


def test_segments_of_another_task_wait_until_the_current_task_is_over():
    """The flood finding: interleaved arrivals never run interleaved."""
    q, clock = make()
    for task, idx, final in [
        ("a", 0, False),
        ("b", 0, False),
        ("a", 1, False),
        ("b", 1, True),
        ("a", 2, True),
    ]:
        put(q, clock, task, idx, final=final)
    order = []
    while (h := q.poll()) is not None:
        assert h.kind == tq.RUN
        order.append((h.item.task_id, h.item.index))
        q.done(h.item.task_id, ok=True, final=h.item.final)
    assert order == [("a", 0), ("a", 1), ("a", 2), ("b", 0), ("b", 1)]
    assert q.active is None and q.ended("a") and q.ended("b")


def test_a_segment_held_past_busy_wait_fails_robot_busy_and_its_task_is_over():
    q, clock = make()
    put(q, clock, "a", 0)
    assert take(q) == (tq.RUN, "a", 0)
    q.done("a", ok=True, final=False)  # a is not over: more segments will come
    put(q, clock, "b", 0)
    put(q, clock, "b", 1)
    clock.t += 4.9
    assert take(q) is None  # held, within busy_wait
    clock.t += 0.2
    h = q.poll()
    assert h.kind == tq.BUSY and "robot busy with task 'a'" in h.reason and h.item.index == 0
    h = q.poll()
    assert h.kind == tq.OVER and "robot busy with task 'a'" in h.reason and h.item.index == 1
    put(q, clock, "a", 1, final=True)  # the current task goes on untouched
    assert take(q) == (tq.RUN, "a", 1)


def test_refusals_answer_held_segments_while_the_worker_runs_a_long_segment():
    q, clock = make()
    put(q, clock, "a", 0)
    assert take(q) == (tq.RUN, "a", 0)  # running (no done() yet)
    put(q, clock, "b", 0)
    assert q.refusals() == []
    clock.t += 6
    kinds = [(h.kind, h.item.task_id) for h in q.refusals()]
    assert kinds == [(tq.BUSY, "b")]


def test_refusals_never_start_a_segment():
    q, clock = make()
    put(q, clock, "a", 0)
    assert q.refusals() == []
    assert take(q) == (tq.RUN, "a", 0)


def test_a_terminal_status_ends_the_task_its_queued_segments_fail_and_the_next_task_starts():
    ended = []
    q, clock = make(on_end=ended.append)
    put(q, clock, "a", 0)
    assert take(q) == (tq.RUN, "a", 0)
    put(q, clock, "a", 1)
    put(q, clock, "b", 0)
    assert q.end("a", "the planner marked the task FAILED: segment 0 timed out") is True
    h = q.poll()
    assert h.kind == tq.OVER and "FAILED: segment 0 timed out" in h.reason and h.item.index == 1
    assert take(q) == (tq.RUN, "b", 0)
    assert ended == ["a"]
    assert q.end("zz", "REJECTED") is False  # a task never seen is remembered as over too
    put(q, clock, "zz", 0)
    assert take(q)[0] == tq.OVER


def test_the_closing_marker_ends_the_task_without_running_anything():
    q, clock = make()
    put(q, clock, "a", 0)
    assert take(q) == (tq.RUN, "a", 0)
    q.done("a", ok=True, final=False)
    put(q, clock, "b", 0)
    put(q, clock, "a", 1, text="", final=True)
    assert take(q) == (tq.MARKER, "a", 1)
    assert take(q) == (tq.RUN, "b", 0)
    put(q, clock, "a", 1, text="", final=True)  # a repeated marker: a duplicate, nothing else
    assert take(q) == (tq.DUPLICATE, "a", 1)


def test_a_failed_segment_ends_its_task():
    q, clock = make()
    put(q, clock, "a", 0)
    take(q)
    q.done("a", ok=False, final=False, reason="its segment 0 failed: gripper empty")
    put(q, clock, "a", 1)
    h = q.poll()
    assert h.kind == tq.OVER and "gripper empty" in h.reason


def test_duplicates_are_reported_and_late_segments_of_an_ended_task_fail():
    q, clock = make()
    put(q, clock, "a", 0, final=True)
    take(q)
    put(q, clock, "a", 0)
    assert take(q) == (tq.DUPLICATE, "a", 0)  # same index again (still the current task)
    q.done("a", ok=True, final=True)
    put(q, clock, "a", 0)
    put(q, clock, "a", 5)
    assert take(q) == (tq.DUPLICATE, "a", 0)
    h = q.poll()
    assert h.kind == tq.OVER and "final segment already ran" in h.reason


def test_a_missing_predecessor_is_a_gap_after_the_timeout():
    q, clock = make(busy_wait=100.0)
    put(q, clock, "a", 2)
    assert take(q) is None
    clock.t += 10
    h = q.poll()
    assert h.kind == tq.GAP and "segment(s) 0..1 of task 'a' never arrived" in h.reason
    put(q, clock, "a", 3)
    assert take(q) == (tq.OVER, "a", 3)
    # within the current task too
    put(q, clock, "b", 0)
    assert take(q) == (tq.RUN, "b", 0)
    q.done("b", ok=True, final=False)
    put(q, clock, "b", 2)
    clock.t += 10
    h = q.poll()
    assert h.kind == tq.GAP and "segment(s) 1 of task 'b'" in h.reason


def test_an_idle_current_task_is_released_and_its_late_segments_refused():
    q, clock = make()
    put(q, clock, "a", 0)
    take(q)
    q.done("a", ok=True, final=False)
    clock.t += 59
    assert take(q) is None
    clock.t += 1
    h = q.poll()
    assert h.kind == tq.RELEASED and h.item.task_id == "a" and "60 s" in h.reason
    put(q, clock, "a", 1)
    assert take(q) == (tq.OVER, "a", 1)
    put(q, clock, "b", 0)
    assert take(q) == (tq.RUN, "b", 0)


def test_a_running_task_is_never_released():
    q, clock = make()
    put(q, clock, "a", 0)
    take(q)
    clock.t += 1000
    assert take(q) is None and q.active == "a"


def test_queue_and_task_records_are_bounded():
    q, clock = make(max_items=3, max_ended=50)
    assert all(q.put(SegmentItem("x", i, "tp")) for i in range(3))
    assert q.put(SegmentItem("x", 3, "tp")) is False
    q.drain()
    for n in range(1000):
        put(q, clock, f"t{n}", 0, final=True)
        h = q.poll()
        q.done(h.item.task_id, ok=True, final=True)
    assert q.task_states() <= 51 and len(q) == 0


def test_get_blocks_until_a_segment_arrives_and_close_wakes_it():
    q = TaskQueue(gap_timeout=60, busy_wait=60)
    got = []
    t = threading.Thread(target=lambda: got.append(q.get(timeout=30)))
    t.start()
    q.put(SegmentItem("a", 0, "tp"))
    t.join(timeout=30)
    assert got and got[0].kind == tq.RUN
    q.put(SegmentItem("a", 2, "tp"))
    q.close()
    assert q.get(timeout=30) is None
    assert [i.index for i in q.drain()] == [2]


@pytest.mark.parametrize(
    "text,final,marker", [("", True, True), ("  ", True, True), ("", False, False), ("}", True, False)]
)
def test_marker_is_a_final_segment_without_text(text, final, marker):
    assert SegmentItem("a", 1, text, final).marker is marker


def test_a_gap_refuses_the_lowest_waiting_segment_and_the_rest_fail_with_feedback():
    q, clock = make()
    put(q, clock, "a", 3)
    put(q, clock, "a", 2)
    clock.t += 10
    h = q.poll()
    assert h.kind == tq.GAP and h.item.index == 2 and "segment(s) 0..1" in h.reason
    assert take(q) == (tq.OVER, "a", 3)  # answered with FAILED, not taken for a duplicate


def test_a_full_queue_of_held_segments_is_answered_in_one_sweep():
    q, clock = make(max_items=1000)
    for n in range(999):
        put(q, clock, f"t{n}", 1)  # all waiting for a missing segment 0
    put(q, clock, "x", 0)
    assert take(q) == (tq.RUN, "x", 0)  # x holds the robot: the others are refused as busy
    clock.t += 6
    refused = q.refusals()
    assert len(refused) == 999 and {h.kind for h in refused} == {tq.BUSY} and len(q) == 0
    for n in range(999):  # the same with the robot free: gaps
        put(q, clock, f"u{n}", 1)
    q.done("x", ok=True, final=True)
    clock.t += 11
    refused = q.refusals()
    assert len(refused) == 999 and {h.kind for h in refused} == {tq.GAP} and len(q) == 0
