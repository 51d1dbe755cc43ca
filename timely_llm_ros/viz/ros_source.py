"""Feeds a :class:`~timely_llm_ros.viz.widget.TimelineWidget` from a live ROS graph.

Shared by the rqt plugin (which gets its node from rqt) and ``timely-llm rqt-timeline`` (which
makes its own), so both subscribe the same way: ``/trace_events`` for the timeline and ``/tasks``
for each task's TUF (ERT markers, utilities). Callbacks run in the executor's thread and only hand
the converted values to the widget's thread-safe queue. Both window the timeline on the node's
clock (:func:`node_clock`): wall time normally, the bag's time under ``use_sim_time`` while a
replay publishes ``/clock``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from timely_llm_ros.core.tuf import TUF, InvalidTUF


def node_clock(node: Any) -> Callable[[], float]:
    """The widget's clock: ``node``'s ROS time in seconds, so it honours ``use_sim_time``.

    Under sim time a node reads 0 until the first ``/clock`` message (e.g. from ``timely-llm
    replay``) arrives; that is returned as NaN — "no time yet" — and the widget then windows on
    the newest event instead of on the epoch.
    """

    def now() -> float:
        ns = node.get_clock().now().nanoseconds
        return ns * 1e-9 if ns > 0 else math.nan

    return now


def attach(
    node: Any, widget: Any, trace_topic: str | None = None, tasks_topic: str | None = None
) -> list[Any]:
    """Create the subscriptions on ``node``; returns them (destroy them to detach)."""
    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.msg import Task, TraceEvent
    from timely_llm_ros.ros.convert import event_from_msg
    from timely_llm_ros.ros.qos import event_qos, task_qos

    log = node.get_logger()

    def on_event(msg: Any) -> None:
        try:
            widget.submit(event_from_msg(msg))
        except ValueError as exc:  # unknown kind code from a newer planner: say so, keep going
            log.warning(f"timeline: skipped a trace event: {exc}", throttle_duration_sec=5.0)

    def on_task(msg: Any) -> None:
        try:
            tuf = TUF(ert=msg.tuf.ert, alpha=msg.tuf.alpha, beta=msg.tuf.beta)
        except InvalidTUF:
            tuf = None  # the planner rejects it; the lane shows the REJECT without an ERT marker
        widget.submit_task(msg.task_id, msg.agent_id, tuf, msg.task_class)

    return [
        node.create_subscription(TraceEvent, trace_topic or topics.TRACE_EVENTS, on_event, event_qos()),
        node.create_subscription(Task, tasks_topic or topics.TASKS, on_task, task_qos()),
    ]


def detach(node: Any, subscriptions: list[Any]) -> None:
    for sub in subscriptions:
        node.destroy_subscription(sub)
