"""Bag messages (rosbags objects) <-> the core's values: trace events, task info, statuses.

The same conventions as ``timely_llm_ros/ros/convert.py`` (which works on rclpy messages): float
seconds on the planner clock <-> ``builtin_interfaces/Time``, kinds and states by name <-> the
uint8 constants of ``msg/*.msg``.

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
from timely_llm_ros.core.tuf import TUF, InvalidTUF
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.timeline_model import arrival_detail, parse_arrival_detail  # noqa: F401 (API)


# ------------------------------------------------------------------------------ trace events
def event_from_msg(msg: Any) -> ev.TraceEvent:
    """A ``TraceEvent`` message as the core's event (ValueError for an unknown kind code)."""
    kind = ts.EVENT_KIND_NAME.get(int(msg.kind))
    if kind is None:
        raise ValueError(f"unknown TraceEvent kind {msg.kind}")
    return ev.TraceEvent(
        ts.from_stamp(msg.stamp),
        kind,
        msg.task_id,
        msg.agent_id,
        int(msg.segment_index),
        float(msg.value),
        msg.detail,
    )


def event_to_msg(store: Any, e: ev.TraceEvent) -> Any:
    try:
        kind = ts.EVENT_KIND_CODE[e.kind]
    except KeyError:
        raise ValueError(f"unknown trace event kind {e.kind!r}") from None
    seg = int(e.seg) if -1 <= e.seg <= 2**31 - 1 else -1
    value = float(e.value) if math.isfinite(e.value) else 0.0
    return store.types[ts.TRACE_EVENT](
        stamp=ts.stamp(store, e.t),
        task_id=str(e.task_id),
        agent_id=str(e.agent_id),
        segment_index=seg,
        kind=kind,
        value=value,
        detail=str(e.detail),
    )


def events_of(contents: Any) -> list[ev.TraceEvent]:
    """Every decodable ``/trace_events`` message (bad kind codes become a problem, not a crash)."""
    out = []
    bad = 0
    for topic, _t_ns, msg in contents.by_type(ts.TRACE_EVENT):
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
    try:
        tuf: TUF | None = TUF(ert=float(msg.tuf.ert), alpha=float(msg.tuf.alpha), beta=float(msg.tuf.beta))
        problem = ""
    except InvalidTUF as exc:
        tuf, problem = None, f"invalid TUF: {exc}"
    return TaskInfo(
        msg.task_id,
        msg.agent_id,
        msg.robot_type,
        msg.skill_set,
        msg.instruction,
        tuf,
        ts.from_stamp(msg.header.stamp),
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
    """A core TaskSpec as a ``Task`` (invalid TUF numbers are written as they are, or zeros)."""
    tuf = spec.tuf
    tmsg = store.types[ts.TUF_MSG](
        ert=_num(getattr(tuf, "ert", 0.0)),
        alpha=_num(getattr(tuf, "alpha", 0.0)),
        beta=_num(getattr(tuf, "beta", 0.0)),
    )
    header = store.types[ts.HEADER](stamp=ts.stamp(store, stamp_t), frame_id="")
    max_tokens = (
        spec.max_tokens if isinstance(spec.max_tokens, int) and not isinstance(spec.max_tokens, bool) else 0
    )
    return store.types[ts.TASK](
        header=header,
        task_id=str(spec.task_id),
        agent_id=str(spec.agent_id),
        robot_type=str(spec.robot_type),
        skill_set=str(spec.skill_set),
        instruction=str(spec.instruction),
        scene=str(spec.scene or ""),
        tuf=tmsg,
        max_tokens=min(max(max_tokens, 0), 2**32 - 1),
        task_class=str(getattr(spec, "task_class", "") or ""),
        trace_id=spec.trace_id if isinstance(getattr(spec, "trace_id", None), int) and spec.trace_id > 0 else 0,
    )


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else 0.0


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
    has = isinstance(response_time, (int, float)) and math.isfinite(response_time)
    return store.types[ts.STATUS](
        task_id=task_id,
        agent_id=agent_id,
        state=ts.TASK_STATE_CODE[state],
        reason=reason,
        stamp=ts.stamp(store, t),
        has_response=has,
        response_time=max(float(response_time), 0.0) if has else 0.0,
        utility=float(utility) if has and math.isfinite(utility) else 0.0,
    )


def status_from_msg(msg: Any) -> tuple[str, float, str, float, float]:
    """(state name, time, reason, response time or nan, utility or nan); ValueError for a bad code."""
    state = ts.TASK_STATE_NAME.get(int(msg.state))
    if state is None:
        raise ValueError(f"unknown TaskStatus state {msg.state}")
    if msg.has_response:
        return state, ts.from_stamp(msg.stamp), msg.reason, float(msg.response_time), float(msg.utility)
    return state, ts.from_stamp(msg.stamp), msg.reason, math.nan, math.nan


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
    dur = float(duration) if math.isfinite(duration) and duration > 0 else 0.0
    return store.types[ts.FEEDBACK](
        task_id=task_id,
        agent_id=agent_id,
        index=int(index),
        state=ts.FEEDBACK_CODE[state],
        stamp=ts.stamp(store, t),
        duration=dur,
        detail=detail,
    )


def feedback_from_msg(msg: Any) -> tuple[str, int, str, float]:
    """(task id, segment index, state name, time); ValueError for an unknown state code."""
    state = ts.FEEDBACK_NAME.get(int(msg.state))
    if state is None:
        raise ValueError(f"unknown SegmentFeedback state {msg.state}")
    return msg.task_id, int(msg.index), state, ts.from_stamp(msg.stamp)


def skill_call_to_msg(store: Any, call: Any) -> Any:
    args = [a if isinstance(a, str) else repr(a) for a in getattr(call, "args", ())]
    return store.types[ts.SKILL_CALL](name=str(call.name), args=args, source=str(getattr(call, "source", "")))


def segment_to_msg(store: Any, task_id: str, agent_id: str, seg: Any, tokens: int = 0) -> Any:
    """A core :class:`~timely_llm_ros.core.generation.Segment` as a ``Segment`` message."""
    gen_end = seg.gen_end if math.isfinite(seg.gen_end) else seg.dispatch
    gen_start = seg.gen_start if math.isfinite(seg.gen_start) and seg.gen_start <= gen_end else gen_end
    lo = float(seg.min_exec) if math.isfinite(seg.min_exec) else 0.0
    hi = float(seg.expected_exec) if math.isfinite(seg.expected_exec) else lo
    return store.types[ts.SEGMENT](
        task_id=task_id,
        agent_id=agent_id,
        index=int(seg.idx),
        text=str(seg.text),
        calls=[skill_call_to_msg(store, c) for c in seg.calls],
        final=bool(seg.final),
        gen_start=ts.stamp(store, gen_start),
        gen_end=ts.stamp(store, gen_end),
        tokens=min(max(int(tokens or seg.n_tokens), 0), 2**32 - 1),
        exec_time_min=max(lo, 0.0),
        exec_time_expected=max(hi, lo, 0.0),
    )
