"""The slack token budget (planner option ``token_budget``, paper 004) on a *real* engine.

``python -m timely_llm_ros.bench.related_real [--engine llamacpp] [--rounds 2]``: a small mixed
workload — per round one robot-arm task with its ~1.3k-token FLTRNN prompt and, while that prompt is
being prefilled, urgent and normal drone tasks (WID 2's instructions) — run through the planner
(``timely``) on the engine in wall time, once with ``token_budget=whole`` (the engine's own chunking:
llama.cpp's preemptible 16/64-token chunks) and once with ``slack``. Reported per run: the urgent
tasks' time to first segment (W(s₀), mean and max) and %Σβ per class. TUFs are scaled as in
``timely-llm realbench`` (``--tuf-scale auto``: the urgent first segment served alone, over the GPU
profile's 0.12 s), so the ERTs keep the paper's slack on this engine.

Wall-time figures depend on the machine and its load: read them next to the load average printed
with them. Not part of ``bench --suite related`` (minutes of real inference per run).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

from timely_llm_ros.bench.realbench import ENGINE_OPTIONS, GPU_URGENT_FIRST_SEGMENT, drive, first_segment_time
from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.task import TaskSpec, task_class
from timely_llm_ros.workload.fileformat import resolve_workload

#: Drone tasks that arrive after each arm task (s after it): while its prompt is being prefilled.
DRONE_OFFSETS = (0.3, 0.6, 0.9)
ROUND_S = 20.0  # rounds start this far apart (the previous round's plans are done by then)


def workload(rounds: int, scale: float) -> list[TaskSpec]:
    """``rounds`` × (one arm task + urgent/normal drone tasks during its prefill), TUFs ×``scale``."""
    arm = sorted(resolve_workload("arm").tasks, key=lambda t: t.arrival)
    drones = sorted(resolve_workload("wid2").tasks, key=lambda t: t.arrival)
    urgent = [t for t in drones if task_class(t) == "urgent"]
    normal = [t for t in drones if task_class(t) == "normal"]
    out: list[TaskSpec] = []
    for r in range(rounds):
        t0 = r * ROUND_S
        out.append(dataclasses.replace(arm[r % len(arm)], task_id=f"arm{r}", agent_id=f"arm{r}", arrival=t0))
        picks = (urgent[2 * r % len(urgent)], normal[r % len(normal)], urgent[(2 * r + 1) % len(urgent)])
        for k, (off, t) in enumerate(zip(DRONE_OFFSETS, picks)):
            out.append(
                dataclasses.replace(t, task_id=f"d{r}.{k}", agent_id=f"drone{r}.{k}", arrival=t0 + off)
            )
    return [dataclasses.replace(t, tuf=t.tuf.scaled(scale) if t.tuf else None) for t in out]


def one_run(engine: Any, tasks: list[TaskSpec], mode: str) -> dict[str, Any]:
    run = drive(engine, tasks, "timely", realtime=True, options=PlannerOptions(token_budget=mode))
    urgent = [r.response_time for r in run.records if r.task_class == "urgent"]
    classes = {k: m.as_dict() for k, m in summarize(run.records).items()}
    return {
        "token_budget": mode,
        "wall_s": run.wall,
        "urgent_first_segment_s": urgent,
        "urgent_mean_s": statistics.fmean(urgent) if urgent else None,
        "urgent_max_s": max(urgent) if urgent else None,
        "pct_beta": {k: c.get("pct_beta") for k, c in classes.items()},
        "states": sorted({r.state for r in run.records}),
        "load_average": os.getloadavg()[0],
    }


def table(results: list[dict[str, Any]], scale: float) -> str:
    lines = [
        f"# slack token budget on a real engine (TUF scale x{scale:g}); urgent W(s0) = time to first segment",
        f"{'token_budget':12s} {'urgent W mean s':>15s} {'urgent W max s':>14s} {'%Σβ urgent':>10s} "
        f"{'%Σβ normal':>10s} {'%Σβ arm':>8s} {'load':>5s}",
    ]
    for r in results:
        pb = r["pct_beta"]

        def f(x: Any) -> str:
            return "-" if x is None else f"{x:.1f}"

        lines.append(
            f"{r['token_budget']:12s} {f(r['urgent_mean_s']):>15s} {f(r['urgent_max_s']):>14s} "
            f"{f(pb.get('urgent')):>10s} {f(pb.get('normal')):>10s} {f(pb.get('arm')):>8s} "
            f"{r['load_average']:5.1f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from timely_llm_ros.engines.registry import create_engine

    ap = argparse.ArgumentParser(
        prog="python -m timely_llm_ros.bench.related_real", description=__doc__.split("\n\n")[0]
    )
    ap.add_argument("--engine", default="llamacpp", choices=("llamacpp", "vllm"))
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--tuf-scale", default="auto")
    ap.add_argument("--out", type=Path, default=Path("results/related_real"))
    args = ap.parse_args(argv)
    engine = create_engine(args.engine, **ENGINE_OPTIONS[args.engine])
    try:
        probe = workload(1, 1.0)
        if args.tuf_scale == "auto":
            first = first_segment_time(engine, next(t for t in probe if task_class(t) == "urgent"))
            scale = max(1.0, round(first / GPU_URGENT_FIRST_SEGMENT))
            print(
                f"[related_real] urgent first segment alone: {first:.2f} s -> TUF scale x{scale:g}",
                flush=True,
            )
        else:
            scale = float(args.tuf_scale)
        tasks = workload(args.rounds, scale)
        PlannerCore(engine, "timely").warm_up(sorted({t.skill_set for t in tasks}))
        results = []
        for mode in ("whole", "slack"):
            print(f"[related_real] token_budget={mode}: {len(tasks)} tasks ...", flush=True)
            results.append(one_run(engine, tasks, mode))
    finally:
        engine.close()
    text = table(results, scale)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "related_real.json").write_text(
        json.dumps({"engine": args.engine, "tuf_scale": scale, "results": results}, indent=1, default=str)
    )
    (args.out / "related_real.txt").write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
