"""The figures of a ``timely-llm bench`` command: a registry of name → drawing function.

Why a registry: each figure (the explicit mode's per-policy charts, a sweep, the paper's Figures
5-9, the scenario suite's load curves) reads different runs of the same bench; one small function
per figure, called in the registry's order when the :class:`~.run_plan.RunPlan` asks for it,
replaces one long function of ``if`` branches. The plotting itself is :mod:`.figures`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.bench import runner as rn
from timely_llm_ros.bench.run_plan import RunPlan, csv

# Panels of Figure 7: mean utility (clamped at 0, then unclamped overall) per class.
FIG7_KEYS = (
    ("all", "utility_mean_clamped"),
    ("urgent", "utility_mean_clamped"),
    ("normal", "utility_mean_clamped"),
    ("all", "utility_mean"),
)


@dataclass
class FigureContext:
    """What every drawing function gets: the finished runs, the plan, the output folder."""

    bench: rn.Bench
    plan: RunPlan
    out: Path

    def runs_of(self, spec: str, pols: Sequence[str]) -> list[rn.RunResult]:
        """The runs of workload ``spec`` under ``pols`` that were done, in ``pols`` order."""
        return [self.bench.runs[(spec, p)] for p in pols if (spec, p) in self.bench.runs]


def slug(text: str) -> str:
    """A workload name as a file-name part."""
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_") or "workload"


def load_keys(series: dict[str, list[tuple[Any, rn.RunResult]]]) -> tuple[tuple[str, str], ...]:
    """Panels of a sweep figure: % of Σβ per class, unclamped (Eq. 1: the headline) and clamped at 0
    (readable when a few late tasks make the unclamped mean plunge)."""
    classes = {c for points in series.values() for _, run in points for c in run.classes}
    present: list[str] = [c for c in ("urgent", "normal", "arm") if c in classes] or ["all"]
    return tuple((c, key) for key in ("pct_beta", "pct_beta_clamped") for c in present)


def fig6_pick(runs: Sequence[rn.RunResult], chosen: str | None) -> list[Any]:
    """Records of the two tasks to show (same task ids in every run)."""
    first = {r.task_id: r for r in runs[0].records}
    if chosen:
        ids = csv(chosen)
        missing = [i for i in ids if i not in first]
        if missing:
            raise ValueError(f"--fig6-tasks: no task {missing} in {runs[0].workload}")
        return ids
    other = {r.task_id: r for r in runs[-1].records}
    recs = sorted(first.values(), key=lambda r: r.arrival)
    fallback = None
    for i, urgent in enumerate(recs):
        if urgent.task_class != "urgent":
            continue
        for normal in recs[max(0, i - 16) : i + 16]:
            if normal.task_class == "urgent" or abs(normal.arrival - urgent.arrival) > 0.02:
                continue
            fallback = fallback or [normal.task_id, urgent.task_id]
            a, b = urgent.response_time, other[urgent.task_id].response_time
            if a <= urgent.tuf.ert < b:
                return [normal.task_id, urgent.task_id]
    return fallback or [r.task_id for r in recs[:2]]


# ------------------------------------------------------------------------------ drawing functions
def explicit(ctx: FigureContext) -> list[Path]:
    """Explicit mode: one workload and one batch setting -> policies per class and per task type;
    several batch caps -> a batch-size sweep figure; --sweep -> a load figure (the per-variant
    bar charts would only repeat what the sweep shows)."""
    from timely_llm_ros.bench import figures as fg

    plan, bench, out = ctx.plan, ctx.bench, ctx.out
    written: list[Path] = []
    for spec in plan.explicit:
        name = slug(bench.workload(spec).name)
        if len(plan.batches) == 1 and not plan.sweeps:
            runs = ctx.runs_of(spec, [rn.batch_policy(p, plan.batches[0]) for p in plan.policies])
            written.append(fg.fig_policies(spec, runs, out / f"policies_{name}.png"))
            written.append(
                fg.fig_per_task_type([(spec, runs)], out / f"tasktypes_{name}.png", f"{spec}: per task type")
            )
        if len(plan.batches) > 1:
            series = {
                p: [(b, bench.runs[(spec, rn.batch_policy(p, b))]) for b in plan.batches]
                for p in plan.policies
            }
            written.append(
                fg.fig_sweep(
                    series,
                    out / f"batch_sweep_{name}.png",
                    xlabel="max batch size",
                    title=bench.workload(spec).name,
                    class_keys=load_keys(series),
                )
            )
    return written


def sweeps(ctx: FigureContext) -> list[Path]:
    """--sweep: % of Σβ against the swept composer parameter, one figure per batch setting."""
    from timely_llm_ros.bench import figures as fg

    plan, bench = ctx.plan, ctx.bench
    written: list[Path] = []
    for variants in plan.sweeps.values():
        assert plan.sweep is not None
        key = plan.sweep[0]
        base_name = slug(bench.workload(variants[0][1]).name.split(":")[0])
        for b in plan.batches:
            series = {}
            for p in plan.policies:
                pol = rn.batch_policy(p, b)
                series[pol] = [(float(yaml.safe_load(v)), bench.runs[(spec, pol)]) for v, spec in variants]
            name = f"sweep_{key}_{base_name}" + (f"_b{b}" if b is not None else "")
            written.append(
                fg.fig_sweep(
                    series,
                    ctx.out / f"{name}.png",
                    xlabel=key,
                    title=f"{base_name}: % of Σβ vs {key}",
                    class_keys=load_keys(series),
                )
            )
    return written


def figure5(ctx: FigureContext) -> list[Path]:
    from timely_llm_ros.bench import figures as fg

    pols = ctx.plan.policies
    return [
        fg.fig_per_task_type(
            [("WID1 (LW)", ctx.runs_of("wid1", pols)), ("WID2 (HW)", ctx.runs_of("wid2", pols))],
            ctx.out / "fig5_task_types.png",
            "Figure 5: end-to-end performance per task type",
        )
    ]


def figure6(ctx: FigureContext) -> list[Path]:
    from timely_llm_ros.bench import figures as fg

    plan = ctx.plan
    runs = ctx.runs_of(plan.fig6_workload, plan.pair)
    ids = fig6_pick(runs, plan.fig6_tasks)
    panels = [
        (run.policy, run, [next(r for r in run.records if r.task_id == i) for i in ids]) for run in runs
    ]
    title = f"Figure 6: tasks {', '.join(ids)} of {plan.fig6_workload} under {' and '.join(plan.pair)}"
    return [fg.fig_timeline(panels, ctx.out / "fig6_timeline.png", title)]


def figure7(ctx: FigureContext) -> list[Path]:
    from timely_llm_ros.bench import figures as fg

    series = {
        p: [(b, ctx.bench.runs[("wid2", rn.batch_policy(p, b))]) for b in rn.FIG7_BATCHES]
        for p in ctx.plan.pair
    }
    return [
        fg.fig_sweep(
            series,
            ctx.out / "fig7_batch_size.png",
            xlabel="max batch size",
            title="Figure 7: WID2 utility vs max batch size",
            class_keys=FIG7_KEYS,
        )
    ]


def figure8(ctx: FigureContext) -> list[Path]:
    from timely_llm_ros.bench import figures as fg

    return [
        fg.fig_policies(
            f"Figure 8: {w}",
            ctx.runs_of(w, ctx.plan.policies),
            ctx.out / f"fig8_policies_{w}.png",
            classes=("urgent", "normal", "all"),
        )
        for w in ("wid1", "wid2")
    ]


def figure9(ctx: FigureContext) -> list[Path]:
    from timely_llm_ros.bench import figures as fg

    runs = ctx.runs_of("wid3", ctx.plan.policies)
    return [
        fg.fig_per_task_type(
            [("WID3 robot arm", runs)], ctx.out / "fig9_arm.png", "Figure 9: robot-arm workload per task type"
        )
    ]


def scenario_loads(ctx: FigureContext) -> list[Path]:
    """--suite scenarios: % of Σβ against event rate, fleet size and batch cap."""
    from timely_llm_ros.bench import figures as fg
    from timely_llm_ros.bench import scenarios as sc

    runs = ctx.bench.runs
    axes = (
        (
            "rate",
            [(r, sc.rate_spec(r), None) for r in sc.RATES],
            "events per second (WID2, one agent per task)",
        ),
        (
            "agents",
            [(sc.WID2_AGENTS * f, sc.agents_spec(f), None) for f in sc.AGENT_FACTORS],
            "agents (WID2; robots per event scaled alike)",
        ),
        (
            "batch",
            [(c, sc.batch_spec(), c) for c in sc.BATCH_CAPS],
            "max batch size (WID2, one agent per task)",
        ),
    )
    written: list[Path] = []
    for name, points, label in axes:
        series = {
            p: [(x, runs[(s, sc.policy_for(p, c))]) for x, s, c in points if (s, sc.policy_for(p, c)) in runs]
            for p in ctx.plan.policies
        }
        written.append(
            fg.fig_sweep(
                series,
                ctx.out / f"load_{name}.png",
                xlabel=label,
                title=f"% of Σβ vs load ({name})",
                class_keys=load_keys(series),
            )
        )
    return written


Drawer = Callable[[FigureContext], list[Path]]

# name -> (is it asked for by the plan?, drawing function); drawn in this order.
REGISTRY: dict[str, tuple[Callable[[RunPlan], bool], Drawer]] = {
    "explicit": (lambda plan: bool(plan.explicit), explicit),
    "sweeps": (lambda plan: bool(plan.sweeps), sweeps),
    "5": (lambda plan: "5" in plan.figures, figure5),
    "6": (lambda plan: "6" in plan.figures, figure6),
    "7": (lambda plan: "7" in plan.figures, figure7),
    "8": (lambda plan: "8" in plan.figures, figure8),
    "9": (lambda plan: "9" in plan.figures, figure9),
    "scenarios": (lambda plan: plan.scenarios, scenario_loads),
}


def draw_figures(bench: rn.Bench, plan: RunPlan, out: Path) -> list[Path]:
    """Every figure the plan asks for, in registry order; the paths written."""
    ctx = FigureContext(bench, plan, out)
    return [path for wanted, draw in REGISTRY.values() if wanted(plan) for path in draw(ctx)]
