"""Cost of one scheduling decision (paper §7.5.2, Table 5) versus the number of queued generations.

``python -m timely_llm_ros.bench.sched_overhead [--out FILE] [--repeats N] [--sizes 1 8 ... 100000]
[--policies ...] [--png FILE]``

A *decision* is what the planner runs before every engine step: :meth:`Scheduler.select` — the
policy's ranking of the queue at that time (for ``timely``: phase changes due, utility-accrual test,
promoted/deferred tiers) plus the admission checks of the candidates it takes. For each policy and
queue length n the queue is filled with n generations of a realistic mix (half initial drone/arm
requests with normal or urgent TUFs that arrived within the last second, half suspended ones whose
previous action ends within ±2 s), seven generations run (one free slot of the default batch of 8),
and ``select`` is timed at a clock advancing 1 ms per decision (so the
policies see time pass: phase changes, promotions, tardy segments); what it picked is pushed back
untimed — as the planner re-queues a suspended generation — so n stays constant. The first
``WARMUP`` decisions are not timed (they index a queue filled all at once). Each decision is
measured twice: the CPU time of the deciding thread (``time.thread_time_ns``: what the decision
costs) and the wall-clock time (``time.perf_counter_ns``: adds the time the thread waited for a CPU,
which on a shared two-core machine dominates the tail). Prints median / mean / p99 of both in
milliseconds, writes them as JSON and plots the CPU median and p99 against n (log-log PNG).

Targets: ≤ 0.05 ms at 8 queued and ≤ 1 ms at 10,000 queued for ``timely`` (per decision,
CPU time). The paper
reports 0.58 ms at 1 and 2.03 ms at 8 queued tasks. Timings depend on the machine and its load:
the JSON records the interpreter and platform; compare runs on one machine only.
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import time
from pathlib import Path

from timely_llm_ros.core.generation import Generation, TaskRecord
from timely_llm_ros.core.sched.policies import UnknownPolicy, parse_policy
from timely_llm_ros.core.sched.scheduler import Scheduler
from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF

SIZES = (1, 8, 64, 1000, 10000, 100000)
POLICIES = ("timely", "timely-paper", "edf-seg", "fcfs-seg")
RUNNING = 7  # generations already running: one free slot of the default batch of 8
WARMUP = 20  # untimed decisions after the queue is filled
T0 = 1.0  # clock of the first decision (s)
MEM = 10**9  # free KV tokens (memory never binds here)


def _generation(i: int, rng: random.Random, sets: list) -> Generation:
    sset = sets[i % 2]
    tuf = URGENT_TUF if rng.random() < 0.4 else NORMAL_TUF
    spec = TaskSpec(
        task_id=str(i),
        agent_id=str(i),
        robot_type=sset.robot_type,
        skill_set=sset.name,
        instruction="x",
        tuf=tuf,
        arrival=T0 - rng.uniform(0.0, 1.0),
    )
    gen = Generation(i, spec, TaskRecord.from_spec(spec), sset, 0.008)
    if i % 2:  # suspended: next segment k > 0, previous action ends around now
        gen.k = 1 + rng.randrange(5)
        gen.ert_k = 0.0
        gen.ref = T0 + rng.uniform(-2.0, 2.0)
    gen.mem_need = 100
    return gen


def measure(policy: str, n: int, repeats: int, seed: int = 0) -> dict:
    """Time ``repeats`` decisions of ``policy`` with ``n`` queued (see the module docstring)."""
    rng = random.Random(seed)
    sets = [load_skill_set("tello_minispec"), load_skill_set("robot_arm")]
    sched = Scheduler(policy)
    for i in range(n):
        sched.push(_generation(i, rng, sets))
    running = [_generation(n + i, rng, sets) for i in range(RUNNING)]
    for r in running:
        r.seg_start = T0 - rng.uniform(0.0, 0.1)
    wall, cpu = [], []
    t = T0
    for rep in range(WARMUP + repeats):
        c0, t0 = time.thread_time_ns(), time.perf_counter_ns()
        picked = sched.decide(t, running, None, MEM).admit
        t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
        if rep >= WARMUP:
            wall.append((t1 - t0) / 1e6)
            cpu.append((c1 - c0) / 1e6)
        for gen in picked:
            sched.push(gen)
        t += 0.001
    wall.sort()
    cpu.sort()
    return {
        "policy": policy,
        "queued": n,
        "repeats": repeats,
        "mean_ms": statistics.fmean(wall),
        "median_ms": statistics.median(wall),
        "p99_ms": _p99(wall),
        "cpu_mean_ms": statistics.fmean(cpu),
        "cpu_median_ms": statistics.median(cpu),
        "cpu_p99_ms": _p99(cpu),
    }


def _p99(sorted_ms: list[float]) -> float:
    return sorted_ms[max(0, int(0.99 * len(sorted_ms)) - 1)]


def repeats_for(n: int, repeats: int) -> int:
    """Fewer timed decisions for long queues (filling them dominates the run time)."""
    if n <= 64:
        return repeats
    if n <= 10000:
        return max(1, repeats // 4)
    return max(1, repeats // 20)


def table(rows: list[dict]) -> str:
    lines = [
        "decision cost in ms: CPU time of the deciding thread (what the decision costs) and wall-clock "
        "time (adds waits for the CPU on a shared machine)",
        f"{'policy':<14}{'queued':>8}{'cpu median':>11}{'cpu mean':>10}{'cpu p99':>9}"
        f"{'wall median':>12}{'wall mean':>10}{'wall p99':>10}",
    ]
    for r in rows:
        lines.append(
            f"{r['policy']:<14}{r['queued']:>8}{r['cpu_median_ms']:>11.4f}{r['cpu_mean_ms']:>10.4f}"
            f"{r['cpu_p99_ms']:>9.4f}{r['median_ms']:>12.4f}{r['mean_ms']:>10.4f}{r['p99_ms']:>10.4f}"
        )
    return "\n".join(lines)


def plot(rows: list[dict], path: Path) -> Path:
    """Median (solid) and p99 (dotted) CPU time of a decision vs queued generations, log-log."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.2))
    for k, pol in enumerate(dict.fromkeys(r["policy"] for r in rows)):
        pts = sorted((r["queued"], r["cpu_median_ms"], r["cpu_p99_ms"]) for r in rows if r["policy"] == pol)
        xs = [p[0] for p in pts]
        (line,) = ax.plot(xs, [p[1] for p in pts], marker="os^vD"[k % 5], label=f"{pol} median")
        ax.plot(xs, [p[2] for p in pts], ":", color=line.get_color(), linewidth=1)
    ax.axhline(1.0, color="grey", linewidth=0.8, linestyle="--")
    ax.axhline(0.05, color="grey", linewidth=0.8, linestyle="--")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("queued generations")
    ax.set_ylabel("decision CPU time (ms; dotted: p99)")
    ax.set_title("Scheduler.select cost vs queue length", fontsize=10)
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results/sched_overhead.json", help="JSON output file")
    ap.add_argument("--png", default=None, help="figure (default: the JSON path with .png)")
    ap.add_argument(
        "--repeats",
        type=int,
        default=2000,
        help="decisions timed per (policy, size) up to 64 "
        "queued (a quarter up to 10,000, a twentieth beyond)",
    )
    ap.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    ap.add_argument("--policies", nargs="+", default=list(POLICIES))
    args = ap.parse_args(argv)
    if args.repeats < 1 or any(s < 1 for s in args.sizes):
        ap.error("--repeats and --sizes must be positive")
    try:
        for p in args.policies:
            parse_policy(p)
    except UnknownPolicy as exc:
        ap.error(str(exc))
    rows = [measure(pol, n, repeats_for(n, args.repeats)) for pol in args.policies for n in args.sizes]
    print(table(rows))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "processor": platform.processor(),
        "platform": platform.platform(),
    }
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=2))
    png = plot(rows, Path(args.png) if args.png else out.with_suffix(".png"))
    print(f"wrote {out} and {png}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
