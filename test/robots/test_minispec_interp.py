"""The streaming MiniSpec interpreter: blocks, loops, variables and returns across segments."""

from __future__ import annotations

import pytest

from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.robots.minispec import CallProgram, MiniSpecProgram, SkillFailure, values_equal


class Recorder:
    """Runtime that records every call and answers from a table (a list = successive answers)."""

    def __init__(self, answers: dict | None = None) -> None:
        self.answers = answers or {}
        self.calls: list[str] = []

    def execute(self, call, args):
        self.calls.append(f"{call.name}({','.join(map(repr, args))})" if args else call.name)
        key = (call.name, *args)
        value = self.answers.get(key, self.answers.get(call.name))
        if isinstance(value, list):
            return value.pop(0)
        return value


DRONE = load_skill_set("tello_minispec")


def run(
    plan_segments: list[str], answers: dict | None = None
) -> tuple[MiniSpecProgram, Recorder, list[list[str]]]:
    rt = Recorder(answers)
    prog = MiniSpecProgram(DRONE, rt)
    notes = [prog.run_segment(seg) for seg in plan_segments]
    return prog, rt, notes


def segments(plan: str) -> list[str]:
    """Cut the plan exactly as the planner's stop checker would."""
    return DRONE.split(plan)


def test_condition_header_is_evaluated_when_it_arrives_and_gates_later_segments():
    plan = "?s('cat')==True{g('cat');tp}->False"
    segs = segments(plan)
    assert segs[0] == "?s('cat')==True{"
    prog, rt, notes = run(segs, {"s": True})
    assert rt.calls == ["s('cat')", "g('cat')", "tp"]
    assert prog.returned and prog.result is False
    prog, rt, notes = run(segs, {"s": False})
    assert rt.calls == ["s('cat')"]
    assert prog.result is False
    assert any("skipped" in n for seg_notes in notes for n in seg_notes)


def test_loop_runs_live_once_then_replays_at_the_closing_brace():
    segs = segments("3{tc(90);tp};mf(50)")
    assert len(segs) >= 3  # the body arrives in several segments
    prog, rt, _ = run(segs)
    assert rt.calls == ["tc(90)", "tp"] * 3 + ["mf(50)"]
    # the first iteration ran before the loop was complete: after the first segment one call was made
    rt2 = Recorder()
    p2 = MiniSpecProgram(DRONE, rt2)
    p2.run_segment(segs[0])
    assert rt2.calls == ["tc(90)"]


def test_nested_loops_and_conditions_inside_loops_are_replayed_exactly():
    plan = "2{tc(10);2{mf(20)};?iv('x')==True{tp}}"
    prog, rt, _ = run(segments(plan), {"iv": [True, False]})
    assert rt.calls == [
        "tc(10)",
        "mf(20)",
        "mf(20)",
        "iv('x')",
        "tp",
        "tc(10)",
        "mf(20)",
        "mf(20)",
        "iv('x')",
    ]


def test_return_inside_a_loop_stops_the_replays_and_the_rest_of_the_plan():
    # the definition of scan from the notes: 8{?iv($1)==True{->True}tc(45)}->False
    plan = "8{?iv('cat')==True{->True}tc(45)}->False"
    prog, rt, _ = run(segments(plan), {"iv": [False, False, True]})
    assert rt.calls == ["iv('cat')", "tc(45)", "iv('cat')", "tc(45)", "iv('cat')"]
    assert prog.result is True


def test_variables_live_across_segments_and_are_checked_when_used():
    plan = "_1=od('cat');?_1<100{mf(_1)}"
    prog, rt, _ = run(segments(plan), {"od": 45.6})
    assert rt.calls == ["od('cat')", "mf(46)"]  # a measured float becomes the int the skill takes
    with pytest.raises(SkillFailure, match="above the maximum 500"):
        run(["_1=od('cat');", "mf(_1)"], {"od": 800.0})
    with pytest.raises(SkillFailure, match="_3 is used before it is set"):
        run(["mf(_3)"])


def test_log_of_a_number_variable_reports_its_text():
    _, rt, notes = run(segments("_2=oh('bottle');l(_2)"), {"oh": 0.3})
    assert rt.calls == ["oh('bottle')", "l('0.3')"]
    assert "log: 0.3" in [n for seg in notes for n in seg]


def test_and_binds_tighter_than_or_and_evaluation_short_circuits():
    # a | b & c  ==  a | (b & c): with a True nothing else is evaluated
    prog, rt, _ = run(
        ["?iv('a')==True|iv('b')==True&iv('c')==True{", "tp", "}"],
        {("iv", "a"): True, ("iv", "b"): False, ("iv", "c"): True},
    )
    assert rt.calls == ["iv('a')", "tp"]
    # a False: b & c evaluated left to right, c skipped once b is False
    prog, rt, _ = run(
        ["?iv('a')==True|iv('b')==True&iv('c')==True{", "tp", "}"],
        {("iv", "a"): False, ("iv", "b"): False, ("iv", "c"): True},
    )
    assert rt.calls == ["iv('a')", "iv('b')"]


def test_equality_rules():
    assert values_equal(True, "True") and not values_equal(True, 1) and values_equal(2, 2.0)
    assert not values_equal("yes", "Yes")
    with pytest.raises(SkillFailure, match="both must be numbers"):
        run(["?p('what?')>3{", "tp", "}"], {"p": "two"})


def test_re_plan_ends_the_plan():
    prog, rt, notes = run(["mf(30);", "rp;", "mf(40)"])
    assert rt.calls == ["mf(30)", "rp"]
    assert prog.returned and prog.result == "re_plan"


def test_bad_segments_fail_with_the_parser_reason():
    with pytest.raises(SkillFailure, match="800 is above the maximum 500"):
        run(["mf(800)"])
    with pytest.raises(SkillFailure, match="closes no open block"):
        run(["mf(20);", "}"])
    with pytest.raises(SkillFailure, match="unknown skill 'fly'"):
        run(["fly(3)"])


def test_call_language_runs_calls_in_order():
    arm = load_skill_set("robot_arm")
    rt = Recorder({"sc": True})
    prog = CallProgram(arm, rt)
    notes = prog.run_segment("sc('red_box'); gt('red_box');") + prog.run_segment(" pi('red_box');")
    assert rt.calls == ["sc('red_box')", "gt('red_box')", "pi('red_box')"]
    assert notes == ["sc('red_box')=True"]


def test_a_budget_refuses_the_segment_before_any_of_it_runs():
    from timely_llm_ros.core.motion_budget import MotionBudget

    rt = Recorder()
    prog = MiniSpecProgram(DRONE, rt, MotionBudget(DRONE))
    prog.run_segment("mf(500);2{tc(90)")
    with pytest.raises(SkillFailure, match="motion budget: plan distance would reach 2500 cm"):
        prog.run_segment(";mf(500);mf(500)")  # 500 + 2 x 1000 = 2500 > 2000 (inside the 2{ loop)
    assert rt.calls == ["mf(500)", "tc(90)"]  # the refused segment moved nothing
    with pytest.raises(SkillFailure, match="nested 2 deep"):
        prog.run_segment(";3{tp}")
    arm = load_skill_set("robot_arm")
    calls = CallProgram(arm, Recorder(), MotionBudget(arm))
    with pytest.raises(SkillFailure, match="execution time would reach 183 s"):
        calls.run_segment("sc('a');" * 61)
