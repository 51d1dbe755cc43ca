"""Measurements and refitted execution-time models (core/exectime_fit.py), without ROS: what the
time-model node writes is loadable by the core's model loader."""

from __future__ import annotations

import pytest

from timely_llm_ros.core.exectime import load_exec_time_file, load_exec_time_model
from timely_llm_ros.core.exectime_fit import Measurements, estimate_segment, first_number, fit_line


def test_fit_line_and_first_number():
    assert fit_line([100, 300], [2.0, 3.0]) == pytest.approx((0.005, 1.5))
    assert fit_line([100, 100], [2.0, 3.0]) is None
    assert first_number(["'cat'", "nan", "50", "7"]) == 50.0
    assert first_number(["'cat'"]) is None


def test_single_call_segments_measure_skills_and_every_segment_counts_toward_the_ratio():
    m = Measurements()
    assert m.record("drone", [("mf", ["100"])], 2.0, 2.5)
    assert not m.record("drone", [("mf", ["100"]), ("g", [])], 6.0, 4.0)  # split unknown: no skill number
    assert m.ratio("drone") == {"n": 2, "mean": pytest.approx((0.8 + 1.5) / 2)}
    assert m.stats["drone"]["mf"].durations == [2.0] and m.stats["drone"]["mf"].args == [100.0]
    assert m.ratio("arm") is None


def test_refit_fits_a_line_for_argument_models_and_samples_for_the_rest(tmp_path):
    m = Measurements()
    for v, d in ((100, 2.0), (300, 3.0), (300, 3.0)):
        m.record("drone", [("mf", [str(v)])], d, 0.0)
    for d in (2.4, 2.6):
        m.record("drone", [("g", [])], d, 0.0)
    m.record("drone", [("s", ["'cat'"])], 3.0, 0.0)  # one sample < min_samples: configured model kept
    data = m.refitted("drone", min_samples=2)
    skills = data["skills"]
    # least squares through (100, 2), (300, 3), (300, 3): slope 0.005, intercept 1.5
    assert skills["mf"] == {"model": "poly", "coef": [0.005, 1.5], "arg_range": [20, 500]}
    assert skills["g"] == {"model": "samples", "samples": [2.4, 2.6]}
    assert skills["s"] == {"model": "iterations", "per_iteration": 1.5275, "iterations": [1, 8]}
    assert data["refit"]["measured"]["g"]["mean"] == pytest.approx(2.5)
    (path,) = m.write(tmp_path / "out", 2, "# test\n")
    assert path.name == "drone.yaml" and path.read_text().startswith("# test\n")
    robot_type, models = load_exec_time_file(path)
    assert robot_type == "drone" and {"mf", "g", "s"} <= set(models)


def test_a_robot_type_that_is_no_file_name_is_not_written(tmp_path):
    m = Measurements()
    m.record("../evil", [("x", [])], 1.0, 1.0)
    assert m.write(tmp_path, 1, "") == []


def test_estimate_answers_and_reasons():
    model = load_exec_time_model()
    lo, exp, hi = estimate_segment(model, {}, "drone", "tello_minispec", "mf(100);")
    assert lo <= exp <= hi and exp == pytest.approx(0.0072 * 100 + 1.8144)
    with pytest.raises(ValueError, match="robot_type is empty"):
        estimate_segment(model, {}, " ", "", "mf(100);")
    with pytest.raises(ValueError, match=r"^no skill set for robot type 'drone'; name one in skill_set$"):
        estimate_segment(model, {}, "drone", "", "mf(100);")
    with pytest.raises(ValueError, match="is for 'drone' robots, not 'arm'"):
        estimate_segment(model, {}, "arm", "tello_minispec", "mf(100);")
    with pytest.raises(ValueError, match="segment_text is empty"):
        estimate_segment(model, {"drone": "tello_minispec"}, "drone", "", "  ")
