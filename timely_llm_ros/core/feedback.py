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
:mod:`.agent_queue`) is not dispatched: no robot can hold it.
"""

from __future__ import annotations

import math

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.generation import TaskRecord


def current_segment(rec: TaskRecord) -> int:
    """Index of the segment the robot holds: the oldest dispatched one not DONE (-1 if none)."""
    for s in rec.segments:
        if math.isnan(s.dispatch):
            return -1
        if math.isnan(s.exec_end):
            return s.idx
    return -1


def feedback_problem(rec: TaskRecord, seg: int, state: str, agent: str | None = None) -> str | None:
    """Why feedback ``state`` for segment ``seg`` of ``rec`` must be ignored, or None to apply it.

    ``agent`` is the sender's agent id (None: not known, e.g. the simulator's own robots).
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
    return None
