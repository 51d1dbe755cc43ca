"""The weight-read floor, the built-in model shape and gpucheck's verdicts, without vLLM or a GPU."""

from __future__ import annotations

import json
import math

import pytest

from timely_llm_ros.bench import gpucheck, realbench
from timely_llm_ros.bench import profile_cli as pc
from timely_llm_ros.bench import weight_floor as wf
from timely_llm_ros.bench.model_shapes import LLAMA3_8B, build_shaped_model

SMOLLM2_135M = {  # config.json of SmolLM2-135M-Instruct
    "hidden_size": 576,
    "intermediate_size": 1536,
    "num_hidden_layers": 30,
    "num_attention_heads": 9,
    "num_key_value_heads": 3,
    "vocab_size": 49152,
    "tie_word_embeddings": True,
}


def test_parameter_counts_match_the_published_model_sizes():
    assert wf.parameter_count(dict(LLAMA3_8B, vocab_size=128256)) == 8_030_261_248  # Llama-3-8B
    assert wf.parameter_count(SMOLLM2_135M) == 134_515_008
    with pytest.raises(KeyError):
        wf.parameter_count({"hidden_size": 8})


@pytest.mark.parametrize(
    "name,tbs",
    [
        ("NVIDIA H100 80GB HBM3", 3.35),
        ("NVIDIA H100 PCIe", 2.0),
        ("NVIDIA H100 NVL", 3.9),
        ("NVIDIA H200", 4.8),
        ("NVIDIA A100-SXM4-80GB", 2.0),
        ("NVIDIA A100 80GB PCIe", 2.0),
        ("NVIDIA A100-SXM4-40GB", 1.555),
        ("NVIDIA GeForce RTX 4090", 1.0),
        ("NVIDIA L4", 0.3),
        ("NVIDIA L40S", 0.864),
    ],
)
def test_bandwidth_by_device_name(name, tbs):
    assert wf.bandwidth_for(name)[1] == tbs


def test_floor_of_an_8b_shaped_model_on_an_h100_and_na_on_a_cpu():
    n = wf.parameter_count(dict(LLAMA3_8B, vocab_size=49152))
    fl = wf.weight_floor(
        "NVIDIA H100 80GB HBM3",
        on_cpu=False,
        param_count=n,
        params_from="config.json",
        dtype="torch.bfloat16",
    )
    assert fl.param_bytes == 2 * n and fl.bandwidth_from == "table: H100"
    assert fl.floor_ms == pytest.approx(2 * n / 3.35e12 * 1e3) and 4.3 < fl.floor_ms < 4.5
    assert fl.ratio(8.8) == pytest.approx(8.8 / fl.floor_ms)
    assert "x the floor" in fl.describe(8.8)
    cpu = wf.weight_floor(
        "CPU AMD EPYC", on_cpu=True, param_count=n, params_from="config.json", dtype="float32"
    )
    assert cpu.floor_ms is None and cpu.ratio(100.0) is None and "n/a" in cpu.describe(100.0)
    flag = wf.weight_floor(
        "CPU AMD EPYC", on_cpu=True, param_count=n, params_from="x", dtype="float32", bandwidth_tbs=0.1
    )
    assert flag.bandwidth_from == "flag" and flag.floor_ms == pytest.approx(4 * n / 0.1e12 * 1e3)
    unknown = wf.weight_floor("Some GPU", on_cpu=False, param_count=n, params_from="x", dtype="bfloat16")
    assert unknown.floor_ms is None and "--bandwidth" in unknown.bandwidth_from


def test_the_8b_shape_takes_the_vocabulary_and_tokenizer_of_the_given_model(tmp_path):
    src = tmp_path / "smol"
    src.mkdir()
    (src / "config.json").write_text(json.dumps({**SMOLLM2_135M, "bos_token_id": 1, "eos_token_id": 2}))
    (src / "tokenizer.json").write_text("{}")
    out = build_shaped_model(tmp_path / "l8b", src)
    cfg = json.loads((out / "config.json").read_text())
    assert cfg["hidden_size"] == 4096 and cfg["num_hidden_layers"] == 32 and cfg["vocab_size"] == 49152
    assert (cfg["bos_token_id"], cfg["eos_token_id"]) == (1, 2) and (out / "tokenizer.json").is_file()
    assert 7.3e9 < wf.parameter_count(cfg) < 7.5e9  # "8B-shaped": the same layers, a smaller vocabulary
    with pytest.raises(ValueError, match="unknown model shape"):
        build_shaped_model(tmp_path / "x", src, "gpt-5")


def test_the_tools_no_longer_force_eager_mode_on_vllm():
    """On CUDA the engine's default (CUDA graphs) must apply; the CPU gets eager from the engine."""
    assert "enforce_eager" not in realbench.ENGINE_OPTIONS["vllm"]
    assert "enforce_eager" not in pc.PROFILE_PARAMS["vllm"]


def _real(policy, urgent_beta, err):
    return {"policy": policy, "real": {"urgent": {"pct_beta": urgent_beta}}, "mean_abs_rel_err": err}


def test_goals_are_judged_from_the_steps_results():
    bench = gpucheck.Step("vllm_bench", "ok", data={"floor": {"ratio_batch1": 1.62}})
    real = gpucheck.Step(
        "realbench",
        "ok",
        data={
            "urgent_first_segment_s": 0.055,
            "results": [_real("timely", 90.0, 0.06), _real("edf-seg", 70.0, 0.10), _real("vllm", 50.0, 0.08)],
        },
    )
    vals = gpucheck.measured(bench, real, 400.0)
    assert vals["floor_ratio"] == 1.62 and vals["urgent_first_ms"] == pytest.approx(55.0)
    assert vals["timely_vs_vllm_urgent"] == pytest.approx(1.8) and vals["sim_error_pct"] == pytest.approx(8.0)
    verdicts = {g["goal"]: g["verdict"] for g in gpucheck.judge(vals, gpu=True)}
    assert verdicts == {
        "floor_ratio": "FAIL",
        "urgent_first_ms": "pass",
        "timely_vs_vllm_urgent": "pass",
        "sim_error_pct": "pass",
        "wall_s": "pass",
    }
    assert {g["verdict"] for g in gpucheck.judge(vals, gpu=False)} == {"n/a (cpu)"}
    missing = gpucheck.measured(
        gpucheck.Step("vllm_bench", "failed"), gpucheck.Step("realbench", "failed"), 900.0
    )
    verdicts = {g["goal"]: g["verdict"] for g in gpucheck.judge(missing, gpu=True)}
    assert verdicts["floor_ratio"] == "n/a" and verdicts["wall_s"] == "FAIL"
    zero = gpucheck.measured(
        bench,
        gpucheck.Step("r", data={"results": [_real("timely", 5.0, math.nan), _real("vllm", 0.0, math.nan)]}),
        1.0,
    )
    assert zero["timely_vs_vllm_urgent"] == math.inf and zero["sim_error_pct"] is None


def test_junit_counts(tmp_path):
    xml = tmp_path / "t.xml"
    xml.write_text('<testsuites><testsuite tests="10" failures="2" errors="1" skipped="3"/></testsuites>')
    assert gpucheck.junit_counts(xml) == {"passed": 4, "failed": 2, "errors": 1, "skipped": 3}
    assert gpucheck.junit_counts(tmp_path / "missing.xml") == {}


def test_table_has_a_row_per_step_and_goal():
    report = {
        "size": "gpu",
        "device": "NVIDIA H100 80GB HBM3",
        "vllm_version": "0.26.0",
        "load_average": [0.5, 1.0],
        "steps": [{"name": "tests", "status": "ok", "wall_s": 40.0, "detail": "31 passed"}],
        "goals": gpucheck.judge({"floor_ratio": 1.2, "wall_s": 300.0}, gpu=True),
        "bench_breakdown": None,
    }
    text = gpucheck.table(report)
    assert "tests" in text and "31 passed" in text
    assert "1.20x" in text and "pass" in text and text.count("n/a") == 3
