"""Shared robot node: receive Segment messages, execute them in order, report SegmentFeedback.

One robot node per agent, started in the agent's namespace (``--ros-args -r __ns:=/drone_1``): it
subscribes to the relative ``skill_segments`` (= ``/<agent>/skill_segments``, where the planner
publishes and where its robot-presence check looks) and publishes ``/segment_feedback``.

Per segment the node publishes ``STARTED`` when execution begins and then ``DONE`` (detail: what
the skills returned or logged) or ``FAILED`` (detail: the reason), each with the measured duration.
Segments are taken off the DDS reader at once (the segment QoS has a lifespan) and executed by one
worker thread, strictly in order (:class:`~timely_llm_ros.robots.runner.SegmentQueue`).

Also subscribed: ``/tasks`` (the scene of this agent's tasks, which the sim backends answer
perception skills from) and ``/task_status`` (a task the planner marks FAILED or EXPIRED has its
queued segments failed instead of executed). Rejected input — a segment for another agent, an
empty task id — is answered with a FAILED feedback that says why; nothing is dropped silently.

While idle the worker calls the backend's ``idle()`` (the Tello keep-alive). On SIGINT/SIGTERM the
running skill is interrupted (its segment reported FAILED), then the backend closes (the Tello lands).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from rclpy.node import Node
from timely_llm_ros.msg import Segment, Task, TaskStatus
from timely_llm_ros.msg import SegmentFeedback as FeedbackMsg

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.skills import SkillSet, UnknownSkillSet, available_skill_sets, load_skill_set
from timely_llm_ros.nodes.common import Param, ParamError, declare_params
from timely_llm_ros.robots.base import RobotBackend
from timely_llm_ros.robots.runner import SegmentItem, SegmentQueue, SegmentRunner
from timely_llm_ros.robots.scene import SceneError, parse_scene
from timely_llm_ros.robots.sim import EXEC_MODES, SimBackend
from timely_llm_ros.ros import convert, qos, topics

IDLE_POLL_S = 0.2  # how often the idle worker wakes up to call backend.idle()


def skill_set_check(robot_type: str):
    """Parameter check: a known skill set of ``robot_type``."""

    def check(name: str) -> str | None:
        try:
            sset = load_skill_set(name)
        except (UnknownSkillSet, ValueError) as exc:
            return str(exc)
        if sset.robot_type != robot_type:
            sets = [s for s in available_skill_sets() if _robot_type(s) == robot_type]
            return f"skill set {name!r} is for {sset.robot_type!r} robots; use one of {', '.join(sets)}"
        return None

    return check


def _robot_type(name: str) -> str:
    try:
        return load_skill_set(name).robot_type
    except (UnknownSkillSet, ValueError):
        return ""


def _scene_check(text: str) -> str | None:
    try:
        parse_scene(text)
    except SceneError as exc:
        return str(exc)
    return None


def common_params(robot_type: str, default_skill_set: str, backends: tuple[str, ...]) -> list[Param]:
    return [
        Param(
            "agent_id",
            "",
            "agent this robot serves; must equal the node namespace token (empty: taken "
            "from the namespace, e.g. /drone_1 -> drone_1)",
            read_only=True,
        ),
        Param(
            "skill_set",
            default_skill_set,
            f"skill set the plans use ({robot_type} skill sets only)",
            read_only=True,
            check=skill_set_check(robot_type),
        ),
        Param(
            "backend", backends[0], "robot backend: " + ", ".join(backends), choices=backends, read_only=True
        ),
        Param(
            "exec_mode",
            "sampled",
            "sim: execution time per skill call from the execution-time model: "
            "min, expected or sampled (seeded draw)",
            choices=EXEC_MODES,
        ),
        Param("seed", 0, "sim: seed of the sampled execution times", low=0, high=2**31 - 1, read_only=True),
        Param("time_scale", 1.0, "sim: multiplies every modelled wait (1 = real time)", low=0.0, high=100.0),
        Param(
            "scene",
            "",
            "scene used when a task's own scene is unknown (e.g. '[cat x:0.5 y:0.5 width:0.2 height:0.3]')",
            check=_scene_check,
        ),
        Param(
            "scene_wait",
            1.0,
            "how long a perception skill waits for its task's scene when the first "
            "segment overtook the Task message (s)",
            low=0.0,
            high=60.0,
            read_only=True,
        ),
        Param(
            "gap_timeout",
            10.0,
            "how long a segment waits for a missing predecessor of its task before it is failed (s)",
            low=0.1,
            high=3600.0,
            read_only=True,
        ),
    ]


class RobotNode(Node):
    """Base of the drone and arm nodes; subclasses choose parameters and build the backend."""

    robot_type = ""
    node_name = "robot"

    def __init__(self, params: list[Param], **kwargs: Any) -> None:
        super().__init__(self.node_name, **kwargs)
        self.p = declare_params(self, params, on_change=self._param_changed)
        self.agent_id = self._agent()
        self.skill_set: SkillSet = load_skill_set(self.p["skill_set"])
        self.backend = self.make_backend()
        self.queue = SegmentQueue(gap_timeout=self.p["gap_timeout"])
        self.runner = SegmentRunner(
            self.skill_set, self.backend, default_scene=self.p["scene"], scene_wait=self.p["scene_wait"]
        )
        self.counters = {"received": 0, "done": 0, "failed": 0, "rejected": 0, "duplicates": 0}
        self._closing = threading.Event()
        self.feedback_pub = self.create_publisher(FeedbackMsg, topics.SEGMENT_FEEDBACK, qos.feedback_qos())
        self.backend.start()  # connect before subscribing: no segment arrives at a robot that is not up
        self.create_subscription(Task, topics.TASKS, self._on_task, qos.task_qos())
        self.create_subscription(Segment, topics.SKILL_SEGMENTS, self._on_segment, qos.segment_qos())
        self.create_subscription(TaskStatus, topics.TASK_STATUS, self._on_status, qos.status_qos())
        self._worker = threading.Thread(target=self._work, name=f"{self.agent_id}-executor", daemon=True)
        self._worker.start()
        self.get_logger().info(
            f"{self.robot_type} {self.agent_id!r} ready: backend {self.backend.kind}, "
            f"skill set {self.skill_set.name}, segments on "
            f"{self.resolve_topic_name(topics.SKILL_SEGMENTS)}"
        )

    # ------------------------------------------------------------------ set-up
    def _agent(self) -> str:
        ns = self.get_namespace()
        token = ns.strip("/")
        given = self.p["agent_id"]
        if not token:
            hint = given or "<agent>"
            raise ParamError(
                f"a robot node must run in its agent's namespace: start it with "
                f"--ros-args -r __ns:=/{hint} (the planner publishes on /{hint}/skill_segments "
                f"and checks that a node in namespace /{hint} subscribes)"
            )
        if "/" in token or not topics.valid_agent_id(token):
            raise ParamError(
                f"namespace {ns!r} is not /<agent_id> with a valid agent id (one ROS name token)"
            )
        if given and given != token:
            raise ParamError(
                f"parameter 'agent_id' is {given!r} but the node runs in namespace {ns!r}; "
                "they must agree (or leave agent_id empty)"
            )
        return token

    def make_backend(self) -> RobotBackend:
        # backends are found by name (robots/plugins.py): built-ins and installed plugins alike
        from timely_llm_ros.robots.plugins import create_backend

        return create_backend(self.p["backend"], self)

    def _param_changed(self, name: str, value: Any) -> None:
        self.p[name] = value
        if isinstance(self.backend, SimBackend):
            if name == "time_scale":
                self.backend.time_scale = float(value)
            elif name == "exec_mode":
                self.backend.exec_mode = value
        if name == "scene":
            self.runner.default_scene = parse_scene(value)

    # ------------------------------------------------------------------ callbacks (executor thread)
    def _on_segment(self, msg: Segment) -> None:
        self.counters["received"] += 1
        problem = None
        if not msg.task_id.strip():
            problem = "segment has an empty task_id"
        elif msg.agent_id != self.agent_id:
            problem = (
                f"segment for agent {msg.agent_id!r} arrived at robot {self.agent_id!r} "
                f"({self.resolve_topic_name(topics.SKILL_SEGMENTS)}); not executed"
            )
        if problem:
            self.counters["rejected"] += 1
            self.get_logger().warning(problem)
            self._feedback(msg.task_id, int(msg.index), ev.FEEDBACK_FAILED, 0.0, problem)
            return
        self.queue.put(SegmentItem(msg.task_id, int(msg.index), msg.text, bool(msg.final)))

    def _on_task(self, msg: Task) -> None:
        if msg.agent_id == self.agent_id:
            self.runner.set_scene(msg.task_id, msg.scene)

    def _on_status(self, msg: TaskStatus) -> None:
        if msg.agent_id != self.agent_id:
            return
        if msg.state in (TaskStatus.FAILED, TaskStatus.EXPIRED):
            state = "FAILED" if msg.state == TaskStatus.FAILED else "EXPIRED"
            self.runner.fail_task(
                msg.task_id,
                f"the planner marked the task {state}" + (f": {msg.reason}" if msg.reason else ""),
            )

    # ------------------------------------------------------------------ worker thread
    def _feedback(self, task_id: str, index: int, state: str, duration: float, detail: str) -> None:
        now = self.get_clock().now().nanoseconds * 1e-9
        self.feedback_pub.publish(
            convert.feedback_to_msg(task_id, self.agent_id, index, state, now, duration, detail)
        )

    def _work(self) -> None:
        while not self._closing.is_set():
            handout = self.queue.get(timeout=IDLE_POLL_S)
            if handout is None:
                try:
                    self.backend.idle()
                except Exception as exc:  # a failed keep-alive is logged; the next segment will tell
                    self.get_logger().warning(f"{self.backend.kind} backend idle check failed: {exc}")
                continue
            item = handout.item
            if handout.kind == "duplicate":
                self.counters["duplicates"] += 1
                self.get_logger().warning(handout.reason)
                continue
            if handout.kind == "gap":
                self.runner.fail_task(item.task_id, handout.reason)
                self.counters["failed"] += 1
                self._feedback(item.task_id, item.index, ev.FEEDBACK_FAILED, 0.0, handout.reason)
                continue
            self._feedback(item.task_id, item.index, ev.STARTED, 0.0, "")
            outcome = self.runner.run(item)
            state = ev.DONE if outcome.ok else ev.FEEDBACK_FAILED
            self.counters["done" if outcome.ok else "failed"] += 1
            if not outcome.ok:
                self.get_logger().warning(
                    f"segment {item.index} of task {item.task_id!r} failed: {outcome.detail}"
                )
            self._feedback(item.task_id, item.index, state, outcome.duration, outcome.detail)

    def close(self) -> None:
        """Stop the worker (interrupting the running skill), then release the robot (land)."""
        self._closing.set()
        self.backend.stop()
        self.queue.close()
        self._worker.join(timeout=60)
        pending = self.queue.drain()
        for item in pending:
            self._feedback(
                item.task_id,
                item.index,
                ev.FEEDBACK_FAILED,
                0.0,
                "the robot node shut down before executing this segment",
            )
        if pending:
            self.get_logger().warning(f"shutting down with {len(pending)} segment(s) not executed")
        t0 = time.monotonic()
        self.backend.close()
        self.get_logger().info(
            f"{self.agent_id} stopped ({self.counters}; backend {self.backend.status()}; "
            f"close took {time.monotonic() - t0:.1f} s)"
        )
