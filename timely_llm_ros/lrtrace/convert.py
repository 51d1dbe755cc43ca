"""Bag messages (rosbags objects) <-> the core's values: trace events, task info, statuses.

The field mapping is the one of ``timely_llm_ros/ros/convert.py`` (rclpy messages), written once in
:mod:`timely_llm_ros.interfaces.mapping` and bound here to a rosbags typestore
(:func:`timely_llm_ros.lrtrace.typestore.adapter`): the ``*_to_msg`` functions take the typestore
first. Only what a bag reader needs beyond that lives here: the lenient :class:`TaskInfo` of a
recorded ``Task`` and the per-bag collections (:func:`events_of`, :func:`task_infos_of`).

Task class and trace id: a ``Task`` message carries neither (they are benchmark labels, not
something a robot sends), but the reports group by them. A planner that knows them writes them
into the ``detail`` of the task's ARRIVAL trace event as ``class=<label> trace=<id>``
(``timeline_model.arrival_detail``); without that the class follows the core rule (``task_class``: ERT < 1 s
-> "urgent", else "normal") and the trace id is unknown.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.task import TaskRejected
from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.interfaces.mapping import from_stamp, tuf_from_msg
from timely_llm_ros.lrtrace import typestore as ts


# ------------------------------------------------------------------------------ trace events
def event_from_msg(msg: Any) -> ev.TraceEvent:
    """A ``TraceEvent`` message as the core's event (ValueError for an unknown kind code)."""
    return ts.adapter().event_from_msg(msg)


def event_to_msg(store: Any, e: ev.TraceEvent) -> Any:
    return ts.adapter(store).event_to_msg(e)


def events_of(contents: Any) -> list[ev.TraceEvent]:
    """Every decodable ``/trace_events`` message (bad kind codes become a problem, not a crash)."""
    out = []
    bad = 0
    for _topic, _t_ns, msg in contents.by_type(ts.TRACE_EVENT):
        try:
            out.append(event_from_msg(msg))
        except ValueError:
            bad += 1
    if bad:
        contents.problems.append(f"{bad} trace event(s) with an unknown kind code were skipped")
    out.sort(key=lambda e: e.t)  # stable: equal times keep the recorded order
    return out


# ------------------------------------------------------------------------------ tasks
@dataclass
class TaskInfo:
    """What a ``Task`` message says about one task (``tuf`` None when its numbers are invalid)."""

    task_id: str
    agent_id: str
    robot_type: str
    skill_set: str
    instruction: str
    tuf: TUF | None
    stamp: float  # header stamp (when the robot created the request)
    log_time: float  # when the recorder received it
    max_tokens: int = 0
    problem: str = ""
    task_class: str = ""
    trace_id: int | None = None


def task_info_from_msg(msg: Any, t_ns: int) -> TaskInfo:
    """What a recorded ``Task`` says, as recorded: a TUF the planner would reject (or an unset one)
    becomes ``tuf=None`` with the reason in ``problem``; nothing is refused."""
    try:
        tuf: TUF | None = tuf_from_msg(msg.tuf)
        problem = ""
    except TaskRejected as exc:
        tuf, problem = None, str(exc)
    return TaskInfo(
        msg.task_id,
        msg.agent_id,
        msg.robot_type,
        msg.skill_set,
        msg.instruction,
        tuf,
        from_stamp(msg.header.stamp),
        t_ns * 1e-9,
        int(msg.max_tokens),
        problem,
        str(getattr(msg, "task_class", "") or ""),
        int(getattr(msg, "trace_id", 0) or 0) or None,
    )


def task_infos_of(contents: Any) -> dict[str, TaskInfo]:
    out: dict[str, TaskInfo] = {}
    for _topic, t_ns, msg in contents.by_type(ts.TASK):
        out.setdefault(msg.task_id, task_info_from_msg(msg, t_ns))  # a re-sent task keeps its first record
    return out


def task_to_msg(store: Any, spec: Any, stamp_t: float) -> Any:
    """A core TaskSpec as a ``Task`` (TUF numbers a message cannot carry are written as zeros)."""
    return ts.adapter(store).task_to_msg(spec, stamp_t)


# ------------------------------------------------------------------------------ statuses, feedback, segments
def status_to_msg(
    store: Any,
    task_id: str,
    agent_id: str,
    state: str,
    t: float,
    reason: str = "",
    response_time: float = math.nan,
    utility: float = math.nan,
) -> Any:
    return ts.adapter(store).status_to_msg(task_id, agent_id, state, t, reason, response_time, utility)


def status_from_msg(msg: Any) -> tuple[str, float, str, float, float]:
    """(state name, time, reason, response time or nan, utility or nan); ValueError for a bad code."""
    return ts.adapter().status_from_msg(msg)


def feedback_to_msg(
    store: Any,
    task_id: str,
    agent_id: str,
    index: int,
    state: str,
    t: float,
    duration: float = 0.0,
    detail: str = "",
) -> Any:
    return ts.adapter(store).feedback_to_msg(task_id, agent_id, index, state, t, duration, detail)


def feedback_from_msg(msg: Any) -> tuple[str, int, str, float]:
    """(task id, segment index, state name, time); ValueError for an unknown state code."""
    fb = ts.adapter().feedback_from_msg(msg)
    return fb.task_id, fb.index, fb.state, fb.t


def segment_to_msg(store: Any, task_id: str, agent_id: str, seg: Any, tokens: int = 0) -> Any:
    """A core :class:`~timely_llm_ros.core.generation.Segment` (a task record's) as a ``Segment``;
    its generation ends at the dispatch when the record has no finite ``gen_end``."""
    return ts.adapter(store).segment_to_msg(
        task_id,
        agent_id,
        seg.idx,
        seg.text,
        seg.calls,
        final=seg.final,
        gen_start=seg.gen_start,
        gen_end=seg.gen_end if math.isfinite(seg.gen_end) else seg.dispatch,
        tokens=tokens or seg.n_tokens,
        min_exec=seg.min_exec,
        expected_exec=seg.expected_exec,
    )
