"""The soak run's own ROS node: publishes tasks like a fleet of robots would and watches every status.

It is the measuring instrument, never killed. Its task writer is KEEP_ALL (a burst must not be lost
in this process's own DDS history: a loss has to be the planner's) and its status reader too, with a
callback that only records, so statuses are not dropped here. Graph checks tell when the planner,
each robot and the recorder are up (their subscriptions exist and this writer matched the planner).
"""

from __future__ import annotations

import random
import threading
import time

import rclpy
from rclpy.context import Context
from rclpy.executors import SingleThreadedExecutor
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from soak_report import Ledger

from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.interfaces import topics
from timely_llm_ros.msg import Task, TaskStatus
from timely_llm_ros.ros import convert
from timely_llm_ros.workload.tasks import load_catalog

_STATES = (
    "ACCEPTED",
    "REJECTED",
    "QUEUED",
    "GENERATING",
    "SUSPENDED",
    "COMPLETED",
    "FAILED",
    "EXPIRED",
    "EXECUTING",
    "CANCELLED",
)  # the last two only where the message has them
STATE_NAMES = {getattr(TaskStatus, n): n for n in _STATES if hasattr(TaskStatus, n)}
_KEEP_ALL = QoSProfile(
    history=HistoryPolicy.KEEP_ALL,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.VOLATILE,
)


class TaskFactory:
    """Benchmark tasks (the LRTrace catalog: the planner's simulated engine has their plans),
    round-robin over the agents, a random task of the agent's robot type each time."""

    def __init__(self, agents: dict[str, str], arm_skill_set: str, seed: int) -> None:
        self.agents = list(agents.items())  # (agent, robot type)
        self.rng = random.Random(seed)
        self.pool: dict[str, list] = {}
        for task in load_catalog():
            for v in task.all_variants():
                if v.skill_set in ("tello_minispec", arm_skill_set):
                    self.pool.setdefault(v.robot_type, []).append((task, v))
        missing = {t for _, t in self.agents} - set(self.pool)
        if missing:
            raise ValueError(f"the task catalog has no task for robot type(s) {sorted(missing)}")

    def make(self, n: int, arrival: float) -> TaskSpec:
        agent, rtype = self.agents[n % len(self.agents)]
        task, variant = self.rng.choice(self.pool[rtype])
        return task.to_spec(task_id=f"soak-{n}", agent_id=agent, arrival=arrival, variant=variant)


class SoakClient:
    """Task publisher + status observer in its own rclpy context and executor thread."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.lock = threading.Lock()
        self.ctx = Context()
        rclpy.init(args=[], context=self.ctx, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node("soak_client", context=self.ctx)
        self.t0 = time.monotonic()
        self.tasks = self.node.create_publisher(Task, topics.TASKS, _KEEP_ALL)
        self._sent: dict[str, Task] = {}  # task id -> its message, for a retry
        self.node.create_subscription(TaskStatus, topics.TASK_STATUS, self._on_status, _KEEP_ALL)
        self.executor = SingleThreadedExecutor(context=self.ctx)
        self.executor.add_node(self.node)
        self._thread = threading.Thread(target=self._spin, name="soak-client", daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while self.ctx.ok():
            try:
                self.executor.spin_once(timeout_sec=0.1)
            except Exception:  # context shut down while spinning
                if not self.ctx.ok():
                    return
                raise

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _on_status(self, msg: TaskStatus) -> None:
        state = STATE_NAMES.get(msg.state, f"#{msg.state}")
        with self.lock:
            self.ledger.status(msg.task_id, state, self.now(), msg.reason)

    def publish(self, spec: TaskSpec, planner_up: bool) -> None:
        msg = convert.task_to_msg(spec, stamp=time.time())
        with self.lock:
            self.ledger.publish(spec.task_id, self.now(), spec.agent_id, planner_up)
            self._sent[spec.task_id] = msg
        self.tasks.publish(msg)

    def retry(self, after: float, max_retries: int) -> int:
        """Publish again (same id, same message) every task with no status at all ``after`` seconds
        after its latest publication: ``/tasks`` is a topic, so a task sent while no planner listened
        (or taken by a planner killed before it journaled the task) is gone, and only its publisher
        can tell. A planner that does have the task answers the copy as ``<id>#dup<n>`` REJECTED and
        leaves the original alone. Returns how many were re-published."""
        with self.lock:
            due = self.ledger.due_retries(self.now(), after, max_retries)
            for task_id in due:
                self.ledger.retried(task_id, self.now())
            msgs = [self._sent[t] for t in due]
        for msg in msgs:
            self.tasks.publish(msg)
        return len(msgs)

    def open_count(self) -> int:
        with self.lock:
            return self.ledger.open_count()

    # -- graph
    def _subscribers(self, topic: str) -> list[tuple[str, str, tuple]]:
        """(namespace, node name, endpoint GID) of every subscription of ``topic`` in the graph."""
        return [
            (i.node_namespace, i.node_name, tuple(i.endpoint_gid))
            for i in self.node.get_subscriptions_info_by_topic(topic)
        ]

    def endpoints(self, role: str) -> set[tuple]:
        """GIDs of the subscriptions that show ``role`` (planner, recorder or an agent) is up.

        A killed process stays in the graph until its DDS lease runs out, so a restart is only up
        once an endpoint that was not there before the kill appears.
        """
        if role == "planner":
            return {g for ns, name, g in self._subscribers(topics.TASKS) if (ns, name) == ("/", "planner")}
        if role == "recorder":
            return {
                g for ns, name, g in self._subscribers(topics.TASK_STATUS) if (ns, name) == ("/", "recorder")
            }
        return {g for ns, _, g in self._subscribers(f"/{role}/{topics.SKILL_SEGMENTS}") if ns == f"/{role}"}

    def up(self, role: str, stale: set[tuple] = frozenset()) -> bool:
        """``role`` has an endpoint not in ``stale``; for the planner also matched by this writer."""
        if not self.endpoints(role) - stale:
            return False
        if role != "planner":
            return True
        readers = {g for _, _, g in self._subscribers(topics.TASKS)}
        return self.tasks.get_subscription_count() >= len(readers)

    def wait(self, check, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.1)
        return False

    def close(self) -> None:
        self.executor.shutdown(timeout_sec=2.0)
        self.node.destroy_node()
        rclpy.shutdown(context=self.ctx)
        self._thread.join(timeout=5.0)
