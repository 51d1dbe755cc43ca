"""Shared robot node: receive Segment messages, execute one task at a time, report SegmentFeedback.

One robot node per agent, started in the agent's namespace (``--ros-args -r __ns:=/drone_1``): it
subscribes to the relative ``skill_segments`` (= ``/<agent>/skill_segments``, where the planner
publishes and where its robot-presence check looks) and publishes ``/segment_feedback``.

Per segment the node publishes ``STARTED`` when execution begins, ``PROGRESS`` every
``heartbeat_period`` while it runs (duration = seconds since STARTED: proof of life for the
planner's timeout), then ``DONE`` (detail: what the skills returned or logged) or ``FAILED``
(detail: the reason), each with the measured duration. Segments are taken off the DDS reader at
once (the segment QoS has a lifespan) and executed by one worker thread.

**One task at a time** (:class:`~timely_llm_ros.robots.task_queue.TaskQueue`): segments of two
tasks never run interleaved. A segment of another task waits up to ``busy_wait`` for the current
task to be over — its final segment ran, one of its segments failed, its closing marker (a final
segment without text: nothing runs, no feedback) or a terminal ``/task_status`` arrived — and is
otherwise FAILED with "robot busy with task A". Segments of a task that is over are FAILED with
the reason. A task idle for ``idle_release`` (a lost status) stops blocking the robot.

**Liveness**: every ``heartbeat_period`` the node publishes ``/robot_heartbeat`` (``std_msgs/Header``,
``frame_id`` = its agent id), running or idle: a planner marks a robot that falls silent down and
ends all its tasks at once (:mod:`timely_llm_ros.core.robot_liveness`). Every feedback echoes the
``nonce`` of its segment (the planner refuses feedback without it). A terminal ``/task_status`` of the running task (e.g. the planner timed it out and
marked it FAILED) interrupts the running skill through the backend — sim waits end at once, the
Tello gets ``stop`` (hover) — and the task's queued segments are FAILED.

**Bounds**: per-task state is dropped when the task is over; at most ``max_queued_segments`` wait;
every forwarded text (feedback detail, echoed ids) is cut to a fixed size; warnings about bad input
are rate-limited (``warn_period``) — each bad message is still answered and counted.

Also subscribed: ``/tasks`` (the scene of this agent's tasks, which the sim backends answer
perception skills from). Rejected input — a segment for another agent, an empty or oversized task
id, an oversized text — is answered with a FAILED feedback that says why; nothing is dropped silently.

While idle the worker calls the backend's ``idle()`` (the Tello keep-alive). On SIGINT/SIGTERM the
running skill is interrupted (its segment reported FAILED), then the backend closes (the Tello lands).
"""

from __future__ import annotations

import functools
import threading
import time
from typing import Any

from rclpy.duration import Duration
from rclpy.node import Node
from std_msgs.msg import Header

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.skills.loader import available_skill_sets, load_skill_set
from timely_llm_ros.core.skills.model import UnknownSkillSet
from timely_llm_ros.core.skills.skillset import SkillSet
from timely_llm_ros.interfaces import topics
from timely_llm_ros.msg import Segment, Task, TaskStatus
from timely_llm_ros.msg import SegmentFeedback as FeedbackMsg
from timely_llm_ros.nodes.common import Param, ParamError, declare_params
from timely_llm_ros.robots import task_queue as tq
from timely_llm_ros.robots.base import RobotBackend
from timely_llm_ros.robots.ratelimit import LogLimiter
from timely_llm_ros.robots.runner import SegmentRunner, clip
from timely_llm_ros.robots.scene import SceneError, parse_scene
from timely_llm_ros.robots.sim import EXEC_MODES, SimBackend
from timely_llm_ros.robots.task_queue import Handout, SegmentItem, TaskQueue
from timely_llm_ros.ros import convert, qos

IDLE_POLL_S = 0.2  # how often the idle worker wakes up to call backend.idle()
MAX_ID = 256  # characters of a task id this robot accepts (the planner's own limit is lower)
MAX_SEGMENT_TEXT = 65_536  # characters of one segment's text
TERMINAL = {  # TaskStatus codes that end a task (CANCELLED comes with the ROS-native interface)
    code: name
    for name in ("REJECTED", "COMPLETED", "FAILED", "EXPIRED", "CANCELLED")
    if (code := getattr(TaskStatus, name, None)) is not None
}


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
        Param(
            "busy_wait",
            10.0,
            "how long a segment of another task waits while this robot's current task is not over, "
            "before it is failed with 'robot busy' (s); one task at a time per robot",
            low=0.0,
            high=3600.0,
            read_only=True,
        ),
        Param(
            "idle_release",
            60.0,
            "a current task with nothing queued or running for this long stops blocking the robot "
            "(a lost final status); its later segments are failed, never run (s)",
            low=1.0,
            high=86400.0,
            read_only=True,
        ),
        Param(
            "heartbeat_period",
            1.0,
            "PROGRESS feedback period while a segment runs (s)",
            low=0.05,
            high=60.0,
            read_only=True,
        ),
        Param(
            "max_queued_segments",
            1000,
            "segments waiting beyond this many are failed at once (bounded memory)",
            low=1,
            high=1_000_000,
            read_only=True,
        ),
        Param(
            "warn_period",
            10.0,
            "at most one warning per kind of bad input per this many seconds (each is still answered)",
            low=0.0,
            high=3600.0,
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
        self.runner = SegmentRunner(
            self.skill_set,
            self.backend,
            default_scene=self.p["scene"],
            scene_wait=self.p["scene_wait"],
            max_tasks=4096,
        )
        self.queue = TaskQueue(
            gap_timeout=self.p["gap_timeout"],
            busy_wait=self.p["busy_wait"],
            idle_release=self.p["idle_release"],
            max_items=self.p["max_queued_segments"],
            on_end=self.runner.forget,
        )
        self.counters = {
            "received": 0,
            "done": 0,
            "failed": 0,
            "rejected": 0,
            "duplicates": 0,
            "busy": 0,
            "over": 0,
            "markers": 0,
            "released": 0,
            "interrupted": 0,
            "progress": 0,
        }
        self.warn = LogLimiter(self.p["warn_period"])
        self._closing = threading.Event()
        self._pub_lock = threading.Lock()  # feedback order: STARTED < PROGRESS* < DONE/FAILED
        self._current: tuple[str, int, float, str] | None = None  # (task, index, started, nonce) running
        fleet = functools.partial(topics.fleet_topic, self.get_namespace())  # <fleet>/<agent>: fleet topics
        self.feedback_pub = self.create_publisher(
            FeedbackMsg, fleet(topics.SEGMENT_FEEDBACK), qos.feedback_qos()
        )
        self.beat_pub = self.create_publisher(Header, fleet(topics.ROBOT_HEARTBEAT), qos.heartbeat_qos())
        self.backend.start()  # connect before subscribing: no segment arrives at a robot that is not up
        self.create_subscription(Task, fleet(topics.TASKS), self._on_task, qos.task_qos())
        self.create_subscription(Segment, topics.SKILL_SEGMENTS, self._on_segment, qos.segment_qos())
        self.create_subscription(TaskStatus, fleet(topics.TASK_STATUS), self._on_status, qos.status_qos())
        self._worker = threading.Thread(target=self._work, name=f"{self.agent_id}-executor", daemon=True)
        self._worker.start()
        self._heart = threading.Thread(target=self._heartbeat, name=f"{self.agent_id}-heartbeat", daemon=True)
        self._heart.start()
        self.get_logger().info(
            f"{self.robot_type} {self.agent_id!r} ready: backend {self.backend.kind}, "
            f"skill set {self.skill_set.name}, segments on "
            f"{self.resolve_topic_name(topics.SKILL_SEGMENTS)}"
        )

    # ------------------------------------------------------------------ set-up
    def _agent(self) -> str:
        ns = self.get_namespace()
        token = ns.rstrip("/").rsplit("/", 1)[-1]  # <fleet>/<agent>: the last token is the agent
        given = self.p["agent_id"]
        if not token:
            hint = given or "<agent>"
            raise ParamError(
                f"a robot node must run in its agent's namespace: start it with "
                f"--ros-args -r __ns:=/{hint} (the planner publishes on /{hint}/skill_segments "
                f"and checks that a node in namespace /{hint} subscribes)"
            )
        if not topics.valid_agent_id(token):
            raise ParamError(
                f"namespace {ns!r} is not [/<fleet>]/<agent_id> with a valid agent id (one ROS name token)"
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
        if name == "warn_period":
            self.warn.period = float(value)

    def _warning(self, key: str, message: str) -> None:
        line = self.warn(key, message)
        if line is not None:
            self.get_logger().warning(line)

    # ------------------------------------------------------------------ callbacks (executor thread)
    def _on_segment(self, msg: Segment) -> None:
        self.counters["received"] += 1
        kind, problem = "", ""  # kind: the rate-limiting key of the warning
        if not msg.task_id.strip():
            kind, problem = "empty id", "segment has an empty task_id"
        elif len(msg.task_id) > MAX_ID:
            kind = "long id"
            problem = (
                f"segment task_id has {len(msg.task_id)} characters; this robot accepts at most {MAX_ID}"
            )
        elif msg.agent_id != self.agent_id:
            kind = "foreign"
            problem = (
                f"segment for agent {clip(msg.agent_id, 80)!r} arrived at robot {self.agent_id!r} "
                f"({self.resolve_topic_name(topics.SKILL_SEGMENTS)}); not executed"
            )
        elif len(msg.text) > MAX_SEGMENT_TEXT:
            kind = "long text"
            problem = (
                f"segment text has {len(msg.text)} characters; this robot accepts at most {MAX_SEGMENT_TEXT}"
            )
        nonce = msg.nonce[:64]
        item = SegmentItem(msg.task_id, int(msg.index), msg.text, bool(msg.final), nonce=nonce)
        if not problem and not self.queue.put(item):
            kind = "queue full"
            problem = (
                f"{len(self.queue)} segments are already waiting at robot {self.agent_id!r} "
                f"(max_queued_segments); segment {msg.index} of task {clip(msg.task_id, 80)!r} is not executed"
            )
        if problem:
            self.counters["rejected"] += 1
            self._warning(kind, problem)
            if not item.marker:
                self._feedback(msg.task_id[:MAX_ID], int(msg.index), ev.FEEDBACK_FAILED, 0.0, problem, nonce)

    def _on_task(self, msg: Task) -> None:
        if msg.agent_id == self.agent_id and len(msg.task_id) <= MAX_ID and not self.queue.ended(msg.task_id):
            self.runner.set_scene(msg.task_id, msg.scene)

    def _on_status(self, msg: TaskStatus) -> None:
        if msg.agent_id != self.agent_id or msg.state not in TERMINAL:
            return
        state = TERMINAL[msg.state]
        reason = f"the planner marked the task {state}" + (f": {clip(msg.reason, 300)}" if msg.reason else "")
        self.queue.end(msg.task_id, reason)
        with self._pub_lock:
            running = self._current is not None and self._current[0] == msg.task_id
        self.backend.interrupt(msg.task_id, reason, halt=running)
        if running:
            self.counters["interrupted"] += 1
            self.get_logger().warning(f"task {clip(msg.task_id, 80)!r}: {reason}; running motion stopped")

    # ------------------------------------------------------------------ worker and heartbeat threads
    def _feedback(
        self, task_id: str, index: int, state: str, duration: float, detail: str, nonce: str = ""
    ) -> None:
        now = self.get_clock().now().nanoseconds * 1e-9
        msg = convert.feedback_to_msg(
            task_id, self.agent_id, index, state, now, duration, clip(detail), nonce
        )
        with self._pub_lock:
            self.feedback_pub.publish(msg)

    def _heartbeat(self) -> None:
        """The robot's beat (``/robot_heartbeat``, running or idle: the planner marks a silent robot
        down), PROGRESS of the running segment, and refusals that must not wait for the worker."""
        period = self.p["heartbeat_period"]
        while True:
            beat = Header(frame_id=self.agent_id, stamp=self.get_clock().now().to_msg())
            try:
                self.beat_pub.publish(beat)
            except Exception as exc:  # noqa: BLE001 - shutting down: the context is gone
                self.get_logger().debug(f"heartbeat: {exc}")
            if self._closing.wait(period):
                return
            with self._pub_lock:
                cur = self._current
                if cur is not None:
                    task, index, started, nonce = cur
                    msg = convert.feedback_to_msg(
                        task,
                        self.agent_id,
                        index,
                        ev.STARTED,
                        self.get_clock().now().nanoseconds * 1e-9,
                        nonce=nonce,
                    )
                    msg.state = FeedbackMsg.PROGRESS
                    msg.duration = time.monotonic() - started
                    self.feedback_pub.publish(msg)
                    self.counters["progress"] += 1
            for h in self.queue.refusals():
                self._refuse(h)

    def _refuse(self, h: Handout) -> None:
        """Answer a handout that executes nothing (see :mod:`timely_llm_ros.robots.task_queue`)."""
        item = h.item
        if h.kind == tq.MARKER:
            self.counters["markers"] += 1
            return
        if h.kind == tq.DUPLICATE:
            self.counters["duplicates"] += 1
            self._warning("duplicate", h.reason)
            return
        if h.kind == tq.RELEASED:
            self.counters["released"] += 1
            self._warning("released", f"task {item.task_id!r} {h.reason}")
            return
        self.counters["busy" if h.kind == tq.BUSY else "over" if h.kind == tq.OVER else "failed"] += 1
        self._warning(h.kind, h.reason)
        if not item.marker:
            self._feedback(item.task_id, item.index, ev.FEEDBACK_FAILED, 0.0, h.reason, item.nonce)

    def _work(self) -> None:
        while not self._closing.is_set():
            handout = self.queue.get(timeout=IDLE_POLL_S)
            if handout is None:
                try:
                    self.backend.idle()
                except Exception as exc:  # noqa: BLE001 - a failed keep-alive is logged; the next segment will tell
                    self._warning("idle", f"{self.backend.kind} backend idle check failed: {exc}")
                continue
            if handout.kind != tq.RUN:
                self._refuse(handout)
                continue
            item = handout.item
            with self._pub_lock:
                self._current = (item.task_id, item.index, time.monotonic(), item.nonce)
            self._feedback(item.task_id, item.index, ev.STARTED, 0.0, "", item.nonce)
            outcome = self.runner.run(item)
            with self._pub_lock:
                self._current = None
            state = ev.DONE if outcome.ok else ev.FEEDBACK_FAILED
            self.counters["done" if outcome.ok else "failed"] += 1
            if not outcome.ok:
                self._warning(
                    "segment failed",
                    f"segment {item.index} of task {item.task_id!r} failed: {outcome.detail}",
                )
            self._feedback(item.task_id, item.index, state, outcome.duration, outcome.detail, item.nonce)
            self.queue.done(
                item.task_id,
                ok=outcome.ok,
                final=item.final,
                reason=f"its segment {item.index} failed: {clip(outcome.detail, 300)}",
            )

    def close(self) -> None:
        """Stop the worker (interrupting the running skill), then release the robot (land)."""
        self._closing.set()
        self.backend.stop()
        self.queue.close()
        self._worker.join(timeout=60)
        self._heart.join(timeout=10)
        pending = [item for item in self.queue.drain() if not item.marker]
        for item in pending:
            self._feedback(
                item.task_id,
                item.index,
                ev.FEEDBACK_FAILED,
                0.0,
                "the robot node shut down before executing this segment",
                item.nonce,
            )
        if pending:
            self.get_logger().warning(f"shutting down with {len(pending)} segment(s) not executed")
        t0 = time.monotonic()
        self.backend.close()
        try:  # the last FAILED feedback must reach the planner before the process (and DDS) goes
            self.feedback_pub.wait_for_all_acked(Duration(seconds=2.0))
        except Exception as exc:  # noqa: BLE001 - an RMW without the call must not break shutdown
            self.get_logger().debug(f"wait_for_all_acked: {exc}")
        self.get_logger().info(
            f"{self.agent_id} stopped ({self.counters}; backend {self.backend.status()}; "
            f"close took {time.monotonic() - t0:.1f} s)"
        )
