"""``timely-llm realbench`` plumbing, checked where the answer is known: with ``--engine sim`` the
"real" engine is the simulated one, so the prediction must reproduce every run exactly (same tasks,
plans, robots, seed, warm-up) — any difference would be the bench's own doing, not the engine's."""

from __future__ import annotations

import json

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
    assert "real engine sim vs simulator" in capsys.readouterr().out


def test_tuf_scale_and_task_selection():
    tasks = realbench.load_tasks("demo", 3, 10.0)
    assert len(tasks) == 3 and tasks[0].arrival == 0.0
    base = realbench.load_tasks("demo", 3, 1.0)
    assert [t.tuf.ert for t in tasks] == [10.0 * t.tuf.ert for t in base]


def _res(policy, real_resp, sim_resp):
    return {
        "policy": policy,
        "real": {"all": {"response_mean": real_resp, "pct_beta": 100.0}},
        "sim": {"all": {"response_mean": sim_resp, "pct_beta": 100.0}},
    }


def test_ordering_of_policies_real_vs_predicted():
    same = [_res("timely", 1.0, 0.9), _res("edf-seg", 1.5, 1.4), _res("vllm", 3.0, 2.5)]
    o = realbench.ordering(same, "response_mean")
    assert o["real"] == o["sim"] == ["timely", "edf-seg", "vllm"] and o["match"]
    swapped = [_res("timely", 1.0, 1.6), _res("edf-seg", 1.5, 1.4)]
    o = realbench.ordering(swapped, "response_mean")
    assert not o["match"] and o["discordant"] == 1
    tie = [_res("timely", 1.0, 1.0), _res("edf-seg", 1.01, 0.99)]  # within ORDER_TIE: no swap
    assert realbench.ordering(tie, "response_mean")["match"]
    assert realbench.ordering(same, "pct_beta")["match"]  # all equal: a tie everywhere


def test_engine_prompt_schedule_and_template_for_the_prediction():
    from timely_llm_ros.engines.sim import SimEngine

    sim = SimEngine()
    assert realbench.engine_rule(sim) is None and realbench.template_tokens(sim) == (0, 0)
