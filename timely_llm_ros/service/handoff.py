"""Typed items the planner node's two threads hand each other through queues.

Why typed: a string-tagged tuple (``("task", spec, None)``) says nothing about its fields, a typo in
the tag is a silently ignored item, and a reader must find every ``put`` to learn what ``item[2]``
is. One small frozen dataclass per kind names the fields, and the receiver dispatches on the type
(``match`` / ``isinstance``), so a checker sees every kind and its fields.

Two directions (see :mod:`timely_llm_ros.service.planner_service`, "Threads"):

* inbound, executor thread → planner thread (which owns the core and the engine): :data:`Inbound`;
* outbound, planner thread → executor thread (which owns the publishers): :data:`Outbound`.

Pure Python: the outbound items carry core values (a status's fields, a :class:`TraceEvent` in ROS
time, a :class:`Dispatch`); the ROS node turns them into messages when it publishes them, so the
service that fills the queue never touches a message class.
"""

from __future__ import annotations

import enum
import math
from dataclasses import dataclass
from typing import Any

from timely_llm_ros.core.events import TraceEvent
from timely_llm_ros.core.generation import Dispatch
from timely_llm_ros.core.planner import ResumedSegment
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.service.journal import OpenTask


class WaitOutcome(enum.Enum):
    """What becomes of a waiting task at one look at the ROS graph."""

    WAIT = "wait"  # keep waiting
    SUBMIT = "submit"  # its robot is there: hand it to the planner thread
    RESOLVE = "resolve"  # a recovered task: resume it or end it (a Recovered item)
    GIVE_UP = "give up"  # no robot node within the grace period: reject it


@dataclass
class Waiting:
    """A task (or a task recovered from the journal) waiting for its robot node to be discovered.

    Mutable on purpose: it lives in the executor thread's waiting list, not in a queue (a
    :class:`Recovered` item refers to it once it leaves that list)."""

    spec: TaskSpec
    deadline: float  # planner clock: after it the task is rejected (or, recovered, resolved anyway)
    recovered: OpenTask | None = None
    earliest: float = -math.inf  # a recovered task's status waits for discovery at least until then

    def outcome(self, robot_ready: bool, status_heard: bool, now: float) -> WaitOutcome:
        """``robot_ready``: its robot node is discovered (and matched); ``status_heard``: every
        ``/task_status`` reader is matched. A new task goes as soon as its robot is there, and is
        given up at the deadline. A recovered task's one final status must reach every reader, so it
        waits for them too, and at least until ``earliest``; at the deadline it is resolved anyway."""
        late = now >= self.deadline
        if self.recovered is not None:
            if robot_ready and status_heard and now >= self.earliest or late:
                return WaitOutcome.RESOLVE
            return WaitOutcome.WAIT
        if robot_ready:
            return WaitOutcome.SUBMIT
        return WaitOutcome.GIVE_UP if late else WaitOutcome.WAIT


# ------------------------------------------------------------------ inbound (to the planner thread)
@dataclass(frozen=True, slots=True)
class Submit:
    """A validated task for :meth:`PlannerCore.submit` (``resume``: segments sent before a restart)."""

    spec: TaskSpec
    resume: list[ResumedSegment] | None = None


@dataclass(frozen=True, slots=True)
class FeedbackIn:
    """Robot feedback (the adapter's converted message) received at ``t`` (planner clock)."""

    feedback: Any
    t: float


@dataclass(frozen=True, slots=True)
class Recovered:
    """A task recovered from the journal whose wait is over: resume it, or end it with ``problem``
    (empty: nothing stands in the way)."""

    waiting: Waiting
    problem: str


@dataclass(frozen=True, slots=True)
class Cancel:
    """Cancel an open task with ``reason`` (FIFO after whatever of it was queued before)."""

    task_id: str
    reason: str


Inbound = Submit | FeedbackIn | Recovered | Cancel


# ------------------------------------------------------------------ outbound (to the executor thread)
@dataclass(frozen=True, slots=True)
class Status:
    """A ``TaskStatus`` to publish (and to hand to the plan_task action server); ``stamp`` is ROS time."""

    task_id: str
    agent: str
    state: str
    stamp: float
    reason: str = ""
    response: float = math.nan
    utility: float = math.nan


@dataclass(frozen=True, slots=True)
class Event:
    """A trace event to publish (its ``t`` already in ROS time)."""

    event: TraceEvent


@dataclass(frozen=True, slots=True)
class Closed:
    """The task reached a terminal state: the executor's open-task bookkeeping forgets it."""

    task_id: str


@dataclass(frozen=True, slots=True)
class SegmentOut:
    """A dispatched segment for the robot ``agent`` (sent on its one segment publisher); generation
    times in ROS time, ``tokens`` its length (the Dispatch does not carry them)."""

    agent: str
    dispatch: Dispatch
    gen_start: float
    gen_end: float
    tokens: int
    nonce: str = ""  # the segment's token, echoed by the robot (core/feedback.py SegmentNonces)


Outbound = Status | Event | Closed | SegmentOut
