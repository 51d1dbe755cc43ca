"""Per-task execution state of SegmentRunner (motion budget, bounded state), without ROS."""

from __future__ import annotations

from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.robots.runner import MAX_DETAIL, MAX_SCENE, SegmentRunner, clip
from timely_llm_ros.robots.sim import SimBackend
from timely_llm_ros.robots.task_queue import SegmentItem

DRONE = load_skill_set("tello_minispec")


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


def test_the_robot_refuses_a_plan_over_its_motion_budget_before_anything_moves():
    """Seen before the budget: `20{mf(200)` flew about 40 m for "fly forward 100000 cm"."""
    backend = SimBackend(DRONE, time_scale=0.0)
    r = SegmentRunner(DRONE, backend)
    out = r.run(SegmentItem("far", 0, "20{mf(200)"))
    assert not out.ok and "motion budget" in out.detail and "4000 cm" in out.detail
    assert backend.calls == 0
    # across segments: 3 x 500 + 500 = 2000 cm is the limit; 20 cm more is refused
    assert r.run(SegmentItem("t", 0, "3{mf(500)")).ok
    assert r.run(SegmentItem("t", 1, "}mf(500)")).ok
    calls = backend.calls
    over = r.run(SegmentItem("t", 2, ";mf(20)"))
    assert not over.ok and "2020 cm" in over.detail and backend.calls == calls


def test_nested_loops_are_refused_on_the_robot_even_across_segments():
    backend = SimBackend(DRONE, time_scale=0.0)
    r = SegmentRunner(DRONE, backend)
    assert r.run(SegmentItem("t", 0, "2{tp")).ok
    out = r.run(SegmentItem("t", 1, ";3{tc(10)}}"))
    assert not out.ok and "nested 2 deep" in out.detail


def test_without_a_budget_the_runner_runs_what_parses():
    r = SegmentRunner(DRONE, SimBackend(DRONE, time_scale=0.0), motion_budget=False)
    assert r.run(SegmentItem("far", 0, "20{mf(200)}")).ok


def test_forget_drops_every_per_task_record():
    r = runner()
    r.set_scene("t", "[cat x:0.5 y:0.5]")
    assert r.run(SegmentItem("t", 0, "tp")).ok
    r.fail_task("t", "x")
    assert r.task_states() == 2
    r.forget("t")
    assert r.task_states() == 0


def test_an_oversized_scene_is_not_kept_and_perception_fails_with_the_reason():
    r = runner()
    r.set_scene("t", "[cat x:0.5 y:0.5] " * (MAX_SCENE // 10))
    out = r.run(SegmentItem("t", 0, "?iv('cat')==True{tp"))
    assert not out.ok and f"keeps at most {MAX_SCENE}" in out.detail


def test_details_are_cut_to_the_forwarding_limit():
    assert clip("x" * 10) == "x" * 10
    cut = clip("y" * 1_000_000)
    assert len(cut) <= MAX_DETAIL and cut.endswith("more characters cut]")


def test_per_task_state_stays_bounded_over_thousands_of_tasks():
    """Memory stays flat: per-task state is dropped when the task is over."""
    from timely_llm_ros.robots.task_queue import TaskQueue

    r = runner()
    q = TaskQueue(on_end=r.forget)
    for n in range(3000):
        r.set_scene(f"t{n}", "[cat x:0.5 y:0.5]")
        q.put(SegmentItem(f"t{n}", 0, "?iv('cat')==True{tp"))
        q.put(SegmentItem(f"t{n}", 1, "}", final=n % 2 == 0))
        if n % 2:
            q.end(f"t{n}", "the planner marked the task COMPLETED")  # ends by status, not by a final
        while (h := q.poll()) is not None:
            out = r.run(h.item) if h.kind == "run" else None
            if out is not None:
                q.done(h.item.task_id, ok=out.ok, final=h.item.final)
    assert r.task_states() == 0 and len(q) == 0 and q.task_states() <= q.max_ended


def test_a_loop_closed_by_a_call_less_final_segment_runs_its_full_count():
    """``2{mf(50);tc(90)}`` arrives as ``2{mf(50)``, ``;tc(90)`` and ``}``: the body runs live once and
    once more at the ``}`` (the planner used to drop that tail; the loop then ran once)."""
    backend = SimBackend(DRONE, time_scale=0.0)
    r = SegmentRunner(DRONE, backend)
    for i, text in enumerate(["2{mf(50)", ";tc(90)"]):
        assert r.run(SegmentItem("t", i, text)).ok
    assert backend.calls == 2
    out = r.run(SegmentItem("t", 2, "}", final=True))
    assert out.ok and "unclosed" not in out.detail, out.detail
    assert backend.calls == 4
