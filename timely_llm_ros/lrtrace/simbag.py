"""A simulator run as an LRTrace bag, with the topics the ROS planner graph records.

Used by the tests (a bag with known content) and by ``timely-llm bench --bag``: the bag of a
simulated run reads back through the same ``timeline`` / ``report`` commands as a recorded one,
and the report's numbers equal the bench's (tested in test/viz/test_report.py).

What goes where (log time = the event's virtual time in nanoseconds, stamps likewise):

* ``/trace_events``: every :class:`TraceEvent` of the run; the ARRIVAL event's ``detail`` carries
  ``class=… trace=…`` (lrtrace/convert.py) so reports can group like the bench, and its time is
  the task's exact arrival (the record's, see below);
* ``/tasks``: one ``Task`` per submitted spec at its arrival;
* ``/<agent>/skill_segments``: each dispatched segment at its dispatch time;
* ``/segment_feedback``: STARTED / DONE per executed segment;
* ``/task_status``: the state changes the planner reports (ACCEPTED, QUEUED, GENERATING, SUSPENDED, EXECUTING,
  COMPLETED / FAILED / REJECTED / EXPIRED), with response time and utility once known.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from timely_llm_ros.core import events as ev
from timely_llm_ros.interfaces.mapping import seconds_to_ns
from timely_llm_ros.interfaces.topics import TOPIC_FEEDBACK, TOPIC_STATUS, TOPIC_TASKS, TOPIC_TRACE
from timely_llm_ros.interfaces.topics import bag_segments_topic as segments_topic
from timely_llm_ros.lrtrace import convert as cv
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.bagio import DEFAULT_TOPICS, BagWriter
from timely_llm_ros.lrtrace.timeline_model import arrival_detail

_STATE_OF = {
    ev.GEN_START: ev.GENERATING,
    ev.SUSPEND: ev.SUSPENDED,
    **ev.TERMINAL_EVENT_STATE,
}


def write_sim_bag(
    sim_result: Any, tasks: Sequence[Any], path: str | Path, *, custom_data: dict[str, str] | None = None
) -> Path:
    """Write ``sim_result`` (a :class:`~timely_llm_ros.sim.simulator.SimResult`) of ``tasks`` to a new
    bag directory ``path``; returns the path. Policy, profile and execution mode from the run's
    stats go into the bag's ``custom_data``."""
    store = ts.shared_typestore()
    records = {r.task_id: r for r in sim_result.records}
    stats = getattr(sim_result, "stats", {}) or {}
    meta = {"source": "timely_llm_ros simulator"}
    meta.update({k: str(stats[k]) for k in ("policy", "profile", "exec_mode") if k in stats})
    meta.update(custom_data or {})
    out: list[tuple[int, int, str, Any]] = []  # (t_ns, order, topic, msg)

    def put(t: float, topic: str, msg: Any) -> None:
        out.append((seconds_to_ns(t), len(out), topic, msg))

    for spec in tasks:
        if not hasattr(spec, "task_id") or not isinstance(getattr(spec, "arrival", None), (int, float)):
            continue
        put(spec.arrival, TOPIC_TASKS, cv.task_to_msg(store, spec, spec.arrival))
    executing = _ExecutingStates()
    for e in sim_result.events:
        if e.kind == ev.ARRIVAL and e.task_id in records:
            rec = records[e.task_id]
            # The simulator hands a task to the planner after the engine iteration it arrived in, so its
            # ARRIVAL event can be up to one iteration late; the record (and so W(s_0)) uses the exact
            # arrival. The bag carries the exact one, which is what a recorder would see.
            t = rec.arrival if math.isfinite(rec.arrival) else e.t
            e = dataclasses.replace(e, t=t, detail=e.detail or arrival_detail(rec.task_class, rec.trace_id))
        put(e.t, TOPIC_TRACE, cv.event_to_msg(store, e))
        _status(store, put, e, records.get(e.task_id))
        if executing.update(e):
            put(e.t, TOPIC_STATUS, cv.status_to_msg(store, e.task_id, e.agent_id, ev.EXECUTING, e.t))
    seg_topics: dict[str, str] = {}
    for rec in sim_result.records:
        topic = seg_topics.setdefault(rec.agent_id, segments_topic(rec.agent_id))
        for seg in rec.segments:
            put(seg.dispatch, topic, cv.segment_to_msg(store, rec.task_id, rec.agent_id, seg))
            if math.isfinite(seg.exec_start):
                put(
                    seg.exec_start,
                    TOPIC_FEEDBACK,
                    cv.feedback_to_msg(store, rec.task_id, rec.agent_id, seg.idx, ev.STARTED, seg.exec_start),
                )
            if math.isfinite(seg.exec_end):
                put(
                    seg.exec_end,
                    TOPIC_FEEDBACK,
                    cv.feedback_to_msg(
                        store,
                        rec.task_id,
                        rec.agent_id,
                        seg.idx,
                        ev.DONE,
                        seg.exec_end,
                        duration=seg.exec_end - seg.exec_start,
                    ),
                )
    out.sort(key=lambda x: (x[0], x[1]))
    topics = dict(DEFAULT_TOPICS)
    topics.update({t: ts.SEGMENT for t in sorted(set(seg_topics.values()))})
    with BagWriter(path, topics, flush_every_s=None, custom_data=meta) as writer:
        for t_ns, _order, topic, msg in out:
            writer.write_msg(topic, t_ns, msg)
    return Path(path)


class _ExecutingStates:
    """When PlannerCore reports EXECUTING (its generation not running, the robot on the task): on the
    robot's STARTED while the generation is suspended, and when the generation ends (eos / length)."""

    def __init__(self) -> None:
        self.generating: set[str] = set()
        self.executing: set[str] = set()

    def update(self, e: ev.TraceEvent) -> bool:
        """True when ``e`` puts its task into EXECUTING."""
        tid = e.task_id
        if e.kind == ev.GEN_START:
            self.generating.add(tid)
            self.executing.discard(tid)
        elif e.kind == ev.GEN_STOP:
            self.generating.discard(tid)
            return e.detail.split(":", 1)[0] in ("eos", "length") and self._enter(tid)
        elif e.kind == ev.EXEC_START and tid not in self.generating:
            return self._enter(tid)
        elif e.kind in (ev.COMPLETE, ev.FAIL, ev.REJECT, ev.EXPIRE, ev.DROP, ev.CANCEL):
            self.generating.discard(tid)
            self.executing.add(tid)  # terminal: never EXECUTING again
        return False

    def _enter(self, tid: str) -> bool:
        if tid in self.executing:
            return False
        self.executing.add(tid)
        return True


def _status(store: Any, put: Any, e: ev.TraceEvent, rec: Any) -> None:
    """The TaskStatus messages the planner sends for trace event ``e`` (PlannerCore's on_state)."""
    if e.kind == ev.ADMIT:
        put(e.t, TOPIC_STATUS, cv.status_to_msg(store, e.task_id, e.agent_id, ev.ACCEPTED, e.t))
        put(e.t, TOPIC_STATUS, cv.status_to_msg(store, e.task_id, e.agent_id, ev.QUEUED, e.t))
        return
    state = _STATE_OF.get(e.kind)
    if state is None:
        return
    response = utility = math.nan
    if (
        rec is not None
        and rec.segments
        and math.isfinite(rec.segments[0].exec_start)
        and rec.segments[0].exec_start <= e.t
    ):
        response, utility = rec.response_time, rec.utility
    reason = e.detail if state in (ev.FAILED, ev.REJECTED, ev.EXPIRED, ev.CANCELLED) else ""
    put(
        e.t,
        TOPIC_STATUS,
        cv.status_to_msg(store, e.task_id, e.agent_id, state, e.t, reason, response, utility),
    )
