"""Helpers for the robot-node tests: an in-process rclpy peer and node processes.

The peer uses its own rclpy Context (no global init, no signal handlers) so tests stay independent.
Waits poll for outcomes (discovery, feedback) with generous limits that only bound a hung run.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.signals import SignalHandlerOptions

from timely_llm_ros.interfaces import topics
from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus
from timely_llm_ros.ros import qos

WAIT_S = 60.0


class Peer:
    """Publishes tasks/segments/statuses and collects SegmentFeedback, like a planner would."""

    def __init__(self, name: str = "robot_test_peer") -> None:
        self.ctx = Context()
        rclpy.init(args=[], context=self.ctx, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, context=self.ctx)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self.feedback: list[SegmentFeedback] = []
        self.node.create_subscription(
            SegmentFeedback, topics.SEGMENT_FEEDBACK, self.feedback.append, qos.feedback_qos()
        )
        self.tasks = self.node.create_publisher(Task, topics.TASKS, qos.task_qos())
        self.status = self.node.create_publisher(TaskStatus, topics.TASK_STATUS, qos.status_qos())
        self._seg_pubs: dict[str, object] = {}

    def segments_pub(self, agent: str):
        if agent not in self._seg_pubs:
            self._seg_pubs[agent] = self.node.create_publisher(
                Segment, topics.segment_topic(agent), qos.segment_qos(30.0)
            )
        return self._seg_pubs[agent]

    def spin_until(self, done: Callable[[], bool], timeout: float = WAIT_S) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            if time.monotonic() > deadline:
                return False
            self.executor.spin_once(timeout_sec=0.05)
        return True

    def wait_for_robot(self, agent: str) -> None:
        seg = self.segments_pub(agent)
        ok = self.spin_until(
            lambda: (
                seg.get_subscription_count() > 0
                and self.tasks.get_subscription_count() > 0
                and self.node.count_publishers(topics.SEGMENT_FEEDBACK) > 0
            )
        )
        assert ok, f"robot node for {agent} was not discovered"
        # Matching is not symmetric: the node's reader may not know our writer yet, and a volatile
        # sample sent before that is lost. Send probe segments until one is answered.
        for k in range(int(WAIT_S / 0.3)):
            self.send_segment(agent, f"probe-{k}", 0, "l('probe')", final=True)
            if self.spin_until(
                lambda: any(f.task_id.startswith("probe-") for f in self.feedback), timeout=0.3
            ):
                break
        else:
            raise AssertionError(f"robot node for {agent} never answered a probe segment")
        self.spin_until(lambda: False, timeout=0.3)  # answers to later probes arrive now, not in the test
        self.feedback.clear()

    def send_task(
        self,
        agent: str,
        task_id: str,
        scene: str = "",
        skill_set: str = "tello_minispec",
        robot_type: str = "drone",
    ) -> None:
        msg = Task(
            task_id=task_id,
            agent_id=agent,
            robot_type=robot_type,
            skill_set=skill_set,
            instruction="test",
            scene=scene,
        )
        msg.tuf.ert, msg.tuf.alpha, msg.tuf.beta = 1.0, -2.0, 1.0
        self.tasks.publish(msg)

    def send_segment(
        self,
        agent: str,
        task_id: str,
        index: int,
        text: str,
        final: bool = False,
        agent_field: str | None = None,
    ) -> None:
        self.segments_pub(agent).publish(
            Segment(task_id=task_id, agent_id=agent_field or agent, index=index, text=text, final=final)
        )

    def send_status(self, agent: str, task_id: str, state: int, reason: str = "") -> None:
        self.status.publish(TaskStatus(task_id=task_id, agent_id=agent, state=state, reason=reason))

    def finished(self, task_id: str, index: int) -> SegmentFeedback | None:
        for fb in self.feedback:
            if (
                fb.task_id == task_id
                and fb.index == index
                and fb.state in (SegmentFeedback.DONE, SegmentFeedback.FAILED)
            ):
                return fb
        return None

    def wait_finished(self, task_id: str, index: int) -> SegmentFeedback:
        assert self.spin_until(lambda: self.finished(task_id, index) is not None), (
            f"no DONE/FAILED for {task_id}#{index}; got "
            f"{[(f.task_id, f.index, f.state) for f in self.feedback]}"
        )
        return self.finished(task_id, index)

    def close(self) -> None:
        self.executor.shutdown()
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)


def start_node(module: str, namespace: str | None, params: dict, env: dict, log: Path) -> subprocess.Popen:
    argv = [sys.executable, "-m", module, "--ros-args"]
    if namespace:
        argv += ["-r", f"__ns:={namespace}"]
    for key, value in params.items():
        argv += ["-p", f"{key}:={value}"]
    return subprocess.Popen(
        argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )


def stop_node(proc: subprocess.Popen, sig: int = signal.SIGINT, timeout: float = WAIT_S) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return -9
