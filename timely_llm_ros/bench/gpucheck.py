"""``timely-llm gpucheck``: one command that measures a GPU machine against the project's GPU goals.

Where CUDA and vLLM are installed (``pip install vllm`` next to this package, or ``make gpu-check``
from a source checkout) it runs, each step in its own process (a crash or a GPU out-of-memory in one
step does not take the others with it, and each frees its GPU memory on exit):

1. **tests** — the vLLM tests of a source checkout (``pytest -m vllm``): engine properties, not one
   model's plans; skipped outside a checkout or with ``--no-tests``;
2. **vllm_bench** on an 8B-shaped model with random weights (:mod:`.model_shapes`: Llama-3-8B's
   dimensions built in, the tokenizer of the SmolLM2 directory built from the shipped GGUF, no hub):
   decode step vs the weight-read floor, per-step breakdown, suspend/resume, segmentation overhead;
3. **realbench** on WID2's first 40 tasks under ``timely``, ``edf-seg`` and ``vllm`` with a profile
   fitted first, the simulator predicting the same runs, in replay mode (``realbench --plans
   reference``): the tasks' reference plans are the constraint of each generation, so the 8B-shaped
   random-weight model writes exactly the traces' plans (a realbench without replay: the real
   SmolLM2 weights write their own plans); on a time axis compressed x0.25 (``--time-scale``:
   arrivals and robot execution times), so that 40 tasks do not take the trace's wall-clock span
   per policy on an engine that computes them in seconds. The table prints each step's wall time
   next to its budget and realbench's time per part (start, probe + fit, each run vs its estimate).

Then one JSON (``gpucheck.json``) and one table (``gpucheck.txt``, printed) with the GPU goals as
pass/fail columns: decode step ≤ 1.5× the weight-read floor at batch 1; the urgent first action
served alone ≤ 60 ms; ``timely`` ≥ 1.5× ``vllm`` urgent %Σβ on the WID2 slice; the simulator's mean
response-time error ≤ 10 %; and the whole check ≤ 8 minutes. Sized for one H100-class GPU.

``--size cpu`` (chosen automatically without CUDA) runs the same steps with small sizes on vLLM's
CPU build (`make vllm`): the real SmolLM2 model, a quick bench, 2 tasks, the shipped profile;
the goals are GPU goals, so they read "n/a (cpu)" there. Exit status: 0 when every step ran (goals
missed included: they are measurements), 1 when a step failed; ``--strict`` also fails on a goal.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import json
import math
import os
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
TEST_FILES_GPU = (
    "test/engines/test_vllm_api.py",
    "test/engines/test_vllm_engine.py",
    "test/engines/test_vllm_model.py",
    "test/engines/test_vllm_replay.py",
)
TEST_FILES_CPU = ("test/engines/test_vllm_api.py", "test/engines/test_vllm_model.py")
POLICIES = "timely,edf-seg,vllm"
BUDGET_S = 480.0  # the whole check on one H100-class GPU


@dataclass
class Size:
    """How big each step is."""

    name: str
    tests: tuple[str, ...]
    bench: list[str]
    tasks: int
    profile: str  # realbench --profile: "fit" or a shipped profile
    timeout_s: float
    #: realbench --time-scale: the workload's arrivals and robot execution times multiplied by this.
    #: On a GPU the engine's work for 40 WID2 tasks takes seconds, the trace's span (arrivals over
    #: 19 s, then the robots' execution) about 34 s per policy (the simulator's makespan with the
    #: shipped GPU profile); x0.25 makes it about 9 s with the same gap between timely and vllm.
    time_scale: float = 1.0
    #: each step's share of the whole check's budget (BUDGET_S), printed next to its wall time
    budget_s: dict[str, float] = field(default_factory=dict)


SIZES = {
    "gpu": Size(
        "gpu",
        TEST_FILES_GPU,
        ["--param", 'load_format="dummy"', "--repeats", "3", "--tasks", "2", "--steps", "12"],
        40,
        "fit",
        900.0,
        0.25,
        {"tests": 180.0, "vllm_bench": 150.0, "realbench": 150.0},
    ),
    "cpu": Size("cpu", TEST_FILES_CPU, ["--quick"], 2, "smollm2-135m-vllm-cpu", 2400.0, 0.25),
}

#: (key, label, target text, test of the measured value)
GOALS = (
    ("floor_ratio", "decode step / weight-read floor, batch 1", "<= 1.5x", lambda v: v <= 1.5),
    ("urgent_first_ms", "urgent first action served alone", "<= 60 ms", lambda v: v <= 60.0),
    ("timely_vs_vllm_urgent", "timely / vllm urgent %Σβ (WID2 slice)", ">= 1.5", lambda v: v >= 1.5),
    ("sim_error_pct", "simulator mean |response error|", "<= 10 %", lambda v: v <= 10.0),
    ("wall_s", "gpucheck wall time", "<= 480 s", lambda v: v <= BUDGET_S),
)


@dataclass
class Step:
    name: str
    status: str = "not run"  # ok | failed | skipped | not run
    wall_s: float = 0.0
    detail: str = ""
    data: dict[str, Any] = field(default_factory=dict)


def cuda_available() -> bool:
    """Whether torch sees a CUDA device (False without torch)."""
    try:
        return bool(importlib.import_module("torch").cuda.is_available())
    except Exception:  # noqa: BLE001 - no torch, broken CUDA: the CPU size
        return False


def vllm_version() -> str:
    """The installed vLLM's version without importing it (``vllm`` or the CPU build ``vllm-cpu``)."""
    from importlib import metadata

    for dist in ("vllm", "vllm-cpu"):
        try:
            return metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    return "?"


def realbench_has_replay() -> bool:
    """Whether this version's realbench takes ``--plans reference`` (replay of reference plans)."""
    from timely_llm_ros.bench import realbench

    parser = argparse.ArgumentParser()
    realbench.add_arguments(parser)
    return "--plans" in parser._option_string_actions  # argparse has no public lookup


def ensure_model(model: str | None, out: Path) -> str:
    """The real-weights model directory: ``model``, the default one (TIMELY_VLLM_MODEL, make
    vllm's), or else built now from the shipped GGUF into ``out`` (about 30 s; no hub)."""
    from timely_llm_ros.core.engine import EngineError
    from timely_llm_ros.engines.vllm_config import default_model

    if model:
        return model
    try:
        return default_model()
    except EngineError:
        pass
    from timely_llm_ros.engines import vllm_model
    from timely_llm_ros.engines.llamacpp_native import default_model_path

    target = out / "models" / "SmolLM2-135M-Instruct"
    if not vllm_model.is_built(target):
        print(f"[gpucheck] building {target} from the shipped GGUF ...", flush=True)
        vllm_model.build_hf_model(default_model_path(), target)
    return str(target)


def step_env() -> dict[str, str]:
    """The environment of every step: vLLM in-process and offline; without flashinfer, vLLM's
    sampler must not try to import it (measured on a CUDA machine without it: the engine fails)."""
    env = dict(os.environ)
    env.setdefault("VLLM_ENABLE_V1_MULTIPROCESSING", "0")
    env.setdefault("HF_HUB_OFFLINE", "1")
    if importlib.util.find_spec("flashinfer") is None:
        env.setdefault("VLLM_USE_FLASHINFER_SAMPLER", "0")
    src = str(REPO) if (REPO / "timely_llm_ros").is_dir() else ""
    if src and src not in env.get("PYTHONPATH", "").split(os.pathsep):
        env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH", "")) if p)
    return env


def _run(step: Step, cmd: list[str], log: Path, timeout: float, cwd: Path | None = None) -> str:
    print(
        f"[gpucheck] {step.name}: {' '.join(cmd[2:] if cmd[:2] == [sys.executable, '-m'] else cmd)}",
        flush=True,
    )
    t0 = time.monotonic()
    try:
        res = subprocess.run(
            cmd, env=step_env(), cwd=cwd, capture_output=True, text=True, timeout=timeout, check=False
        )
        out = res.stdout + res.stderr
        step.status = "ok" if res.returncode == 0 else "failed"
        if res.returncode:
            step.detail = f"exit status {res.returncode}: " + " | ".join(out.strip().splitlines()[-3:])
    except subprocess.TimeoutExpired as exc:
        out = (exc.stdout or b"").decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        step.status, step.detail = "failed", f"timed out after {timeout:.0f} s"
    step.wall_s = time.monotonic() - t0
    log.write_text(out)
    print(f"[gpucheck] {step.name}: {step.status} in {step.wall_s:.0f} s", flush=True)
    return out


def run_tests(size: Size, out: Path, enabled: bool) -> Step:
    step = Step("tests")
    if not enabled:
        step.status, step.detail = "skipped", "--no-tests"
        return step
    files = [f for f in size.tests if (REPO / f).is_file()]
    if not files:
        step.status, step.detail = "skipped", "not a source checkout (no test/ next to the package)"
        return step
    xml = out / "tests.xml"
    # each test module starts its own engine in the one pytest process; a closed engine may keep
    # its GPU memory until the process ends, so each takes a third of the GPU, not vLLM's 0.9
    os.environ.setdefault("TIMELY_VLLM_OPTIONS", '{"gpu_memory_utilization": 0.3}')
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-m",
        "vllm",
        "-q",
        "-p",
        "no:cacheprovider",
        f"--junitxml={xml}",
        *files,
    ]
    _run(step, cmd, out / "tests.log", size.timeout_s, cwd=REPO)
    step.data = junit_counts(xml)
    step.detail = (step.detail + "; " if step.detail else "") + ", ".join(
        f"{v} {k}" for k, v in step.data.items()
    )
    return step


def junit_counts(xml: Path) -> dict[str, int]:
    """passed / failed / errors / skipped of a pytest junit file ({} when it is missing)."""
    try:
        root = ET.parse(xml).getroot()
    except (OSError, ET.ParseError):
        return {}
    suite = root if root.tag == "testsuite" else root.find("testsuite")
    if suite is None:
        return {}
    n = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    return {
        "passed": n["tests"] - n["failures"] - n["errors"] - n["skipped"],
        "failed": n["failures"],
        "errors": n["errors"],
        "skipped": n["skipped"],
    }


def run_bench(size: Size, out: Path, model: str | None, bandwidth: float | None) -> Step:
    """vllm_bench on ``model`` (the 8B-shaped directory on a GPU size)."""
    step = Step("vllm_bench")
    js = out / "vllm_bench.json"
    cmd = [sys.executable, "-m", "timely_llm_ros.bench.vllm_bench", *size.bench, "--out", str(js)]
    if model:
        cmd += ["--model", model]
    if bandwidth:
        cmd += ["--bandwidth", str(bandwidth)]
    _run(step, cmd, out / "vllm_bench.log", size.timeout_s)
    if step.status == "ok":
        step.data = json.loads(js.read_text())
        fl = step.data["floor"]
        step.detail = fl["text"]
    return step


def run_realbench(
    size: Size, out: Path, model: str | None, replay: bool, shaped: Path | None, profile: str | None
) -> Step:
    step = Step("realbench")
    rdir = out / "realbench"
    cmd = [
        sys.executable,
        "-m",
        "timely_llm_ros.bench.realbench",
        "--engine",
        "vllm",
        "--workload",
        "wid2",
        "--tasks",
        str(size.tasks),
        "--policies",
        POLICIES,
        "--profile",
        profile or size.profile,
        "--time-scale",
        f"{size.time_scale:g}",
        "--out",
        str(rdir),
    ]
    if replay:
        cmd += ["--plans", "reference"]
    if replay and shaped is not None:  # random weights write the reference plans: time the big model
        cmd += ["--param", f"model={shaped}", "--param", "load_format=dummy"]
    elif model:
        cmd += ["--param", f"model={model}"]
    text = _run(step, cmd, out / "realbench.log", size.timeout_s * 2)
    if step.status == "ok":
        step.data = json.loads((rdir / "realbench.json").read_text())
        m = re.search(r"urgent first segment alone: ([0-9.]+) s", text)
        if m:
            step.data.setdefault("urgent_first_segment_s", float(m.group(1)))
        step.data["replay"] = replay
        step.detail = (
            "replayed reference plans" if replay else "the model's own plans"
        ) + f", {size.tasks} tasks, time x{size.time_scale:g}"
        step.detail += "; " + realbench_times(step.data)
        reps = [r["replay"] for r in step.data.get("results", []) if r.get("replay")]
        if reps:
            exact = sum(r["replayed_exactly"] for r in reps)
            step.detail += f"; {exact}/{sum(r['tasks_with_reference'] for r in reps)} plans replayed exactly"
    return step


def realbench_times(data: dict[str, Any]) -> str:
    """Where realbench's time went: engine start, probe + fit, each policy's run (estimated from the
    profile before it / actual) with its speed check and prediction."""
    t = data.get("timing") or {}
    parts = [
        f"start {t.get('engine_start_s', math.nan):.0f} s",
        f"probe+fit {t.get('probe_and_fit_s', math.nan):.0f} s",
    ]
    for r in data.get("results", []):
        rt = r.get("timing") or {}
        parts.append(
            f"{r['policy']} run {rt.get('run_s', math.nan):.0f} s (est. {rt.get('estimated_run_s') or math.nan:.0f}) "
            f"+ {rt.get('total_s', math.nan) - rt.get('run_s', math.nan):.0f} s"
        )
    return ", ".join(parts)


def measured(bench: Step, real: Step, wall: float) -> dict[str, float | None]:
    """The values the goals judge, None where a step did not give them."""
    vals: dict[str, float | None] = {k: None for k, *_ in GOALS}
    vals["wall_s"] = wall
    if bench.data:
        vals["floor_ratio"] = bench.data.get("floor", {}).get("ratio_batch1")
    if real.data:
        first = real.data.get("urgent_first_segment_s")
        vals["urgent_first_ms"] = first * 1e3 if first is not None else None
        res = {r["policy"]: r for r in real.data.get("results", [])}

        def urgent(pol: str) -> float | None:
            v = res.get(pol, {}).get("real", {}).get("urgent", {}).get("pct_beta")
            return v if isinstance(v, (int, float)) and math.isfinite(v) else None

        t, v = urgent("timely"), urgent("vllm")
        if t is not None and v is not None:
            vals["timely_vs_vllm_urgent"] = t / v if v > 0 else (math.inf if t > 0 else None)
        errs = [
            r["mean_abs_rel_err"] for r in res.values() if math.isfinite(r.get("mean_abs_rel_err", math.nan))
        ]
        if errs:
            vals["sim_error_pct"] = 100 * sum(errs) / len(errs)
    return vals


def judge(vals: dict[str, float | None], gpu: bool) -> list[dict[str, Any]]:
    """One row per goal: measured value, target, pass / FAIL / n/a."""
    rows = []
    for key, label, target, ok in GOALS:
        v = vals.get(key)
        if not gpu:
            verdict = "n/a (cpu)"
        elif v is None:
            verdict = "n/a"
        else:
            verdict = "pass" if ok(v) else "FAIL"
        rows.append({"goal": key, "label": label, "target": target, "measured": v, "verdict": verdict})
    return rows


def _fmt(key: str, v: float | None) -> str:
    if v is None:
        return "-"
    return {
        "floor_ratio": f"{v:.2f}x",
        "urgent_first_ms": f"{v:.0f} ms",
        "timely_vs_vllm_urgent": f"{v:.2f}",
        "sim_error_pct": f"{v:.1f} %",
        "wall_s": f"{v:.0f} s",
    }[key]


def table(report: dict[str, Any]) -> str:
    lines = [
        f"gpucheck ({report['size']} size) on {report['device']}, vLLM {report['vllm_version']}, "
        f"load average {report['load_average'][0]:.1f} -> {report['load_average'][1]:.1f}",
        f"{'step':11s} {'status':8s} {'wall':>6s} {'budget':>7s}  detail",
    ]
    budgets = report.get("budget_s") or {}
    for s in report["steps"]:
        b = budgets.get(s["name"])
        lines.append(
            f"{s['name']:11s} {s['status']:8s} {s['wall_s']:5.0f}s {f'{b:.0f}s' if b else '-':>7s}  "
            f"{s['detail'][:400]}"
        )
    lines.append(f"{'GPU goal':42s} {'measured':>10s} {'target':>9s}  verdict")
    for g in report["goals"]:
        lines.append(
            f"{g['label']:42s} {_fmt(g['goal'], g['measured']):>10s} {g['target']:>9s}  {g['verdict']}"
        )
    for bd in (report.get("bench_breakdown") or [])[:1]:
        from timely_llm_ros.bench.vllm_steps import table as bd_table

        lines.append(bd_table(bd))
    return "\n".join(lines)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--size", choices=("auto", "gpu", "cpu"), default="auto", help="auto: gpu when CUDA is available"
    )
    parser.add_argument("--out", type=Path, default=Path("results/gpucheck"), help="output directory")
    parser.add_argument(
        "--model", help="the real-weights model directory (default: TIMELY_VLLM_MODEL or make vllm's)"
    )
    parser.add_argument(
        "--bandwidth", type=float, help="device memory bandwidth in TB/s (default: by device name)"
    )
    parser.add_argument("--no-tests", action="store_true", help="skip the vLLM tests")
    parser.add_argument(
        "--tasks", type=int, help="realbench: the first N WID2 tasks (default: 40 gpu, 2 cpu)"
    )
    parser.add_argument(
        "--profile", help="realbench --profile (default: fit on a gpu, the shipped one on a cpu)"
    )
    parser.add_argument(
        "--skip", default="", help="comma-separated steps to leave out: tests,bench,realbench"
    )
    parser.add_argument("--strict", action="store_true", help="exit 1 when a goal is missed too")


def run(args: argparse.Namespace) -> int:
    if importlib.util.find_spec("vllm") is None:
        print(
            "timely-llm gpucheck: error: vLLM is not installed here (pip install vllm on a CUDA "
            "machine; make vllm for the CPU build)",
            file=sys.stderr,
        )
        return 2
    t0 = time.monotonic()
    load0 = os.getloadavg()[0]
    gpu = cuda_available() if args.size == "auto" else args.size == "gpu"
    size = SIZES["gpu" if gpu else "cpu"]
    if args.tasks:
        size = dataclasses.replace(size, tasks=args.tasks)
    skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    replay = realbench_has_replay()
    model = ensure_model(args.model, out)
    os.environ["TIMELY_VLLM_MODEL"] = model  # the tests' engine too
    shaped = None
    if gpu:  # the 8B-shaped random-weight model: config built in, the real model's tokenizer
        from timely_llm_ros.bench.model_shapes import build_shaped_model

        shaped = build_shaped_model(out / "models" / "llama3-8b", Path(model))
    tests = run_tests(size, out, not args.no_tests and "tests" not in skip)
    bench = (
        Step("vllm_bench", "skipped", detail="--skip")
        if "bench" in skip
        else run_bench(size, out, str(shaped) if shaped else model, args.bandwidth)
    )
    real = (
        Step("realbench", "skipped", detail="--skip")
        if "realbench" in skip
        else run_realbench(size, out, model, replay, shaped, args.profile)
    )
    wall = time.monotonic() - t0
    vals = measured(bench, real, wall)
    report: dict[str, Any] = {
        "size": size.name,
        "device": bench.data.get("device_name") or ("CUDA GPU" if gpu else "CPU"),
        "vllm_version": bench.data.get("engine", {}).get("vllm_version") or vllm_version(),
        "replay": replay,
        "wall_s": wall,
        "budget_s": size.budget_s,
        "load_average": [load0, os.getloadavg()[0]],
        "steps": [{k: v for k, v in s.__dict__.items() if k != "data"} for s in (tests, bench, real)],
        "goals": judge(vals, gpu),
        "bench_breakdown": bench.data.get("breakdown"),
        "tests": tests.data,
        "vllm_bench": bench.data,
        "realbench": real.data,
    }
    text = table(report)
    print(text)
    (out / "gpucheck.json").write_text(json.dumps(report, indent=1, default=str))
    (out / "gpucheck.txt").write_text(text + "\n")
    print(f"[gpucheck] wrote {out}/gpucheck.json and gpucheck.txt")
    failed = [s.name for s in (tests, bench, real) if s.status == "failed"]
    missed = [g["goal"] for g in report["goals"] if g["verdict"] == "FAIL"]
    return 1 if failed or (args.strict and missed) else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="timely-llm gpucheck", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
