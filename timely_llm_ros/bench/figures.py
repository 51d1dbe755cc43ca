"""PNG figures of the bench CLI, in the layout of the paper's Figures 5-9 (matplotlib, Agg).

Every function takes finished :class:`~timely_llm_ros.bench.runner.RunResult` objects and a
path, draws, saves and returns the path; none of them runs a simulation. Titles say which
workload and policies the numbers come from, so a figure is readable without the report.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt

from timely_llm_ros.bench.runner import task_intervals
from timely_llm_ros.bench.tables import class_order

_POLICY_COLORS = {
    "timely": "#d62728",
    "timely-paper": "#ff9896",
    "vllm": "#1f77b4",
    "vllm-stream": "#17becf",
    "fcfs-seg": "#2ca02c",
    "edf-seg": "#9467bd",
}


def _color(policy: str, index: int) -> str:
    return _POLICY_COLORS.get(policy.split("@")[0], f"C{index % 10}")


def _value(metrics: dict[str, Any] | None, key: str) -> float:
    if not metrics:
        return math.nan
    value = metrics.get(key)
    return math.nan if value is None else float(value)


def _grouped_bars(ax, groups: Sequence[str], runs: Sequence[Any], getter, ylabel: str, title: str) -> None:
    n = max(len(runs), 1)
    width = 0.8 / n
    for i, run in enumerate(runs):
        xs = [g + (i - (n - 1) / 2) * width for g in range(len(groups))]
        ys = [getter(run, group) for group in groups]
        ax.bar(xs, ys, width=width, label=run.policy, color=_color(run.policy, i))
    ax.set_xticks(range(len(groups)))
    ax.set_xticklabels(groups, fontsize=8)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.axhline(0, color="black", linewidth=0.5)


def _trace_labels(runs: Sequence[Any]) -> list[str]:
    keys: set[str] = set()
    for run in runs:
        keys.update(run.traces)
    return sorted(keys, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))


def fig_per_task_type(loads: Sequence[tuple[str, Sequence[Any]]], path: Path, title: str) -> Path:
    """Fig. 5 / Fig. 9: utility, response and waiting time per task type (trace id), one row per load."""
    rows = len(loads)
    fig, axes = plt.subplots(rows, 3, figsize=(15, 3.6 * rows), squeeze=False)
    for r, (label, runs) in enumerate(loads):
        traces = _trace_labels(runs)
        for c, (key, ylabel) in enumerate(
            (
                ("utility_mean", "mean time utility"),
                ("response_mean", "response time (s)"),
                ("waiting_mean", "waiting time (s)"),
            )
        ):
            _grouped_bars(
                axes[r][c],
                traces,
                runs,
                lambda run, t, key=key: _value(run.traces.get(t), key),
                ylabel,
                f"({chr(97 + r * 3 + c)}) {label}: {ylabel} per task type",
            )
            axes[r][c].set_xlabel("task type (LRTrace trace id, Table 2)")
    axes[0][0].legend(fontsize=8)
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fig_policies(
    workload: str, runs: Sequence[Any], path: Path, classes: Sequence[str] | None = None
) -> Path:
    """Fig. 8: policies side by side per task class: mean utility, %Σβ and waiting time."""
    classes = list(classes or class_order(sorted({c for run in runs for c in run.classes})))
    fig, axes = plt.subplots(1, 3, figsize=(15, 3.8))
    for ax, (key, ylabel) in zip(
        axes,
        (
            ("utility_mean", "mean time utility"),
            ("pct_beta", "% of Σβ"),
            ("waiting_mean", "waiting time (s)"),
        ),
    ):
        _grouped_bars(
            ax,
            classes,
            runs,
            lambda run, cls, key=key: _value(run.classes.get(cls), key),
            ylabel,
            f"{workload}: {ylabel}",
        )
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fig_sweep(
    series: Mapping[str, Sequence[tuple[Any, Any]]],
    path: Path,
    *,
    xlabel: str,
    title: str,
    class_keys: Sequence[tuple[str, str]] = (("all", "utility_mean"),),
) -> Path:
    """Fig. 7 / load sweep: one line per base policy; ``series[policy] = [(x, run), ...]``.

    ``class_keys`` picks what to plot: one panel per (class, metric key).
    """
    cols = 2 if len(class_keys) == 4 else min(len(class_keys), 3)
    rows = -(-len(class_keys) // cols)
    fig, axes = plt.subplots(rows, cols, figsize=(5.5 * cols, 3.8 * rows), squeeze=False)
    flat = [ax for row in axes for ax in row]
    for ax in flat[len(class_keys) :]:
        ax.set_visible(False)
    for ax, (cls, key) in zip(flat, class_keys):
        for i, (policy, points) in enumerate(series.items()):
            points = sorted(points, key=lambda p: p[0])
            ax.plot(
                [x for x, _ in points],
                [_value(run.classes.get(cls), key) for _, run in points],
                marker="o",
                label=policy,
                color=_color(policy, i),
            )
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{key} ({cls})")
        ax.set_title(f"{title}: {cls}, {key}", fontsize=9)
        ax.grid(alpha=0.3)
    flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def fig_timeline(panels: Sequence[tuple[str, Any, Sequence[Any]]], path: Path, title: str) -> Path:
    """Fig. 6: per (policy, task) one lane with generation, suspension and execution bars and ERT.

    ``panels`` = [(policy label, run, [TaskRecord, ...]), ...]; time is relative to the earliest
    arrival among the shown tasks.
    """
    lanes = [(label, run, rec) for label, run, recs in panels for rec in recs]
    t0 = min(rec.arrival for _, _, rec in lanes)
    fig, ax = plt.subplots(figsize=(11, 0.7 * len(lanes) + 1.6))
    colors = {"queued": "#f5deb3", "generation": "#d62728", "suspension": "#bbbbbb", "execution": "#1f77b4"}
    labels_done: set[str] = set()
    for y, (_label, run, rec) in enumerate(lanes):
        spans = task_intervals(run.events, rec.task_id)
        for kind, intervals in spans.items():
            # Planner side (queued / generation / suspension) on the upper half of the lane, the
            # robot's execution on the lower half: they overlap in time by design.
            offset = 0.17 if kind == "execution" else -0.17
            for a, b in intervals:
                ax.barh(
                    y + offset,
                    b - a,
                    left=a - t0,
                    height=0.3,
                    color=colors[kind],
                    label=kind if kind not in labels_done else None,
                )
                labels_done.add(kind)
        ert = rec.arrival + rec.tuf.ert - t0
        ax.plot(
            [ert, ert],
            [y - 0.35, y + 0.35],
            color="black",
            linewidth=2,
            label="ERT" if "ERT" not in labels_done else None,
        )
        labels_done.add("ERT")
        ax.plot([rec.arrival - t0], [y], marker="v", color="black")
    ax.set_yticks(range(len(lanes)))
    ax.set_yticklabels(
        [f"{label}: task {rec.task_id} ({rec.task_class}, trace {rec.trace_id})" for label, _, rec in lanes],
        fontsize=8,
    )
    ax.invert_yaxis()
    ax.set_xlabel("time since the first arrival (s)")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
