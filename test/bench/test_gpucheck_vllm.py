"""`timely-llm gpucheck` end to end on vLLM's CPU build (marker ``vllm``: `make test-vllm`).

The GPU check must run anywhere vLLM runs, so that it is tested before it meets a GPU: here with
its small CPU size (the real SmolLM2 model, a quick bench, the first WID2 task under timely / edf-seg /
vllm, the shipped profile) and without its own pytest step (this suite is that step). Asserted:
every step ran, the JSON and the table hold every GPU goal (n/a on a CPU), the bench's floor says
n/a without a bandwidth, its per-step breakdown and segmentation overhead are there.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.vllm


def test_gpucheck_runs_its_small_size_on_the_cpu(tmp_path, repo_root):
    out = tmp_path / "gc"
    res = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.bench.gpucheck", "--size", "cpu", "--no-tests", "--tasks", "1"]
        + ["--out", str(out)],
        cwd=repo_root,
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-4000:]
    report = json.loads((out / "gpucheck.json").read_text())
    steps = {s["name"]: s for s in report["steps"]}
    assert steps["tests"]["status"] == "skipped"
    assert steps["vllm_bench"]["status"] == "ok" and steps["realbench"]["status"] == "ok", steps
    assert [g["goal"] for g in report["goals"]] == [
        "floor_ratio",
        "urgent_first_ms",
        "timely_vs_vllm_urgent",
        "sim_error_pct",
        "wall_s",
    ]
    assert {g["verdict"] for g in report["goals"]} == {"n/a (cpu)"}
    assert report["goals"][1]["measured"] > 0  # the urgent first action was measured
    bench = report["vllm_bench"]
    assert bench["engine"]["enforce_eager"] is True and bench["floor"]["floor_ms"] is None
    # SmolLM2-135M: 134,515,008 parameters from its config.json, in bfloat16 or float32 here
    assert bench["floor"]["params_from"] == "config.json"
    assert bench["floor"]["param_bytes"] in (2 * 134_515_008, 4 * 134_515_008), bench["floor"]
    (bd,) = bench["breakdown"]
    assert bd["steps"] > 0 and bd["parts_ms"]["segmenter (stop checks)"] >= 0
    assert "grammar bitmask" in bd["parts_ms"] and bd["llm_engine_step_ms"] <= bd["step_ms"]
    sg = bench["segmentation"]
    assert sg["paper_table4"]["overhead_pct"] == {"median": 3.45, "min": 2.6, "max": 5.6}
    assert len(sg["per_task"]) == 1 and sg["overhead_pct"]["min"] <= sg["overhead_pct"]["max"]
    # realbench on a compressed time axis (the GPU size's 40 tasks would otherwise take the trace's
    # span per policy), with where its time went: start, fit, each run estimated vs actual
    assert report["realbench"]["time_scale"] == 0.25 and "time x0.25" in steps["realbench"]["detail"]
    assert "probe+fit" in steps["realbench"]["detail"] and "est." in steps["realbench"]["detail"]
    assert all(r["timing"]["run_s"] > 0 for r in report["realbench"]["results"])
    results = report["realbench"]["results"]
    assert [r["policy"] for r in results] == ["timely", "edf-seg", "vllm"]
    if report["replay"]:  # realbench --plans reference: every plan is its reference, exactly
        for r in results:
            assert r["replay"]["replayed_exactly"] == r["replay"]["tasks_with_reference"] > 0, r["replay"]
    text = (out / "gpucheck.txt").read_text()
    assert "GPU goal" in text and "decode step / weight-read floor" in text and "per-step breakdown" in text
