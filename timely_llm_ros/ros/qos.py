"""QoS profiles of the node graph (one place, so publishers and subscribers stay compatible).

Conventions (the usual ROS 2 practice): commands —
here skill segments — are reliable, keep-last, volatile, with a ``lifespan`` bounding staleness.

* **Segments** (planner → robot): reliable, keep-last 10, volatile, with a fixed ``lifespan`` (planner
  parameter ``segment_lifespan``): a segment still undelivered after it is stale, DDS discards it and
  the planner's segment timeout fails the task with a reason. Lifespan is a *publisher* policy; the
  planner keeps exactly **one publisher per robot** so that all of a robot's segments keep their
  order on the topic (a publisher per task lifespan — the TUF horizon — left 200 publishers on one
  topic and could reorder a robot's segments across them).
* **Tasks, feedback**: reliable, keep-last with a history deep enough for a burst of thousands
  (:data:`INBOUND_DEPTH`): the planner takes them off the reader at once and answers an overload with
  a REJECTED status, so nothing may vanish in DDS first (a depth of 1000 lost 1799 of 3000 tasks
  published in one second). KEEP_ALL would block a robot's publisher on a slow planner.
* **Statuses, trace events**: reliable, keep-last, deep (:data:`EVENT_DEPTH`): every task's final
  status must reach the robots and the recorder after such a burst. **Transient local** on both
  sides: the planner keeps its last :data:`EVENT_DEPTH` statuses and events (a bounded history) and a
  late joiner — an rqt timeline opened mid-run, a restarted robot or recorder — receives them when it
  matches, instead of nothing from before it joined. (DDS only matches a transient-local reader with
  a transient-local writer: every publisher of these topics uses these profiles — replay too.)

Robots must take segments off the subscription promptly (queue them internally, execute in another
thread): a sample that waits in the DDS reader cache beyond its lifespan is dropped.
"""

from __future__ import annotations

import math

from rclpy.duration import Duration
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy

SEGMENT_DEPTH = 10
INBOUND_DEPTH = 10_000  # tasks, feedback: a burst of 5000 in one second fits twice
EVENT_DEPTH = 10_000  # statuses, trace events: the answers to such a burst (1 status + 2 events each)
FEEDBACK_DEPTH = INBOUND_DEPTH


def _reliable(depth: int) -> QoSProfile:
    return QoSProfile(
        history=HistoryPolicy.KEEP_LAST,
        depth=depth,
        reliability=ReliabilityPolicy.RELIABLE,
        durability=DurabilityPolicy.VOLATILE,
    )


def segment_qos(lifespan_s: float | None = None) -> QoSProfile:
    """Segment topic QoS; ``lifespan_s`` None or inf = infinite (a subscriber passes None)."""
    qos = _reliable(SEGMENT_DEPTH)
    if lifespan_s is not None and math.isfinite(lifespan_s):
        if lifespan_s <= 0:
            raise ValueError(f"segment lifespan must be > 0 s, got {lifespan_s}")
        qos.lifespan = Duration(nanoseconds=int(round(lifespan_s * 1e9)))
    return qos


def task_qos() -> QoSProfile:
    return _reliable(INBOUND_DEPTH)


def _latched(depth: int) -> QoSProfile:
    qos = _reliable(depth)
    qos.durability = DurabilityPolicy.TRANSIENT_LOCAL
    return qos


def status_qos() -> QoSProfile:
    return _latched(EVENT_DEPTH)


def event_qos() -> QoSProfile:
    return _latched(EVENT_DEPTH)


def is_latched_topic(name: str) -> bool:
    """True for a task-status or trace-event topic in any namespace (replay picks its QoS by name)."""
    from timely_llm_ros.interfaces.topics import TASK_STATUS, TRACE_EVENTS

    return name.rstrip("/").rsplit("/", 1)[-1] in (TASK_STATUS, TRACE_EVENTS)


def feedback_qos() -> QoSProfile:
    return _reliable(FEEDBACK_DEPTH)


def heartbeat_qos() -> QoSProfile:
    """Robot heartbeats: reliable, shallow (only the newest beat matters)."""
    return _reliable(SEGMENT_DEPTH)
