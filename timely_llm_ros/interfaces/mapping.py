"""Core values <-> timely_llm_ros message fields, written once for both message-class back-ends.

The same messages are built in two places: the ROS nodes publish rclpy messages (classes of the
interface build), the bag writer and reader work without ROS on ``rosbags`` typestore classes. Both
are plain "class with keyword fields" objects, so the field mapping is written here once and takes
the classes from a :class:`MessageTypes` back-end (:class:`timely_llm_ros.ros.convert.RclpyTypes`,
:class:`timely_llm_ros.lrtrace.typestore.BagTypes`). A message written by either back-end reads back
to the same core value (test/interfaces/test_message_adapter.py checks every field).

Conventions: times are float seconds on the planner's clock in the core and
``builtin_interfaces/Time`` in messages (nan, negative or zero -> the zero stamp, "unknown");
task states, event kinds and feedback states are names in the core (``"COMPLETED"``) and the uint8
constants of the same names in ``msg/*.msg`` (the tables are read from the message constants, so
they cannot drift apart). Numbers going out are clamped to their field's range instead of making
the serialiser raise; messages coming in are untrusted: :meth:`MessageAdapter.task_from_msg` checks
every field (:mod:`timely_llm_ros.core.limits`) and raises :class:`TaskRejected` with a reason for
the sender, the other readers raise ``ValueError`` for an unknown code.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Protocol

from timely_llm_ros.core import events as ev
from timely_llm_ros.core import limits
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, TUF

DEFAULT_MAX_TOKENS = 256  # Task.max_tokens == 0 means "the planner's default"
UINT32_MAX = 2**32 - 1
INT32_MAX = 2**31 - 1

# String fields of msg/Task.msg that a TaskSpec carries under the same name, copied as they are both
# ways (None -> ""). A new string field of Task.msg that TaskSpec also has: one entry here.
TASK_TEXT_FIELDS = (
    "task_id",
    "agent_id",
    "robot_type",
    "skill_set",
    "instruction",
    "scene",
    "task_class",
    "overrun",
)


class MessageTypes(Protocol):
    """A message-class back-end: builds a message by its short type name (``"Task"``, ``"Time"``,
    ``"Header"``, ...) from keyword fields (positional-only: ``SkillCall`` has a field ``name``), and
    reads the integer constants of a type."""

    def new(self, msgtype: str, /, **fields: Any) -> Any: ...

    def constant(self, name: str, const: str) -> int: ...


# --------------------------------------------------------------------------------------- values
def seconds_to_ns(t: float) -> int:
    """Float seconds -> integer nanoseconds (nan, negative or zero -> 0: "unknown"; bag log times are
    unsigned)."""
    if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        return 0
    return int(round(float(t) * 1e9))


def from_stamp(stamp: Any) -> float:
    """``builtin_interfaces/Time`` -> float seconds (a zero stamp gives 0.0)."""
    return stamp.sec + stamp.nanosec * 1e-9


def stamp_ns(stamp: Any) -> int:
    """Stamp as integer nanoseconds (bag timestamps are ns)."""
    return stamp.sec * 1_000_000_000 + stamp.nanosec


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def _num(x: Any) -> float:
    """A finite float, else 0.0 (a field that cannot carry nan/inf gets "unset")."""
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else 0.0


def _uint32(x: Any) -> int:
    return min(max(x, 0), UINT32_MAX) if isinstance(x, int) and not isinstance(x, bool) else 0


def is_auto_tuf(msg: Any) -> bool:
    """An unset ``Tuf`` field (ert, alpha, beta all 0): the task names no TUF."""
    return msg.ert == 0.0 and msg.alpha == 0.0 and msg.beta == 0.0


def tuf_from_msg(msg: Any) -> TUF:
    """Raises :class:`TaskRejected` for numbers that are no valid TUF (NaN, alpha > 0, beta <= 0...)."""
    return limits.tuf_or_reject(float(msg.ert), float(msg.alpha), float(msg.beta))


def task_fields(msg: Any) -> limits.TaskFields:
    """The inbound fields of a ``Task`` as plain values (for :func:`limits.check_task_fields`)."""
    return limits.TaskFields(
        task_id=msg.task_id,
        agent_id=msg.agent_id,
        robot_type=msg.robot_type,
        skill_set=msg.skill_set,
        instruction=msg.instruction,
        scene=msg.scene,
        task_class=msg.task_class,
        max_tokens=int(msg.max_tokens),
        ert=float(msg.tuf.ert),
        alpha=float(msg.tuf.alpha),
        beta=float(msg.tuf.beta),
    )


def task_from_msg(msg: Any, arrival: float, default_max_tokens: int = DEFAULT_MAX_TOKENS) -> TaskSpec:
    """A received ``Task`` as a :class:`TaskSpec` arriving at ``arrival`` (planner clock).

    Checks what the message alone can tell (limits of every field, TUF numbers, non-empty required
    fields, ``TaskSpec.validate``); the planner's intake checks the rest (skill set known, prompt
    fits). Raises :class:`TaskRejected`.
    """
    tuf = limits.check_task_fields(task_fields(msg))
    return task_from_checked_msg(msg, arrival, tuf, default_max_tokens)


def task_from_checked_msg(
    msg: Any, arrival: float, tuf: TUF | None, default_max_tokens: int = DEFAULT_MAX_TOKENS
) -> TaskSpec:
    """:func:`task_from_msg` for a caller that already ran :func:`limits.check_task_fields` on
    ``task_fields(msg)`` (the planner does, first, so that a rejection can name the task): ``tuf`` is
    what that check returned, so the message's TUF is validated once. None: an unset Tuf (all zeros)
    asks for ``auto``, the planner's urgency classifier derives it from the instruction (or rejects
    the task when it runs without one)."""
    text = {name: getattr(msg, name) for name in TASK_TEXT_FIELDS}
    text["task_class"] = text["task_class"].strip()
    text["overrun"] = text["overrun"].strip()[:32]  # validate() rejects unknown ones; no name is longer
    spec = TaskSpec(
        **text,
        tuf=tuf,
        arrival=float(arrival),
        max_tokens=int(msg.max_tokens) or int(default_max_tokens),
        trace_id=int(msg.trace_id) or None,
    )
    # without a TUF, the other fields are checked now; the planner derives the TUF (or rejects it)
    (spec if tuf is not None else dataclasses.replace(spec, tuf=NORMAL_TUF)).validate()
    return spec


def split_call_args(source: str) -> list[str]:
    """Exact source text of each argument of a call ``name(a, 'b, c', 3)`` → ``["a", "'b, c'", "3"]``.

    Top-level commas inside the outermost parentheses separate arguments; commas in quotes or
    nested parentheses do not. A call without parentheses has no arguments.
    """
    open_i = source.find("(")
    close_i = source.rfind(")")
    if open_i < 0 or close_i < open_i:
        return []
    inner = source[open_i + 1 : close_i]
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


def check_feedback_ids(msg: Any) -> None:
    """ValueError for a ``SegmentFeedback`` whose ids are longer than any the planner accepts."""
    for name, limit in (("task_id", limits.MAX_TASK_ID), ("agent_id", limits.MAX_AGENT_ID)):
        if len(getattr(msg, name)) > limit:
            raise ValueError(f"{name} is {len(getattr(msg, name))} characters long (limit {limit})")


@dataclass(frozen=True, slots=True)
class Feedback:
    """A received ``SegmentFeedback`` in core terms (``state``: STARTED / DONE / FAILED / PROGRESS)."""

    task_id: str
    agent_id: str
    index: int
    state: str
    t: float
    duration: float
    detail: str
    nonce: str = ""  # Segment.nonce echoed by the robot


def _table(types: MessageTypes, msg: str, names: tuple[str, ...]) -> tuple[dict[str, int], dict[int, str]]:
    codes = {name: int(types.constant(msg, name)) for name in names}
    return codes, {code: name for name, code in codes.items()}


# --------------------------------------------------------------------------------------- adapter
class MessageAdapter:
    """Every core value <-> message conversion, on the message classes of one back-end.

    ``SkillCall.args`` carries the exact source text of each argument, as msg/SkillCall.msg defines
    it (``say('hi')`` -> ``["'hi'"]``), on both back-ends: a simulator bag and a recording of a real
    fleet carry the same segments. Calls without parentheses (chatbot sentences) carry their parsed
    values as text.
    """

    def __init__(self, types: MessageTypes) -> None:
        self.types = types
        # name <-> uint8 code tables (core names equal the constant names of msg/*.msg)
        self.task_state_code, self.task_state_name = _table(types, "TaskStatus", ev.TASK_STATES)
        self.event_kind_code, self.event_kind_name = _table(types, "TraceEvent", ev.EVENT_KINDS)
        self.feedback_code, self.feedback_name = _table(types, "SegmentFeedback", ev.FEEDBACK_STATES)

    # ----------------------------------------------------------------------------------- time
    def to_stamp(self, t: float) -> Any:
        """Float seconds → ``builtin_interfaces/Time`` (nan/negative → zero stamp: "unknown")."""
        sec, nanosec = divmod(seconds_to_ns(t), 1_000_000_000)
        if sec > INT32_MAX:
            raise ValueError(f"time {t} s does not fit builtin_interfaces/Time")
        return self.types.new("Time", sec=sec, nanosec=nanosec)

    # ----------------------------------------------------------------------------------- tasks
    def tuf_to_msg(self, tuf: TUF | None) -> Any:
        """``None`` (a task without a TUF: ``auto``) is the unset, all-zero ``Tuf``; numbers that a
        message cannot carry (nan, inf) are written as zeros."""
        return self.types.new(
            "Tuf",
            ert=_num(getattr(tuf, "ert", 0.0)),
            alpha=_num(getattr(tuf, "alpha", 0.0)),
            beta=_num(getattr(tuf, "beta", 0.0)),
        )

    def task_to_msg(self, spec: TaskSpec, stamp: float | None = None) -> Any:
        """A core task as the ``Task`` a robot (or the workload node) publishes; ``stamp``: header time.

        The class label and trace id travel (reports group by them); simulation-only fields (reference
        plan, recorded execution times) have no place in the message: the planner's simulated engine
        finds plans by other means.
        """
        header = self.types.new("Header", stamp=self.to_stamp(0.0 if stamp is None else stamp), frame_id="")
        trace_id = getattr(spec, "trace_id", None)
        trace_id = trace_id if isinstance(trace_id, int) and 0 < trace_id <= UINT32_MAX else 0  # 0 = none
        text = {name: _text(getattr(spec, name, "")) for name in TASK_TEXT_FIELDS}
        return self.types.new(
            "Task",
            header=header,
            tuf=self.tuf_to_msg(spec.tuf),
            max_tokens=_uint32(spec.max_tokens),
            trace_id=trace_id,
            **text,
        )

    task_from_msg = staticmethod(task_from_msg)

    # ----------------------------------------------------------------------------------- segments
    def call_to_msg(self, call: Any) -> Any:
        """One parsed skill call (``args``: see the class docstring)."""
        source = _text(getattr(call, "source", ""))
        if "(" in source:
            args = split_call_args(source)
        else:
            args = [a if isinstance(a, str) else repr(a) for a in getattr(call, "args", ())]
        return self.types.new("SkillCall", name=str(call.name), args=args, source=source)

    def segment_to_msg(
        self,
        task_id: str,
        agent_id: str,
        index: int,
        text: str,
        calls: Any,
        *,
        final: bool,
        gen_start: float,
        gen_end: float,
        tokens: int,
        min_exec: float,
        expected_exec: float,
        nonce: str = "",
    ) -> Any:
        """One segment: generation times ordered (``gen_start`` <= ``gen_end``), the execution-time
        estimates finite, >= 0 and ordered, the token count in range."""
        gen_start = gen_start if math.isfinite(gen_start) and gen_start <= gen_end else gen_end
        lo = max(_num(min_exec), 0.0)
        hi = float(expected_exec) if math.isfinite(expected_exec) else lo
        return self.types.new(
            "Segment",
            task_id=str(task_id),
            agent_id=str(agent_id),
            index=int(index),
            text=str(text),
            calls=[self.call_to_msg(c) for c in calls],
            final=bool(final),
            gen_start=self.to_stamp(gen_start),
            gen_end=self.to_stamp(gen_end),
            tokens=min(max(int(tokens), 0), UINT32_MAX),
            exec_time_min=lo,
            exec_time_expected=max(hi, lo),
            nonce=str(nonce),
        )

    # ----------------------------------------------------------------------------------- feedback
    def feedback_to_msg(
        self,
        task_id: str,
        agent_id: str,
        index: int,
        state: str,
        t: float,
        duration: float = 0.0,
        detail: str = "",
        nonce: str = "",
    ) -> Any:
        """Robot side: ``state`` is a core name (``events.STARTED`` / ``DONE`` / ``FEEDBACK_FAILED``...)."""
        if state not in self.feedback_code:
            raise ValueError(f"unknown feedback state {state!r}; expected one of {ev.FEEDBACK_STATES}")
        dur = float(duration) if math.isfinite(duration) and duration > 0 else 0.0
        return self.types.new(
            "SegmentFeedback",
            task_id=task_id,
            agent_id=agent_id,
            index=int(index),
            state=self.feedback_code[state],
            stamp=self.to_stamp(t),
            duration=dur,
            detail=detail,
            nonce=str(nonce),
        )

    def feedback_from_msg(self, msg: Any) -> Feedback:
        """ValueError for an unknown state code; the detail is clipped to :data:`limits.MAX_DETAIL`
        characters (it is forwarded in statuses)."""
        state = self.feedback_name.get(int(msg.state))
        if state is None:
            known = ", ".join(f"{code}={name}" for code, name in sorted(self.feedback_name.items()))
            raise ValueError(f"unknown SegmentFeedback state {msg.state} (expected {known})")
        t = from_stamp(msg.stamp)
        duration = float(msg.duration)
        return Feedback(
            msg.task_id,
            msg.agent_id,
            int(msg.index),
            state,
            t if math.isfinite(t) else 0.0,
            duration if math.isfinite(duration) else 0.0,
            limits.clip(msg.detail),
            limits.clip(msg.nonce, 64),
        )

    # ----------------------------------------------------------------------------------- status
    def status_to_msg(
        self,
        task_id: str,
        agent_id: str,
        state: str,
        t: float,
        reason: str = "",
        response_time: float = math.nan,
        utility: float = math.nan,
    ) -> Any:
        """``state`` is a core task-state name; response fields are set when ``response_time`` is known."""
        if state not in self.task_state_code:
            raise ValueError(f"unknown task state {state!r}; expected one of {ev.TASK_STATES}")
        has = isinstance(response_time, (int, float)) and math.isfinite(response_time)
        return self.types.new(
            "TaskStatus",
            task_id=task_id,
            agent_id=agent_id,
            state=self.task_state_code[state],
            reason=reason,
            stamp=self.to_stamp(t),
            has_response=has,
            response_time=max(float(response_time), 0.0) if has else 0.0,
            utility=_num(utility) if has else 0.0,
        )

    def status_from_msg(self, msg: Any) -> tuple[str, float, str, float, float]:
        """(state name, time, reason, response time or nan, utility or nan); ValueError for a bad code."""
        state = self.task_state_name.get(int(msg.state))
        if state is None:
            raise ValueError(f"unknown TaskStatus state {msg.state}")
        if msg.has_response:
            return state, from_stamp(msg.stamp), msg.reason, float(msg.response_time), float(msg.utility)
        return state, from_stamp(msg.stamp), msg.reason, math.nan, math.nan

    # ----------------------------------------------------------------------------------- trace
    def event_to_msg(self, e: ev.TraceEvent) -> Any:
        """A core trace event as a ``TraceEvent`` message (kind by name → constant)."""
        try:
            kind = self.event_kind_code[e.kind]
        except KeyError:
            raise ValueError(f"unknown trace event kind {e.kind!r}") from None
        seg = int(e.seg) if -1 <= e.seg <= INT32_MAX else -1
        return self.types.new(
            "TraceEvent",
            stamp=self.to_stamp(e.t),
            task_id=str(e.task_id),
            agent_id=str(e.agent_id),
            segment_index=seg,
            kind=kind,
            value=_num(e.value),
            detail=str(e.detail),
        )

    def event_from_msg(self, msg: Any) -> ev.TraceEvent:
        """A ``TraceEvent`` message back as the core's event (ValueError for an unknown kind code)."""
        kind = self.event_kind_name.get(int(msg.kind))
        if kind is None:
            raise ValueError(f"unknown TraceEvent kind {msg.kind}")
        return ev.TraceEvent(
            from_stamp(msg.stamp),
            kind,
            msg.task_id,
            msg.agent_id,
            int(msg.segment_index),
            float(msg.value),
            msg.detail,
        )
