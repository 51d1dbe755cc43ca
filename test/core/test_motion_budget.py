"""Per-plan motion budget (core/motion_budget.py): hand-computed costs, limits, loading, the planner hook."""

from __future__ import annotations

import math
from dataclasses import replace
from pathlib import Path

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.motion_budget import (
    BudgetExceeded,
    MotionBudget,
    MotionBudgetError,
    PlanBudgets,
    budget_limits,
    loop_depth,
    parse_limits,
)
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.workload.tasks import load_catalog

DRONE = load_skill_set("tello_minispec")
ARM = load_skill_set("robot_arm")
# Hand-computed from config/exec_time/drone.yaml: mf(v) = 0.0072 v + 1.8144 s, tc(v) = 0.0165 v + 0.784 s
MF100 = 0.0072 * 100 + 1.8144
TC90 = 0.0165 * 90 + 0.784


def test_shipped_tello_limits_are_the_documented_ones():
    lim = budget_limits(DRONE)
    assert (lim.max_distance_cm, lim.max_rotation_deg, lim.max_time_s, lim.max_calls, lim.max_loop_depth) == (
        2000,
        1440,
        120,
        100,
        1,
    )
    assert lim.costs["mf"] == {"distance_cm": "arg"} and lim.costs["s"] == {"rotation_deg": 360}
    arm = budget_limits(ARM)
    assert arm.max_time_s == 180 and arm.max_calls == 60 and math.isinf(arm.max_distance_cm)
    assert budget_limits(load_skill_set("chatbot_sentence")) is None


def test_loop_repeats_count_for_distance_rotation_time_and_calls():
    b = MotionBudget(DRONE)
    cost = b.charge("3{mf(100);tc(90)}")
    assert (cost.distance_cm, cost.rotation_deg, cost.calls) == (300, 270, 6)
    assert cost.time_s == pytest.approx(3 * MF100 + 3 * TC90)
    assert b.used == cost


def test_a_looped_long_flight_is_refused_and_nothing_is_charged():
    """`20{mf(200)` for "fly forward 100000 cm": 20 x 200 = 4000 cm > 2000 cm."""
    b = MotionBudget(DRONE)
    with pytest.raises(BudgetExceeded, match=r"distance would reach 4000 cm .* limit of 2000 cm"):
        b.charge("20{mf(200)")
    assert b.used.distance_cm == 0 and b.segments == 0


def test_loops_opened_in_an_earlier_segment_multiply_later_segments():
    b = MotionBudget(DRONE)
    b.charge("4{mf(100)")  # 400
    assert b.charge(";mr(100)").distance_cm == 400  # still inside the 4{ loop
    assert b.charge("}mu(100)").distance_cm == 100  # after the loop
    assert b.used.distance_cm == 900
    with pytest.raises(BudgetExceeded, match=r"2400 cm \(this segment: 1500\)"):
        b.charge("3{md(500)")  # 900 + 3 x 500 = 2400 > 2000
    b.charge(";md(500)")  # 1400 <= 2000, the refused segment was not added


def test_worst_cases_variables_scans_and_conditional_bodies():
    b = MotionBudget(DRONE)
    # a variable distance counts as the argument's maximum (500); a conditional body as executed;
    # a scan as a full turn and a goto as one maximal SDK move
    cost = b.charge("_1=od('cat');?s('cat')==True{g('cat');mf(_1)}")
    assert (cost.distance_cm, cost.rotation_deg, cost.calls) == (1000, 360, 4)


def test_rotation_time_and_call_limits():
    with pytest.raises(BudgetExceeded, match="rotation would reach 1800 deg"):
        MotionBudget(DRONE).charge("5{tc(360)}")
    with pytest.raises(BudgetExceeded, match=r"execution time would reach 200 s .* 120 s"):
        MotionBudget(DRONE).charge("20{d(10)}")  # d(v) takes v seconds
    with pytest.raises(BudgetExceeded, match="skill calls would reach 120"):
        MotionBudget(DRONE).charge("20{tp;tp;tp;tp;tp;tp}")
    # arm (config/exec_time/arm.yaml): sc takes at most 3.0 s; 61 scans = 183 s > 180 s
    with pytest.raises(BudgetExceeded, match="execution time would reach 183 s"):
        MotionBudget(ARM).charge("sc('a');" * 61)


def test_nested_loops_are_refused_also_across_segments():
    with pytest.raises(BudgetExceeded, match="nested 2 deep"):
        MotionBudget(DRONE).charge("2{3{tp}}")
    b = MotionBudget(DRONE)
    b.charge("2{tp")
    with pytest.raises(BudgetExceeded, match="nested 2 deep"):
        b.charge(";3{tp}")
    b.charge("}3{tp}")  # after the first loop closed, a second loop is fine
    deeper = MotionBudget(DRONE, replace(budget_limits(DRONE), max_loop_depth=2))
    deeper.charge("2{3{tp}}")


@pytest.mark.parametrize(
    "text,depth",
    [
        ("tp", 0),
        ("3{tp}", 1),
        ("?ox('a')>5{tp}", 0),
        ("2{?iv('a')==True{3{tp}}}", 2),
        ("?x==1{2{tp}};4{tp}", 1),
    ],
)
def test_loop_depth_tells_loops_from_conditions(text, depth):
    assert loop_depth(text) == depth


def test_every_reference_plan_and_example_fits_its_budget():
    for task in load_catalog():
        for v in task.all_variants():
            sset = load_skill_set(v.skill_set)
            b = MotionBudget(sset)
            for seg in sset.split(v.plan):
                b.charge(seg)
    for sset in (DRONE, ARM, load_skill_set("arm_fltrnn")):
        for ex in sset.examples:
            MotionBudget(sset).charge(ex["plan"])


@pytest.mark.parametrize(
    "raw,word",
    [
        ([], "must be a mapping"),
        ({"max_distance": 5}, "unknown field"),
        ({"max_distance_cm": -1}, "finite number >= 0"),
        ({"max_distance_cm": math.inf}, "finite number >= 0"),
        ({"max_calls": 2.5}, "non-negative int"),
        ({"costs": {"zz": {"distance_cm": 1}}}, "no skill 'zz'"),
        ({"costs": {"mf": {"height": 1}}}, "must map some of"),
        ({"costs": {"mf": {"distance_cm": -3}}}, "number >= 0"),
        ({"costs": {"iv": {"distance_cm": "arg"}}}, "numeric first argument"),
    ],
)
def test_malformed_budget_sections_are_refused_with_the_field(raw, word):
    with pytest.raises(MotionBudgetError, match=word):
        parse_limits(raw, DRONE, "x.yaml")


def test_plan_budgets_rebuild_an_evicted_plan_from_its_dispatched_segments():
    books = PlanBudgets(max_plans=1)
    assert books.check(1, DRONE, [], "3{mf(500)") is None
    assert books.check(2, DRONE, [], "mf(20)") is None  # evicts plan 1
    assert len(books) == 1
    assert "above the maximum 500" in books.check(1, DRONE, ["3{mf(500)"], "}mf(600)")  # parse-level
    assert "2020 cm" in books.check(1, DRONE, ["3{mf(500)"], "}mf(500);mf(20)")
    assert books.check(3, load_skill_set("chatbot_sentence"), [], "Hello there.") is None


# ------------------------------------------------------------------------------ planner hook (sim engine)
PROFILE = EngineProfile(name="t", prefill_b=0.0001, prefill_c=0.01, decode_q=0.02, decode_r=0.0)


def _spec(task_id: str, plan: str) -> TaskSpec:
    return TaskSpec(
        task_id=task_id,
        agent_id="ag",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] fly forward 100000 cm",
        tuf=NORMAL_TUF,
        reference_plan=plan,
    )


def test_the_planner_fails_an_over_budget_plan_before_dispatching_it():
    sent, states = [], []
    p = PlannerCore(SimEngine(PROFILE), "timely", dispatch=sent.append, on_state=lambda *a: states.append(a))
    far = p.submit(_spec("far", "20{mf(200)}"))
    later = p.submit(_spec("later", "3{mf(500)};mf(500);mf(20)"))
    ok = p.submit(_spec("ok", "mu(40);tp;"))
    while p.has_work():
        p.step()
    assert far.state == ev.FAILED and "exceeds the motion budget" in far.reason and "4000 cm" in far.reason
    assert not [d for d in sent if d.task_id == "far"]  # nothing of it reached the robot
    # a plan that goes over in a later segment: the earlier segments went out, the rest not
    assert later.state == ev.FAILED and "2020 cm" in later.reason
    assert [d.text for d in sent if d.task_id == "later"] and all(
        "mf(20)" not in d.text for d in sent if d.task_id == "later"
    )
    assert ok.state != ev.FAILED  # (a closing marker, if the planner sends one, has no text)
    assert [c.name for d in sent if d.task_id == "ok" for c in d.calls] == ["mu", "tp"]
    assert ("far", ev.FAILED, far.reason) in states


def test_the_skill_set_schema_accepts_the_budget_section_and_refuses_a_misspelt_field(tmp_path):
    from timely_llm_ros.core.skills import SkillSetError, load_skill_set_file

    text = DRONE.source_path and Path(DRONE.source_path).read_text(encoding="utf-8")
    bad = tmp_path / "tello_minispec.yaml"
    bad.write_text(text.replace("  max_distance_cm: 2000", "  max_distance: 2000"), encoding="utf-8")
    with pytest.raises(SkillSetError, match="max_distance"):
        load_skill_set_file(bad)
