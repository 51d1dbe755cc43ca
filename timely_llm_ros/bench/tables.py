"""Plain-text result tables of the bench CLI (one per task type per workload).

The numbers come from the same metric dicts that go into ``results.json``, formatted with fixed
decimals (:data:`COLUMNS`), so a reader can match every printed value to the JSON one.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Column:
    key: str  # key in a run's per-class metric dict
    header: str
    decimals: int
    scale: float = 1.0  # printed value = JSON value * scale (ms for latencies would be 1000)


# Mean utility unclamped (Eq. 1) and clamped at 0, % of the class's Σβ (the maximum), tasks with
# utility <= 0, response time W(s_0) mean/p50/p99/max, robot waiting time Σ W(s_k), completion.
COLUMNS: tuple[Column, ...] = (
    Column("n", "n", 0),
    Column("utility_mean", "U mean", 3),
    Column("utility_mean_clamped", "U>=0 mean", 3),
    Column("pct_beta", "%Σβ", 1),
    Column("pct_beta_clamped", "%Σβ>=0", 1),
    Column("n_nonpositive", "n U<=0", 0),
    Column("response_mean", "resp mean", 3),
    Column("response_p50", "resp p50", 3),
    Column("response_p99", "resp p99", 3),
    Column("response_max", "resp max", 3),
    Column("waiting_mean", "wait mean", 3),
    Column("completion_mean", "compl mean", 3),
)
TIME_NOTE = "times in seconds; U = TUF_0(response) (Eq. 1); %Σβ = ΣU / Σβ of the class"


def format_value(value: Any, column: Column) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if column.decimals == 0:
        return str(int(round(value)))
    return f"{value * column.scale:.{column.decimals}f}"


def render_table(
    title: str, rows: Sequence[tuple[str, dict[str, Any]]], columns: Sequence[Column] = COLUMNS
) -> str:
    """``rows`` = [(policy label, metric dict), ...] -> aligned text table with a title line."""
    header = ["policy", *(c.header for c in columns)]
    body = [[label, *(format_value(metrics.get(c.key), c) for c in columns)] for label, metrics in rows]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        first = cells[0].ljust(widths[0])
        rest = [cell.rjust(w) for cell, w in zip(cells[1:], widths[1:])]
        return "  ".join([first, *rest])

    out = [title, line(header), "  ".join("-" * w for w in widths)]
    out.extend(line(r) for r in body)
    return "\n".join(out)


def class_tables(workload: str, runs: Iterable[Any], classes: Sequence[str] | None = None) -> list[str]:
    """One table per task class for the runs of one workload (``run.policy``, ``run.classes``)."""
    runs = list(runs)
    if classes is None:
        seen: list[str] = []
        for run in runs:
            for cls in run.classes:
                if cls not in seen:
                    seen.append(cls)
        classes = class_order(seen)
        if len([c for c in classes if c != "all"]) == 1:
            classes = [c for c in classes if c != "all"]  # "all" would repeat the only class
    tables = []
    for cls in classes:
        rows = [(run.policy, run.classes[cls]) for run in runs if cls in run.classes]
        if rows:
            tables.append(render_table(f"== {workload} | task type: {cls}", rows))
    return tables


def class_order(classes: list[str]) -> list[str]:
    preferred = ["urgent", "normal", "arm", "all"]
    return [c for c in preferred if c in classes] + sorted(c for c in classes if c not in preferred)


def overhead_tables(report: dict[str, Any]) -> list[str]:
    """Tables 4 and 5 style text for the overhead report (see runner.overhead_report)."""
    out = []
    seg = report.get("segmentation") or []
    if seg:
        cols = [
            "task",
            "skill set",
            "tokens",
            "segments",
            "unseg s",
            "seg s",
            "overhead s",
            "overhead %",
            "unseg steps",
            "seg steps",
            "unseg host ms",
            "seg host ms",
        ]
        rows = [
            [
                str(r["task"]),
                r["skill_set"],
                str(r["tokens"]),
                str(r["segments"]),
                f"{r['unsegmented_s']:.4f}",
                f"{r['segmented_s']:.4f}",
                f"{r['overhead_s']:.4f}",
                f"{r['overhead_pct']:.1f}",
                str(r["unsegmented_steps"]),
                str(r["segmented_steps"]),
                f"{r['unsegmented_host_ms']:.2f}",
                f"{r['segmented_host_ms']:.2f}",
            ]
            for r in seg
        ]
        out.append(
            _grid(
                "== Segmentation overhead on the simulated engine (paper Table 4; model-level only)",
                cols,
                rows,
            )
            + "\n"
            + SEG_NOTE
        )
    sched = report.get("scheduling") or []
    if sched:
        keys = [k for k in sched[0] if k != "queue"]
        cols = ["queue", *keys]
        rows = [[str(r["queue"]), *(_fmt_cell(r[k]) for k in keys)] for r in sched]
        out.append(
            _grid(
                "== Scheduling overhead vs queue size (paper Table 5; CPU time of one decision, "
                "Scheduler.select)",
                cols,
                rows,
            )
        )
    return out


SEG_NOTE = (
    "# seconds/steps: the engine timing model (virtual time); a suspended context that stays in device\n"
    "# memory resumes in the next decode pass at no extra cost, so the model-level overhead is 0 unless\n"
    "# contexts are evicted (swap or re-prefill, visible in workload runs). host ms = CPU time of the whole\n"
    "# simulation (planner, stop checks, simulator; median of 3). Real-engine overhead needs a real engine."
)


def _fmt_cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4f}"
    return str(value)


def _grid(title: str, header: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = [title, "  ".join(h.rjust(w) for h, w in zip(header, widths)), "  ".join("-" * w for w in widths)]
    lines.extend("  ".join(c.rjust(w) for c, w in zip(r, widths)) for r in rows)
    return "\n".join(lines)
