"""Planner node: TimelyLLM segmented generation for a robot fleet over ROS 2.

A thin adapter: the planner's task life — front door, planner thread, segment watchdogs, crash-recovery
journal — is the ROS-free :class:`~timely_llm_ros.service.planner_service.PlannerService` over one
:class:`~timely_llm_ros.core.planner.PlannerCore` (scheduling, segmented generation, suspension; paper
§3-§4; one task at a time per robot) and one engine (``engine`` parameter: ``sim`` — the simulated
engine run in real time, see :mod:`.sim_support` — or ``llamacpp`` / ``vllm`` / ``openai`` through
``timely_llm_ros.engines.registry``). This node declares the parameters (:mod:`.planner_params`),
creates the ROS entities, converts messages, answers the service's questions about the ROS graph
(:class:`~timely_llm_ros.service.planner_service.Ports`) and drives the lifecycle.

Topics (:mod:`timely_llm_ros.interfaces.topics`, QoS in :mod:`timely_llm_ros.ros.qos`):
``/tasks`` (Task, in) → front door (:mod:`~timely_llm_ros.service.front_desk`: every check and its
rejection reason) → core; each segment → ``/<agent>/skill_segments`` (Segment, one publisher per
robot, so the order on the topic is the dispatch order); ``/segment_feedback`` (in) →
``PlannerCore.feedback`` (checked: only the segment the robot holds, from that robot, never twice);
``/task_status`` (every state change, EXECUTING included) and ``/trace_events`` (every core event) out.

Threads: the ROS executor thread only converts, validates and queues; the service's planner thread
owns core and engine and hands results back through an outbox that a guard condition drains on the
executor thread, where they become messages. A robot is "there" when a node in namespace
``/<agent>`` subscribes to ``/<agent>/skill_segments`` (within ``robot_grace_period``). Nothing is
dropped silently: DDS queues are deep (:mod:`~timely_llm_ros.ros.qos`) and a sample DDS reports lost
is counted and logged. Repeated warnings are rate-limited (``warn_period``).

Crash recovery (``journal``), clocks (engine clock inside, ROS time on messages) and replay mode
(``plan_source: reference``): see the service (:mod:`timely_llm_ros.service.planner_service`) and
:mod:`.planner_setup`, which turns the parameters into engine, plans, options and journal.
"""

from __future__ import annotations

import functools
import json
import math
import sys
import time
from collections import deque
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rcl_interfaces.msg import ParameterDescriptor, SetParametersResult
from rclpy.duration import Duration
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn
from rclpy.parameter import Parameter
from std_msgs.msg import Header

from timely_llm_ros.core import limits
from timely_llm_ros.core.task import TaskRejected
from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.interfaces import topics
from timely_llm_ros.interfaces.mapping import task_fields, task_from_checked_msg
from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus, TraceEvent
from timely_llm_ros.nodes.common import ParamError, declare_params, forget_destroyed, run_node
from timely_llm_ros.nodes.planner_params import (
    MAPPING_PARAMS,
    PARAMS,
    configure_time_param,
    parse_agent_types,
    quote_mapping_args,
)
from timely_llm_ros.nodes.planner_setup import configure
from timely_llm_ros.ros import convert, qos
from timely_llm_ros.ros.plan_task import PlanTaskServer
from timely_llm_ros.service import handoff as ho
from timely_llm_ros.service.journal import default_path
from timely_llm_ros.service.planner_service import PlannerService, Ports


@dataclass
class _AgentPub:
    """The one segment publisher of a robot, and since when the robot has had no open task."""

    pub: Any
    idle_since: float = math.nan


class PlannerNode(LifecycleNode):
    """See the module docstring."""

    def __init__(self, name: str = "planner", **kwargs: Any) -> None:
        # undeclared names are allowed for the nested engine/planner options only (_guard_params)
        kwargs.setdefault("allow_undeclared_parameters", True)
        super().__init__(name, **kwargs)
        if self.get_parameter("use_sim_time").value:
            raise ParamError("use_sim_time is not supported: the planner runs on the engine's wall clock")
        self._configured = False  # engine loaded: configure-time parameters are refused (_guard_params)
        self._started = False
        self.add_on_set_parameters_callback(self._guard_params)
        self.p = declare_params(self, PARAMS, on_change=self._param_changed)
        self._declare_nested_options()
        self._started = True
        self._transition_error: Exception | None = None
        self._pubs: dict[str, _AgentPub] = {}
        self._outbound: deque[ho.Outbound] = deque()
        self.svc = PlannerService(
            self.p,
            Ports(
                put=self._put,
                log=self.get_logger(),
                robot_ready=self._robot_ready,
                status_readers_matched=self._status_readers_matched,
                open_robot=self._segment_publisher,
                robot_topic=lambda agent: self.resolve_topic_name(topics.segment_topic(agent)),
                release_robot=self._drop_idle_publisher,
            ),
        )
        self.svc.desk.agent_types = parse_agent_types(self.p["agent_types"])

        self._status_pub = self.create_publisher(TaskStatus, topics.TASK_STATUS, qos.status_qos())
        self._event_pub = self.create_publisher(TraceEvent, topics.TRACE_EVENTS, qos.event_qos())
        self._lost = {
            kind: SubscriptionEventCallbacks(message_lost=functools.partial(self._dds_lost, kind))
            for kind in ("tasks", "feedback")
        }
        self.create_subscription(
            SegmentFeedback,
            topics.SEGMENT_FEEDBACK,
            self._on_feedback,
            qos.feedback_qos(),
            event_callbacks=self._lost["feedback"],
        )
        self.create_subscription(  # robots' heartbeats: a silent robot is down (core/robot_liveness.py)
            Header, topics.ROBOT_HEARTBEAT, lambda m: self.svc.beat(m.frame_id), qos.heartbeat_qos()
        )
        self._wake = self.create_guard_condition(self._drain_outbound)
        self._echoes: set[str] = set()
        self._task_pub = self.create_publisher(Task, topics.TASKS, qos.task_qos())
        self._task_sub: Any = None  # created on the first activation (see on_activate)
        self.plan_task: PlanTaskServer | None = None
        self.create_timer(0.05, self._tick)
        self.create_timer(1.0, self._housekeeping)
        if self.p["autostart"]:  # a plain node: configure + activate now (errors: exit status 2)
            for step in (self.trigger_configure, self.trigger_activate):
                step()
                if self._transition_error is not None:
                    raise self._transition_error
        else:
            self.get_logger().info(
                "planner unconfigured (autostart false): waiting for the lifecycle "
                "transitions configure and activate"
            )

    # ------------------------------------------------------------------ lifecycle (managed node)
    def on_configure(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Load the engine and warm it up, open the journal; no task is taken yet."""
        self._transition_error = None
        try:
            configure(self.svc, self.p, self._nested, self.get_logger(), self._journal_path)
        except ParamError as exc:
            self._transition_error = exc
            self.get_logger().error(f"configure failed: {exc}")
            self.svc.release_engine()
            return TransitionCallbackReturn.FAILURE
        self._configured = True
        self.get_logger().info(f"planner configured: {self.svc.describe()}")
        return TransitionCallbackReturn.SUCCESS

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Accept tasks (tasks topic, plan_task action); the planner thread runs from now on."""
        if self._task_sub is None:
            self._task_sub = self.create_subscription(
                Task, topics.TASKS, self._on_task, qos.task_qos(), event_callbacks=self._lost["tasks"]
            )
            self.plan_task = PlanTaskServer(self, self._intake_goal, self.svc.desk.request_cancel)
        if not self.svc.running:
            self.svc.start()
        self.svc.active = True
        self.get_logger().info(f"planner ready: accepting tasks ({self.svc.describe()})")
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop accepting tasks (new ones are REJECTED with the reason); in-flight tasks finish or are
        cancelled (parameter ``on_deactivate``)."""
        self.svc.active = False
        open_ids = self.svc.open_tasks.ids()
        if self.p["on_deactivate"] == "cancel":
            for task_id in open_ids:
                self.svc.desk.request_cancel(task_id, "planner deactivated")
        self.get_logger().info(
            f"planner inactive: not accepting tasks; {len(open_ids)} open task(s) "
            f"{'cancelled' if self.p['on_deactivate'] == 'cancel' else 'go on to their end'}"
        )
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Back to unconfigured: every open task ends (FAILED "planner cleaned up"), engine released;
        engine, model, policy and options may be set again before the next configure."""
        self._shutdown_work("planner cleaned up")
        self._configured = False
        if self._task_sub is not None:
            self.destroy_subscription(self._task_sub)
            self._task_sub = None
        if self.plan_task is not None:
            self.plan_task.destroy()
            self.plan_task = None
        return TransitionCallbackReturn.SUCCESS

    def on_shutdown(self, state: LifecycleState) -> TransitionCallbackReturn:
        self._shutdown_work("planner shut down")
        return TransitionCallbackReturn.SUCCESS

    # ------------------------------------------------------------------ configure-time parameters
    def _declare_nested_options(self) -> None:
        """Declare the nested options given at start-up (``engine_options.model_path`` from a parameter
        file or ``-p``), so that ``ros2 param list/get/set`` shows and changes them like any other."""
        for key, given in sorted(self._parameter_overrides.items()):
            if any(key.startswith(m + ".") for m in MAPPING_PARAMS):
                self.declare_parameter(
                    key,
                    given.value,
                    ParameterDescriptor(
                        description=f"nested form of {key.split('.')[0]} (wins over the string form)",
                        dynamic_typing=True,
                    ),
                )

    def _nested(self, name: str) -> dict[str, Any]:
        """The current ``<name>.<key>`` parameters (start-up and ``ros2 param set`` ones) by full name."""
        return {f"{name}.{k}": v for k, v in self.get_parameters_by_prefix(name).items()}

    def _guard_params(self, changes: list[Parameter]) -> SetParametersResult:
        """Engine, model, policy, profile and options are read by configure: refuse a change while the
        planner is configured (with the lifecycle recipe) and any undeclared name but nested options."""
        for change in changes:
            name = change.name
            nested = any(name.startswith(m + ".") for m in MAPPING_PARAMS)
            if self._started and not nested and not self.has_parameter(name):
                return SetParametersResult(successful=False, reason=f"parameter {name!r} is not declared")
            if self._configured and configure_time_param(name):
                node = self.get_fully_qualified_name()
                return SetParametersResult(
                    successful=False,
                    reason=f"parameter {name!r} is read by configure and the planner is configured: "
                    f"set it while unconfigured (ros2 lifecycle set {node} deactivate, then cleanup; "
                    "set it; configure; activate)",
                )
        return SetParametersResult(successful=True)

    def _journal_path(self) -> Path:
        return default_path(self.get_fully_qualified_name(), self.context.get_domain_id())

    def _param_changed(self, name: str, value: Any) -> None:
        self.p[name] = value
        if name == "agent_types":
            self.svc.desk.agent_types = parse_agent_types(value)
        self.svc.param_changed(name)

    def _tick(self) -> None:
        """Every 50 ms on the executor: tasks waiting for their robot; proof that the executor runs
        (the planner thread judges no robot down while the executor lags behind its heartbeats)."""
        self.svc.host_tick = time.monotonic()
        self.svc.desk.check_waiting()

    # ------------------------------------------------------------------ executor thread: intake
    def _on_task(self, msg: Task) -> None:
        if msg.task_id in self._echoes:  # an action goal this node published itself (see _intake_goal)
            self._echoes.discard(msg.task_id)
            return
        self._intake(msg)

    def _intake_goal(self, msg: Task) -> str:
        """A ``plan_task`` goal: the topic intake, then the accepted task is published on ``tasks`` too,
        so robots get its scene, the recorder records it and the rqt timeline shows its TUF exactly as
        for a topic task; this node skips its own copy when it comes back."""
        task_id = self._intake(msg)
        if task_id in self.svc.open_tasks:
            self._echoes.add(task_id)
            self._task_pub.publish(msg)  # msg.task_id is the (possibly assigned) id
        return task_id

    def _intake(self, msg: Task) -> str:
        """One task from the ``tasks`` topic or the ``plan_task`` action (see the front desk)."""

        def to_spec(task_id: str, now: float, tuf: TUF | None) -> Any:
            msg.task_id = task_id
            return task_from_checked_msg(msg, now, tuf, self.p["default_max_tokens"])

        return self.svc.desk.intake(msg.task_id, msg.agent_id, lambda: task_fields(msg), to_spec)

    def _on_feedback(self, msg: SegmentFeedback) -> None:
        if self.svc.core is None:  # unconfigured: no task can be open
            self.svc.stats["feedback_ignored"] += 1
            return
        now = self.svc.clock_fn()
        try:
            fb = convert.feedback_from_msg(msg)
        except ValueError as exc:
            self.svc.stats["feedback_ignored"] += 1
            self.svc.warn(
                "feedback:malformed", f"feedback for task {limits.clip(msg.task_id, 80)!r} ignored: {exc}"
            )
            return
        self.svc.desk.feedback(fb, now)

    def _dds_lost(self, kind: str, info: Any) -> None:
        """DDS dropped samples before we took them (reader queue overflow): never silently."""
        n = int(getattr(info, "total_count_change", 0) or 0)
        stats = self.svc.stats
        stats[f"dds_lost_{kind}"] += n
        depth = qos.task_qos().depth if kind == "tasks" else qos.feedback_qos().depth
        self.get_logger().error(
            f"DDS lost {n} {kind} message(s) before the planner could take them "
            f"(reader queue depth {depth}; {stats[f'dds_lost_{kind}']} in total)"
        )

    # ------------------------------------------------------------------ executor thread: the graph
    def _segment_publisher(self, agent: str) -> Any:
        """The robot's one segment publisher (created on its first task; TaskRejected if impossible)."""
        entry = self._pubs.get(agent)
        if entry is None:
            try:
                topic = topics.segment_topic(agent)
                lifespan = self.p["segment_lifespan"]
                pub = self.create_publisher(
                    Segment, topic, qos.segment_qos(lifespan if lifespan > 0 else None)
                )
            except Exception as exc:  # noqa: BLE001 - invalid name, RMW refused the topic ...: this task only
                raise TaskRejected(
                    f"cannot publish segments for agent {agent!r}: {limits.clip(str(exc), 200)}"
                ) from None
            entry = self._pubs[agent] = _AgentPub(pub)
        return entry.pub

    def _robot_ready(self, agent: str, late: bool = False) -> bool:
        """A robot node — a node in namespace ``/<agent>`` — subscribes to the agent's segment topic,
        and our publisher has matched every subscription the graph shows on it.

        Observers (recorder, time model) subscribe from other namespaces and do not count as the
        robot: a task is never accepted for a fleet without its robot. But they are waited for: the
        segment topic is volatile, and a segment sent before the recorder's reader is matched would be
        missing from the bag. With ``late`` (grace period over) one matched subscription is enough: a
        reader that can never match (incompatible QoS) must not block the robot's tasks.
        """
        entry = self._pubs.get(agent)
        if entry is None:
            return False
        matched = entry.pub.get_subscription_count()
        if matched == 0:
            return False
        infos = self.get_subscriptions_info_by_topic(topics.segment_topic(agent))
        if not any(info.node_namespace == topics.join(self.get_namespace(), agent) for info in infos):
            return False
        return late or matched >= len(infos)

    def _status_readers_matched(self) -> bool:
        """Every /task_status reader the graph shows is matched (the final status of a recovered task
        is published once: a reader not yet matched would never see it)."""
        matched = self._status_pub.get_subscription_count()
        return matched > 0 and matched >= len(self.get_subscriptions_info_by_topic(topics.TASK_STATUS))

    def _drop_idle_publisher(self, agent: str) -> None:
        busy = agent in self.svc.open_tasks.busy_agents()
        entry = self._pubs.get(agent)
        if entry is not None and not busy and not self.svc.desk.waits_for(agent):
            del self._pubs[agent]
            self.destroy_publisher(entry.pub)

    def _housekeeping(self) -> None:
        """Remove the segment publishers of robots without open tasks for ``publisher_idle_timeout``."""
        forget_destroyed(self)  # publishers the executor still held at their destruction
        now = self.svc.clock_fn()
        busy = self.svc.open_tasks.busy_agents()
        for agent, entry in list(self._pubs.items()):
            if agent in busy:
                entry.idle_since = math.nan
            elif math.isnan(entry.idle_since):
                entry.idle_since = now
            elif now - entry.idle_since >= self.p["publisher_idle_timeout"]:
                self._drop_idle_publisher(agent)
        self.svc.warn_backlog()

    # ------------------------------------------------------------------ executor thread: output
    def _put(self, item: ho.Outbound) -> None:
        self._outbound.append(item)
        self._wake.trigger()

    def _drain_outbound(self) -> None:
        while True:
            try:
                item = self._outbound.popleft()
            except IndexError:
                return
            try:
                self._publish(item)
            except Exception as exc:  # noqa: BLE001 - a value the message cannot hold: say so, never crash the executor
                self.get_logger().error(f"cannot publish {type(item).__name__}: {type(exc).__name__}: {exc}")

    def _publish(self, item: ho.Outbound) -> None:
        match item:
            case ho.Status():
                msg = convert.status_to_msg(
                    item.task_id, item.agent, item.state, item.stamp, item.reason, item.response, item.utility
                )
                self._status_pub.publish(msg)
                if self.plan_task is not None:
                    self.plan_task.on_status(msg)
            case ho.Event(event):
                self._event_pub.publish(convert.event_to_msg(event))
            case ho.Closed(task_id):
                self.svc.open_tasks.closed(task_id)
            case ho.SegmentOut(agent, d):
                msg = convert.segment_to_msg(
                    d, gen_start=item.gen_start, gen_end=item.gen_end, tokens=item.tokens, nonce=item.nonce
                )
                try:
                    self._segment_publisher(agent).publish(msg)
                except TaskRejected as exc:  # cannot happen: created at intake; say so, never crash
                    self.get_logger().error(f"segment of task {msg.task_id!r} not sent: {exc.reason}")
                    return
                if self.plan_task is not None:
                    self.plan_task.on_segment(msg)

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Process exit (after SIGINT/SIGTERM): as the lifecycle shutdown transition."""
        self._shutdown_work("planner shut down")

    def _shutdown_work(self, reason: str) -> None:
        """Every open task gets a final status (see :meth:`PlannerService.shutdown`); then the reliable
        topics get a moment for subscribers (recorder, robots) to acknowledge the final statuses
        before the process exits and takes the DDS history with it."""
        if not self.svc.shutdown(reason, self._drain_outbound):
            return
        for pub in (self._status_pub, self._event_pub):
            try:
                pub.wait_for_all_acked(Duration(seconds=2.0))
            except Exception as exc:  # noqa: BLE001 - an RMW without the call must not break shutdown
                self.get_logger().debug(f"wait_for_all_acked: {exc}")
        info = json.dumps(dict(self.svc.stats))
        self.get_logger().info(f"planner stopped ({reason}): {info}")


def main(argv: list[str] | None = None) -> int:
    args = quote_mapping_args(sys.argv if argv is None else argv)
    return run_node(
        PlannerNode,
        args,
        params=PARAMS,
        description="TimelyLLM planner node (see timely_llm_ros.nodes.planner)",
    )


if __name__ == "__main__":
    raise SystemExit(main())
