"""Conversions between the core's plain Python values and the timely_llm_ros ROS messages.

The core (``timely_llm_ros.core``) never imports ROS; nodes convert at their edges with these
functions. Times: the core uses float seconds on the planner's clock; messages carry
``builtin_interfaces/Time`` (:func:`to_stamp` / :func:`from_stamp`). States and event kinds: the core
uses the names (``"COMPLETED"``, ``"DISPATCH"``), messages the uint8 constants of the same names.

Messages coming *in* are untrusted (any node may publish): :func:`task_from_msg` checks every field
against :mod:`timely_llm_ros.core.limits` (lengths, TUF ranges that keep every derived time finite)
and raises :class:`TaskRejected` with a reason meant for the sender instead of letting a bad field
crash the planner later; :func:`feedback_from_msg` clips the detail text and raises ``ValueError``
for an unknown state code or an id beyond its limit.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from builtin_interfaces.msg import Time

from timely_llm_ros.core import events as ev
from timely_llm_ros.core import limits
from timely_llm_ros.core.generation import Dispatch
from timely_llm_ros.core.skills import SkillCall as CoreSkillCall
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, TUF, InvalidTUF
from timely_llm_ros.msg import Segment, SegmentFeedback, SkillCall, Task, TaskStatus, TraceEvent, Tuf

DEFAULT_MAX_TOKENS = 256  # Task.max_tokens == 0 means "the planner's default"
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1

# name <-> uint8 code tables, built from the message constants so they cannot drift apart
TASK_STATE_CODE: dict[str, int] = {name: getattr(TaskStatus, name) for name in ev.TASK_STATES}
TASK_STATE_NAME: dict[int, str] = {code: name for name, code in TASK_STATE_CODE.items()}
EVENT_KIND_CODE: dict[str, int] = {name: getattr(TraceEvent, name) for name in ev.EVENT_KINDS}
EVENT_KIND_NAME: dict[int, str] = {code: name for name, code in EVENT_KIND_CODE.items()}
FEEDBACK_CODE: dict[str, int] = {name: getattr(SegmentFeedback, name) for name in ev.FEEDBACK_STATES}
FEEDBACK_NAME: dict[int, str] = {code: name for name, code in FEEDBACK_CODE.items()}


# --------------------------------------------------------------------------------------- time
def to_stamp(t: float) -> Time:
    """Float seconds → ``builtin_interfaces/Time`` (nan/negative → zero stamp: "unknown")."""
    if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        return Time(sec=0, nanosec=0)
    ns = int(round(float(t) * 1e9))
    sec, nanosec = divmod(ns, 1_000_000_000)
    if sec > INT32_MAX:
        raise ValueError(f"time {t} s does not fit builtin_interfaces/Time")
    return Time(sec=sec, nanosec=nanosec)


def from_stamp(stamp: Time) -> float:
    """``builtin_interfaces/Time`` → float seconds (a zero stamp gives 0.0)."""
    return stamp.sec + stamp.nanosec * 1e-9


def stamp_ns(stamp: Time) -> int:
    """Stamp as integer nanoseconds (bag timestamps are ns)."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


# --------------------------------------------------------------------------------------- TUF
def tuf_to_msg(tuf: TUF | None) -> Tuf:
    """``None`` (a task without a TUF: ``auto``) is the unset, all-zero ``Tuf``."""
    if tuf is None:
        return Tuf()
    return Tuf(ert=float(tuf.ert), alpha=float(tuf.alpha), beta=float(tuf.beta))


def is_auto_tuf(msg: Tuf) -> bool:
    """An unset ``Tuf`` field (ert, alpha, beta all 0): the task names no TUF."""
    return msg.ert == 0.0 and msg.alpha == 0.0 and msg.beta == 0.0


def tuf_from_msg(msg: Tuf) -> TUF:
    """Raises :class:`TaskRejected` for numbers that are no valid TUF (NaN, alpha > 0, beta <= 0...)."""
    try:
        return TUF(ert=msg.ert, alpha=msg.alpha, beta=msg.beta)
    except InvalidTUF as exc:
        raise TaskRejected(f"invalid TUF: {exc}") from None


# --------------------------------------------------------------------------------------- tasks
def task_to_msg(spec: TaskSpec, stamp: float | None = None) -> Task:
    """A core task as the ``Task`` a robot (or the workload node) publishes.

    The class label and trace id travel (reports group by them); simulation-only fields (reference
    plan, recorded execution times) have no place in the message: the planner's simulated engine
    finds plans by other means.
    """
    msg = Task()
    if stamp is not None:
        msg.header.stamp = to_stamp(stamp)
    msg.task_id = spec.task_id
    msg.agent_id = spec.agent_id
    msg.robot_type = spec.robot_type
    msg.skill_set = spec.skill_set
    msg.instruction = spec.instruction
    msg.scene = spec.scene or ""
    msg.tuf = tuf_to_msg(spec.tuf)
    if isinstance(spec.max_tokens, int) and not isinstance(spec.max_tokens, bool):
        msg.max_tokens = min(max(spec.max_tokens, 0), UINT32_MAX)
    msg.task_class = spec.task_class or ""
    if isinstance(spec.trace_id, int) and 0 < spec.trace_id <= UINT32_MAX:
        msg.trace_id = spec.trace_id
    return msg


def task_from_msg(msg: Task, arrival: float, default_max_tokens: int = DEFAULT_MAX_TOKENS) -> TaskSpec:
    """A received ``Task`` as a :class:`TaskSpec` arriving at ``arrival`` (planner clock).

    Checks what the message alone can tell (limits of every field, TUF numbers, non-empty required
    fields); the planner's intake checks the rest (skill set known, prompt fits). Raises
    :class:`TaskRejected`.
    """
    # an unset Tuf (all zeros) asks for ``auto``: the planner's urgency classifier derives it from the
    # instruction (or rejects the task when it runs without one); any other TUF is checked as given
    tuf = None if is_auto_tuf(msg.tuf) else tuf_from_msg(msg.tuf)
    limits.check_task_fields(task_fields(msg))
    for name in ("agent_id", "robot_type", "skill_set", "instruction"):
        if not getattr(msg, name).strip():
            raise TaskRejected(f"{name} is empty")
    max_tokens = int(msg.max_tokens) or int(default_max_tokens)
    spec = TaskSpec(task_id=msg.task_id, agent_id=msg.agent_id, robot_type=msg.robot_type,
                    skill_set=msg.skill_set, instruction=msg.instruction, tuf=tuf, arrival=float(arrival),
                    scene=msg.scene, max_tokens=max_tokens, task_class=msg.task_class.strip(),
                    trace_id=int(msg.trace_id) or None)
    # without a TUF, the other fields are checked now; the planner derives the TUF (or rejects it)
    (spec if tuf is not None else dataclasses.replace(spec, tuf=NORMAL_TUF)).validate()
    return spec


def task_fields(msg: Task) -> limits.TaskFields:
    """The inbound fields of a ``Task`` as plain values (for :func:`limits.check_task_fields`)."""
    return limits.TaskFields(task_id=msg.task_id, agent_id=msg.agent_id, robot_type=msg.robot_type,
                             skill_set=msg.skill_set, instruction=msg.instruction, scene=msg.scene,
                             task_class=msg.task_class, max_tokens=int(msg.max_tokens), ert=float(msg.tuf.ert),
                             alpha=float(msg.tuf.alpha), beta=float(msg.tuf.beta))


# --------------------------------------------------------------------------------------- segments
def split_call_args(source: str) -> list[str]:
    """Exact source text of each argument of a call ``name(a, 'b, c', 3)`` → ``["a", "'b, c'", "3"]``.

    Top-level commas inside the outermost parentheses separate arguments; commas in quotes or
    nested parentheses do not. A call without parentheses has no arguments.
    """
    open_i = source.find("(")
    close_i = source.rfind(")")
    if open_i < 0 or close_i < open_i:
        return []
    inner = source[open_i + 1:close_i]
    out: list[str] = []
    depth = 0
    quote = ""
    escaped = False
    start = 0
    for i, ch in enumerate(inner):
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        elif ch == "," and depth == 0:
            out.append(inner[start:i].strip())
            start = i + 1
    last = inner[start:].strip()
    if last or out:
        out.append(last)
    return out


def call_to_msg(call: CoreSkillCall) -> SkillCall:
    """One parsed skill call. Calls without parentheses (chatbot sentences) carry their text args."""
    if "(" in call.source:
        args = split_call_args(call.source)
    else:
        args = [a if isinstance(a, str) else str(a) for a in call.args]
    return SkillCall(name=call.name, args=args, source=call.source)


def segment_to_msg(d: Dispatch, *, final: bool | None = None, gen_start: float = math.nan,
                   gen_end: float | None = None, tokens: int = 0) -> Segment:
    """A dispatched core segment (:class:`~timely_llm_ros.core.generation.Dispatch`) as a ``Segment``.

    ``gen_start``/``tokens`` come from the task record's segment (the Dispatch does not carry them);
    ``gen_end`` defaults to the dispatch time (the planner dispatches the moment a segment is cut);
    ``final`` defaults to the Dispatch's own flag (a closing marker: no calls, empty text, final).
    """
    final = d.final if final is None else final
    msg = Segment()
    msg.task_id = d.task_id
    msg.agent_id = d.agent_id
    msg.index = int(d.seg)
    msg.text = d.text
    msg.calls = [call_to_msg(c) for c in d.calls]
    msg.final = bool(final)
    end = d.t if gen_end is None else gen_end
    msg.gen_end = to_stamp(end)
    msg.gen_start = to_stamp(gen_start if math.isfinite(gen_start) and gen_start <= end else end)
    msg.tokens = min(max(int(tokens), 0), UINT32_MAX)
    msg.exec_time_min = max(float(d.min_exec), 0.0)
    msg.exec_time_expected = max(float(d.expected_exec), msg.exec_time_min)
    return msg


# --------------------------------------------------------------------------------------- feedback
@dataclass(frozen=True, slots=True)
class Feedback:
    """A received ``SegmentFeedback`` in core terms (``state``: STARTED / DONE / FAILED)."""

    task_id: str
    agent_id: str
    index: int
    state: str
    t: float
    duration: float
    detail: str


def feedback_to_msg(task_id: str, agent_id: str, index: int, state: str, t: float, duration: float = 0.0,
                    detail: str = "") -> SegmentFeedback:
    """Robot side: ``state`` is a core name (``events.STARTED`` / ``DONE`` / ``FEEDBACK_FAILED``)."""
    if state not in FEEDBACK_CODE:
        raise ValueError(f"unknown feedback state {state!r}; expected one of {ev.FEEDBACK_STATES}")
    dur = float(duration) if math.isfinite(duration) and duration > 0 else 0.0
    return SegmentFeedback(task_id=task_id, agent_id=agent_id, index=int(index), state=FEEDBACK_CODE[state],
                           stamp=to_stamp(t), duration=dur, detail=detail)


def feedback_from_msg(msg: SegmentFeedback) -> Feedback:
    """Raises ValueError for an unknown state code or an id longer than any the planner accepts;
    the detail is clipped to :data:`limits.MAX_DETAIL` characters (it is forwarded in statuses)."""
    state = FEEDBACK_NAME.get(msg.state)
    if state is None:
        known = ", ".join(f"{code}={name}" for code, name in sorted(FEEDBACK_NAME.items()))
        raise ValueError(f"unknown SegmentFeedback state {msg.state} (expected {known})")
    for name, limit in (("task_id", limits.MAX_TASK_ID), ("agent_id", limits.MAX_AGENT_ID)):
        if len(getattr(msg, name)) > limit:
            raise ValueError(f"{name} is {len(getattr(msg, name))} characters long (limit {limit})")
    t = from_stamp(msg.stamp)
    duration = float(msg.duration)
    return Feedback(msg.task_id, msg.agent_id, int(msg.index), state, t if math.isfinite(t) else 0.0,
                    duration if math.isfinite(duration) else 0.0, limits.clip(msg.detail))


# --------------------------------------------------------------------------------------- status
def status_to_msg(task_id: str, agent_id: str, state: str, t: float, reason: str = "",
                  response_time: float = math.nan, utility: float = math.nan) -> TaskStatus:
    """``state`` is a core task-state name; response fields are set when ``response_time`` is known."""
    if state not in TASK_STATE_CODE:
        raise ValueError(f"unknown task state {state!r}; expected one of {ev.TASK_STATES}")
    msg = TaskStatus(task_id=task_id, agent_id=agent_id, state=TASK_STATE_CODE[state], reason=reason,
                     stamp=to_stamp(t))
    if isinstance(response_time, (int, float)) and math.isfinite(response_time):
        msg.has_response = True
        msg.response_time = max(float(response_time), 0.0)
        msg.utility = float(utility) if math.isfinite(utility) else 0.0
    return msg


def status_name(msg: TaskStatus) -> str:
    """Core state name of a ``TaskStatus`` (ValueError for an unknown code)."""
    try:
        return TASK_STATE_NAME[msg.state]
    except KeyError:
        raise ValueError(f"unknown TaskStatus state {msg.state}") from None


# --------------------------------------------------------------------------------------- trace
def event_to_msg(e: ev.TraceEvent) -> TraceEvent:
    """A core trace event as a ``TraceEvent`` message (kind by name → constant)."""
    try:
        kind = EVENT_KIND_CODE[e.kind]
    except KeyError:
        raise ValueError(f"unknown trace event kind {e.kind!r}") from None
    seg = int(e.seg) if -1 <= e.seg <= INT32_MAX else -1
    value = float(e.value) if math.isfinite(e.value) else 0.0
    return TraceEvent(stamp=to_stamp(e.t), task_id=e.task_id, agent_id=e.agent_id, segment_index=seg,
                      kind=kind, value=value, detail=e.detail)


def event_from_msg(msg: TraceEvent) -> ev.TraceEvent:
    """A ``TraceEvent`` message back as the core's event (ValueError for an unknown kind code)."""
    kind = EVENT_KIND_NAME.get(msg.kind)
    if kind is None:
        raise ValueError(f"unknown TraceEvent kind {msg.kind}")
    return ev.TraceEvent(from_stamp(msg.stamp), kind, msg.task_id, msg.agent_id, int(msg.segment_index),
                         float(msg.value), msg.detail)
