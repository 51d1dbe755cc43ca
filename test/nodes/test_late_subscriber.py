"""Late joiners catch up: task_status and trace_events are transient local with a
bounded history on both sides, so a node that subscribes after a task ended — an rqt timeline opened
mid-run, a restarted robot or recorder — still receives that task's statuses and events.

A planner process (simulated engine) and the test peer as robot; the late subscriber is a fresh
node in its own rclpy context, created only after the task is COMPLETED.
"""

from __future__ import annotations

import threading

import pytest
from planner_testkit import make_task, planner_graph, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 120.0


def test_a_late_subscriber_receives_earlier_statuses_and_events(tmp_path):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.msg import TaskStatus, TraceEvent
    from timely_llm_ros.ros import convert, qos

    with planner_graph(tmp_path, {"journal": "off"}, {"late_bot": "done"}, "late_peer") as (peer, proc):
        peer.task_pub.publish(make_task("late-1", "late_bot", "[A] Climb, turn and take a picture."))
        wait_for(
            lambda: peer.final_state("late-1") == "COMPLETED", WAIT, "the task to complete", procs=(proc,)
        )
        seen = peer.states("late-1")

        ctx = rclpy.Context()
        rclpy.init(context=ctx, signal_handler_options=SignalHandlerOptions.NO)
        node = rclpy.create_node("late_joiner", context=ctx)
        statuses: list = []
        events: list = []
        lock = threading.Lock()

        def keep(into: list):
            def cb(msg) -> None:
                with lock:
                    into.append(msg)

            return cb

        node.create_subscription(TaskStatus, topics.TASK_STATUS, keep(statuses), qos.status_qos())
        node.create_subscription(TraceEvent, topics.TRACE_EVENTS, keep(events), qos.event_qos())
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        try:

            def caught_up() -> bool:
                executor.spin_once(timeout_sec=0.05)
                with lock:
                    states = [convert.status_name(s) for s in statuses if s.task_id == "late-1"]
                    kinds = [e.kind for e in events if e.task_id == "late-1"]
                return "COMPLETED" in states and TraceEvent.COMPLETE in kinds

            wait_for(caught_up, WAIT, "the late subscriber to receive the earlier statuses and events")
            with lock:
                late = [convert.status_name(s) for s in statuses if s.task_id == "late-1"]
                kinds = [e.kind for e in events if e.task_id == "late-1"]
            assert late == seen  # every status, in order, as the subscriber present from the start saw them
            assert kinds[0] == TraceEvent.ARRIVAL and TraceEvent.DISPATCH in kinds
        finally:
            executor.shutdown()
            node.destroy_node()
            rclpy.try_shutdown(context=ctx)


def test_status_and_event_profiles_are_transient_local_and_bounded():
    from rclpy.qos import DurabilityPolicy, HistoryPolicy

    from timely_llm_ros.ros import qos

    for profile in (qos.status_qos(), qos.event_qos()):
        assert profile.durability == DurabilityPolicy.TRANSIENT_LOCAL
        assert profile.history == HistoryPolicy.KEEP_LAST and 0 < profile.depth <= qos.EVENT_DEPTH
    assert qos.is_latched_topic("/fleet_a/task_status") and qos.is_latched_topic("/trace_events")
    assert not qos.is_latched_topic("/tasks")
