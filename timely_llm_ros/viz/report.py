"""``timely-llm report BAG [-o DIR]``: the metrics of a recorded run, as the bench prints them.

The task records are rebuilt from the bag (lrtrace/from_bag.py) and summarised with
:func:`timely_llm_ros.core.metrics.summarize`, the function the bench uses; the per-class tables
are printed by the bench's own :func:`~timely_llm_ros.bench.tables.class_tables` (plus an on-time
column), so a simulated run's bag reports the numbers ``timely-llm bench`` printed for that run
(test/viz/test_report.py). With ``-o DIR`` it also writes ``report.txt``, ``metrics.json``, the
paper-style bar charts (per task class: Figure 8 layout; per task type: Figure 5 layout) and the
timeline (PNG of the first tasks, HTML of all).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from timely_llm_ros.bench.runner import clean, trace_key
from timely_llm_ros.bench.tables import COLUMNS, TIME_NOTE, Column, class_order, class_tables, format_value
from timely_llm_ros.core.metrics import summarize

ON_TIME = Column("on_time_pct", "on-time %", 1)
TYPE_COLUMNS: tuple[Column, ...] = (
    Column("n", "n", 0),
    Column("utility_mean", "U mean", 3),
    Column("pct_beta", "%Σβ", 1),
    Column("response_mean", "resp mean", 3),
    Column("response_p99", "resp p99", 3),
    Column("waiting_mean", "wait mean", 3),
    ON_TIME,
)


def build(run_: Any) -> Any:
    """A bench :class:`~timely_llm_ros.bench.runner.RunResult` for a recorded run (same metric dicts)."""
    from timely_llm_ros.bench.runner import RunResult

    records = run_.records()
    classes = {k: clean(m.as_dict()) for k, m in summarize(records).items()} if records else {}
    traces = (
        {k: clean(m.as_dict()) for k, m in summarize(records, by=trace_key, total=None).items()}
        if records
        else {}
    )
    label = run_.label
    base, _, batch = label.partition("@b")
    return RunResult(
        workload=Path(run_.path).name,
        policy=label,
        base_policy=base,
        max_batch=int(batch) if batch.isdigit() else 0,
        classes=classes,
        traces=traces,
        stats={"tasks": len(records), "notes": list(run_.notes)},
        records=records,
        events=run_.events,
    )


def type_table(title: str, traces: dict[str, dict[str, Any]]) -> str:
    """Per task type (LRTrace trace id) table."""
    header = ["task type", *(c.header for c in TYPE_COLUMNS)]
    keys = sorted(traces, key=lambda k: (not k.isdigit(), int(k) if k.isdigit() else 0, k))
    body = [[k, *(format_value(traces[k].get(c.key), c) for c in TYPE_COLUMNS)] for k in keys]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  ".join([cells[0].ljust(widths[0]), *(c.rjust(w) for c, w in zip(cells[1:], widths[1:]))])

    return "\n".join([title, line(header), "  ".join("-" * w for w in widths), *(line(r) for r in body)])


def report_text(run_: Any, result: Any) -> str:
    name = Path(run_.path).name
    lines = [
        f"# {TIME_NOTE}",
        f"# bag {run_.path}: {len(result.records)} tasks scored, policy {result.policy}",
    ]
    lines += [f"# note: {n}" for n in run_.notes]
    if not result.classes:
        lines.append("# no task could be scored (no trace events or no TUFs in the bag)")
        return "\n".join(lines)
    lines += class_tables(name, [result], classes=_classes(result))
    lines.append(end_states(result.records))
    wait = robot_wait_line(run_)
    if wait:
        lines.append(wait)
    lines.append("")
    lines.append(type_table(f"== {name} | per task type (trace id; '-' = unknown)", result.traces))
    return "\n".join(lines)


def robot_wait_line(run_: Any) -> str:
    """The per-robot queueing of a run, named as such: how many tasks waited for their own robot (still
    busy with an earlier task of that robot) and for how long — '' when none did."""
    from timely_llm_ros.lrtrace.timeline_model import robot_waits

    waits = robot_waits(run_.model)
    if not waits:
        return ""
    values = list(waits.values())
    return (
        f"# waited for their robot (busy with an earlier task of the same robot): {len(values)} of "
        f"{len(run_.model.lanes)} tasks, mean {sum(values) / len(values):.1f} s, max {max(values):.1f} s "
        "(part of their response time: one task at a time per robot; fewer tasks per robot or more "
        "robots shorten it, a faster engine does not)"
    )


def end_states(records: list[Any], examples: int = 3) -> str:
    """How the tasks ended (every state seen), with the first reasons of the EXPIRED ones: a planner
    option (overrun kill / skip-next) gave up on them, and the reason says when and why."""
    counts: dict[str, int] = {}
    for r in records:
        counts[r.state] = counts.get(r.state, 0) + 1
    line = "# ended: " + ", ".join(f"{s} {n}" for s, n in sorted(counts.items()))
    why = [f"{r.task_id}: {r.reason}" for r in records if r.state == "EXPIRED" and r.reason][:examples]
    return "\n".join([line, *(f"#   expired {w}" for w in why)])


def _classes(result: Any) -> list[str]:
    classes = class_order(list(result.classes))
    if len([c for c in classes if c != "all"]) == 1:
        classes = [c for c in classes if c != "all"]
    return classes


def class_tables_with_on_time(name: str, result: Any) -> list[str]:
    """The bench's class tables with an extra on-time column (used in report.txt)."""
    from timely_llm_ros.bench.tables import render_table

    return [
        render_table(
            f"== {name} | task type: {cls}", [(result.policy, result.classes[cls])], (*COLUMNS, ON_TIME)
        )
        for cls in _classes(result)
    ]


def write_outputs(run_: Any, result: Any, out: Path) -> list[Path]:
    """report.txt, metrics.json and the figures into ``out``; returns the written paths."""
    from timely_llm_ros.bench import figures
    from timely_llm_ros.lrtrace.timeline_model import robot_waits
    from timely_llm_ros.viz.layout import make_layout
    from timely_llm_ros.viz.timeline import save

    out.mkdir(parents=True, exist_ok=True)
    name = Path(run_.path).name
    paths = []
    text = report_text(run_, result)
    if result.classes:
        text += "\n\n# with on-time share (W(s_0) <= ERT):\n" + "\n".join(
            class_tables_with_on_time(name, result)
        )
    (out / "report.txt").write_text(text + "\n", encoding="utf-8")
    paths.append(out / "report.txt")
    metrics = {
        "bag": str(run_.path),
        "policy": result.policy,
        "notes": run_.notes,
        "classes": result.classes,
        "task_types": result.traces,
        "robot_wait_s": robot_waits(run_.model),
    }
    (out / "metrics.json").write_text(json.dumps(clean(metrics), indent=1) + "\n", encoding="utf-8")
    paths.append(out / "metrics.json")
    if result.classes:
        paths.append(figures.fig_policies(name, [result], out / "per_class.png", classes=_classes(result)))
        paths.append(
            figures.fig_per_task_type(
                [(name, [result])], out / "per_task_type.png", f"{name}: per task type ({result.policy})"
            )
        )
    if run_.model.lanes:
        title = f"{name} — policy {result.policy}"
        paths.append(save(make_layout(run_.model, max_tasks=60), out / "timeline.png", title, run_.notes))
        paths.append(save(make_layout(run_.model, max_tasks=0), out / "timeline.html", title, run_.notes))
    return paths


def print_summary(bag: Path, out: Path | None, results: list | None = None, tag: str = "demo") -> int:
    """Print a run's per-task-type tables (and how long tasks waited for their own robot) from its
    bag; with ``out`` also write report.txt, metrics.json and the timeline images to ``out/report``.
    ``timely-llm demo`` and ``timely-llm fleet`` (after a workload) end with it; 1 = nothing scored."""
    from timely_llm_ros.lrtrace.from_bag import load_run

    run_ = load_run(bag)
    result = build(run_)
    if not result.classes:
        print(f"[{tag}] the bag {bag} holds no scored task: {'; '.join(run_.notes) or 'no trace events'}")
        return 1
    if results is not None:
        results.append(result)
    print("\n".join(class_tables_with_on_time(tag, result)))
    wait = robot_wait_line(run_)
    if wait:
        print(wait.replace("# ", f"[{tag}] ", 1))
    paths = write_outputs(run_, result, out / "report") if out is not None else []
    print(f"\n[{tag}] bag:      {bag}   (inspect: timely-llm report {bag}; replay: timely-llm replay ...)")
    for p in paths:
        if p.name in ("timeline.png", "timeline.html", "report.txt"):
            print(f"[{tag}] {p.stem + ':':9s} {p}")
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "bag", type=Path, help="rosbag2 directory (or .mcap file) of a recorded or simulated run"
    )
    parser.add_argument(
        "-o",
        "--out",
        type=Path,
        help="directory for report.txt, metrics.json and figures (default: print only)",
    )


def run(args: argparse.Namespace) -> int:
    from timely_llm_ros.lrtrace.from_bag import load_run

    try:
        run_ = load_run(args.bag)
    except (FileNotFoundError, ValueError) as exc:
        print(f"timely-llm report: error: {exc}", file=sys.stderr)
        return 2
    result = build(run_)
    print(report_text(run_, result))
    if args.out is not None:
        for p in write_outputs(run_, result, args.out):
            print(f"# wrote {p}", file=sys.stderr)
    return 0 if result.classes else 1
