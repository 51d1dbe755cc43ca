"""bench CLI on a tiny workload: table content, JSON = printed numbers, determinism, bad input."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from bench_testlib import parse_table

from timely_llm_ros.bench import cli
from timely_llm_ros.bench.tables import COLUMNS, format_value

TINY = str(Path(__file__).parent / "data" / "tiny.yaml")
REPO = Path(__file__).resolve().parents[2]


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = cli.main(list(argv))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def _tables(stdout: str) -> dict[str, str]:
    """Printed tables keyed by their '== workload | task type: X' title."""
    blocks: dict[str, str] = {}
    current = None
    for line in stdout.splitlines():
        if line.startswith("== "):
            current = line
            blocks[current] = line
        elif current and line.strip() and not line.startswith("#"):
            blocks[current] += "\n" + line
        else:
            current = None
    return blocks


def test_tables_match_results_json(tmp_path, capsys):
    rc, out, err = _run(
        capsys,
        "--workload",
        TINY,
        "--policies",
        "timely,vllm,edf-seg",
        "--out",
        str(tmp_path),
        "--no-figures",
        "--quiet",
    )
    assert rc == 0, err
    assert err == ""  # --quiet: nothing on stderr
    results = json.loads((tmp_path / "results.json").read_text())
    runs = {(r["workload"], r["policy"]): r for r in results["runs"]}
    assert set(runs) == {("tiny", "timely"), ("tiny", "vllm"), ("tiny", "edf-seg")}
    tables = _tables(out)
    titles = [t.split("task type: ")[1] for t in tables]
    assert titles == ["urgent", "normal", "arm", "all"]
    wl = results["workloads"][TINY]
    assert f"# tiny: {wl['tasks']} tasks" in out
    for title, text in tables.items():
        cls = title.split("task type: ")[1]
        rows = parse_table(text)
        assert [r["policy"] for r in rows] == ["timely", "vllm", "edf-seg"]
        for row in rows:
            metrics = runs[("tiny", row["policy"])]["classes"][cls]
            for col in COLUMNS:
                value = metrics[col.key]
                assert row[col.header] == format_value(value, col), (cls, row["policy"], col.key)
            # Table content is sane: counts add up, %Σβ agrees with the mean utility.
            assert int(row["n"]) == metrics["n"] > 0
            if metrics["utility_mean"] is not None:
                expected_pct = 100 * metrics["utility_mean"] * metrics["n"] / metrics["sum_beta"]
                assert math.isclose(metrics["pct_beta"], expected_pct, rel_tol=1e-9, abs_tol=1e-9)
    all_n = runs[("tiny", "vllm")]["classes"]["all"]["n"]
    assert (
        all_n
        == wl["tasks"]
        == sum(runs[("tiny", "vllm")]["classes"][c]["n"] for c in ("urgent", "normal", "arm"))
    )
    # Per task type metrics are in the JSON too (Fig. 5 / 9).
    assert set(runs[("tiny", "timely")]["task_types"]) == {"1", "4", "6", "8", "9"}
    assert (tmp_path / "tables.txt").read_text().strip() == out.strip()


def test_same_seed_gives_identical_results(tmp_path, capsys):
    outs = []
    for name in ("a", "b"):
        rc, out, _ = _run(
            capsys,
            "-w",
            TINY,
            "-p",
            "timely,vllm-stream",
            "--exec-mode",
            "sampled",
            "--seed",
            "3",
            "--out",
            str(tmp_path / name),
            "--no-figures",
            "-q",
        )
        assert rc == 0
        outs.append(out)
    assert outs[0] == outs[1]
    assert (tmp_path / "a" / "results.json").read_bytes() == (tmp_path / "b" / "results.json").read_bytes()


def test_batch_caps_and_sweep_runs(tmp_path, capsys):
    rc, out, err = _run(
        capsys,
        "-w",
        TINY,
        "-p",
        "timely,vllm",
        "--max-batch",
        "1,4",
        "--sweep",
        "rate=0.25,0.5",
        "--out",
        str(tmp_path),
        "-q",
        "--no-figures",
    )
    assert rc == 0, err
    results = json.loads((tmp_path / "results.json").read_text())
    keys = {(r["workload"], r["policy"]) for r in results["runs"]}
    assert len(keys) == 2 * 2 * 2
    assert ("tiny:rate=0.25", "timely@b1") in keys and ("tiny:rate=0.5", "vllm@b4") in keys
    assert {r["max_batch"] for r in results["runs"]} == {1, 4}
    assert "== tiny:rate=0.25 | task type: urgent" in out
    assert not list(tmp_path.glob("*.png"))


@pytest.mark.parametrize(
    "extra,expected",
    [
        (["--max-batch", "1,4"], ["batch_sweep_tiny.png"]),
        (["--sweep", "agents=6,12"], ["sweep_agents_tiny.png"]),
        ([], ["policies_tiny.png", "tasktypes_tiny.png"]),
    ],
)
def test_figures_written(tmp_path, capsys, extra, expected):
    rc, _, err = _run(capsys, "-w", TINY, "-p", "timely,vllm", *extra, "--out", str(tmp_path), "-q")
    assert rc == 0, err
    pngs = sorted(p.name for p in tmp_path.glob("*.png"))
    assert pngs == expected
    assert all((tmp_path / p).read_bytes()[:4] == b"\x89PNG" for p in pngs)


def test_timeline_figure_on_chosen_tasks(tmp_path, capsys):
    rc, _, err = _run(
        capsys, "--figure", "6", "--fig6-workload", TINY, "-p", "timely,vllm", "--out", str(tmp_path), "-q"
    )
    assert rc == 0, err
    assert (tmp_path / "fig6_timeline.png").is_file()
    rc, _, err = _run(
        capsys,
        "--figure",
        "6",
        "--fig6-workload",
        TINY,
        "--fig6-tasks",
        "0,999",
        "--out",
        str(tmp_path),
        "-q",
    )
    assert rc == 2 and "no task ['999']" in err


@pytest.mark.parametrize(
    "argv,message",
    [
        (["-w", "nope"], "no such workload"),
        (["-w", TINY, "-p", "timely,best"], "best"),
        (["-w", TINY, "--max-batch", "0"], "--max-batch"),
        (["-w", TINY, "--sweep", "rate"], "--sweep"),
        (["-w", "wid1:agnets=3"], "unknown key"),
    ],
)
def test_bad_arguments_exit_2_with_reason(tmp_path, capsys, argv, message):
    rc, out, err = _run(capsys, *argv, "--out", str(tmp_path), "-q")
    assert rc == 2 and message in err and "error" in err
    assert not (tmp_path / "results.json").exists()


def test_progress_lines_when_not_a_terminal(tmp_path, capsys):
    rc, _, err = _run(capsys, "-w", TINY, "-p", "vllm,edf-seg", "--out", str(tmp_path), "--no-figures")
    assert rc == 0
    assert "[1/2] tiny vllm done" in err and "[2/2] tiny edf-seg done" in err
    assert f"results: {tmp_path / 'results.json'}" in err


def test_module_entry_point_lists(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.bench.cli", "--list"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    assert "wid1" in proc.stdout and "vllm-stream" in proc.stdout and "sample1" in proc.stdout


def test_top_level_cli_dispatches_bench(capsys):
    from timely_llm_ros.cli import main

    assert main(["bench", "--list"]) == 0
    assert "workload presets:" in capsys.readouterr().out
    with pytest.raises(SystemExit):
        main(["bench", "--help"])
    assert "--suite paper" in capsys.readouterr().out


def test_bag_option_writes_one_bag_per_run_that_the_report_scores_alike(tmp_path, capsys):
    """--bag: a simulated run becomes a rosbag2 bag; `timely-llm report` on it gives the bench's numbers."""
    pytest.importorskip("rosbags")
    from timely_llm_ros.lrtrace.from_bag import load_run
    from timely_llm_ros.viz.report import build

    bags = tmp_path / "bags"
    rc, _out, err = _run(
        capsys,
        "--workload",
        TINY,
        "--policies",
        "timely,vllm",
        "--out",
        str(tmp_path),
        "--no-figures",
        "--quiet",
        "--bag",
        str(bags),
    )
    assert rc == 0, err
    assert sorted(p.name for p in bags.iterdir()) == ["tiny_timely", "tiny_vllm"]
    results = json.loads((tmp_path / "results.json").read_text())
    bench = {r["policy"]: r["classes"] for r in results["runs"]}
    for policy in ("timely", "vllm"):
        got = build(load_run(bags / f"tiny_{policy}"))
        assert got.policy == policy
        for cls, metrics in bench[policy].items():
            # bag stamps are whole nanoseconds: numbers agree to ~1e-9 s, not bit for bit
            assert got.classes[cls]["pct_beta"] == pytest.approx(metrics["pct_beta"], rel=1e-6, abs=1e-6)
            assert got.classes[cls]["response_mean"] == pytest.approx(metrics["response_mean"], abs=1e-6)
    rc, _out, err = _run(
        capsys,
        "--workload",
        TINY,
        "--policies",
        "timely",
        "--out",
        str(tmp_path),
        "--no-figures",
        "--quiet",
        "--bag",
        str(bags),
    )
    assert rc == 2 and "never overwritten" in err  # a rerun refuses to overwrite, with the reason
