"""Which robot feedback the planner believes.

Anyone on the DDS domain can publish a ``SegmentFeedback``, and DDS may deliver a message twice
after a reconnection. Before this check a repeated (or forged) DONE for segment 0 counted as the
DONE of another segment: the task was marked COMPLETED while the robot still executed segment 1.

Feedback is applied only if it is about **the segment the robot currently holds**, comes **from the
robot the segment was sent to**, and moves that segment forward; anything else is ignored (the
caller logs it, rate-limited) and changes nothing, so every message is idempotent:

==========  =========================================================================================
state       accepted when
==========  =========================================================================================
STARTED     the segment is the robot's current one (the oldest dispatched segment not DONE) and has
            not started yet
PROGRESS    the segment is the robot's current one (a heartbeat; it proves the robot is alive)
DONE        the segment is the robot's current one (a DONE without STARTED implies the start)
FAILED      the segment was dispatched and is not DONE — a robot may fail a segment still queued on
            it (shut-down, gap); a failure can only stop the task, never make a robot act
==========  =========================================================================================

A task that is already terminal accepts nothing. A held segment (planned but not yet sent, see
:mod:`.sched.agent_queue`) is not dispatched: no robot can hold it.

**The robot's own sequence** (:class:`FeedbackRules`, on in the ROS planner node, where any participant
of the DDS domain can publish feedback; off for the in-process robots of the simulators): a DONE
counts only for a segment the robot reported STARTED, and no earlier than ``min_exec_fraction`` × the
segment's *minimum* execution time (the execution-time model's lower bound, paper §4.3) after that
STARTED (not for a loop body, which robots run when the loop closes; :data:`CLOCK_SLACK` allowed);
an earlier one is reported as :class:`TooEarly`, which the ROS planner applies at that time.
Before, a forged DONE 0, DONE 1, DONE 2 … (right robot id, in order) completed an in-flight
task at once and made its robot abort the running motion. The node adds a per-segment nonce that the
robot echoes (:class:`SegmentNonces`), so feedback from a participant that never saw the segment is
refused too. What remains possible for a participant that reads the segment topics is documented in
the README ("Reliability and security"): only DDS-Security stops it.
"""

from __future__ import annotations

import math
import secrets
from dataclasses import dataclass

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.generation import TaskRecord


@dataclass(frozen=True, slots=True)
class FeedbackRules:
    """How strictly feedback must follow the robot's own sequence (see the module docstring).

    ``require_started``: DONE only for a segment whose STARTED was applied. ``min_exec_fraction``: a
    DONE earlier than this fraction of the segment's minimum execution time after its STARTED is
    implausible and ignored (0 = no time check).
    """

    require_started: bool = False
    min_exec_fraction: float = 0.0


TRUSTED = FeedbackRules()  # the simulators' in-process robots


class SegmentNonces:
    """One unguessable token per dispatched segment; the robot echoes it in its feedback.

    A participant that did not receive the segment cannot produce it (64 random bits), and a replay
    of an older task's feedback carries another segment's token. Bounded: a task's tokens are
    dropped when it ends (:meth:`forget`).
    """

    def __init__(self) -> None:
        self._tokens: dict[str, dict[int, str]] = {}

    def issue(self, task_id: str, seg: int) -> str:
        token = secrets.token_hex(8)
        self._tokens.setdefault(task_id, {})[seg] = token
        return token

    def check(self, task_id: str, seg: int, nonce: str) -> str | None:
        """Why ``nonce`` is refused for segment ``seg`` of ``task_id`` (None: it is the one issued;
        also None when no token was issued for it, e.g. a segment sent before a planner restart)."""
        token = self._tokens.get(task_id, {}).get(seg)
        if token is None or secrets.compare_digest(token, nonce):
            return None
        return "wrong nonce (not the one sent with the segment: forged or replayed)" if nonce else "no nonce"

    def forget(self, task_id: str) -> None:
        self._tokens.pop(task_id, None)

    def __len__(self) -> int:
        return len(self._tokens)


CLOCK_SLACK = 0.01  # s: stamp resolution and rounding between a robot's STARTED and DONE


def _in_open_loop(rec: TaskRecord, seg: int) -> bool:
    """Segment ``seg`` ends inside a loop not closed yet (MiniSpec ``n{...}``): robots run a loop's
    body only once its closing ``}`` arrives (that segment then takes the time), so the body
    segment's DONE comes at once."""
    depth = 0
    for s in rec.segments[: seg + 1]:
        depth += s.text.count("{") - s.text.count("}")
    return depth > 0


def current_segment(rec: TaskRecord) -> int:
    """Index of the segment the robot holds: the oldest dispatched one not DONE (-1 if none)."""
    for s in rec.segments:
        if math.isnan(s.dispatch):
            return -1
        if math.isnan(s.exec_end):
            return s.idx
    return -1


def feedback_problem(
    rec: TaskRecord,
    seg: int,
    state: str,
    agent: str | None = None,
    t: float = math.nan,
    rules: FeedbackRules = TRUSTED,
) -> str | None:
    """Why feedback ``state`` for segment ``seg`` of ``rec`` must be ignored, or None to apply it.

    ``agent`` is the sender's agent id (None: not known, e.g. the simulator's own robots); ``t`` when
    the feedback happened (planner clock), used by ``rules``.
    """
    if state not in ev.FEEDBACK_STATES:
        return f"unknown feedback state {state!r}"
    if agent is not None and agent != rec.agent_id:
        return f"sent by {agent!r}, but the task belongs to robot {rec.agent_id!r}"
    if rec.state in ev.TERMINAL_STATES:
        return f"the task is already {rec.state}"
    if not 0 <= seg < len(rec.segments) or math.isnan(rec.segments[seg].dispatch):
        return f"segment {seg} was never dispatched (the task has {len(rec.segments)} planned)"
    s = rec.segments[seg]
    if state == ev.FEEDBACK_FAILED:
        return "segment already DONE" if not math.isnan(s.exec_end) else None
    head = current_segment(rec)
    if seg != head:
        if not math.isnan(s.exec_end):
            return f"duplicate {state}: segment {seg} is already DONE"
        return f"segment {seg} is not the robot's current segment ({head})"
    if state == ev.STARTED and not math.isnan(s.exec_start):
        return f"duplicate STARTED for segment {seg}"
    if state == ev.DONE and rules.require_started:
        if math.isnan(s.exec_start):
            return f"DONE for segment {seg}, which the robot never reported STARTED"
        earliest = rules.min_exec_fraction * (s.min_exec if math.isfinite(s.min_exec) else 0.0)
        if _in_open_loop(rec, seg):  # the robot defers a loop body until the loop closes
            earliest = 0.0
        if t - s.exec_start < earliest - CLOCK_SLACK:
            return TooEarly(
                f"DONE for segment {seg} only {t - s.exec_start:.3f} s after its STARTED; no robot "
                f"executes it in less than {earliest:.3f} s ({rules.min_exec_fraction:g} x its minimum "
                f"execution time {s.min_exec:.3f} s)",
                s.exec_start + earliest,
            )
    return None


class TooEarly(str):
    """A DONE that came sooner than the segment's plausible execution time: the caller may apply it
    at :attr:`at` (planner clock) instead of now, in the robot's order (a fast robot, or a model
    whose minimum is too high, is delayed a little, never failed; a forged early DONE counts no
    earlier than a real robot could have finished)."""

    at: float

    def __new__(cls, text: str, at: float) -> TooEarly:
        obj = super().__new__(cls, text)
        obj.at = at
        return obj
