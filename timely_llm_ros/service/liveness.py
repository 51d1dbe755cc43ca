"""Segment timeouts that follow the robot's own progress.

A dispatched segment without feedback must not hold its task (and, one task at a time, its robot's
queue) forever: the planner fails the task with a reason. Per robot only one segment is "current"
(the oldest dispatched one not DONE; the planner sends a robot one task at a time), and only its
timer runs:

* not started yet: it must start within ``limit(expected)`` counted from when it became the robot's
  current segment — its dispatch, or the DONE of the segment before it. A segment held while the
  robot executed another task is dispatched only when that task ended, so a slow robot's previous
  task never starts the next task's timer early (a false timeout);
* started: it must finish within ``limit(expected)`` counted from its STARTED, **or** send a
  PROGRESS heartbeat at least every ``heartbeat_timeout`` seconds — a long motion that keeps
  reporting progress is alive however long it takes (the robot enforces its own motion limits).

``limit(expected)`` is the planner's ``segment_timeout`` rule (:func:`segment_limit`: fixed, or
factor × expected + margin).
Pure Python: the ROS planner node feeds it dispatches, feedback and the clock.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from timely_llm_ros.core.generation import Segment


def segment_limit(expected: float, fixed: float, factor: float, margin: float) -> float:
    """The planner's ``segment_timeout`` rule: ``fixed`` seconds when it is > 0, else
    ``factor`` × the segment's expected execution time + ``margin`` (a long motion gets long)."""
    if fixed > 0:
        return fixed
    return expected * factor + margin


def feedback_time(now: float, robot_t: float, tolerance: float) -> float:
    """When a robot's feedback happened, on the planner's clock: the robot's own stamp ``robot_t``
    (already converted to the planner's clock; NaN when the message has none) when it lies within
    ``tolerance`` seconds of ``now`` — never later than ``now`` — else the receipt time ``now`` (a
    robot whose clock is skewed must not move a segment's times)."""
    if abs(robot_t - now) <= tolerance:  # False for NaN
        return min(robot_t, now)
    return now


@dataclass
class _Watch:
    task_id: str
    seg: int
    expected: float
    current_since: float = math.nan  # when it became the robot's current segment
    started: float = math.nan
    heartbeat: float = math.nan  # last PROGRESS


@dataclass(frozen=True, slots=True)
class Expired:
    """A segment whose robot gave no sign of life in time; ``reason`` is meant for the task status."""

    agent: str
    task_id: str
    seg: int
    reason: str


class SegmentTimers:
    """Per-robot timers of dispatched segments (see the module docstring)."""

    def __init__(self, limit: Callable[[float], float], heartbeat_timeout: Callable[[], float]) -> None:
        self.limit = limit
        self.heartbeat_timeout = heartbeat_timeout
        self._agents: dict[str, OrderedDict[tuple[str, int], _Watch]] = {}

    def dispatched(self, agent: str, task_id: str, seg: int, t: float, expected: float) -> None:
        pending = self._agents.setdefault(agent, OrderedDict())
        pending[(task_id, seg)] = _Watch(task_id, seg, expected)
        self._refresh(agent, t)

    def resumed(self, agent: str, task_id: str, segments: Sequence[Segment]) -> None:
        """A task resumed after a planner restart: its segments that the robot still holds (not DONE)
        are watched again from their ``dispatch`` (the core sets it to the time of the resume), and a
        started one counts as started then: the restart gives each a fresh limit, not a false timeout
        for the time the planner was down."""
        for i, seg in enumerate(segments):
            if math.isfinite(seg.exec_end):
                continue
            self.dispatched(agent, task_id, i, seg.dispatch, seg.expected_exec)
            if math.isfinite(seg.exec_start):
                self.started(agent, task_id, i, seg.dispatch)

    def started(self, agent: str, task_id: str, seg: int, t: float) -> None:
        w = self._get(agent, task_id, seg)
        if w is not None and math.isnan(w.started):
            w.started = t

    def progress(self, agent: str, task_id: str, seg: int, t: float) -> None:
        w = self._get(agent, task_id, seg)
        if w is not None:
            if math.isnan(w.started):
                w.started = t
            w.heartbeat = t

    def done(self, agent: str, task_id: str, seg: int, t: float) -> None:
        pending = self._agents.get(agent)
        if pending is not None:
            pending.pop((task_id, seg), None)
            self._refresh(agent, t)

    def forget_task(self, agent: str, task_id: str, t: float) -> None:
        """The task is terminal: none of its segments is waited for any more."""
        pending = self._agents.get(agent)
        if pending is None:
            return
        for key in [k for k in pending if k[0] == task_id]:
            del pending[key]
        self._refresh(agent, t)

    def pending(self, agent: str) -> int:
        return len(self._agents.get(agent, ()))

    def expired(self, now: float) -> list[Expired]:
        """Current segments past their deadline (each reported once: it is forgotten here)."""
        out: list[Expired] = []
        for agent, pending in list(self._agents.items()):
            if not pending:
                continue
            w = next(iter(pending.values()))
            limit = self.limit(w.expected)
            if math.isnan(w.started):
                if now - w.current_since <= limit:
                    continue
                reason = (
                    f"segment {w.seg} timed out: robot {agent!r} did not start it within {limit:.1f} s "
                    f"(no SegmentFeedback)"
                )
            else:
                beat = self.heartbeat_timeout()
                alive_until = max(
                    w.started + limit, w.heartbeat + beat if not math.isnan(w.heartbeat) else -math.inf
                )
                if now <= alive_until:
                    continue
                if math.isnan(w.heartbeat):
                    reason = (
                        f"segment {w.seg} timed out: robot {agent!r} did not finish it within {limit:.1f} s "
                        f"of its start (no DONE, no PROGRESS heartbeat)"
                    )
                else:
                    reason = (
                        f"segment {w.seg} timed out: robot {agent!r} sent no PROGRESS heartbeat for "
                        f"{now - w.heartbeat:.1f} s (limit {beat:.1f} s) and no DONE"
                    )
            out.append(Expired(agent, w.task_id, w.seg, reason))
            self.forget_task(agent, w.task_id, now)
        return out

    def _get(self, agent: str, task_id: str, seg: int) -> _Watch | None:
        pending = self._agents.get(agent)
        return None if pending is None else pending.get((task_id, seg))

    def _refresh(self, agent: str, t: float) -> None:
        pending = self._agents.get(agent)
        if not pending:
            self._agents.pop(agent, None)  # bounded memory: no entry for an idle robot
            return
        head = next(iter(pending.values()))
        if math.isnan(head.current_since):
            head.current_since = t
