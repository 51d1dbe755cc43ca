"""``timely-llm realbench`` plumbing, checked where the answer is known: with ``--engine sim`` the
"real" engine is the simulated one, so the prediction must reproduce every run exactly (same tasks,
plans, robots, seed, warm-up) — any difference would be the bench's own doing, not the engine's."""

from __future__ import annotations

import json

import pytest

from timely_llm_ros.bench import realbench


def test_simulated_engine_is_predicted_exactly(tmp_path, capsys):
    assert (
        realbench.main(
            ["--engine", "sim", "--tasks", "5", "--policies", "timely,vllm", "--out", str(tmp_path)]
        )
        == 0
    )
    out = json.loads((tmp_path / "realbench.json").read_text())
    assert out["tuf_scale"] >= 1 and [r["policy"] for r in out["results"]] == ["timely", "vllm"]
    for res in out["results"]:
        assert res["tasks"] == 5 and res["completed"] == 5
        assert res["mean_abs_rel_err"] == 0.0
        assert all(t["plan"] for t in res["per_task"])
        assert res["real"]["all"]["pct_beta"] == res["sim"]["all"]["pct_beta"]
    assert all(r["diff_pct"] == 0 for r in out["ratios"]["response_mean"])
    assert (tmp_path / "realbench.png").stat().st_size > 0
    text = capsys.readouterr().out
    assert "real engine sim vs simulator" in text
    # the simulated engine's steps do not say what they fed: no speed during the run, said in words
    assert text.count("not measured during it") == 2 and "nan" not in text


def test_tuf_scale_and_task_selection():
    tasks = realbench.load_tasks("demo", 3, 10.0)
    assert len(tasks) == 3 and tasks[0].arrival == 0.0
    base = realbench.load_tasks("demo", 3, 1.0)
    assert [t.tuf.ert for t in tasks] == [10.0 * t.tuf.ert for t in base]


def test_time_scale_compresses_arrivals_only():
    base = realbench.load_tasks("wid3", 15, 8.0)
    half = realbench.load_tasks("wid3", 15, 8.0, time_scale=0.5)
    assert [t.arrival for t in half] == [0.5 * t.arrival for t in base] and base[-1].arrival > 0
    assert [t.tuf for t in half] == [t.tuf for t in base]  # ERTs follow --tuf-scale alone
    with pytest.raises(ValueError, match="time scale"):
        realbench.load_tasks("wid3", 3, 1.0, time_scale=0.0)


def test_time_scale_and_repeats_on_the_simulated_engine(tmp_path):
    """--time-scale shortens the run (arrivals and robots), predicted alike (error 0); --repeats runs
    each policy again and the ordering check reads them."""
    args = ["--engine", "sim", "--workload", "wid3", "--tasks", "6", "--tuf-scale", "4"]
    args += ["--policies", "timely,vllm", "--plans", "reference"]
    spans = {}
    for ts in ("1", "0.25"):
        out = tmp_path / ts
        assert realbench.main([*args, "--time-scale", ts, "--repeats", "2", "--out", str(out)]) == 0
        res = json.loads((out / "realbench.json").read_text())
        assert res["time_scale"] == float(ts) and res["repeats"] == 2
        assert [(r["policy"], r["repeat"]) for r in res["results"]] == [
            ("timely", 0),
            ("vllm", 0),
            ("timely", 1),
            ("vllm", 1),
        ]
        assert all(r["mean_abs_rel_err"] == 0.0 for r in res["results"])
        spans[ts] = max(r["timing"]["predicted_makespan_s"] for r in res["results"])
        for r in res["results"]:  # the estimate is the prediction before the run (sim: same engine)
            assert r["timing"]["estimated_run_s"] == pytest.approx(r["timing"]["predicted_makespan_s"])
        check = res["ordering_check"]
        assert check["reproduced"] and check["swaps"] == 0, check["reason"]
        assert "ordering reproduced: yes" in (out / "realbench.txt").read_text()
        assert set(res["ordering"]) == {"response_mean", "pct_beta"}
    assert spans["0.25"] < 0.5 * spans["1"], spans


def test_exec_time_model_scaled_for_robots_and_planner():
    import random

    from timely_llm_ros.core.exectime import ExecTimeError, load_exec_time_model
    from timely_llm_ros.core.skills import SkillCall

    m = load_exec_time_model()
    robot = "arm"  # TimelyLLM's arm: uniform ranges (the minimum is the low end)
    call = SkillCall("pi", ("'apple'",), "pi('apple')")
    half = m.scaled(0.5)
    e, h = m.estimate(robot, [call]), half.estimate(robot, [call])
    assert (h.minimum, h.expected, h.maximum) == (0.5 * e.minimum, 0.5 * e.expected, 0.5 * e.maximum)
    assert half.sample(robot, [call], random.Random(1)) == 0.5 * m.sample(robot, [call], random.Random(1))
    assert m.scaled(1.0) is m and half.scaled(2.0).estimate(robot, [call]) == e
    with pytest.raises(ExecTimeError, match="scale"):
        m.scaled(-1.0)


def test_engine_prompt_schedule_and_template_for_the_prediction():
    from timely_llm_ros.engines.sim import SimEngine

    sim = SimEngine()
    assert realbench.engine_rule(sim) is None and realbench.template_tokens(sim) == (0, 0)


def test_strict_fails_when_the_slice_does_not_separate_the_policies(tmp_path, capsys):
    """--strict (make realbench-order): exit 1 unless the ordering is reproduced and the error goal
    met; one lone task separates no policy, so nothing about the ordering is shown."""
    args = ["--engine", "sim", "--tasks", "1", "--policies", "timely,edf-seg", "--strict"]
    assert realbench.main([*args, "--out", str(tmp_path / "one")]) == 1
    out = capsys.readouterr()
    assert "ordering reproduced: no (every pair is a tie" in out.out and "--strict" in out.err
    args = [
        "--engine",
        "sim",
        "--workload",
        "wid3",
        "--tasks",
        "6",
        "--tuf-scale",
        "4",
        "--plans",
        "reference",
    ]
    assert (
        realbench.main([*args, "--policies", "timely,vllm", "--strict", "--out", str(tmp_path / "six")]) == 0
    )


def test_speed_check_takes_the_median_probe():
    # one probe met a burst (x1.9), two saw the engine at its profile's speed: the run gets ~x1.0
    assert realbench.median_ratio([(1.9, 1.0), (1.0, 1.0), (1.02, 1.0)]) == 1.02
    assert realbench.median_ratio([(2.0, 1.0)]) == 2.0
    assert realbench.median_ratio([(1.0, 0.0)]) == 1.0 and realbench.median_ratio([]) == 1.0
