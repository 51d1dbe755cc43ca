"""Segment ordering (SegmentQueue) and per-task execution state (SegmentRunner), without ROS."""

from __future__ import annotations

from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.robots.runner import SegmentItem, SegmentQueue, SegmentRunner
from timely_llm_ros.robots.sim import SimBackend

DRONE = load_skill_set("tello_minispec")


def handouts(q: SegmentQueue, n: int) -> list[tuple[str, str, int]]:
    out = []
    for _ in range(n):
        h = q.get(timeout=30)
        assert h is not None
        out.append((h.kind, h.item.task_id, h.item.index))
    return out


def test_tasks_interleave_in_arrival_order_but_each_task_runs_by_index():
    q = SegmentQueue(gap_timeout=60)
    for task, idx in [("a", 0), ("b", 1), ("b", 0), ("a", 1), ("a", 2)]:
        q.put(SegmentItem(task, idx, "tp"))
    assert handouts(q, 5) == [
        ("run", "a", 0),
        ("run", "b", 0),
        ("run", "b", 1),
        ("run", "a", 1),
        ("run", "a", 2),
    ]
    assert q.get(timeout=0.01) is None


def test_a_duplicate_is_reported_not_run_twice():
    q = SegmentQueue(gap_timeout=60)
    q.put(SegmentItem("a", 0, "tp"))
    q.put(SegmentItem("a", 0, "tp"))
    assert handouts(q, 2) == [("run", "a", 0), ("duplicate", "a", 0)]


def test_a_segment_whose_predecessor_never_arrives_is_handed_out_as_a_gap():
    q = SegmentQueue(gap_timeout=0.05)
    q.put(SegmentItem("a", 2, "tp"))
    h = q.get(timeout=30)
    assert h.kind == "gap" and "segment(s) 0..1 of task 'a' never arrived" in h.reason
    q.put(SegmentItem("a", 3, "tp"))  # the task's later segments flow (the runner fails them)
    assert handouts(q, 1) == [("run", "a", 3)]


def test_close_wakes_a_waiting_consumer_and_drain_returns_the_rest():
    q = SegmentQueue(gap_timeout=60)
    q.put(SegmentItem("a", 1, "tp"))
    q.close()
    assert q.get(timeout=30) is None
    assert [i.index for i in q.drain()] == [1]


def runner() -> SegmentRunner:
    return SegmentRunner(DRONE, SimBackend(DRONE, time_scale=0.0), default_scene="[cat x:0.5 y:0.5]")


def test_after_a_failure_the_task_s_later_segments_fail_at_once():
    r = runner()
    assert r.run(SegmentItem("t", 0, "mf(50);")).ok
    bad = r.run(SegmentItem("t", 1, "mf(900);"))
    assert not bad.ok and "above the maximum 500" in bad.detail
    later = r.run(SegmentItem("t", 2, "tp"))
    assert not later.ok and "an earlier segment of task 't' failed" in later.detail
    assert r.run(SegmentItem("other", 0, "tp")).ok  # other tasks are unaffected


def test_follow_on_failures_quote_the_root_cause_once():
    """Each later segment names the first failure; reasons must not nest (seen in the demo: 40
    segments of one task produced ever longer messages)."""
    r = runner()
    assert not r.run(SegmentItem("t", 0, "mf(900);")).ok
    details = [r.run(SegmentItem("t", i, "tp")).detail for i in range(1, 6)]
    assert all(d.count("above the maximum 500") == 1 for d in details)
    assert all(d.count("an earlier segment") == 1 for d in details)
    assert len({len(d) - len(str(i)) for i, d in enumerate(details, 1)}) == 1  # no growth


def test_a_continuation_of_an_unknown_task_fails():
    out = runner().run(SegmentItem("t", 3, "tp"))
    assert not out.ok and "never received the task's earlier segments" in out.detail


def test_a_bad_task_scene_fails_the_segment_with_the_scene_error():
    r = runner()
    r.set_scene("t", "[apple:0.48 y:0.55]")
    out = r.run(SegmentItem("t", 0, "?iv('apple')==True{"))
    assert not out.ok and "scene cannot be used" in out.detail


def test_final_segment_ends_the_task_state_and_reports_unclosed_blocks():
    r = runner()
    out = r.run(SegmentItem("t", 0, "?iv('cat')==True{tp", final=True))
    assert out.ok and "1 unclosed block" in out.detail
    again = r.run(SegmentItem("t", 1, "tp"))  # the task is over: no program state to continue
    assert not again.ok


def test_planner_failure_marks_queued_segments_failed():
    r = runner()
    assert r.run(SegmentItem("t", 0, "mf(50);")).ok
    r.fail_task("t", "the planner marked the task EXPIRED")
    out = r.run(SegmentItem("t", 1, "mf(50);"))
    assert not out.ok and "EXPIRED" in out.detail
