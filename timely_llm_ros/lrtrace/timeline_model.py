"""Per-task timeline lanes built incrementally from trace events (paper Figure 6 as data).

One :class:`TaskLane` per task holds its spans — ``queued`` (waiting for the engine), ``robot``
(waiting for its own robot, still busy with an earlier task of that robot: the per-robot queue,
named by the planner's ``robot busy:`` ADMIT / SUSPEND details, core/events.py),
``generating`` (one span per segment's generation; a resumed generation starts a new span),
``suspended`` (generation paused by the scheduler, tokens and KV kept), ``dispatched`` (segment
sent, robot not started yet) and ``executing`` (the robot runs the segment) — plus the markers a
reader looks for: arrival, the ERT deadline (arrival + ERT of TUF_0), the first action start (the
response time W(s_0)) and the terminal state. The first three span kinds are the planner's side,
the last two the robot's; they overlap in time by design (segmented generation overlaps execution).

:meth:`TimelineModel.apply` costs O(1) per event, so the same model backs the offline figures and
the live rqt widget (200 events/s). Events must come in time order per task (a recorder delivers
them so; :func:`timely_llm_ros.lrtrace.convert.events_of` sorts a bag's).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.tuf import TUF, on_time, tuf_class

QUEUED = "queued"
ROBOT_WAIT = "robot"
GENERATING = "generating"
SUSPENDED = "suspended"
DISPATCHED = "dispatched"
EXECUTING = "executing"
SPAN_KINDS = (QUEUED, ROBOT_WAIT, GENERATING, SUSPENDED, DISPATCHED, EXECUTING)
PLANNER_KINDS = frozenset((QUEUED, ROBOT_WAIT, GENERATING, SUSPENDED))
ROBOT_KINDS = frozenset((DISPATCHED, EXECUTING))
NAN = math.nan
_TERMINAL_EVENT_STATE = ev.TERMINAL_EVENT_STATE


@dataclass(slots=True)
class Span:
    kind: str
    start: float
    end: float = NAN  # nan while open
    seg: int = -1
    value: float = 0.0  # DISPATCHED: the segment's minimum execution-time estimate

    def end_or(self, now: float) -> float:
        return now if math.isnan(self.end) else self.end


@dataclass
class TaskLane:
    """Everything the timeline shows for one task."""

    task_id: str
    agent_id: str = ""
    task_class: str = ""
    trace_id: int | None = None
    tuf: TUF | None = None
    arrival: float = NAN
    state: str = ev.ACCEPTED
    reason: str = ""
    first_exec: float = NAN  # first action start: arrival + W(s_0)
    terminal: float = NAN
    last_t: float = NAN  # time of the latest event
    segments: int = 0  # dispatched segments
    spans: list[Span] = field(default_factory=list)
    _open: dict[tuple[str, int], Span] = field(default_factory=dict, repr=False)

    # -- derived ---------------------------------------------------------------------------------
    @property
    def klass(self) -> str:
        if self.task_class:
            return self.task_class
        if self.tuf is not None:
            return tuf_class(self.tuf)  # the core.task.task_class rule
        return ""

    @property
    def urgent(self) -> bool:
        return self.klass == "urgent"

    @property
    def deadline(self) -> float:
        """Absolute ERT deadline of the first action (nan without arrival or TUF)."""
        return self.arrival + self.tuf.ert if self.tuf is not None else NAN

    @property
    def response_time(self) -> float:
        return self.first_exec - self.arrival

    @property
    def utility(self) -> float:
        """TUF_0(W(s_0)) once the first action started (nan before, or without a TUF)."""
        r = self.response_time
        return self.tuf(r) if self.tuf is not None and not math.isnan(r) else NAN

    @property
    def done(self) -> bool:
        return self.state in ev.TERMINAL_STATES

    @property
    def activity(self) -> str:
        """What the task is doing now, for tables: the terminal state, else the open spans (more
        precise than the state: a task can be SUSPENDED, EXECUTING s1 and DISPATCHED s2 at once)."""
        if self.done:
            return self.state
        kinds = {kind: seg for kind, seg in self._open}
        doing = []
        for kind, label in (
            (GENERATING, "GENERATING"),
            (SUSPENDED, "SUSPENDED"),
            (QUEUED, "QUEUED"),
            (ROBOT_WAIT, "WAITING FOR ROBOT"),
        ):
            if kind in kinds:
                doing.append(label)
        execs = sorted(seg for kind, seg in self._open if kind == EXECUTING)
        if execs:
            doing.append(f"EXECUTING s{execs[0]}")
        elif any(kind == DISPATCHED for kind, _ in self._open):
            doing.append("DISPATCHED")
        return " + ".join(doing) if doing else self.state

    def missed_ert(self, now: float = NAN) -> bool:
        """The first action started after the ERT, or has not started and ``now`` is past the ERT
        (a task that ended without any action counts as missed once its ERT has passed)."""
        dl = self.deadline
        if math.isnan(dl) or self.tuf is None:
            return False
        if not math.isnan(self.first_exec):
            return not on_time(self.response_time, self.tuf.ert)
        if self.done:
            return self.state != ev.REJECTED  # it will never act: the ERT is missed for good
        return not math.isnan(now) and not on_time(now - self.arrival, self.tuf.ert)

    def end_time(self, now: float) -> float:
        return self.terminal if not math.isnan(self.terminal) else now

    # -- spans -----------------------------------------------------------------------------------
    def _open_span(self, kind: str, t: float, seg: int = -1, value: float = 0.0) -> None:
        key = (kind, seg if kind in ROBOT_KINDS else -1)
        if key in self._open:
            return
        span = Span(kind, t, NAN, seg, value)
        self._open[key] = span
        self.spans.append(span)

    def _close(self, kind: str, t: float, seg: int = -1) -> Span | None:
        span = self._open.pop((kind, seg if kind in ROBOT_KINDS else -1), None)
        if span is None:
            return None
        span.end = max(t, span.start)
        if span.end == span.start and kind in PLANNER_KINDS:
            self.spans.remove(span)  # zero-length planner spans (cut + suspend at one instant) say nothing
        return span

    def _close_all(self, t: float) -> None:
        for kind, seg in list(self._open):
            self._close(kind, t, seg)

    def open_spans(self) -> list[Span]:
        return list(self._open.values())


class TimelineModel:
    """Task lanes keyed by task id, in first-seen order; see the module docstring."""

    def __init__(self) -> None:
        self.lanes: dict[str, TaskLane] = {}
        self.t_min = math.inf
        self.t_max = -math.inf
        self.events_applied = 0
        self.unknown_events = 0  # events of a kind the model does not know (newer planner)
        self.changed: set[str] = set()  # task ids touched since the last take_changed()

    def lane(self, task_id: str) -> TaskLane:
        lane = self.lanes.get(task_id)
        if lane is None:
            lane = self.lanes[task_id] = TaskLane(task_id)
        return lane

    def set_task(
        self,
        task_id: str,
        agent_id: str = "",
        tuf: TUF | None = None,
        task_class: str = "",
        trace_id: int | None = None,
        arrival: float = NAN,
    ) -> TaskLane:
        """What the task message says (TUF, agent); fills only what events did not."""
        lane = self.lane(task_id)
        lane.agent_id = lane.agent_id or agent_id
        lane.tuf = lane.tuf or tuf
        lane.task_class = lane.task_class or task_class
        lane.trace_id = lane.trace_id if lane.trace_id is not None else trace_id
        if math.isnan(lane.arrival) and not math.isnan(arrival):
            lane.arrival = arrival
        self.changed.add(task_id)
        return lane

    def extend(self, events: Iterable[ev.TraceEvent]) -> None:
        for e in events:
            self.apply(e)

    def apply(self, e: ev.TraceEvent) -> TaskLane:
        """Update the task's lane with one event (O(1))."""
        lane = self.lane(e.task_id)
        t = e.t
        self.events_applied += 1
        self.changed.add(e.task_id)
        if t < self.t_min:
            self.t_min = t
        if t > self.t_max:
            self.t_max = t
        lane.last_t = t
        if e.agent_id and not lane.agent_id:
            lane.agent_id = e.agent_id
        k = e.kind
        if k == ev.ARRIVAL:
            lane.arrival = t
            if e.detail:
                klass, trace = parse_arrival_detail(e.detail)
                lane.task_class = lane.task_class or klass
                lane.trace_id = lane.trace_id if lane.trace_id is not None else trace
            lane._open_span(QUEUED, t)
        elif k == ev.ADMIT:
            lane.state = ev.QUEUED
            if e.detail.startswith(ev.ROBOT_SCHEDULED):  # its robot's queue let it go to the engine
                lane._close(ROBOT_WAIT, t)
                lane._open_span(QUEUED, t)
            elif (QUEUED, -1) not in lane._open and not lane.spans:
                lane._open_span(QUEUED, t)  # no ARRIVAL seen (recording started late)
            if e.detail.startswith(f"{ev.ROBOT_BUSY} waiting"):  # not scheduled: waits for its robot
                queued = lane._open.pop((QUEUED, -1), None)
                if queued is not None:
                    lane.spans.remove(queued)
                lane._open_span(ROBOT_WAIT, t if queued is None else queued.start)
        elif k in (ev.GEN_START, ev.RESUME):
            lane._close(QUEUED, t)
            lane._close(ROBOT_WAIT, t)
            lane._close(SUSPENDED, t)
            lane._open_span(GENERATING, t, max(e.seg, 0))
            lane.state = ev.GENERATING
        elif k == ev.SEGMENT_READY:
            # A non-segmented stream (vllm-stream) keeps generating after a cut: the next segment's
            # generation starts here. Segmented policies close this zero-length span at GEN_STOP.
            if lane._close(GENERATING, t) is not None:
                lane._open_span(GENERATING, t, e.seg + 1)
        elif k == ev.GEN_STOP:
            lane._close(GENERATING, t)
            if e.detail.split(":", 1)[0] in ("eos", "length") and not lane.done:
                lane.state = ev.EXECUTING  # the plan is complete: only the robot works on it now
        elif k == ev.SUSPEND:
            lane._close(GENERATING, t)
            # a segment held while its robot runs an earlier task waits for the robot, not the engine
            lane._open_span(ROBOT_WAIT if e.detail.startswith(ev.ROBOT_BUSY) else SUSPENDED, t, e.seg)
            lane.state = ev.SUSPENDED
        elif k == ev.DISPATCH:
            if lane._close(ROBOT_WAIT, t) is not None:  # the robot is free: the held segment goes out
                lane._open_span(SUSPENDED, t, e.seg + 1)  # and the rest of the plan waits for the engine
            lane._open_span(DISPATCHED, t, e.seg, e.value)
            lane.segments = max(lane.segments, e.seg + 1)
        elif k == ev.EXEC_START:
            lane._close(DISPATCHED, t, e.seg)
            lane._open_span(EXECUTING, t, e.seg)
            if (
                lane.state == ev.SUSPENDED
            ):  # as the planner's TaskStatus: the robot executes, nothing generates
                lane.state = ev.EXECUTING
            if math.isnan(lane.first_exec) or t < lane.first_exec:
                lane.first_exec = t
        elif k == ev.EXEC_END:
            if lane._close(EXECUTING, t, e.seg) is None:  # STARTED was not recorded
                lane._close(DISPATCHED, t, e.seg)
        elif k in _TERMINAL_EVENT_STATE:
            if lane.done:  # a second terminal event (e.g. FAIL after EXPIRE) changes nothing
                return lane
            lane.state = _TERMINAL_EVENT_STATE[k]
            lane.terminal = t
            if k != ev.COMPLETE:
                lane.reason = e.detail or ("dropped by the scheduler" if k == ev.DROP else "")
            lane._close_all(t)
        else:
            self.unknown_events += 1
        return lane

    def take_changed(self) -> set[str]:
        """Task ids changed since the last call (the live table refreshes only those rows)."""
        out, self.changed = self.changed, set()
        return out

    def prune(self, before: float) -> int:
        """Forget finished tasks that ended before ``before`` (keeps a live view bounded)."""
        gone = [tid for tid, lane in self.lanes.items() if lane.done and lane.terminal < before]
        for tid in gone:
            del self.lanes[tid]
        return len(gone)

    def select(
        self,
        tasks: Iterable[str] | None = None,
        agents: Iterable[str] | None = None,
        window: tuple[float, float] | None = None,
    ) -> list[TaskLane]:
        """Lanes matching the filters (window: the lane overlaps [t0, t1]), in arrival order."""
        want_t = set(tasks) if tasks else None
        want_a = set(agents) if agents else None
        out = []
        for lane in self.lanes.values():
            if want_t is not None and lane.task_id not in want_t:
                continue
            if want_a is not None and lane.agent_id not in want_a:
                continue
            if window is not None:
                start = lane.arrival if not math.isnan(lane.arrival) else _first_start(lane)
                end = lane.end_time(self.t_max)
                if end < window[0] or start > window[1]:
                    continue
            out.append(lane)
        out.sort(key=lambda x: (_first_start(x), x.task_id))
        return out


def arrival_detail(task_class: str, trace_id: int | None) -> str:
    """ARRIVAL ``detail`` carrying the benchmark labels: ``class=<label> trace=<id>`` (lrtrace/convert.py)."""
    parts = []
    if task_class:
        parts.append(f"class={task_class}")
    if trace_id is not None:
        parts.append(f"trace={trace_id}")
    return " ".join(parts)


def parse_arrival_detail(detail: str) -> tuple[str, int | None]:
    """Inverse of :func:`arrival_detail`; other words are ignored."""
    klass, trace = "", None
    for word in detail.split():
        key, _, value = word.partition("=")
        if key == "class":
            klass = value
        elif key == "trace":
            try:
                trace = int(value)
            except ValueError:
                trace = None
    return klass, trace


def _first_start(lane: TaskLane) -> float:
    if not math.isnan(lane.arrival):
        return lane.arrival
    starts = [s.start for s in lane.spans]
    return min(starts) if starts else (lane.last_t if not math.isnan(lane.last_t) else math.inf)


def robot_waits(model: TimelineModel, now: float = NAN) -> dict[str, float]:
    """Seconds each task spent waiting for its own robot (sum of its ``robot`` spans; open spans run to
    ``now``, else to the model's last event); only tasks that waited at all."""
    end = model.t_max if math.isnan(now) else now
    out: dict[str, float] = {}
    for tid, lane in model.lanes.items():
        total = math.fsum(s.end_or(end) - s.start for s in lane.spans if s.kind == ROBOT_WAIT)
        if total > 0:
            out[tid] = total
    return out
