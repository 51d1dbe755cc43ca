"""Simulated robots: modelled timing, perception from the scene, arm state, reference plans."""

from __future__ import annotations

import threading

import pytest

from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.robots.minispec import Call, SkillFailure
from timely_llm_ros.robots.runner import SegmentRunner
from timely_llm_ros.robots.scene import SceneError, parse_scene
from timely_llm_ros.robots.sim import SimBackend
from timely_llm_ros.robots.task_queue import SegmentItem
from timely_llm_ros.workload.tasks import load_catalog

DRONE = load_skill_set("tello_minispec")


def backend(**kw) -> SimBackend:
    kw.setdefault("time_scale", 0.0)
    return SimBackend(DRONE, **kw)


def test_min_mode_waits_the_fitted_model_minimum():
    b = backend(exec_mode="min")
    b.execute(Call("mf", (100,), "mf(100)"), (100,))
    b.execute(Call("tc", (90,), "tc(90)"), (90,))
    # Tello models (config/exec_time/drone.yaml): 0.0072 v + 1.8144 and 0.0165 v + 0.784
    assert b.status()["modelled_s"] == pytest.approx(0.0072 * 100 + 1.8144 + 0.0165 * 90 + 0.784)
    b.execute(Call("s", ("cat",), "s('cat')"), ("cat",))  # scan: minimum = one 1.5275 s iteration
    assert b.status()["modelled_s"] == pytest.approx(0.0072 * 100 + 1.8144 + 0.0165 * 90 + 0.784 + 1.5275)


def test_sampled_mode_is_reproducible_per_seed():
    def durations(seed: int) -> list[float]:
        b = backend(exec_mode="sampled", seed=seed)
        return [b.duration(Call("s", ("x",), "s('x')"), ("x",)) for _ in range(20)]

    assert durations(7) == durations(7)
    assert durations(7) != durations(8)
    assert all(1.5275 - 1e-9 <= d <= 8 * 1.5275 + 1e-9 for d in durations(3))


def test_waiting_is_real_and_ends_with_a_failure_on_shutdown():
    b = SimBackend(DRONE, exec_mode="min", time_scale=1.0)
    out: list[BaseException] = []

    def work() -> None:
        try:
            b.execute(Call("mf", (500,), "mf(500)"), (500,))  # 5.4 s modelled
        except SkillFailure as exc:
            out.append(exc)

    t = threading.Thread(target=work)
    t.start()
    b.stop()
    t.join(timeout=30)
    assert not t.is_alive()
    assert out and "shutting down" in out[0].reason


def test_perception_is_answered_from_the_scene():
    b = backend()
    runner = SegmentRunner(DRONE, b)
    runner.set_scene(
        "t",
        "[bottle_1 x:0.32 y:0.50 width:0.10 height:0.30 distance:120], "
        "[cat x:0.7 y:0.2 width:0.2 height:0.4]",
    )
    plan = "?iv('bottle')==True{_1=oh('bottle');l(_1);_2=od('bottle');_3=ox('cat');_4=p('what do you see?')}"
    outcomes = [runner.run(SegmentItem("t", i, s)) for i, s in enumerate(DRONE.split(plan))]
    assert all(o.ok for o in outcomes), outcomes
    detail = " ".join(o.detail for o in outcomes)
    for expected in (
        "iv('bottle')=True",
        "log: 0.3",
        "od('bottle')=120",
        "ox('cat')=0.7",
        "in view: bottle_1, cat",
    ):
        assert expected in detail


@pytest.mark.parametrize(
    "plan, reason",
    [
        ("_1=ox('dog')", "'dog' is not in view"),
        ("g('dog')", "'dog' is not in view"),
        ("_1=od('cat')", "no distance for 'cat'"),
    ],
)
def test_asking_about_what_is_not_in_the_scene_fails_instead_of_guessing(plan, reason):
    runner = SegmentRunner(DRONE, backend(), default_scene="[cat x:0.5 y:0.5 width:0.2 height:0.2]")
    out = runner.run(SegmentItem("t", 0, plan))
    assert not out.ok and reason in out.detail


def test_scene_parsing():
    s = parse_scene("[table_1 x:0.28 y:0.15 width:0.2 height:0.19],")
    assert s.find("table").x == 0.28 and s.find("Table 1") is not None
    assert parse_scene("[]").objects == [] and parse_scene("").objects == []
    assert parse_scene("[a x:0.1] [b y:0.2]").names() == ["a", "b"]
    for bad, why in [
        ("[apple:0.48 y:0.55 width:0.49 height:0.35]", "does not start with an object name"),
        ("[cat x:1.5]", "within 0..1"),
        ("[cat colour:red]", "is not one of"),
        ("cat x:0.5", "not a list"),
    ]:
        with pytest.raises(SceneError, match=why):
            parse_scene(bad)


def test_arm_state_refuses_impossible_plans_and_persists_across_tasks():
    arm = load_skill_set("robot_arm")
    runner = SegmentRunner(arm, SimBackend(arm, time_scale=0.0))
    bad = runner.run(SegmentItem("a", 0, "pi('red_box');"))
    assert not bad.ok and "go to it first" in bad.detail
    assert runner.run(SegmentItem("b", 0, "gt('red_box'); pi('red_box');")).ok
    held = runner.run(SegmentItem("c", 0, "gt('cup'); pi('cup');"))  # still holding the red box
    assert not held.ok and "already holds 'red_box'" in held.detail
    assert runner.run(SegmentItem("d", 0, "dr();")).ok
    empty = runner.run(SegmentItem("e", 0, "dr();"))
    assert not empty.ok and "holds nothing" in empty.detail
    fl = load_skill_set("arm_fltrnn")
    r2 = SegmentRunner(fl, SimBackend(fl, time_scale=0.0))
    assert r2.run(SegmentItem("f", 0, "move_to(0.5, 0.5); take('apple');")).ok
    wrong = r2.run(SegmentItem("g", 0, "drop('pear');"))
    assert not wrong.ok and "holds 'apple'" in wrong.detail


def test_every_reference_plan_runs_segment_by_segment_on_the_sim():
    """The LRTrace catalog's plans (what the sim engine emits) must all execute on the sim robots."""
    seen = 0
    for task in load_catalog():
        for v in task.all_variants():
            sset = load_skill_set(v.skill_set)
            runner = SegmentRunner(sset, SimBackend(sset, exec_mode="sampled", time_scale=0.0))
            runner.set_scene("task", v.scene)
            segs = sset.split(v.plan)
            for i, seg in enumerate(segs):
                out = runner.run(SegmentItem("task", i, seg, final=i == len(segs) - 1))
                assert out.ok, f"task {task.id} ({v.skill_set}) segment {i} {seg!r}: {out.detail}"
            seen += 1
    assert seen >= 11
