"""Limits on everything a planner receives, checked at the boundary.

Why: any node on the DDS domain may publish a Task or a SegmentFeedback. A field that is legal for
the message type but absurd for the planner must be refused *with a reason*, never turned into a
crash later: an ``agent_id`` of 232 characters made the segment topic name too long and killed the
planner (and the recorder); a TUF with ERT = 1e12 s or alpha = -1e-12 gave a utility horizon of
1e12 s, which overflowed the segment lifespan; a 1 MB failure detail was forwarded to every
subscriber of ``/task_status``.

Every limit below keeps every time derived from a task finite and representable (deadlines,
horizons, ``builtin_interfaces/Time``, QoS durations in int64 nanoseconds) and every forwarded text
small. The numbers are generous for real robots (an id of 64 characters, an instruction of 8000).

Also here: :func:`clip` (size limit of forwarded text), :class:`RateLimiter` (one log line per key
and period instead of one per bad message) and :class:`RecentIds` (bounded memory of task ids).
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from timely_llm_ros.core.task import TaskRejected
from timely_llm_ros.core.tuf import TUF, InvalidTUF

# ROS: a topic name is limited by the RMW (Fast DDS: 255 characters for "rt/<name>" incl. the
# partition); /<agent>/skill_segments must stay far below it. 64 is the usual robot-name budget.
MAX_AGENT_ID = 64
MAX_TASK_ID = 128
MAX_NAME = 64  # robot_type, skill_set, task_class
MAX_INSTRUCTION = 8_000  # characters; the prompt must fit the engine context anyway
MAX_SCENE = 16_000
MAX_DETAIL = 1_000  # feedback detail / failure reason forwarded in statuses and events
MAX_MAX_TOKENS = 1_000_000

# TUF: every derived time stays finite and fits int64 nanoseconds (9.2e9 s) with room to spare.
MAX_ERT_S = 86_400.0  # one day
MAX_BETA = 1e6
MAX_ABS_ALPHA = 1e6  # utility per second
MAX_HORIZON_S = 1e6  # ERT + beta / -alpha (when alpha < 0): about 11.6 days


@dataclass(frozen=True, slots=True)
class TaskFields:
    """The inbound fields of one Task, as plain values (the ROS adapter fills it)."""

    task_id: str
    agent_id: str
    robot_type: str
    skill_set: str
    instruction: str
    scene: str
    task_class: str
    max_tokens: int
    ert: float
    alpha: float
    beta: float


def _length(name: str, value: str, limit: int) -> None:
    if len(value) > limit:
        raise TaskRejected(f"{name} is {len(value)} characters long; the limit is {limit}")


def check_task_fields(f: TaskFields) -> TUF | None:
    """Raise :class:`TaskRejected` for a field beyond its limit (empty fields are checked later).

    Returns the task's TUF, checked here once for the whole ROS intake (None: all zeros, ``auto``)."""
    _length("task_id", f.task_id, MAX_TASK_ID)
    _length("agent_id", f.agent_id, MAX_AGENT_ID)
    for name in ("robot_type", "skill_set", "task_class"):
        _length(name, getattr(f, name), MAX_NAME)
    _length("instruction", f.instruction, MAX_INSTRUCTION)
    _length("scene", f.scene, MAX_SCENE)
    for name in ("task_id", "agent_id", "robot_type", "skill_set", "task_class"):
        if any(ord(c) < 32 or ord(c) == 127 for c in getattr(f, name)):
            raise TaskRejected(f"{name} contains control characters")
    if not 0 <= f.max_tokens <= MAX_MAX_TOKENS:
        raise TaskRejected(
            f"max_tokens {f.max_tokens} is out of range (0 = default, at most {MAX_MAX_TOKENS})"
        )
    if (f.ert, f.alpha, f.beta) == (0.0, 0.0, 0.0):  # all zeros: no TUF (``auto``, derived by the planner)
        return None
    return check_tuf_range(f.ert, f.alpha, f.beta)


def tuf_or_reject(ert: float, alpha: float, beta: float) -> TUF:
    """The TUF of these numbers, or :class:`TaskRejected` "invalid TUF: <why>" (the one wording of a
    TUF that is no TUF at all, for the ROS intake and :meth:`Intake.prepare` alike)."""
    try:
        return TUF(ert, alpha, beta)
    except InvalidTUF as exc:
        raise TaskRejected(f"invalid TUF: {exc}") from None


def check_tuf_range(ert: float, alpha: float, beta: float) -> TUF:
    """TUF numbers a planner can compute with: valid (Eq. 1) and every derived time finite."""
    tuf = tuf_or_reject(ert, alpha, beta)  # not a TUF at all (finite, alpha <= 0, beta > 0)
    if not 0.0 <= ert <= MAX_ERT_S:
        raise TaskRejected(f"invalid TUF: ERT must be within [0, {MAX_ERT_S:g}] s, got {ert!r}")
    if not -MAX_ABS_ALPHA <= alpha <= 0.0:
        raise TaskRejected(
            f"invalid TUF: alpha must be within [-{MAX_ABS_ALPHA:g}, 0] (utility may not "
            f"grow with delay), got {alpha!r}"
        )
    if not 0.0 < beta <= MAX_BETA:
        raise TaskRejected(f"invalid TUF: beta must be within (0, {MAX_BETA:g}], got {beta!r}")
    if alpha < 0.0:
        horizon = tuf.zero_time
        if not horizon <= MAX_HORIZON_S:
            raise TaskRejected(
                f"invalid TUF: utility horizon ERT + beta/-alpha = {horizon:.3g} s exceeds "
                f"{MAX_HORIZON_S:g} s (use alpha = 0 for a utility that never decays)"
            )
    return tuf


def clip(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was cut (clipping twice changes
    nothing: a clipped text is within the limit)."""
    if not isinstance(text, str):
        text = str(text)
    if len(text) <= limit:
        return text
    keep = limit
    while True:  # the note's own length depends on the number it states
        note = f"… [{len(text) - keep} more characters cut]"
        if keep + len(note) <= limit or keep == 0:
            return text[:keep] + note
        keep = max(0, limit - len(note))


class RateLimiter:
    """At most one event per ``key`` per ``period`` seconds; counts what it suppressed.

    Why: one warning per bad message lets a flood of forged feedback flood the log (and the disk) too.
    ``allow(key)`` returns None when the event must stay quiet, else the number of events suppressed
    for that key since the last one allowed (so the log line can say "and N more").
    """

    STALE_PERIODS = 10  # a suppressed count older than this many periods is dropped unreported

    def __init__(self, period: float, clock: Callable[[], float], max_keys: int = 1024) -> None:
        self.period = float(period)
        self.clock = clock
        self.max_keys = max_keys
        self._last: OrderedDict[str, tuple[float, int]] = OrderedDict()
        self._lock = threading.Lock()  # a node's threads share one limiter (host + planner thread)
        self._pruned_at = -math.inf

    def allow(self, key: str) -> int | None:
        now = self.clock()
        with self._lock:
            if now - self._pruned_at >= self.period:  # at most once a period: allow stays O(1)
                self._prune(now)
            last = self._last.get(key)
            if last is not None and now - last[0] < self.period:
                self._last[key] = (last[0], last[1] + 1)
                return None
            self._last[key] = (now, 0)
            self._last.move_to_end(key)
            while len(self._last) > self.max_keys:
                self._last.popitem(last=False)
            return 0 if last is None else last[1]

    def prune(self, now: float | None = None) -> None:
        """Forget keys whose period is over (issue 27: memory returns to its baseline once the agents
        that caused warnings are gone, not only at ``max_keys``). A key that suppressed nothing is
        dropped as soon as its period ends (``allow`` would answer 0 either way); one that suppressed
        events keeps its count for the next report until ``STALE_PERIODS`` periods have passed.
        Keys are ordered by the time of their last report, so this stops at the first young one."""
        with self._lock:
            self._prune(self.clock() if now is None else now)

    def _prune(self, now: float) -> None:
        self._pruned_at = now
        doomed = []
        for key, (t, suppressed) in self._last.items():
            age = now - t
            if age < self.period:
                break  # ordered by report time: the rest are younger
            if not suppressed or age >= self.STALE_PERIODS * self.period:
                doomed.append(key)
        for key in doomed:
            del self._last[key]

    def __len__(self) -> int:
        return len(self._last)


class RecentIds:
    """A set of the most recent ``capacity`` ids (oldest forgotten first): bounded memory.

    Duplicate task ids are refused while the first task is open or recently finished; an id seen
    long ago may be reused (the memory would otherwise grow with every task, forever).
    """

    def __init__(self, capacity: int) -> None:
        if capacity < 1:
            raise ValueError(f"capacity must be >= 1, got {capacity}")
        self.capacity = capacity
        self._ids: OrderedDict[str, None] = OrderedDict()

    def __contains__(self, key: str) -> bool:
        return key in self._ids

    def __len__(self) -> int:
        return len(self._ids)

    def add(self, key: str) -> None:
        self._ids[key] = None
        self._ids.move_to_end(key)
        while len(self._ids) > self.capacity:
            self._ids.popitem(last=False)
