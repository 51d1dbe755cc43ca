"""Runs workloads through policies on the simulator and keeps the results the CLI reports.

A :class:`Bench` resolves workloads once, runs each (workload, policy) pair at most once (figures
that share runs reuse them) and turns every :class:`~timely_llm_ros.sim.simulator.SimResult`
into a :class:`RunResult`: metrics per task class and per task type (trace id) as plain dicts —
the exact numbers printed in the tables and written to ``results.json`` — plus the records and
trace events that the timeline figure needs. Wall-clock times are kept apart (:attr:`Bench.timing`)
so the results file is identical for identical inputs.

Also here: the plans of the paper's figures and suites (which runs each needs) and the overhead
report (paper Tables 4 and 5).
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.sched.policies import parse_policy
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.workload.fileformat import Workload, resolve_workload

DEFAULT_POLICIES = ("timely", "vllm", "vllm-stream", "fcfs-seg", "edf-seg")
# Paper §7.3.1 sweeps the maximum batch size on WID 2 ("up to 16 tasks per event").
FIG7_BATCHES = (1, 2, 4, 6, 8, 10, 12, 14, 16)
# Paper Table 5 queue sizes, plus larger ones (target ≤ 1 ms at 10,000; bench.sched_overhead goes to 100k).
SCHED_SIZES = (1, 2, 4, 6, 8, 64, 1000, 10000)


@dataclass
class BenchOptions:
    policies: list[str] = field(default_factory=lambda: list(DEFAULT_POLICIES))
    seed: int = 0
    exec_mode: str = "recorded"
    profile: str = "llama3-8b-fp16-rtx4090"
    network_latency: float = 0.008

    def as_dict(self) -> dict[str, Any]:
        return {
            "policies": list(self.policies),
            "seed": self.seed,
            "exec_mode": self.exec_mode,
            "profile": self.profile,
            "network_latency": self.network_latency,
        }


@dataclass
class RunResult:
    """One workload under one policy."""

    workload: str
    policy: str  # as run, e.g. "timely@b6"
    base_policy: str
    max_batch: int
    classes: dict[str, dict[str, Any]]  # task class (+ "all") -> metric dict
    traces: dict[str, dict[str, Any]]  # task type (trace id as text) -> metric dict
    stats: dict[str, Any]
    records: list[Any] = field(default_factory=list, repr=False)
    events: list[Any] = field(default_factory=list, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "workload": self.workload,
            "policy": self.policy,
            "base_policy": self.base_policy,
            "max_batch": self.max_batch,
            "classes": self.classes,
            "task_types": self.traces,
            "stats": self.stats,
        }


def clean(value: Any) -> Any:
    """JSON-safe copy: NaN/inf -> None (JSON has no NaN), recursively."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [clean(v) for v in value]
    return value


def trace_key(rec: Any) -> str:
    """Per-task-type group of a record: its LRTrace trace id, or "-" when unknown."""
    return "-" if rec.trace_id is None else str(rec.trace_id)


class Progress:
    """Progress on stderr without a dependency: a redrawn one-line bar on a terminal, one line per
    finished run otherwise (logs stay readable); silent when disabled."""

    def __init__(
        self,
        total_runs: int,
        stream: TextIO | None = None,
        enabled: bool = True,
        width: int = 28,
        tty: bool | None = None,
    ):
        self.total = max(total_runs, 1)
        self.stream = stream or sys.stderr
        self.enabled = enabled
        self.tty = self.stream.isatty() if tty is None else tty
        self.width = width
        self.done_runs = 0
        self._last = 0.0
        self._started = time.monotonic()

    def update(self, label: str, done: int, total: int, force: bool = False) -> None:
        if not (self.enabled and self.tty):
            return
        now = time.monotonic()
        if not force and now - self._last < 0.2:
            return
        self._last = now
        frac = (self.done_runs + (done / total if total else 1.0)) / self.total
        filled = int(round(frac * self.width))
        bar = "#" * filled + "." * (self.width - filled)
        self.stream.write(
            f"\r[{bar}] {100 * frac:5.1f}%  run {min(self.done_runs + 1, self.total)}/{self.total} "
            f"{label}: {done}/{total} tasks\x1b[K"
        )
        self.stream.flush()

    def run_finished(self, label: str = "") -> None:
        self.done_runs += 1
        if self.enabled and not self.tty:
            elapsed = time.monotonic() - self._started
            self.stream.write(f"[{self.done_runs}/{self.total}] {label} done ({elapsed:.1f} s elapsed)\n")
            self.stream.flush()

    def close(self) -> None:
        if self.enabled and self.tty:
            self.stream.write("\r\x1b[K")
            self.stream.flush()


class Bench:
    """Caches workloads and runs; see the module docstring."""

    def __init__(self, options: BenchOptions, progress: Progress | None = None):
        self.options = options
        self.progress = progress
        self.workloads: dict[str, Workload] = {}
        self.runs: dict[tuple[str, str], RunResult] = {}
        self.timing: dict[str, float] = {}

    def workload(self, spec: str) -> Workload:
        if spec not in self.workloads:
            self.workloads[spec] = resolve_workload(spec)
        return self.workloads[spec]

    def run(self, workload_spec: str, policy: str) -> RunResult:
        key = (workload_spec, policy)
        if key in self.runs:
            return self.runs[key]
        wl = self.workload(workload_spec)
        pol = parse_policy(policy)  # raises UnknownPolicy with the list of known names
        config = SimConfig(
            policy=policy,
            profile=self.options.profile,
            exec_mode=self.options.exec_mode,
            network_latency=self.options.network_latency,
            seed=self.options.seed,
        )
        label = f"{wl.name} {policy}"
        callback: Callable[[int, int, float], None] | None = None
        if self.progress is not None:
            progress = self.progress

            def callback(done: int, total: int, _t: float) -> None:
                progress.update(label, done, total)

        t0 = time.perf_counter()
        result = simulate(wl.tasks, config, progress=callback)
        self.timing[f"{wl.name} | {policy}"] = time.perf_counter() - t0
        if self.progress is not None:
            self.progress.update(label, len(wl.tasks), len(wl.tasks), force=True)
            self.progress.run_finished(label)
        classes = {k: clean(m.as_dict()) for k, m in summarize(result.records).items()}
        traces = {
            k: clean(m.as_dict()) for k, m in summarize(result.records, by=trace_key, total=None).items()
        }
        run = RunResult(
            workload=wl.name,
            policy=policy,
            base_policy=pol.base,
            max_batch=pol.max_batch,
            classes=classes,
            traces=traces,
            stats=clean(dict(result.stats)),
            records=result.records,
            events=result.events,
        )
        self.runs[key] = run
        return run

    def results_json(self, extra: dict[str, Any] | None = None) -> dict[str, Any]:
        """Everything measured, deterministic for identical inputs (no wall-clock values)."""
        return {
            "options": self.options.as_dict(),
            "workloads": {spec: clean(wl.describe()) for spec, wl in self.workloads.items()},
            "runs": [run.to_json() for run in self.runs.values()],
            **(extra or {}),
        }


def task_intervals(events: Sequence[Any], task_id: str) -> dict[str, list[tuple[float, float]]]:
    """Queueing (arrival to first generation), generation, suspension and execution intervals of
    one task from its trace events."""
    queued, gen, susp, exe = [], [], [], []
    arrival = None
    gen_from = susp_from = None
    exec_from: dict[int, float] = {}
    for e in events:
        if e.task_id != task_id:
            continue
        if e.kind == ev.ARRIVAL:
            arrival = e.t
        if e.kind in (ev.GEN_START, ev.RESUME):
            if arrival is not None:
                if e.t > arrival:
                    queued.append((arrival, e.t))
                arrival = None
            if susp_from is not None:
                if e.t > susp_from:
                    susp.append((susp_from, e.t))
                susp_from = None
            gen_from = e.t
        elif e.kind in (ev.SUSPEND, ev.GEN_STOP, ev.FAIL, ev.DROP, ev.EXPIRE):
            if gen_from is not None:
                if e.t > gen_from:
                    gen.append((gen_from, e.t))
                gen_from = None
            if e.kind == ev.SUSPEND:
                susp_from = e.t
        elif e.kind == ev.EXEC_START:
            exec_from[e.seg] = e.t
        elif e.kind == ev.EXEC_END and e.seg in exec_from:
            exe.append((exec_from.pop(e.seg), e.t))
    return {"queued": queued, "generation": gen, "suspension": susp, "execution": exe}


# ------------------------------------------------------------------------------ figure plans
@dataclass(frozen=True)
class Job:
    workload: str
    policy: str


def batch_policy(policy: str, batch: int | None) -> str:
    """``timely`` + 6 -> ``timely@b6`` (an explicit ``@bN`` in the name wins)."""
    if batch is None or "@" in policy:
        return policy
    return f"{policy}@b{batch}"


def figure_jobs(figure: str, policies: Sequence[str]) -> list[Job]:
    """The runs one paper figure needs (policies = the user's list; the paper's pairs come first)."""
    pair = list(policies[:2]) if len(policies) >= 2 else ["timely", "vllm"]
    if figure == "5":
        return [Job(w, p) for w in ("wid1", "wid2") for p in policies]
    if figure == "6":
        return [Job("wid2", p) for p in pair]
    if figure == "7":
        return [Job("wid2", batch_policy(p, b)) for p in pair for b in FIG7_BATCHES]
    if figure == "8":
        return [Job(w, p) for w in ("wid1", "wid2") for p in policies]
    if figure == "9":
        return [Job("wid3", p) for p in policies]
    raise ValueError(f"unknown figure {figure!r} (choose 5, 6, 7, 8 or 9)")


FIGURES = ("5", "6", "7", "8", "9")


def scenario_jobs(policies: Sequence[str], groups: Sequence[str] | None = None) -> list[Job]:
    """The ``--suite scenarios`` runs: every entry of :data:`.scenarios.SUITE` (public samples,
    presets, fleet, rate, batch-cap, burst, compressed, urgent-heavy and overload families) under
    every policy."""
    from timely_llm_ros.bench import scenarios as sc

    return [
        Job(spec, sc.policy_for(p, cap))
        for _, spec, cap in sc.suite(list(groups) if groups is not None else None)
        for p in policies
    ]


def stress_jobs(policies: Sequence[str], seeds: Sequence[int] | None = None) -> list[Job]:
    """The ``--suite stress`` runs: every entry of :func:`.stress.suite` (bursty workloads, plain and
    compressed, distinct or shared agents, caps 2-16) under every policy."""
    from timely_llm_ros.bench import scenarios as sc
    from timely_llm_ros.bench import stress

    return [Job(spec, sc.policy_for(p, cap)) for _, spec, cap in stress.suite(seeds) for p in policies]


# ------------------------------------------------------------------------------ overhead report
def segmentation_overhead(options: BenchOptions, repeats: int = 3) -> list[dict[str, Any]]:
    """Segmented vs unsegmented generation of each benchmark plan, alone on the simulated engine.

    Each reference plan runs as a one-task workload under ``vllm`` (whole plan, one generation) and
    ``fcfs-seg`` (suspended after every executable segment and resumed). Generation time is the sum
    of the task's generation intervals in the trace (GEN_START/RESUME to SUSPEND/GEN_STOP), steps
    the engine iterations. On the simulated engine this is *model-level* overhead only (extra
    prefill/restore passes the timing model charges); the CPU cost of stop checks and context
    bookkeeping is reported separately as host milliseconds per simulation (median of ``repeats``),
    and real-engine overhead needs the llama.cpp engine.
    """
    from timely_llm_ros.workload.tasks import load_catalog

    rows = []
    for task in load_catalog():
        for variant in task.all_variants():
            spec = task.to_spec(task_id="0", agent_id="0", arrival=0.0, variant=variant)
            out: dict[str, Any] = {"task": task.id, "skill_set": variant.skill_set}
            for mode, policy in (("unsegmented", "vllm"), ("segmented", "fcfs-seg")):
                config = SimConfig(
                    policy=policy,
                    profile=options.profile,
                    exec_mode=options.exec_mode,
                    network_latency=options.network_latency,
                    seed=options.seed,
                )
                cpu = []
                for _ in range(max(1, repeats)):
                    t0 = time.perf_counter()
                    result = simulate([spec], config)
                    cpu.append(time.perf_counter() - t0)
                rec = result.records[0]
                spans = task_intervals(result.events, rec.task_id)["generation"]
                out[f"{mode}_s"] = math.fsum(b - a for a, b in spans)
                out[f"{mode}_steps"] = result.stats.get("engine_steps", 0)
                out[f"{mode}_host_ms"] = 1000 * sorted(cpu)[len(cpu) // 2]
                if mode == "segmented":
                    out["segments"] = len(rec.segments)
                    out["tokens"] = rec.n_tokens
                    out["state"] = rec.state
            out["overhead_s"] = out["segmented_s"] - out["unsegmented_s"]
            out["overhead_pct"] = (
                100 * out["overhead_s"] / out["segmented_s"] if out["segmented_s"] > 0 else 0.0
            )
            rows.append(out)
    return rows


def scheduling_overhead(
    policies: Sequence[str] = ("timely", "edf-seg", "fcfs-seg"),
    sizes: Sequence[int] = SCHED_SIZES,
    repeats: int = 500,
) -> list[dict[str, Any]]:
    """Cost of one scheduling decision vs queue size (paper Table 5), via bench.sched_overhead."""
    from timely_llm_ros.bench import sched_overhead

    rows = []
    for n in sizes:
        row: dict[str, Any] = {"queue": n}
        for policy in policies:
            m = sched_overhead.measure(policy, n, sched_overhead.repeats_for(n, repeats))
            row[f"{policy} median ms"] = m["cpu_median_ms"]  # CPU time: robust on a shared machine
            row[f"{policy} p99 ms"] = m["cpu_p99_ms"]
        rows.append(row)
    return rows
