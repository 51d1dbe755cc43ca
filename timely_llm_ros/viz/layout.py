"""What a timeline shows, independent of how it is drawn (matplotlib, HTML/SVG, Qt).

:func:`make_layout` picks and orders the lanes (filters, zoom window, grouping by agent or class,
a cap on the number of lanes so 700 tasks never become an unreadable smear) and
:func:`lane_items` turns one lane into bars and markers with hover text. Times stay absolute
(planner clock); views subtract :attr:`Layout.t0`, the earliest arrival of the whole run, so the
same task sits at the same x in every zoom window.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from timely_llm_ros.core import events as ev
from timely_llm_ros.lrtrace.timeline_model import DISPATCHED, EXECUTING, SPAN_KINDS, TaskLane, TimelineModel
from timely_llm_ros.viz.style import SPAN_LABELS, fmt_s

GROUPS = ("agent", "class", "none")
_PAINT_ORDER = {k: i for i, k in enumerate(SPAN_KINDS)}


@dataclass
class Bar:
    kind: str
    start: float
    end: float
    seg: int
    robot_side: bool
    tip: str


@dataclass
class Marker:
    kind: str  # arrival | ert | ert_missed | terminal
    t: float
    tip: str


@dataclass
class Row:
    y: int
    lane: TaskLane
    group: str
    bars: list[Bar] = field(default_factory=list)
    markers: list[Marker] = field(default_factory=list)

    @property
    def label(self) -> str:
        return self.lane.task_id


@dataclass
class Layout:
    rows: list[Row]
    groups: list[tuple[str, int, int]]  # (label, first row y, last row y)
    t0: float
    x_range: tuple[float, float]  # absolute times shown
    now: float
    omitted: int = 0  # lanes that matched but were cut by max_tasks
    total: int = 0  # lanes in the model
    group_by: str = "agent"

    def note(self) -> str:
        if not self.omitted:
            return ""
        return (
            f"showing {len(self.rows)} of {len(self.rows) + self.omitted} matching tasks "
            f"(use --window, --tasks, --agents or --max-tasks 0)"
        )


def parse_window(text: str | None) -> tuple[float, float] | None:
    """``"T0:T1"`` (seconds since the first arrival; either side may be empty) -> (t0, t1)."""
    if not text:
        return None
    lo, sep, hi = text.partition(":")
    if not sep:
        raise ValueError(
            f"window {text!r} must look like T0:T1 (seconds since the first arrival), e.g. 10:40"
        )
    try:
        a = float(lo) if lo.strip() else -math.inf
        b = float(hi) if hi.strip() else math.inf
    except ValueError:
        raise ValueError(f"window {text!r}: T0 and T1 must be numbers of seconds") from None
    if not a < b:
        raise ValueError(f"window {text!r}: T0 must be smaller than T1")
    return a, b


def origin(model: TimelineModel) -> float:
    arrivals = [lane.arrival for lane in model.lanes.values() if not math.isnan(lane.arrival)]
    if arrivals:
        return min(arrivals)
    return model.t_min if math.isfinite(model.t_min) else 0.0


def make_layout(
    model: TimelineModel,
    *,
    tasks: list[str] | None = None,
    agents: list[str] | None = None,
    window: tuple[float, float] | None = None,
    group: str = "agent",
    max_tasks: int = 80,
    now: float | None = None,
    t0: float | None = None,
) -> Layout:
    """Lanes to draw (see module docstring). ``window`` is relative to ``t0`` (default: first arrival)."""
    if group not in GROUPS:
        raise ValueError(f"unknown grouping {group!r}; choose one of {', '.join(GROUPS)}")
    base = origin(model) if t0 is None else t0
    t_now = model.t_max if now is None else now
    if not math.isfinite(t_now):
        t_now = base
    abs_window = None if window is None else (base + window[0], base + window[1])
    lanes = model.select(tasks, agents, abs_window)
    omitted = 0
    if max_tasks and len(lanes) > max_tasks:
        omitted = len(lanes) - max_tasks
        lanes = lanes[:max_tasks]
    if group == "agent":
        key = {lane.task_id: lane.agent_id or "?" for lane in lanes}
    elif group == "class":
        key = {lane.task_id: lane.klass or "?" for lane in lanes}
    else:
        key = {lane.task_id: "" for lane in lanes}
    first_seen: dict[str, int] = {}
    for i, lane in enumerate(lanes):
        first_seen.setdefault(key[lane.task_id], i)
    lanes.sort(key=lambda lane: first_seen[key[lane.task_id]])  # stable: arrival order inside a group
    rows = [Row(y, lane, key[lane.task_id]) for y, lane in enumerate(lanes)]
    groups: list[tuple[str, int, int]] = []
    for row in rows:
        if groups and groups[-1][0] == row.group:
            groups[-1] = (row.group, groups[-1][1], row.y)
        else:
            groups.append((row.group, row.y, row.y))
    for row in rows:
        row.bars, row.markers = lane_items(row.lane, t_now, base)
    if abs_window is not None and math.isfinite(abs_window[0]) and math.isfinite(abs_window[1]):
        x_range = abs_window
    else:
        starts = [b.start for r in rows for b in r.bars] + [m.t for r in rows for m in r.markers]
        ends = [b.end for r in rows for b in r.bars] + [m.t for r in rows for m in r.markers]
        lo = min(starts) if starts else base
        hi = max(ends) if ends else base + 1.0
        if abs_window is not None:
            lo = max(lo, abs_window[0]) if math.isfinite(abs_window[0]) else lo
            hi = min(hi, abs_window[1]) if math.isfinite(abs_window[1]) else hi
        pad = max((hi - lo) * 0.01, 0.05)
        x_range = (lo - pad, hi + pad)
    return Layout(rows, groups, base, x_range, t_now, omitted, len(model.lanes), group)


def lane_items(lane: TaskLane, now: float, t0: float) -> tuple[list[Bar], list[Marker]]:
    """Bars (one per span; open spans run to ``now``) and markers of one lane, with hover text."""
    head = f"task {lane.task_id} (agent {lane.agent_id or '?'}, {lane.klass or 'class ?'})"
    bars = []
    for s in lane.spans:
        end = s.end_or(max(now, s.start))
        what = SPAN_LABELS[s.kind]
        seg = f" segment {s.seg}" if s.seg >= 0 else ""
        extra = f"; min exec estimate {fmt_s(s.value)} s" if s.kind == DISPATCHED and s.value else ""
        open_note = " (still open)" if math.isnan(s.end) else ""
        tip = (
            f"{head}: {what}{seg}, {fmt_s(s.start - t0)}–{fmt_s(end - t0)} s "
            f"({fmt_s(end - s.start)} s){open_note}{extra}"
        )
        bars.append(Bar(s.kind, s.start, end, s.seg, s.kind in (DISPATCHED, EXECUTING), tip))
    # Paint order: a segment waits at the robot ("dispatched") while the previous one executes; the
    # execution must be drawn over that wait, not hidden under it.
    bars.sort(key=lambda b: _PAINT_ORDER[b.kind])
    markers = []
    if not math.isnan(lane.arrival):
        markers.append(Marker("arrival", lane.arrival, f"{head}: arrived at {fmt_s(lane.arrival - t0)} s"))
    dl = lane.deadline
    if not math.isnan(dl):
        missed = lane.missed_ert(now)
        resp = lane.response_time
        assert lane.tuf is not None  # a deadline comes from the TUF
        resp_txt = (
            f"response W(s_0) = {fmt_s(resp)} s, utility {lane.utility:.3f} of {lane.tuf.beta:g}"
            if not math.isnan(resp)
            else "no action started yet"
            if not lane.done
            else "never acted"
        )
        verdict = "MISSED the ERT" if missed else ("met the ERT" if not math.isnan(resp) else "ERT")
        markers.append(
            Marker(
                "ert_missed" if missed else "ert",
                dl,
                f"{head}: ERT {fmt_s(lane.tuf.ert)} s at {fmt_s(dl - t0)} s; {verdict}; {resp_txt}",
            )
        )
    if lane.done and lane.state != ev.COMPLETED:
        reason = f": {lane.reason}" if lane.reason else ""
        markers.append(
            Marker(
                "terminal", lane.terminal, f"{head}: {lane.state} at {fmt_s(lane.terminal - t0)} s{reason}"
            )
        )
    return bars, markers


def lane_summary(lane: TaskLane) -> str:
    """One-line state of a task (table cells, HTML lane labels)."""
    resp = lane.response_time
    parts = [lane.activity]
    if not math.isnan(resp):
        parts.append(f"W(s0)={fmt_s(resp)} s")
        if not math.isnan(lane.utility):
            parts.append(f"U={lane.utility:.3f}")
    return ", ".join(parts)
