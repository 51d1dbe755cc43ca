"""QoS profiles of the node graph (one place, so publishers and subscribers stay compatible).

Conventions (the usual ROS 2 practice): commands —
here skill segments — are reliable, keep-last, volatile, with a ``lifespan`` bounding staleness.

* **Segments** (planner → robot): reliable, keep-last 10, volatile. The lifespan is the task's
  *utility horizon*: the response time at which its TUF reaches zero (``TUF.zero_time`` = ERT +
  beta/−alpha; TUF_1 of later segments has the shorter horizon beta/−alpha, so the task's horizon
  bounds both). A segment still undelivered after that is stale: DDS discards it and the planner's
  segment timeout fails the task with a reason. Lifespan is a *publisher* policy, so the planner keeps
  one publisher per (agent, lifespan); all segments of one task use the same one, which keeps them in
  order. A flat TUF (alpha = 0) has no horizon: infinite lifespan.
* **Tasks, feedback, statuses, trace events**: reliable, keep-last with a deep history (bursts of
  hundreds of tasks, each producing several statuses and events, must reach the recorder intact;
  KEEP_ALL would block the publisher on a slow reader), volatile.

Robots must take segments off the subscription promptly (queue them internally, execute in another
thread): a sample that waits in the DDS reader cache beyond its lifespan is dropped.
"""

from __future__ import annotations

import math

from rclpy.duration import Duration
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

SEGMENT_DEPTH = 10
EVENT_DEPTH = 1000  # tasks, statuses, trace events: a burst of 200 tasks x ~8 events fits
FEEDBACK_DEPTH = 200


def _reliable(depth: int) -> QoSProfile:
    return QoSProfile(history=HistoryPolicy.KEEP_LAST, depth=depth, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)


def segment_qos(lifespan_s: float | None = None) -> QoSProfile:
    """Segment topic QoS; ``lifespan_s`` None or inf = infinite (a subscriber passes None)."""
    qos = _reliable(SEGMENT_DEPTH)
    if lifespan_s is not None and math.isfinite(lifespan_s):
        if lifespan_s <= 0:
            raise ValueError(f"segment lifespan must be > 0 s, got {lifespan_s}")
        qos.lifespan = Duration(nanoseconds=int(round(lifespan_s * 1e9)))
    return qos


def lifespan_for(zero_time: float, floor_s: float) -> float:
    """Lifespan of a task's segments: its utility horizon, never below ``floor_s`` (inf stays inf).

    The floor keeps a very steep TUF from making the lifespan shorter than plain delivery jitter
    on a loaded machine; values are rounded to 10 ms so that tasks of one TUF class share a publisher.
    """
    if not math.isfinite(zero_time):
        return math.inf
    return max(float(floor_s), math.ceil(zero_time * 100.0) / 100.0)


def task_qos() -> QoSProfile:
    return _reliable(EVENT_DEPTH)


def status_qos() -> QoSProfile:
    return _reliable(EVENT_DEPTH)


def event_qos() -> QoSProfile:
    return _reliable(EVENT_DEPTH)


def feedback_qos() -> QoSProfile:
    return _reliable(FEEDBACK_DEPTH)
