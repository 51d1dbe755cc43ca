"""``timely-llm timeline BAG``: Gantt chart of a recorded run, one lane per task (paper Figure 6).

Each lane has the planner's side on top — queued, generating (one bar per segment), suspended —
and the robot's side below — dispatched, executing — with the arrival (triangle) and the ERT
deadline (vertical tick; red with a cross when the first action started late or never). Urgent
tasks have a tinted lane and red labels. Lanes are grouped by agent (or class), cut to a zoom
window and capped in number so that runs with hundreds of tasks stay readable. Output by suffix:
``.png`` / ``.svg`` (matplotlib) or ``.html`` (one self-contained file with hover details).

Artists carry gids (``bar|<task>|<kind>|<seg>``, ``marker|<task>|<kind>``, ``urgent|<task>``) that
also appear as element ids in SVG output, so tests and scripts can check what was drawn.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.artist import Artist
from matplotlib.lines import Line2D
from matplotlib.patches import Patch
from matplotlib.transforms import blended_transform_factory

from timely_llm_ros.lrtrace.timeline_model import SPAN_KINDS
from timely_llm_ros.viz import style
from timely_llm_ros.viz.layout import GROUPS, Layout, make_layout, parse_window

LANE_H = 0.34  # height of one half-lane bar (lane pitch is 1)


def draw(layout: Layout, title: str, notes: list[str] | None = None):
    """Draw ``layout`` into a new figure and return it (the caller saves and closes it)."""
    n = len(layout.rows)
    small = n > 40
    fig_h = max(3.2, 0.2 * n + 2.0) if small else max(3.2, 0.42 * n + 2.0)
    fig, ax = plt.subplots(figsize=(13, fig_h))
    t0 = layout.t0
    # urgent lane bands first (behind everything)
    for row in layout.rows:
        if row.lane.urgent:
            band = ax.axhspan(row.y - 0.5, row.y + 0.5, color=style.URGENT_BAND, zorder=0, linewidth=0)
            band.set_gid(f"urgent|{row.lane.task_id}")
    # bars, batched per kind (one barh call each keeps 80 lanes x 15 spans fast)
    for kind in SPAN_KINDS:
        items = [(row, b) for row in layout.rows for b in row.bars if b.kind == kind]
        if not items:
            continue
        ys = [row.y + (LANE_H / 2 + 0.01 if b.robot_side else -(LANE_H / 2 + 0.01)) for row, b in items]
        # a minimum visible width (0.15 % of the x range): a 1-ms action must not vanish
        min_w = (layout.x_range[1] - layout.x_range[0]) * 0.0015
        widths = [max(b.end - b.start, min_w) for _, b in items]
        lefts = [b.start - t0 for _, b in items]
        bars = ax.barh(
            ys, widths, left=lefts, height=LANE_H, color=style.SPAN_COLORS[kind], linewidth=0, zorder=2
        )
        for rect, (row, b) in zip(bars.patches, items):
            rect.set_gid(f"bar|{row.lane.task_id}|{b.kind}|{b.seg}")
    for row in layout.rows:
        tid = row.lane.task_id
        for m in row.markers:
            x = m.t - t0
            if m.kind == "arrival":
                (art,) = ax.plot(
                    [x],
                    [row.y - 0.18],
                    marker=">",
                    markersize=4 if small else 6,
                    color=style.ARRIVAL_COLOR,
                    linestyle="none",
                    zorder=4,
                )
            elif m.kind in ("ert", "ert_missed"):
                missed = m.kind == "ert_missed"
                (art,) = ax.plot(
                    [x, x],
                    [row.y - 0.46, row.y + 0.46],
                    zorder=5,
                    color=style.MISSED_COLOR if missed else style.ERT_COLOR,
                    linewidth=2.0 if missed else 1.4,
                )
                if missed:
                    (cross,) = ax.plot(
                        [x],
                        [row.y],
                        marker="x",
                        markersize=5 if small else 7,
                        zorder=6,
                        color=style.MISSED_COLOR,
                        markeredgewidth=1.6,
                        linestyle="none",
                    )
                    cross.set_gid(f"marker|{tid}|missed_cross")
            else:  # terminal without completion (FAILED / EXPIRED / REJECTED / CANCELLED)
                (art,) = ax.plot(
                    [x],
                    [row.y],
                    marker="X",
                    markersize=6 if small else 8,
                    zorder=6,
                    color=style.FAILED_COLOR,
                    linestyle="none",
                )
            art.set_gid(f"marker|{tid}|{m.kind}")
    # groups: separators and labels on the right edge
    trans = blended_transform_factory(ax.transAxes, ax.transData)
    if len(layout.groups) > 1 or (layout.groups and layout.groups[0][0]):
        for label, first, last in layout.groups:
            if first > 0:
                ax.axhline(first - 0.5, color=style.GROUP_LINE, linewidth=0.6, linestyle="--", zorder=1)
            text = f"agent {label}" if layout.group_by == "agent" else label
            ax.text(
                1.004,
                (first + last) / 2,
                text,
                transform=trans,
                fontsize=6 if small else 8,
                va="center",
                ha="left",
                clip_on=False,
                gid=f"group|{label}",
            )
    ax.set_yticks([row.y for row in layout.rows])
    ax.set_yticklabels([row.label for row in layout.rows], fontsize=6 if small else 8)
    for tick, row in zip(ax.get_yticklabels(), layout.rows):
        if row.lane.urgent:
            tick.set_color(style.URGENT_TEXT)
            tick.set_fontweight("bold")
    ax.set_ylim(n - 0.5 if n else 0.5, -0.5)
    ax.set_xlim(layout.x_range[0] - t0, layout.x_range[1] - t0)
    ax.set_xlabel("time since the first arrival (s)")
    ax.set_ylabel(
        f"task (grouped by {layout.group_by}, arrival order)"
        if layout.group_by != "none"
        else "task (arrival order)",
        fontsize=8,
    )
    ax.grid(axis="x", alpha=0.25, zorder=0)
    handles: list[Artist] = [
        Patch(color=style.SPAN_COLORS[k], label=style.SPAN_LABELS[k]) for k in SPAN_KINDS
    ]
    handles += [
        Line2D([], [], marker=">", color=style.ARRIVAL_COLOR, linestyle="none", label="arrival"),
        Line2D([], [], color=style.ERT_COLOR, linewidth=1.4, label="ERT met / pending"),
        Line2D([], [], color=style.MISSED_COLOR, marker="x", linewidth=2.0, label="ERT missed"),
        Line2D(
            [],
            [],
            marker="X",
            color=style.FAILED_COLOR,
            linestyle="none",
            label="failed / expired / cancelled",
        ),
        Patch(color=style.URGENT_BAND, label="urgent task"),
    ]
    ax.legend(
        handles=handles, loc="lower left", bbox_to_anchor=(0.0, 1.005), ncol=5, fontsize=7, frameon=False
    )
    ax.set_title(title, fontsize=10, pad=34)
    footer = [layout.note()] if layout.note() else []
    footer += list(notes or [])
    if not layout.rows:
        ax.text(0.5, 0.5, "no tasks to show", transform=ax.transAxes, ha="center", va="center", fontsize=12)
    if footer:
        fig.text(
            0.01,
            0.005,
            "\n".join(_wrap(footer)),
            fontsize=7,
            va="bottom",
            ha="left",
            color="#7f0000",
            gid="notes",
        )
    fig.tight_layout(rect=(0, min(0.02 + 0.025 * len(footer), 0.3) if footer else 0, 0.96, 1))
    return fig


def _wrap(lines: list[str], width: int = 170) -> list[str]:
    out = []
    for line in lines:
        while len(line) > width:
            out.append(line[:width])
            line = "    " + line[width:]
        out.append(line)
    return out


def save(layout: Layout, path: Path, title: str, notes: list[str] | None = None) -> Path:
    """Write ``layout`` as PNG, SVG or HTML (by suffix)."""
    suffix = path.suffix.lower()
    if suffix == ".html":
        from timely_llm_ros.viz.html import render_html

        path.write_text(render_html(layout, title, notes), encoding="utf-8")
        return path
    if suffix not in (".png", ".svg"):
        raise ValueError(f"output {path} must end in .png, .svg or .html")
    fig = draw(layout, title, notes)
    try:
        fig.savefig(path, dpi=110)
    finally:
        plt.close(fig)
    return path


# ------------------------------------------------------------------------------ CLI
def _csv(text: str | None) -> list[str] | None:
    if not text:
        return None
    return [x.strip() for x in text.split(",") if x.strip()]


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "bag", type=Path, help="rosbag2 directory (or .mcap file) of a recorded or simulated run"
    )
    parser.add_argument("--tasks", help="comma-separated task ids to show (default: all)")
    parser.add_argument("--agents", help="comma-separated agent ids to show (default: all)")
    parser.add_argument("--window", help="zoom window T0:T1 in seconds since the first arrival (e.g. 30:60)")
    parser.add_argument("--group", choices=GROUPS, default="agent", help="lane grouping (default: agent)")
    parser.add_argument(
        "--max-tasks",
        type=int,
        default=80,
        help="at most this many lanes, the earliest first (0 = no limit; default 80)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        help="output file: .png, .svg or .html (default: <bag name>-timeline.png here)",
    )
    parser.add_argument("--title", help="figure title (default: bag name, policy and task counts)")


def run(args: argparse.Namespace) -> int:
    from timely_llm_ros.lrtrace.from_bag import load_run

    try:
        window = parse_window(args.window)
        if args.max_tasks < 0:
            raise ValueError("--max-tasks must be >= 0")
        out = args.output or Path(f"{Path(args.bag).name or 'bag'}-timeline.png")
        if out.suffix.lower() not in (".png", ".svg", ".html"):
            raise ValueError(f"output {out} must end in .png, .svg or .html")
        run_ = load_run(args.bag)
        layout = make_layout(
            run_.model,
            tasks=_csv(args.tasks),
            agents=_csv(args.agents),
            window=window,
            group=args.group,
            max_tasks=args.max_tasks,
        )
    except (ValueError, FileNotFoundError) as exc:
        print(f"timely-llm timeline: error: {exc}", file=sys.stderr)
        return 2
    for note in run_.notes:
        print(f"timely-llm timeline: note: {note}", file=sys.stderr)
    if layout.note():
        print(f"timely-llm timeline: note: {layout.note()}", file=sys.stderr)
    title = args.title or _default_title(run_, layout)
    save(layout, out, title, run_.notes)
    print(out)
    if not layout.rows:
        print("timely-llm timeline: nothing to draw (no task matched)", file=sys.stderr)
        return 1
    return 0


def _default_title(run_, layout: Layout) -> str:
    lanes = list(run_.model.lanes.values())
    missed = sum(lane.missed_ert(layout.now) for lane in lanes)
    urgent = sum(lane.urgent for lane in lanes)
    return (
        f"{Path(run_.path).name} — policy {run_.label}: {len(lanes)} tasks ({urgent} urgent), "
        f"{missed} missed their ERT"
    )
