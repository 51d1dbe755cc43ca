"""Trace events, task states and segment feedback states.

The names are shared with the ROS messages (``msg/TraceEvent.msg`` constants, ``TaskStatus``) so a
trace recorded from the simulator and one recorded from the ROS planner node read the same.

Event kinds (one :class:`TraceEvent` each):

* ``ARRIVAL`` task reached the planner; ``ADMIT`` it passed validation and was queued;
  ``REJECT`` it failed validation (``info`` = reason).
* ``GEN_START`` a generation (re)started on the engine for the task's current segment (admission
  or resumption; a resumption is followed by ``RESUME``); ``GEN_STOP`` it stopped (``detail``:
  "segment" when suspended after a segment, "eos" or "length" at its end).
* ``SEGMENT_READY`` the stop checker found an executable segment (``seg`` = its index);
  ``DISPATCH`` the segment went to the robot; ``SUSPEND`` the generation was suspended after it.
* ``EXEC_START`` / ``EXEC_END`` robot feedback for a segment.
* ``COMPLETE`` the last segment finished executing; ``FAIL`` the task failed (``info`` = reason:
  unparsable segment, robot failure, engine error); ``DROP`` / ``EXPIRE`` reserved for policies
  that give up on work; ``CANCEL`` the task was cancelled on request (``info`` = by whom / why).
"""

from __future__ import annotations

from dataclasses import dataclass

ARRIVAL = "ARRIVAL"
ADMIT = "ADMIT"
REJECT = "REJECT"
GEN_START = "GEN_START"
GEN_STOP = "GEN_STOP"
SEGMENT_READY = "SEGMENT_READY"
DISPATCH = "DISPATCH"
EXEC_START = "EXEC_START"
EXEC_END = "EXEC_END"
SUSPEND = "SUSPEND"
RESUME = "RESUME"
COMPLETE = "COMPLETE"
DROP = "DROP"
EXPIRE = "EXPIRE"
FAIL = "FAIL"
CANCEL = "CANCEL"
EVENT_KINDS = (
    ARRIVAL,
    ADMIT,
    REJECT,
    GEN_START,
    GEN_STOP,
    SEGMENT_READY,
    DISPATCH,
    EXEC_START,
    EXEC_END,
    SUSPEND,
    RESUME,
    COMPLETE,
    DROP,
    EXPIRE,
    FAIL,
    CANCEL,
)

# Task states (TaskStatus)
ACCEPTED = "ACCEPTED"
REJECTED = "REJECTED"
QUEUED = "QUEUED"
GENERATING = "GENERATING"
SUSPENDED = "SUSPENDED"
COMPLETED = "COMPLETED"
FAILED = "FAILED"
EXPIRED = "EXPIRED"
# every generated segment so far is dispatched and the robot is executing (the generation is
# suspended or finished); the task leaves it when its generation resumes or it ends
EXECUTING = "EXECUTING"
CANCELLED = "CANCELLED"  # cancelled on request (PlanTask action cancel; PlannerCore.cancel)
TASK_STATES = (
    ACCEPTED,
    REJECTED,
    QUEUED,
    GENERATING,
    SUSPENDED,
    COMPLETED,
    FAILED,
    EXPIRED,
    EXECUTING,
    CANCELLED,
)
TERMINAL_STATES = frozenset((REJECTED, COMPLETED, FAILED, EXPIRED, CANCELLED))

# Per-robot queueing (core.sched.agent_queue) in TraceEvent details, so that a timeline or report names a
# wait for the task's own robot as such (not as a wait for the engine): ADMIT of a task whose robot
# still runs an earlier task starts with ROBOT_BUSY (``robot busy: waiting for robot 'd1' to end task
# 'x'`` — not scheduled; or ``robot busy: generating ahead while …`` — scheduled, its segments held);
# a second ADMIT with ROBOT_SCHEDULED marks when a waiting task is scheduled for the engine; a SUSPEND
# starting with ROBOT_BUSY holds a generated segment until the robot is free (its DISPATCH ends that).
ROBOT_BUSY = "robot busy:"
ROBOT_SCHEDULED = "scheduled:"
# The task state a terminal event leaves behind. One table for every reader that rebuilds states
# from events (bag readers, timeline model, the simulator's bag writer): a DROP (the simulator's
# overload drop) ends a task FAILED.
TERMINAL_EVENT_STATE = {
    COMPLETE: COMPLETED,
    FAIL: FAILED,
    REJECT: REJECTED,
    EXPIRE: EXPIRED,
    DROP: FAILED,
    CANCEL: CANCELLED,
}

# Segment feedback states (robot -> planner)
STARTED = "STARTED"
DONE = "DONE"
FEEDBACK_FAILED = "FAILED"
PROGRESS = "PROGRESS"  # heartbeat of a running segment (proof of life for its timeout)
FEEDBACK_STATES = (STARTED, DONE, FEEDBACK_FAILED, PROGRESS)


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One timestamped planner event (fields as in ``msg/TraceEvent.msg``).

    ``seg`` is the segment index or -1; ``value`` a kind-specific number (GEN_STOP: tokens generated
    since the generation (re)started; DISPATCH: the segment's minimum execution-time estimate;
    EXEC_START of segment 0: the response time W(s_0); COMPLETE: the utility TUF_0(W(s_0))), else 0;
    ``detail`` free text (REJECT / FAIL reason, GEN_STOP reason "segment" / "eos" / "length" — the latter
    followed by ": …" when an unfinished statement cut by the token limit was not sent,
    the segment text for SEGMENT_READY).
    """

    t: float
    kind: str
    task_id: str
    agent_id: str = ""
    seg: int = -1
    value: float = 0.0
    detail: str = ""
