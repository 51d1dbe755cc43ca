"""Colours and words shared by every view of a timeline (matplotlib, HTML, Qt), so they read alike.

Planner-side spans use warm colours (queued, generating) and grey (suspended); robot-side spans
blues (dispatched, executing) — the paper's Figure 6 colours generation red and execution blue.
"""

from __future__ import annotations

from timely_llm_ros.lrtrace.timeline_model import (
    DISPATCHED,
    EXECUTING,
    GENERATING,
    QUEUED,
    ROBOT_WAIT,
    SUSPENDED,
)

SPAN_COLORS = {
    QUEUED: "#f5deb3",
    ROBOT_WAIT: "#fdae6b",
    GENERATING: "#d62728",
    SUSPENDED: "#b0b0b0",
    DISPATCHED: "#9ecae1",
    EXECUTING: "#1f77b4",
}
SPAN_LABELS = {
    QUEUED: "queued (waiting for the engine)",
    ROBOT_WAIT: "waiting for its robot (busy with an earlier task)",
    GENERATING: "generating a segment",
    SUSPENDED: "suspended (tokens + KV kept)",
    DISPATCHED: "dispatched, robot not started",
    EXECUTING: "executing on the robot",
}
URGENT_BAND = "#fdecea"  # lane background of urgent tasks
URGENT_TEXT = "#b2182b"
ERT_COLOR = "#000000"
MISSED_COLOR = "#e31a1c"
ARRIVAL_COLOR = "#444444"
FAILED_COLOR = "#6a3d9a"
GROUP_LINE = "#999999"


def fmt_s(value: float) -> str:
    """Seconds for labels: 3 decimals, '-' for nan."""
    return "-" if value != value else f"{value:.3f}"


# What the Qt window's legend says (the HTML and PNG timelines draw their own legends from the same
# colours): the bars, the ticks on them and the urgent band.
LEGEND_MARKS = (
    (ARRIVAL_COLOR, "\u25b6", "task arrival"),
    (ERT_COLOR, "|", "black tick: ERT deadline of the first action"),
    (MISSED_COLOR, "\u2715", "red tick + cross: ERT missed"),
    (FAILED_COLOR, "\u2715", "purple cross: failed / expired / cancelled"),
)


def legend_html() -> str:
    """One line of rich text for the live window: a coloured square per span kind (top half of a
    lane = planner, bottom half = robot), then the markers and the urgent band."""
    parts = [f'<span style="color:{SPAN_COLORS[k]}">\u25a0</span>&nbsp;{SPAN_LABELS[k]}' for k in SPAN_COLORS]
    parts += [f'<span style="color:{c}"><b>{sym}</b></span>&nbsp;{text}' for c, sym, text in LEGEND_MARKS]
    parts.append(f'<span style="background:{URGENT_BAND};color:{URGENT_TEXT}">&nbsp;urgent task&nbsp;</span>')
    return (
        "<small>upper half of a lane: planner &nbsp;·&nbsp; lower half: robot &nbsp;&nbsp; "
        + " &nbsp; ".join(parts)
        + "</small>"
    )
