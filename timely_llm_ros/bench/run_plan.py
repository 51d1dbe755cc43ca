"""What one ``timely-llm bench`` command runs: the run plan, built from the command-line arguments.

Why apart from the CLI: the modes combine freely (explicit workloads, batch caps, a composer
sweep, the paper's figures, suites) and share runs; deciding *which* (workload, policy) runs that
means — once each, in a stable order — and what the figure step must know about them is one small
pure function of the arguments, testable without running anything.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass, field

from timely_llm_ros.bench import runner as rn
from timely_llm_ros.bench.stress import parse_seeds
from timely_llm_ros.core.sched.policies import parse_policy

Sweep = tuple[str, list[str]]  # (composer parameter, values as written)


def csv(text: str) -> list[str]:
    """Non-empty, stripped parts of a comma-separated option value."""
    return [part.strip() for part in text.split(",") if part.strip()]


def parse_batches(text: str | None) -> list[int | None]:
    """``--max-batch 4,8`` → [4, 8]; absent → [None] (no cap)."""
    if text is None:
        return [None]
    out: list[int | None] = []
    for part in csv(text):
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--max-batch: {part!r} is not a positive integer")
        out.append(int(part))
    if not out:
        raise ValueError("--max-batch: no value given")
    return out


def parse_sweep(text: str | None) -> Sweep | None:
    """``--sweep rate=0.1,0.25`` → ("rate", ["0.1", "0.25"])."""
    if text is None:
        return None
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[a-z_]+", key) or not csv(values):
        raise ValueError(f"--sweep: write KEY=V1,V2,... (e.g. rate=0.1,0.25), got {text!r}")
    if key == "traces":
        raise ValueError("--sweep: traces cannot be swept (commas separate the values)")
    return key, csv(values)


def parse_policies(text: str) -> list[str]:
    """``--policies``: names (each checked, optionally ``@bN``), at least one."""
    policies = csv(text)
    if not policies:
        raise ValueError("--policies: no policy given")
    for p in policies:
        parse_policy(p)
    return policies


def with_override(workload: str, key: str, value: str) -> str:
    """A composer workload spec with one more ``key=value`` override (``wid2`` → ``wid2:rate=0.5``)."""
    return f"{workload}{',' if ':' in workload else ':'}{key}={value}"


def dedupe(jobs: list[rn.Job]) -> list[rn.Job]:
    """The jobs once each, first occurrence first (modes share runs)."""
    return list(dict.fromkeys(jobs))


@dataclass
class RunPlan:
    """The runs a bench command asks for, and what the tables and figures need to know of them."""

    policies: list[str]
    jobs: list[rn.Job] = field(default_factory=list)
    figures: list[str] = field(default_factory=list)  # the paper's figure numbers to draw
    batches: list[int | None] = field(default_factory=lambda: [None])
    sweep: Sweep | None = None
    explicit: list[str] = field(default_factory=list)  # workload specs of the explicit mode, in order
    sweeps: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # base workload -> [(value, spec)]
    scenarios: bool = False  # --suite scenarios: its runs, summary table and load figures
    stress: bool = False  # --suite stress: its runs and summary table (bench.stress)
    stress_seeds: list[int] | None = None  # --workload-seeds: compose the stress families with these
    overhead: bool = False  # --overhead or --suite paper: the overhead report
    claims: bool = False  # --suite paper: the claims table (bench.claims) and its runs
    fig6_workload: str = "wid2"
    fig6_tasks: str | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> RunPlan:
        """The plan of the parsed ``timely-llm bench`` arguments (ValueError: bad option value)."""
        policies = parse_policies(args.policies)
        paper = list(rn.FIGURES) if args.suite == "paper" else []
        plan = cls(
            policies,
            figures=list(dict.fromkeys((args.figure or []) + paper)),
            batches=parse_batches(args.max_batch),
            sweep=parse_sweep(args.sweep),
            scenarios=args.suite == "scenarios",
            stress=args.suite == "stress",
            stress_seeds=parse_seeds(getattr(args, "workload_seeds", None)),
            overhead=bool(args.overhead or args.suite == "paper"),
            claims=args.suite == "paper",
            fig6_workload=args.fig6_workload,
            fig6_tasks=args.fig6_tasks,
        )
        workloads = list(args.workload or [])
        if not workloads and not plan.figures and not args.suite and not args.overhead:
            workloads = ["wid1"]
        jobs = [job for w in workloads for job in plan._explicit_jobs(w)]
        jobs += [job for fig in plan.figures for job in plan._figure_jobs(fig)]
        if plan.scenarios:
            jobs += rn.scenario_jobs(policies)
        if plan.stress:
            jobs += rn.stress_jobs(policies, plan.stress_seeds)
        elif plan.stress_seeds is not None:
            raise ValueError("--workload-seeds: only --suite stress composes workloads with other seeds")
        if plan.claims:
            from timely_llm_ros.bench.claims import claims_jobs

            jobs += claims_jobs()
        plan.jobs = dedupe(jobs)
        return plan

    @property
    def pair(self) -> list[str]:
        """The two policies compared by Figures 6 and 7 (the first two given, else timely vs vllm)."""
        return self.policies[:2] if len(self.policies) >= 2 else ["timely", "vllm"]

    def workloads(self) -> list[str]:
        """Workload specs of the jobs, once each, in job order."""
        return list(dict.fromkeys(job.workload for job in self.jobs))

    def _explicit_jobs(self, workload: str) -> list[rn.Job]:
        sweep = self.sweep
        if sweep is None:
            variants: list[tuple[str | None, str]] = [(None, workload)]
        else:
            variants = [(v, with_override(workload, sweep[0], v)) for v in sweep[1]]
            self.sweeps[workload] = [(v, spec) for v, spec in variants if v is not None]
        jobs = []
        for _, spec in variants:
            self.explicit.append(spec)
            jobs += [rn.Job(spec, rn.batch_policy(p, b)) for b in self.batches for p in self.policies]
        return jobs

    def _figure_jobs(self, fig: str) -> list[rn.Job]:
        if fig == "6":
            return [rn.Job(self.fig6_workload, p) for p in self.pair]
        return rn.figure_jobs(fig, self.policies)
