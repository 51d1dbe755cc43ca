"""The generic ROS 2 backend (``backend: ros``): each skill call is an action goal, a service call or a
topic message of the robot's existing stack (Nav2, MoveIt, a manufacturer's driver), as the skill
set's ``backends: ros:`` section maps it (:mod:`.ros_backend_map` documents and checks the format).

Per call, on the robot node's executor (rclpy's action/service clients are thread-safe here; the
node's worker thread waits on the futures):

* **action** — wait for the server (``wait_for_servers`` seconds at most), send the goal; a rejected
  goal fails the skill ("goal rejected"); then wait for the result up to the skill's ``timeout``: on
  expiry the goal is cancelled and the skill fails. A result with status SUCCEEDED succeeds unless its
  ``success`` field says otherwise; ABORTED and CANCELED fail, quoting the ``error`` field if given.
  ``returns`` names the result field the skill returns to the plan.
* **service** — the same with the response (a call that cannot be cancelled is abandoned at timeout).
* **topic** — publish the message; nothing to wait for (a topic skill returns no value).

**Cancel on task cancel**: the backend watches ``/task_status``; when the planner ends the robot's
current task (FAILED, EXPIRED, or CANCELLED where the message defines it), the running goal is
cancelled (per skill: ``cancel_on_task_cancel``) and the skill fails with the planner's reason. On
shutdown (:meth:`stop`) the running goal is cancelled too, so the robot does not go on moving.

Names are resolved in the robot node's namespace (``drive`` of robot ``/rover_1`` is
``/rover_1/drive``); absolute names (``/navigate_to_pose``) are used as they are.
"""

from __future__ import annotations

import threading
import time
from typing import Any

from action_msgs.msg import GoalStatus
from rclpy.action import ActionClient

from timely_llm_ros.robots.base import RobotBackend
from timely_llm_ros.robots.minispec import Call, SkillFailure
from timely_llm_ros.robots.ros_backend_map import Binding, MappingError, fill, parse_mapping, read

_STATUS = {
    GoalStatus.STATUS_SUCCEEDED: "succeeded",
    GoalStatus.STATUS_ABORTED: "aborted",
    GoalStatus.STATUS_CANCELED: "cancelled",
    GoalStatus.STATUS_UNKNOWN: "unknown",
}
_POLL_S = 0.05
# DDS discovery is asymmetric: right after this client sees a server, the server may not know this
# client's reply reader yet, and a request sent in that window can lose its reply. Requests wait
# until a server has been seen for this long.
SETTLE_S = 0.5
# A goal whose acceptance is not answered within this long (a lost reply, a hung server) fails;
# if it is accepted later it is cancelled at once.
ACCEPT_TIMEOUT_S = 10.0


def _cancel_if_accepted(future: Any) -> None:
    handle = future.result() if future.done() and future.exception() is None else None
    if handle is not None and handle.accepted:
        handle.cancel_goal_async()


class RosBackend(RobotBackend):
    """A robot driven through ROS 2 interfaces of another stack (see the module docstring)."""

    kind = "ros"

    def __init__(self, node: Any) -> None:
        super().__init__(node.skill_set)
        self.node = node
        self.mapping = parse_mapping(node.skill_set)
        self._clients: dict[str, Any] = {}
        self._goal: tuple[Any, Binding] | None = None  # the running action goal's handle
        self._goal_lock = threading.Lock()
        self._cancelled: str | None = None  # why the planner ended the running task
        self.counters = {"calls": 0, "failed": 0, "cancelled": 0, "timeouts": 0}
        self._seen: dict[str, float] = {}  # interface name -> when its server was first seen ready
        for b in self.mapping.bindings.values():  # one client per interface name, shared by skills
            if b.name in self._clients:
                if self._clients[b.name][0] != (b.kind, b.type_name):
                    raise MappingError(
                        f"{self.skill_set.source_path}: {b.label} is also mapped with another kind or type"
                    )
                continue
            self._clients[b.name] = ((b.kind, b.type_name), self._make(b))
        self._watch_status()

    # ------------------------------------------------------------------ set-up
    def _make(self, b: Binding) -> Any:
        if b.kind == "action":
            return ActionClient(self.node, b.interface, b.name)
        if b.kind == "service":
            return self.node.create_client(b.interface, b.name)
        return self.node.create_publisher(b.interface, b.name, 10)  # reliable, keep-last 10

    def _client(self, b: Binding) -> Any:
        return self._clients[b.name][1]

    def _watch_status(self) -> None:
        from timely_llm_ros.interfaces import topics
        from timely_llm_ros.msg import TaskStatus
        from timely_llm_ros.ros import qos

        ends = {TaskStatus.FAILED: "FAILED", TaskStatus.EXPIRED: "EXPIRED"}
        if hasattr(TaskStatus, "CANCELLED"):
            ends[TaskStatus.CANCELLED] = "CANCELLED"

        def on_status(msg: Any) -> None:
            if msg.agent_id != self.node.agent_id or msg.task_id != self.ctx.task_id or msg.state not in ends:
                return
            self.cancel_running(
                f"the planner marked the task {ends[msg.state]}" + (f": {msg.reason}" if msg.reason else "")
            )

        self.node.create_subscription(
            TaskStatus,
            topics.fleet_topic(self.node.get_namespace(), topics.TASK_STATUS),
            on_status,
            qos.status_qos(),
        )

    def start(self) -> None:
        """Wait (up to ``wait_for_servers`` s) for every action/service server; fail start-up if absent."""
        wait = self.mapping.wait_for_servers
        if wait <= 0:
            return
        deadline = time.monotonic() + wait
        missing = []
        for b in self.mapping.bindings.values():
            if b.kind == "topic":
                continue
            client = self._client(b)
            ready = client.server_is_ready if b.kind == "action" else client.service_is_ready
            while not ready() and time.monotonic() < deadline and not self.stop_event.is_set():
                time.sleep(_POLL_S)
            if not ready():
                missing.append(f"{b.label} as {self._resolved(b)}")
        if missing:
            raise MappingError(
                f"{self.skill_set.source_path}: no server within {wait:g} s (wait_for_servers) "
                f"for: {'; '.join(dict.fromkeys(missing))}"
            )

    def _resolved(self, b: Binding) -> str:
        if b.kind == "service":
            return self.node.resolve_service_name(b.name)
        return self.node.resolve_topic_name(b.name)

    # ------------------------------------------------------------------ execution
    def unsupported(self, names: set[str]) -> str | None:
        missing = sorted(names - set(self.mapping.bindings))
        return f"no ROS mapping for skill(s) {', '.join(missing)}" if missing else None

    def begin_segment(self, ctx: Any) -> None:
        if ctx.task_id != self.ctx.task_id:
            self._cancelled = None
        super().begin_segment(ctx)

    def execute(self, call: Call, args: tuple) -> Any:
        b = self.mapping.bindings.get(call.name)
        if b is None:
            raise SkillFailure(f"{call.source}: no ROS mapping for skill {call.name!r}")
        if self._cancelled:
            raise SkillFailure(f"{call.source}: not started: {self._cancelled}")
        if self.stop_event.is_set():
            raise SkillFailure(f"{call.source}: not started: the robot node is shutting down")
        spec = self.skill_set.skills[call.name]
        named = {a.name: v for a, v in zip(spec.args, args, strict=False)}
        try:
            request = fill(b, named)
        except (ValueError, TypeError, AssertionError, IndexError) as exc:  # rclpy asserts ranges and types
            raise SkillFailure(f"{call.source}: cannot fill {b.label}: {exc}") from None
        self.counters["calls"] += 1
        try:
            if b.kind == "topic":
                self._client(b).publish(request)
                return None
            reply = self._action(b, request, call) if b.kind == "action" else self._service(b, request, call)
            return self._judge(b, reply, call)
        except SkillFailure:
            self.counters["failed"] += 1
            raise

    def _wait(
        self, future: Any, until: float, b: Binding, call: Call, what: str, limit_s: float | None = None
    ) -> Any:
        """Wait for ``future``; SkillFailure on timeout, shutdown or task cancel."""
        done = threading.Event()
        future.add_done_callback(lambda _f: done.set())
        while not done.wait(_POLL_S):
            if self.stop_event.is_set():
                raise SkillFailure(f"{call.source}: {what} interrupted: the robot node is shutting down")
            if self._cancelled and b.kind == "service" and b.cancel_on_task_cancel:
                raise SkillFailure(f"{call.source}: abandoned: {self._cancelled}")
            if time.monotonic() >= until:
                self.counters["timeouts"] += 1
                limit = b.timeout if limit_s is None else limit_s
                raise SkillFailure(f"{call.source}: {b.label} timed out after {limit:g} s ({what})")
        exc = future.exception()
        if exc is not None:
            raise SkillFailure(f"{call.source}: {b.label} failed: {exc}")
        return future.result()

    def _ready(self, b: Binding, call: Call) -> None:
        client = self._client(b)
        ready = client.server_is_ready if b.kind == "action" else client.service_is_ready
        deadline = time.monotonic() + max(self.mapping.wait_for_servers, 0.0)
        while not ready():
            self._seen.pop(b.name, None)
            if time.monotonic() >= deadline or self.stop_event.is_set():
                raise SkillFailure(f"{call.source}: {b.label} has no server at {self._resolved(b)}")
            time.sleep(_POLL_S)
        seen = self._seen.setdefault(b.name, time.monotonic())
        settle = seen + SETTLE_S - time.monotonic()
        if settle > 0:
            self.stop_event.wait(settle)

    def _service(self, b: Binding, request: Any, call: Call) -> Any:
        self._ready(b, call)
        until = time.monotonic() + b.timeout
        future = self._client(b).call_async(request)
        try:
            return self._wait(future, until, b, call, "waiting for the response")
        except SkillFailure:
            self._client(b).remove_pending_request(future)
            raise

    def _action(self, b: Binding, goal: Any, call: Call) -> Any:
        self._ready(b, call)
        until = time.monotonic() + b.timeout
        sent = self._client(b).send_goal_async(goal)
        try:
            accept_by = time.monotonic() + ACCEPT_TIMEOUT_S
            handle = self._wait(
                sent,
                min(until, accept_by),
                b,
                call,
                "waiting for acceptance",
                None if until <= accept_by else ACCEPT_TIMEOUT_S,
            )
        except SkillFailure as exc:
            sent.add_done_callback(_cancel_if_accepted)  # a goal accepted after we gave up must not run
            if "timed out" in exc.reason:
                raise SkillFailure(f"{exc.reason}; goal cancelled") from None
            raise
        if not handle.accepted:
            raise SkillFailure(f"{call.source}: {b.label} rejected the goal")
        with self._goal_lock:
            self._goal = (handle, b)
        try:
            if self._cancelled and b.cancel_on_task_cancel:  # the task ended while the goal was sent
                handle.cancel_goal_async()
            result = self._wait(handle.get_result_async(), until, b, call, "waiting for the result")
        except SkillFailure as exc:
            handle.cancel_goal_async()  # a timed-out or interrupted goal must not go on moving
            if "timed out" in exc.reason:
                raise SkillFailure(f"{exc.reason}; goal cancelled") from None
            raise
        finally:
            with self._goal_lock:
                self._goal = None
        if result.status == GoalStatus.STATUS_SUCCEEDED:
            return result.result
        why = _STATUS.get(result.status, f"status {result.status}")
        detail = self._error_text(b, result.result)
        if result.status == GoalStatus.STATUS_CANCELED and self._cancelled:
            raise SkillFailure(f"{call.source}: goal cancelled: {self._cancelled}")
        raise SkillFailure(f"{call.source}: {b.label} {why}" + (f": {detail}" if detail else ""))

    def _error_text(self, b: Binding, reply: Any) -> str:
        if b.error is None or reply is None:
            return ""
        try:
            return str(read(reply, b.error))
        except (AttributeError, IndexError) as exc:
            return f"(error field {b.error!r} unreadable: {exc})"

    def _judge(self, b: Binding, reply: Any, call: Call) -> Any:
        try:
            return self._read_reply(b, reply, call)
        except (IndexError, AttributeError) as exc:  # e.g. returns: poses[0] of an empty list
            raise SkillFailure(f"{call.source}: {b.label} replied without the mapped field: {exc}") from None

    def _read_reply(self, b: Binding, reply: Any, call: Call) -> Any:
        if b.success is not None:
            path, want = b.success
            got = read(reply, path)
            if got != want:
                detail = self._error_text(b, reply)
                raise SkillFailure(
                    f"{call.source}: {b.label} reported failure ({path} = {got!r})"
                    + (f": {detail}" if detail else "")
                )
        return None if b.returns is None else read(reply, b.returns)

    # ------------------------------------------------------------------ cancel / stop
    def cancel_running(self, reason: str) -> None:
        """End the running skill of the current task (task ended by the planner)."""
        self._cancelled = reason
        with self._goal_lock:
            running = self._goal
        if running is not None and running[1].cancel_on_task_cancel:
            self.counters["cancelled"] += 1
            running[0].cancel_goal_async()

    def stop(self) -> None:
        super().stop()
        with self._goal_lock:
            running = self._goal
        if running is not None:
            running[0].cancel_goal_async()

    def status(self) -> dict[str, Any]:
        return dict(self.counters)
