"""Bench building blocks: table rendering, progress bar, figure plans, overhead rows."""

from __future__ import annotations

import io
import math

from bench_testlib import parse_table

from timely_llm_ros.bench import runner as rn
from timely_llm_ros.bench.tables import COLUMNS, render_table


def test_render_and_parse_roundtrip():
    metrics = {c.key: 1.23456 for c in COLUMNS}
    metrics["n"] = 7
    metrics["response_max"] = math.nan
    text = render_table("== t", [("timely", metrics), ("vllm-stream@b4", {"n": 3})])
    rows = parse_table(text)
    assert rows[0]["policy"] == "timely" and rows[0]["U mean"] == "1.235" and rows[0]["%Σβ"] == "1.2"
    assert rows[0]["resp max"] == "-" and rows[1]["policy"] == "vllm-stream@b4" and rows[1]["U mean"] == "-"


def test_progress_bar_modes():
    tty = io.StringIO()
    p = rn.Progress(2, stream=tty, tty=True)
    p.update("w timely", 5, 10, force=True)
    assert "\r[" in tty.getvalue() and "25.0%" in tty.getvalue() and "run 1/2" in tty.getvalue()
    log = io.StringIO()
    p = rn.Progress(2, stream=log, tty=False)
    p.update("w timely", 5, 10, force=True)
    p.run_finished("w timely")
    assert log.getvalue().startswith("[1/2] w timely done")
    off = io.StringIO()
    p = rn.Progress(2, stream=off, enabled=False, tty=True)
    p.update("x", 1, 2, force=True)
    p.run_finished("x")
    assert off.getvalue() == ""


def test_figure_plans():
    pols = ["timely", "vllm", "edf-seg"]
    assert {j.workload for j in rn.figure_jobs("5", pols)} == {"wid1", "wid2"}
    fig7 = rn.figure_jobs("7", pols)
    assert {j.policy for j in fig7} == {f"{p}@b{b}" for p in ("timely", "vllm") for b in rn.FIG7_BATCHES}
    assert {j.workload for j in rn.figure_jobs("9", pols)} == {"wid3"}
    assert rn.batch_policy("timely@b2", 8) == "timely@b2" and rn.batch_policy("vllm", None) == "vllm"
    scen = rn.scenario_jobs(pols)
    assert any(j.workload == "wid2:unique_agents=true" and j.policy == "edf-seg@b4" for j in scen)
    assert any(j.workload.startswith("wid2:bursty=10,compress=0.5") and j.policy == "timely@b6" for j in scen)
    assert any(j.workload == "sample1" for j in scen)


def test_segmentation_overhead_rows():
    rows = rn.segmentation_overhead(rn.BenchOptions(), repeats=1)
    assert len(rows) == 14  # 11 tasks + 3 FLTRNN variants
    for r in rows:
        assert r["state"] == "COMPLETED" and r["segments"] >= 2
        assert r["segmented_s"] >= r["unsegmented_s"] > 0 and r["segmented_steps"] >= r["unsegmented_steps"]
    arm = [r for r in rows if r["skill_set"] == "robot_arm"]
    assert all(r["segments"] == 12 or r["segments"] == 18 for r in arm)


def test_scheduling_overhead_rows():
    rows = rn.scheduling_overhead(policies=("timely",), sizes=(1, 8), repeats=20)
    assert [r["queue"] for r in rows] == [1, 8]
    assert all(r["timely median ms"] >= 0 for r in rows)
