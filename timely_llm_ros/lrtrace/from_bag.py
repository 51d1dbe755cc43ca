"""A recorded run rebuilt from a bag: trace events, timeline lanes and the core's task records.

:func:`load_run` reads a bag and returns a :class:`Run`. The task records
(:class:`~timely_llm_ros.core.generation.TaskRecord`) are rebuilt from the trace events and the
``/tasks`` messages exactly as :class:`~timely_llm_ros.core.planner.PlannerCore` fills them, so
:func:`timely_llm_ros.core.metrics.summarize` gives the bench's numbers (to the nanosecond
resolution of bag timestamps).

A bag without ``/trace_events`` (not recorded, or lost) still gives a timeline and metrics:
:func:`events_from_topics` rebuilds the events from ``/tasks`` (arrival = receive time),
``/task_status`` (state changes), the segment topics (generation end = dispatch) and
``/segment_feedback`` (action start / end), and the run says so in its notes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.generation import Segment, TaskRecord
from timely_llm_ros.core.tuf import tuf_class
from timely_llm_ros.interfaces.mapping import from_stamp
from timely_llm_ros.lrtrace import convert as cv
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.bagread import BagContents, read_bag
from timely_llm_ros.lrtrace.timeline_model import TimelineModel, parse_arrival_detail

NAN = math.nan
_TERMINAL = ev.TERMINAL_EVENT_STATE
# Tie order for rebuilt events at one instant (the planner's own emission order).
_KIND_ORDER = {
    k: i
    for i, k in enumerate(
        (
            ev.ARRIVAL,
            ev.ADMIT,
            ev.REJECT,
            ev.GEN_START,
            ev.RESUME,
            ev.SEGMENT_READY,
            ev.DISPATCH,
            ev.GEN_STOP,
            ev.SUSPEND,
            ev.EXEC_START,
            ev.EXEC_END,
            ev.COMPLETE,
            ev.FAIL,
            ev.EXPIRE,
            ev.DROP,
            ev.CANCEL,
        )
    )
}


@dataclass
class Run:
    """One recorded run: what the timeline and report commands draw and count."""

    path: Path
    contents: BagContents
    events: list[ev.TraceEvent]
    tasks: dict[str, cv.TaskInfo]
    model: TimelineModel
    notes: list[str] = field(default_factory=list)  # missing topics, problems, fallbacks used
    events_rebuilt: bool = False
    _records: list[TaskRecord] | None = field(default=None, repr=False)

    @property
    def label(self) -> str:
        """Policy (from the bag's custom data) or "recorded"."""
        return self.contents.custom_data.get("policy", "recorded")

    def records(self) -> list[TaskRecord]:
        """Task records rebuilt once (their notes, e.g. tasks without TUF, join :attr:`notes`)."""
        if self._records is None:
            self._records = records_from_events(self.events, self.tasks, self.notes)
        return self._records


def load_run(path: str | Path) -> Run:
    contents = read_bag(path)
    tasks = contents.task_infos()
    events = contents.trace_events()
    notes = [f"missing: {m}" for m in contents.missing] + [f"problem: {p}" for p in contents.problems]
    rebuilt = False
    if not events:
        events = events_from_topics(contents)
        rebuilt = True
        if events:
            notes.append(
                "no trace events in the bag: timeline rebuilt from /tasks, /task_status, segments "
                "and feedback (generation start/suspension times are approximate)"
            )
        else:
            notes.append("the bag holds no trace events, statuses, segments or feedback: nothing to draw")
    tasks = _name_unnamed_tasks(contents, tasks, events)
    model = TimelineModel()
    for info in tasks.values():
        model.set_task(info.task_id, info.agent_id, info.tuf, info.task_class, info.trace_id)
    model.extend(events)
    no_tuf = [lane.task_id for lane in model.lanes.values() if lane.tuf is None]
    if no_tuf and tasks:
        notes.append(f"{len(no_tuf)} task(s) have no /tasks message (no TUF: no ERT marker, no utility)")
    elif no_tuf:
        notes.append("no /tasks messages: TUFs unknown, so no ERT markers and no utilities")
    return Run(Path(path), contents, events, tasks, model, notes, rebuilt)


def _name_unnamed_tasks(
    contents: BagContents, tasks: dict[str, cv.TaskInfo], events: list[ev.TraceEvent]
) -> dict[str, cv.TaskInfo]:
    """Give ``/tasks`` messages sent without a ``task_id`` the id the planner gave them.

    The planner names such a task ``<agent>-<n>``; the recorder keeps the message as it was sent, so
    without this the task's TUF is unknown and it cannot be scored. Each agent's id-less messages, in
    the order they were received, are paired with that agent's ARRIVAL events of tasks no message
    names, in time order (the planner takes one publisher's messages in order)."""
    unnamed: dict[str, list[cv.TaskInfo]] = {}
    for _topic, t_ns, msg in contents.by_type(ts.TASK):
        if not str(msg.task_id).strip():
            unnamed.setdefault(msg.agent_id, []).append(cv.task_info_from_msg(msg, t_ns))
    if not unnamed:
        return tasks
    named = {k: v for k, v in tasks.items() if k.strip()}
    arrivals: dict[str, list[str]] = {}
    for e in sorted((e for e in events if e.kind == ev.ARRIVAL), key=lambda e: e.t):
        if e.task_id not in named and e.task_id not in arrivals.get(e.agent_id, ()):
            arrivals.setdefault(e.agent_id, []).append(e.task_id)
    for agent, infos in unnamed.items():
        for info, task_id in zip(infos, arrivals.get(agent, []), strict=False):
            named[task_id] = replace(info, task_id=task_id)
    return named


def events_from_topics(contents: BagContents) -> list[ev.TraceEvent]:
    """Approximate trace events from the other topics (module docstring)."""
    out: list[tuple[float, int, int, ev.TraceEvent]] = []

    def put(e: ev.TraceEvent) -> None:
        out.append((e.t, _KIND_ORDER.get(e.kind, 99), len(out), e))

    infos = contents.task_infos()
    for info in infos.values():
        put(ev.TraceEvent(info.log_time, ev.ARRIVAL, info.task_id, info.agent_id))
    generating: dict[str, int] = {}
    for _topic, _t, msg in contents.by_type(ts.STATUS):
        try:
            state, t, reason, _resp, util = cv.status_from_msg(msg)
        except ValueError:
            continue
        tid, agent = msg.task_id, msg.agent_id
        if state == ev.ACCEPTED:
            put(ev.TraceEvent(t, ev.ADMIT, tid, agent))
        elif state == ev.GENERATING:
            put(ev.TraceEvent(t, ev.GEN_START, tid, agent, generating.get(tid, 0)))
        elif state == ev.SUSPENDED:
            generating[tid] = generating.get(tid, 0) + 1
            put(ev.TraceEvent(t, ev.SUSPEND, tid, agent, generating[tid]))
        elif state == ev.COMPLETED:
            put(ev.TraceEvent(t, ev.COMPLETE, tid, agent, value=0.0 if math.isnan(util) else util))
        elif state in (ev.FAILED, ev.REJECTED, ev.EXPIRED, ev.CANCELLED):
            kind = {
                ev.FAILED: ev.FAIL,
                ev.REJECTED: ev.REJECT,
                ev.EXPIRED: ev.EXPIRE,
                ev.CANCELLED: ev.CANCEL,
            }[state]
            put(ev.TraceEvent(t, kind, tid, agent, detail=reason))
    for _topic, _t, msg in contents.by_type(ts.SEGMENT):
        t = from_stamp(msg.gen_end)
        put(ev.TraceEvent(t, ev.SEGMENT_READY, msg.task_id, msg.agent_id, int(msg.index), detail=msg.text))
        put(
            ev.TraceEvent(
                t, ev.DISPATCH, msg.task_id, msg.agent_id, int(msg.index), value=float(msg.exec_time_min)
            )
        )
    for _topic, _t, msg in contents.by_type(ts.FEEDBACK):
        try:
            tid, idx, state, t = cv.feedback_from_msg(msg)
        except ValueError:
            continue
        exec_kind = {ev.STARTED: ev.EXEC_START, ev.DONE: ev.EXEC_END}.get(state)
        if exec_kind is not None:
            put(ev.TraceEvent(t, exec_kind, tid, msg.agent_id, idx))
    out.sort(key=lambda x: (x[0], x[1], x[2]))
    return [x[3] for x in out]


def records_from_events(
    events: list[ev.TraceEvent], tasks: dict[str, cv.TaskInfo], notes: list[str] | None = None
) -> list[TaskRecord]:
    """Task records as PlannerCore fills them (planner.py), in arrival order.

    Tasks whose TUF is unknown (no valid ``/tasks`` message) cannot be scored; they are left out and
    counted in ``notes`` rather than guessed.
    """
    recs: dict[str, TaskRecord] = {}
    gen_from: dict[str, float] = {}  # start of the current segment's generation (Generation.seg_start)
    skipped: list[str] = []
    for e in events:
        rec = recs.get(e.task_id)
        if rec is None:
            info = tasks.get(e.task_id)
            rec = TaskRecord(
                task_id=e.task_id,
                agent_id=e.agent_id or (info.agent_id if info else ""),
                task_class="",
                tuf=info.tuf if info else None,
                arrival=e.t if e.kind == ev.ARRIVAL else (info.log_time if info else e.t),
                robot_type=info.robot_type if info else "",
                skill_set=info.skill_set if info else "",
            )
            recs[e.task_id] = rec
        k = e.kind
        if k == ev.ARRIVAL:
            rec.arrival = e.t
            klass, trace = parse_arrival_detail(e.detail)
            info = tasks.get(e.task_id)
            rec.task_class = rec.task_class or klass or (info.task_class if info else "")
            if rec.trace_id is None:
                rec.trace_id = trace if trace is not None else (info.trace_id if info else None)
        elif k == ev.ADMIT:
            rec.state = ev.QUEUED
        elif k == ev.GEN_START:
            if math.isnan(rec.first_admit):
                rec.first_admit = e.t
            gen_from[e.task_id] = e.t
            rec.state = ev.GENERATING
        elif k == ev.SEGMENT_READY:
            idx = e.seg if e.seg >= 0 else len(rec.segments)
            seg = _segment(rec, idx)
            seg.text = e.detail
            seg.gen_start = gen_from.get(e.task_id, NAN)
            seg.gen_end = e.t
            gen_from[e.task_id] = e.t  # a stream keeps generating the next segment from here
        elif k == ev.DISPATCH:
            seg = _segment(rec, e.seg if e.seg >= 0 else len(rec.segments) - 1)
            seg.dispatch = e.t
            seg.min_exec = e.value
            if math.isnan(seg.gen_end):
                seg.gen_end = e.t
        elif k == ev.SUSPEND:
            rec.n_suspensions += 1
            rec.state = ev.SUSPENDED
        elif k == ev.GEN_STOP:
            if e.detail.split(":", 1)[0] in ("eos", "length"):
                rec.gen_end = e.t
        elif k == ev.EXEC_START:
            _segment(rec, e.seg).exec_start = e.t
        elif k == ev.EXEC_END:
            seg = _segment(rec, e.seg)
            if math.isnan(seg.exec_start):
                seg.exec_start = e.t
            seg.exec_end = e.t
        elif k in _TERMINAL:
            if rec.state in ev.TERMINAL_STATES:
                continue
            rec.state = _TERMINAL[k]
            rec.terminal_time = e.t
            if k == ev.COMPLETE:
                if rec.segments:
                    rec.segments[-1].final = True
                    rec.completion_time_abs = rec.segments[-1].exec_end
            else:
                rec.reason = e.detail
    out = []
    for rec in recs.values():
        if rec.tuf is None and rec.state != ev.REJECTED:
            skipped.append(rec.task_id)
            continue
        if not rec.task_class and rec.tuf is not None:
            rec.task_class = tuf_class(rec.tuf)  # the core.task.task_class rule
        out.append(rec)
    if skipped and notes is not None:
        notes.append(
            f"{len(skipped)} task(s) left out of the metrics: no TUF known (no valid /tasks message), "
            f"e.g. {', '.join(skipped[:5])}"
        )
    out.sort(key=lambda r: r.arrival)
    return out


def _segment(rec: TaskRecord, idx: int) -> Segment:
    idx = max(int(idx), 0)
    while len(rec.segments) <= idx:
        rec.segments.append(Segment(idx=len(rec.segments)))
    return rec.segments[idx]
