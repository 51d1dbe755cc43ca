"""Execution-time models: hand-computed values from the notes' table, bounds, seeded sampling."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import yaml

from timely_llm_ros.core.exectime import (
    ExecEstimate,
    ExecTimeError,
    UnknownRobotType,
    executed_calls,
    load_exec_time_file,
    load_exec_time_model,
)
from timely_llm_ros.core.skills import available_skill_sets, load_skill_set

MODEL = load_exec_time_model()
TELLO = load_skill_set("tello_minispec")
ARM = load_skill_set("robot_arm")
FLTRNN = load_skill_set("arm_fltrnn")


def est(sset, text):
    return MODEL.estimate(sset.robot_type, sset.parse_plan(text))


def approx(e: ExecEstimate, lo: float, mid: float, hi: float) -> None:
    assert e.minimum == pytest.approx(lo, abs=1e-9)
    assert e.expected == pytest.approx(mid, abs=1e-9)
    assert e.maximum == pytest.approx(hi, abs=1e-9)


def test_tello_formulas():
    approx(est(TELLO, "mf(100)"), 2.5344, 2.5344, 2.5344)  # 0.0072·100 + 1.8144
    approx(est(TELLO, "ml(20)"), 1.9584, 1.9584, 1.9584)  # 0.0072·20 + 1.8144
    # 8e-7·50³ − 3e-4·50² + 0.0388·50 + 1.3195 = 0.1 − 0.75 + 1.94 + 1.3195
    approx(est(TELLO, "mu(50)"), 2.6095, 2.6095, 2.6095)
    approx(est(TELLO, "md(100)"), 2.9995, 2.9995, 2.9995)  # 0.8 − 3 + 3.88 + 1.3195
    approx(est(TELLO, "tc(90)"), 2.269, 2.269, 2.269)  # 0.0165·90 + 0.784
    approx(est(TELLO, "d(3)"), 3.0, 3.0, 3.0)
    approx(est(TELLO, "g('cat')"), 2.5, 2.5, 2.5)
    approx(est(TELLO, "p('what?')"), 0.041, 0.041, 0.041)
    approx(est(TELLO, "tp"), 0.001, 0.001, 0.001)


def test_scan_iterations():
    # 1..8 iterations of 1.5275 s: min = found at once, max = full turn, expected = 4.5 iterations
    approx(est(TELLO, "s('cat')"), 1.5275, 4.5 * 1.5275, 8 * 1.5275)
    approx(est(TELLO, "sa('what is red?')"), 1.5675, 4.5 * 1.5675, 8 * 1.5675)
    approx(MODEL.estimate("drone", TELLO.parse("?s('cat')==True{")), 1.5275, 6.87375, 12.22)


def test_segment_sums_and_loops():
    # s + g = the minimum the scheduler uses for trace 0's whole plan
    approx(est(TELLO, "?s('cat')==True{g('cat')}"), 4.0275, 9.37375, 14.72)
    approx(est(TELLO, "4{tc(90);tp}"), 9.08, 9.08, 9.08)  # 4 · (2.269 + 0.001)
    approx(MODEL.estimate("drone", []), 0.0, 0.0, 0.0)


def _runs(sset, segments):
    """Per segment: {call source: times executed} as the streaming interpreter runs them."""
    out = []
    for i, text in enumerate(segments):
        counts: dict[str, int] = {}
        for c in executed_calls(sset, segments[:i], text):
            counts[c.source] = counts.get(c.source, 0) + c.repeat
        out.append(counts)
    return out


def test_segments_are_timed_as_the_interpreter_runs_them():
    # the embedded LLM's loop, cut by the stop checker: one live turn, then the rest at the '}'
    assert TELLO.split("10{tc(90);tp}") == ["10{tc(90)", ";tp}"]
    assert _runs(TELLO, ["10{tc(90)", ";tp}"]) == [{"tc(90)": 1}, {"tp": 10, "tc(90)": 9}]
    one_turn = 2.269
    approx(MODEL.estimate_segment("drone", TELLO, [], "10{tc(90)"), one_turn, one_turn, one_turn)
    rest = 9 * one_turn + 10 * 0.001
    approx(MODEL.estimate_segment("drone", TELLO, ["10{tc(90)"], ";tp}"), rest, rest, rest)
    # nested loops and a condition header inside a loop (its call re-runs on every pass)
    assert _runs(TELLO, ["2{3{tc(30)", "};tp}"]) == [{"tc(30)": 1}, {"tc(30)": 5, "tp": 2}]
    assert _runs(TELLO, ["4{tc(90)", ";?iv('cat')==True{", "tp}", "}"]) == [
        {"tc(90)": 1},
        {"iv('cat')": 1},
        {"tp": 1},
        {"tc(90)": 3, "iv('cat')": 3, "tp": 3},
    ]
    # a '}' that closes nothing of this task adds nothing; call-language sets have no blocks
    assert _runs(TELLO, ["tp}"]) == [{"tp": 1}]
    assert _runs(ARM, ["sc('a'); gt('a')", "dr()"]) == [{"sc('a')": 1, "gt('a')": 1}, {"dr()": 1}]


@pytest.mark.parametrize(
    "plan",
    [
        "10{tc(90);tp}",
        "2{mf(50);tc(90)}",
        "2{3{tc(30)};tp}",
        "4{tc(90);?iv('cat')==True{tp}}",
        "?s('cat')==True{g('cat')}->False",
        "mu(40);3{_1=od('cup');mf(_1)};tp",
    ],
)
def test_segment_estimates_add_up_to_the_whole_plan(plan):
    segments = TELLO.split(plan)
    total = ExecEstimate(0.0, 0.0, 0.0)
    for i, text in enumerate(segments):
        total = total + MODEL.estimate_segment("drone", TELLO, segments[:i], text)
    whole = est(TELLO, plan)
    approx(total, whole.minimum, whole.expected, whole.maximum)


def test_variable_argument_uses_range():
    approx(est(TELLO, "_1=od('cup');mf(_1)"), 0.001 + 1.9584, 0.001 + 3.6864, 0.001 + 5.4144)


def test_arm_models():
    approx(est(ARM, "gt('a')"), 0.8, 3.15, 5.5)
    approx(est(ARM, "sc('a'); pi('a'); dr()"), 1 + 3 + 3, 2 + 3.6 + 3.6, 3 + 4.2 + 4.2)
    e = est(FLTRNN, "move_to(0.5, 0.5)")
    assert (e.minimum, e.maximum) == (1.003181, 2.960106)
    assert est(FLTRNN, "take('a')").minimum == 3.098021
    assert est(FLTRNN, "drop('a')").maximum == 4.128261


def test_chatbot_reading_time():
    s = load_skill_set("chatbot_sentence")
    calls = s.parse("One two three four five six seven eight nine ten.")
    approx(MODEL.estimate("chatbot", calls), 2.0, 2.0, 2.0)  # 10 words at 300 words/min


def test_sampling_is_seeded_and_in_bounds():
    plans = [
        (TELLO, "?s('cat')==True{g('cat')};mu(_1)"),
        (ARM, "sc('a'); gt('a'); pi('a'); dr()"),
        (FLTRNN, "move_to(0.1, 0.2); take('a'); move_to(0.3, 0.3); drop('a')"),
    ]
    for sset, text in plans:
        calls = sset.parse_plan(text)
        e = MODEL.estimate(sset.robot_type, calls)
        a = [MODEL.sample(sset.robot_type, calls, random.Random(7)) for _ in range(3)]
        assert a[0] == a[1] == a[2]
        rng = random.Random(1)
        values = [MODEL.sample(sset.robot_type, calls, rng) for _ in range(200)]
        assert all(e.minimum - 1e-9 <= v <= e.maximum + 1e-9 for v in values)
        assert len(set(values)) > 1  # these plans contain random skills


def test_scan_sample_is_whole_iterations():
    calls = TELLO.parse("s('cat')")
    rng = random.Random(3)
    ks = {round(MODEL.sample("drone", calls, rng) / 1.5275, 9) for _ in range(300)}
    assert ks == {float(k) for k in range(1, 9)}


def test_fltrnn_samples_come_from_data():
    calls = FLTRNN.parse("take('a')")
    rng = random.Random(5)
    got = {MODEL.sample("arm", calls, rng) for _ in range(200)}
    assert got <= {3.098021, 3.129758, 3.193694, 3.242394, 3.399605, 3.783813, 3.827272, 4.048311}


def test_every_skill_has_a_model():
    for name in available_skill_sets():
        s = load_skill_set(name)
        assert s.skill_names() <= MODEL.skills(s.robot_type), name


def test_unknown_robot_and_skill():
    with pytest.raises(UnknownRobotType) as err:
        MODEL.estimate("submarine", [])
    assert isinstance(err.value, KeyError)
    assert "'submarine'" in str(err.value) and "arm, chatbot, drone" in str(err.value)
    with pytest.raises(ExecTimeError, match="no execution-time model for skill 'mf' of robot type 'arm'"):
        MODEL.estimate("arm", TELLO.parse("mf(100)"))
    with pytest.raises(UnknownRobotType):
        MODEL.sample("submarine", [], random.Random(0))
    with pytest.raises(TypeError):
        MODEL.sample("drone", [], 42)  # type: ignore[arg-type]


def _file(tmp_path: Path, skills: dict) -> Path:
    p = tmp_path / "r.yaml"
    p.write_text(yaml.safe_dump({"robot_type": "r", "skills": skills}), encoding="utf-8")
    return p


@pytest.mark.parametrize(
    "skills,fragment",
    [
        ({"a": {"model": "magic"}}, "skills.a.model: must be one of poly"),
        ({"a": {"model": "poly", "coef": [], "arg_range": [0, 1]}}, "skills.a.coef: must not be empty"),
        ({"a": {"model": "poly", "coef": [1.0], "arg_range": [5, 1]}}, "'arg_range' must be [low, high]"),
        ({"a": {"model": "poly", "coef": [1.0, -5.0], "arg_range": [0, 10]}}, "negative time"),
        ({"a": {"model": "constant", "value": -1}}, "skills.a.value: must be >= 0, got -1"),
        ({"a": {"model": "iterations", "per_iteration": 1.0, "iterations": [0, 8]}}, "positive ints"),
        ({"a": {"model": "uniform", "range": [2]}}, "skills.a.range: [2] is too short"),
        ({"a": {"model": "samples", "samples": []}}, "skills.a.samples: must not be empty"),
        ({"a": {"model": "reading", "words_per_minute": 0}}, "skills.a.words_per_minute: must be > 0"),
        ({}, "skills: must not be empty"),
        (
            {"a": {"model": "constant", "value": 1, "extra": 2}},
            "skills.a: unknown field(s) 'extra'; known: model, value",
        ),
    ],
)
def test_bad_model_files(tmp_path, skills, fragment):
    path = _file(tmp_path, skills)
    with pytest.raises(ExecTimeError) as err:
        load_exec_time_file(path)
    assert str(path) in str(err.value) and fragment in str(err.value)


def test_bad_model_yaml(tmp_path):
    p = tmp_path / "bad.yaml"
    p.write_text("robot_type: [\n", encoding="utf-8")
    with pytest.raises(ExecTimeError, match="not valid YAML"):
        load_exec_time_file(p)
    p.write_text("skills: {a: {model: constant, value: 1}}\n", encoding="utf-8")
    with pytest.raises(ExecTimeError, match="missing field 'robot_type'"):
        load_exec_time_file(p)


def test_numeric_model_needs_numeric_argument(tmp_path):
    _, models = load_exec_time_file(
        _file(tmp_path, {"iv": {"model": "poly", "coef": [1.0], "arg_range": [0, 1]}})
    )
    with pytest.raises(ExecTimeError, match="needs a numeric first argument"):
        models["iv"].estimate(TELLO.parse("iv('x')")[0])
