"""Planner node: TimelyLLM segmented generation for a robot fleet over ROS 2.

A thin adapter over :class:`~timely_llm_ros.core.planner.PlannerCore` (scheduling, segmented
generation, suspension; paper §3-§4; one task at a time per robot, :mod:`~timely_llm_ros.core.agent_queue`)
and one engine (``engine`` parameter: ``sim`` — the simulated engine run in real time, see
:mod:`.sim_support` — or ``llamacpp`` / ``vllm`` through ``timely_llm_ros.engines.registry``).
Parameters: :mod:`.planner_params`.

Topics (:mod:`timely_llm_ros.ros.topics`, QoS in :mod:`timely_llm_ros.ros.qos`):
``/tasks`` (Task, in) → validation → core; each segment → ``/<agent>/skill_segments`` (Segment, one
publisher per robot, so the order on the topic is the dispatch order); ``/segment_feedback`` (in) →
``PlannerCore.feedback`` (checked: only the segment the robot holds, from that robot, never twice);
``/task_status`` (every state change, EXECUTING included) and ``/trace_events`` (every core event) out.

Threads: the ROS executor thread only converts, validates and queues; the planner thread owns the
core, the engine (which blocks for a whole decoding iteration), the segment timers and the journal,
and hands messages back through a queue and a guard condition, so no callback ever waits for the
engine and nothing in the core is touched by two threads. Both queues carry typed items
(:mod:`~timely_llm_ros.core.handoff`), dispatched on their type.

Validation (each failure → ``TaskStatus`` REJECTED with the reason, plus ARRIVAL + REJECT events; the
checks themselves are in core — :mod:`~timely_llm_ros.core.limits`, :mod:`~timely_llm_ros.core.intake`
— and raise :class:`~timely_llm_ros.core.intake.Refused`, mapped to the status in one place):
field limits (:mod:`~timely_llm_ros.core.limits`: id and text lengths, TUF ranges keeping every derived
time finite), malformed fields or TUF, unknown skill set, robot type that does not match the skill set
(or the ``agent_types`` table), an agent id that cannot name a topic (or a topic the middleware
refuses: a failure to create a ROS entity rejects that task, never the node), a duplicate ``task_id``
(reported under ``<id>#dup<n>``, so the original task's robot is not told its task was rejected; an
empty id is assigned: ``<agent>-<n>``), no robot node — no node in namespace ``/<agent>`` subscribed to
``/<agent>/skill_segments`` within ``robot_grace_period`` —, a full robot queue (``agent_queue_depth``),
an overloaded planner (``max_inbound`` tasks not yet taken by the planner thread, or
``max_queued_tasks`` open: the reason names the queue state) and, for the simulated engine, an
instruction without a reference plan. The core then rejects what only it can judge (a prompt longer
than the context). Nothing is dropped silently: DDS queues are deep (:mod:`~timely_llm_ros.ros.qos`)
and a sample DDS reports lost is counted and logged. Repeated warnings are rate-limited (``warn_period``).

Failure handling: a robot reporting FAILED fails the task (generation released). A robot's current
segment without feedback times out (:mod:`~timely_llm_ros.core.liveness`: its timer starts when it
becomes the robot's current segment; PROGRESS heartbeats keep a long segment alive) and its task FAILs
with the reason. Unparsable or out-of-range segments are never sent.

Crash recovery (:mod:`~timely_llm_ros.core.journal`, parameter ``journal``): accepted tasks and their
progress are journaled; after a restart every task the journal shows open is, once its robot is
discovered, either re-planned for the rest (``on_restart: resume``) or ended FAILED "planner
restarted" (default). A clean stop (SIGINT/SIGTERM) gives every open task — queued, generating,
held or executing — a final FAILED status.

Clocks: the planner runs on the engine clock (monotonic); stamps on messages are ROS (system) time,
converted with one offset measured at start. Robot feedback stamps are used when they lie within
``feedback_clock_tolerance`` of the planner's own reading, else the receipt time (clock skew).

Replay mode (``plan_source: reference``, :mod:`~timely_llm_ros.core.replay`): a real engine writes
each task's reference plan exactly — the plan the simulated engine would emit, looked up in the
``sim_plans`` sources as for ``engine: sim`` — as its structured-output constraint; a task for which
no source has a plan keeps the skill grammar (the model writes its own).
"""

from __future__ import annotations

import dataclasses
import json
import math
import queue
import sys
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from rclpy.duration import Duration
from rclpy.event_handler import SubscriptionEventCallbacks
from rclpy.lifecycle import LifecycleNode, LifecycleState, TransitionCallbackReturn

from timely_llm_ros.core import events as ev
from timely_llm_ros.core import handoff as ho
from timely_llm_ros.core import limits
from timely_llm_ros.core.agent_queue import AgentQueues
from timely_llm_ros.core.generation import Dispatch, TaskRecord
from timely_llm_ros.core.intake import (
    NOT_ACTIVE,
    Refused,
    TaskIds,
    check_robot_type,
    load_task_skill_set,
    overload_reason,
    refusal,
)
from timely_llm_ros.core.journal import (
    Journal,
    JournalError,
    OpenTask,
    default_path,
    task_entry,
    task_from_entry,
)
from timely_llm_ros.core.kv_policy import KVPolicyError
from timely_llm_ros.core.liveness import SegmentTimers, feedback_time, segment_limit
from timely_llm_ros.core.open_tasks import OpenTasks
from timely_llm_ros.core.planner import PlannerCore, ResumedSegment
from timely_llm_ros.core.planner_options import PlannerOptions
from timely_llm_ros.core.replay import REFERENCE
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.engines.base import Engine, EngineError
from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus, TraceEvent
from timely_llm_ros.nodes.common import ParamError, declare_params, run_node
from timely_llm_ros.nodes.planner_params import (
    PARAMS,
    engine_options,
    parse_agent_types,
    planner_options,
    quote_mapping_args,
)
from timely_llm_ros.nodes.sim_support import PlanTable, RealtimeSimEngine, sim_engine_kwargs
from timely_llm_ros.ros import convert, qos, topics
from timely_llm_ros.ros.plan_task import PlanTaskServer

RESTARTED = "planner restarted"


@dataclass
class _AgentPub:
    """The one segment publisher of a robot, and since when the robot has had no open task."""

    pub: Any
    idle_since: float = math.nan


class PlannerNode(LifecycleNode):
    """See the module docstring."""

    def __init__(self, name: str = "planner", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        if self.get_parameter("use_sim_time").value:
            raise ParamError("use_sim_time is not supported: the planner runs on the engine's wall clock")
        self.p = declare_params(self, PARAMS, on_change=self._param_changed)
        # set by on_configure (engine, core, journal) and on_activate (planner thread, intake)
        self.engine: Engine | None = None
        self.core: PlannerCore | None = None
        self.journal: Journal | None = None
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._active = False
        self._recovered_tasks: list[OpenTask] = []
        self._transition_error: Exception | None = None
        self.clock_fn = time.monotonic  # the engines' clock (monotonic) until one is configured
        # planner clock (engine, monotonic) -> ROS time (system clock) offset
        self._ros_offset = time.time() - self.clock_fn()
        self._agent_types = parse_agent_types(self.p["agent_types"])
        self.warn = limits.RateLimiter(self.p["warn_period"], time.monotonic)
        # executor thread state
        self.ids = TaskIds(max(4 * self.p["finished_retention"], 10_000))
        self._waiting: list[ho.Waiting] = []
        self._pubs: dict[str, _AgentPub] = {}
        # hand-off queues (typed items: core/handoff.py)
        self._inbound: queue.Queue[ho.Inbound] = queue.Queue()
        self._outbound: deque[ho.Outbound] = deque()
        self.open_tasks = OpenTasks()  # accepted at intake and not terminal (executor's view, locked)
        # planner thread state (open tasks only: pruned when terminal)
        self._records: dict[str, TaskRecord] = {}
        self._specs: dict[str, TaskSpec] = {}
        self.seg_timers = SegmentTimers(self.segment_timeout, lambda: self.p["heartbeat_timeout"])
        self.stats = {
            "received": 0,
            "tasks": 0,
            "rejected": 0,
            "segments": 0,
            "feedback_ignored": 0,
            "timeouts": 0,
            "dds_lost_tasks": 0,
            "dds_lost_feedback": 0,
            "recovered": 0,
            "cancelled": 0,
        }

        self._status_pub = self.create_publisher(TaskStatus, topics.TASK_STATUS, qos.status_qos())
        self._event_pub = self.create_publisher(TraceEvent, topics.TRACE_EVENTS, qos.event_qos())
        self._lost = {
            kind: SubscriptionEventCallbacks(message_lost=lambda info, k=kind: self._dds_lost(k, info))
            for kind in ("tasks", "feedback")
        }
        self.create_subscription(
            SegmentFeedback,
            topics.SEGMENT_FEEDBACK,
            self._on_feedback,
            qos.feedback_qos(),
            event_callbacks=self._lost["feedback"],
        )
        self._wake = self.create_guard_condition(self._drain_outbound)
        self._echoes: set[str] = set()
        self._task_pub = self.create_publisher(Task, topics.TASKS, qos.task_qos())
        self._task_sub: Any = None  # created on the first activation (see on_activate)
        self.plan_task: PlanTaskServer | None = None
        self.create_timer(0.05, self._check_waiting)
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
            self._stop = threading.Event()
            self.engine = self._make_engine()
            self.clock_fn = self.engine.now
            self._ros_offset = time.time() - self.clock_fn()
            options = self._planner_options()
            self.plans = self._load_plans(options.plan_source == REFERENCE)
            self.core = self._new_core(options)
            self.seg_timers = SegmentTimers(self.segment_timeout, lambda: self.p["heartbeat_timeout"])
            self._warm_up(self.p["warmup_skill_sets"])
            self.journal, self._recovered_tasks = self._open_journal()
        except ParamError as exc:
            self._transition_error = exc
            self.get_logger().error(f"configure failed: {exc}")
            self._release_engine()
            return TransitionCallbackReturn.FAILURE
        self.get_logger().info(
            f"planner configured: engine {self.engine.info.name}, policy "
            f"{self.core.policy.name}, journal {self.journal.path if self.journal else 'off'}"
            + (", replaying reference plans" if self.core.intake.replay else "")
        )
        return TransitionCallbackReturn.SUCCESS

    def _new_core(self, options: PlannerOptions) -> PlannerCore:
        try:
            return PlannerCore(
                self.engine,
                self.p["policy"],
                clock=self.clock_fn,
                dispatch=self._dispatch,
                sink=self._event,
                on_state=self._state,
                network_latency=self.p["network_latency"],
                agent_queues=AgentQueues(self.p["agent_queue_depth"], self.p["lookahead"]),
                retain_records=self.p["finished_retention"],
                options=options,
            )
        except EngineError as exc:  # plan_source reference on an engine that cannot replay
            raise ParamError(f"parameter 'plan_source': {exc}") from None

    def on_activate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Accept tasks (tasks topic, plan_task action); the planner thread runs from now on."""
        if self._task_sub is None:
            self._task_sub = self.create_subscription(
                Task, topics.TASKS, self._on_task, qos.task_qos(), event_callbacks=self._lost["tasks"]
            )
            self.plan_task = PlanTaskServer(self, self._intake_goal, self.request_cancel)
        if self._thread is None:
            self._recover(self._recovered_tasks)
            self._recovered_tasks = []
            self._thread = threading.Thread(target=self._run, name="planner-core", daemon=True)
            self._thread.start()
        self._active = True
        self.get_logger().info(
            f"planner ready: accepting tasks (engine {self.engine.info.name}, policy "
            f"{self.core.policy.name}, journal {self.journal.path if self.journal else 'off'})"
        )
        return TransitionCallbackReturn.SUCCESS

    def on_deactivate(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Stop accepting tasks (new ones are REJECTED with the reason); in-flight tasks finish or are
        cancelled (parameter ``on_deactivate``)."""
        self._active = False
        open_ids = self.open_tasks.ids()
        if self.p["on_deactivate"] == "cancel":
            for task_id in open_ids:
                self.request_cancel(task_id, "planner deactivated")
        self.get_logger().info(
            f"planner inactive: not accepting tasks; {len(open_ids)} open task(s) "
            f"{'cancelled' if self.p['on_deactivate'] == 'cancel' else 'go on to their end'}"
        )
        return TransitionCallbackReturn.SUCCESS

    def on_cleanup(self, state: LifecycleState) -> TransitionCallbackReturn:
        """Back to unconfigured: every open task ends (FAILED "planner cleaned up"), engine released."""
        self._shutdown_work("planner cleaned up")
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

    def _release_engine(self) -> None:
        engine, self.engine, self.core = self.engine, None, None
        close = getattr(engine, "close", None) or getattr(engine, "shutdown", None)
        if callable(close):
            try:
                close()
            except Exception as exc:  # releasing must not fail the transition
                self.get_logger().warning(f"engine close: {exc}")

    # ------------------------------------------------------------------ set-up
    def _make_engine(self) -> Engine:
        name = self.p["engine"]
        if name == "sim":
            try:
                kwargs = sim_engine_kwargs(
                    engine_options(name, self.p["engine_options"], self._parameter_overrides)
                )
            except ValueError as exc:
                raise ParamError(f"parameter 'engine_options': {exc}") from None
            try:
                return RealtimeSimEngine(self.p["profile"], clock=time.monotonic, stop=self._stop, **kwargs)
            except KVPolicyError as exc:
                raise ParamError(f"parameter 'engine_options': {exc}") from None
            except (KeyError, ValueError, OSError) as exc:
                raise ParamError(f"parameter 'profile': {exc}") from None
        try:
            from timely_llm_ros.engines.registry import create_engine  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ParamError(
                f"engine {name!r} needs timely_llm_ros.engines.registry, which cannot be "
                f"imported here ({exc}); use engine:=sim"
            ) from None
        try:
            options = engine_options(name, self.p["engine_options"], self._parameter_overrides)
        except ValueError as exc:
            raise ParamError(f"parameter 'engine_options': {exc}") from None
        try:
            return create_engine(name, **options)
        except Exception as exc:  # model file missing, GPU library absent, bad option ...
            raise ParamError(f"engine {name!r} could not be created: {type(exc).__name__}: {exc}") from None

    def _planner_options(self) -> PlannerOptions:
        try:
            opts = planner_options(self.p["planner_options"], self._parameter_overrides)
        except ValueError as exc:
            raise ParamError(f"parameter 'planner_options': {exc}") from None
        if self.p["plan_source"] == REFERENCE:  # the parameter, or the planner_options key
            opts = dataclasses.replace(opts, plan_source=REFERENCE)
        return opts

    def _load_plans(self, replay: bool) -> PlanTable | None:
        """The reference plans: the simulated engine emits them; in replay mode a real engine writes them."""
        if not (self.engine.needs_script or replay):
            return None
        plans = PlanTable()
        for source in self.p["sim_plans"]:
            try:
                n = plans.load(source)
            except Exception as exc:  # WorkloadError, OSError, ...: name the source
                raise ParamError(f"parameter 'sim_plans': cannot load {source!r}: {exc}") from None
            self.get_logger().info(f"{n} reference plans from {source!r}")
        return plans

    def _warm_up(self, skill_sets: list[str]) -> None:
        """Prefill the named skill prompts now; runs before /tasks is subscribed (see PARAMS)."""
        if not skill_sets:
            return
        try:
            took = self.core.warm_up(list(skill_sets))
        except KeyError as exc:
            raise ParamError(f"parameter 'warmup_skill_sets': {exc}") from None
        except EngineError as exc:
            raise ParamError(f"warm-up failed in the engine: {exc}") from None
        for name, seconds in took.items():
            self.get_logger().info(f"warm-up: prefilled the {name} prompt in {seconds:.2f} s")

    def _open_journal(self) -> tuple[Journal | None, list[OpenTask]]:
        where = self.p["journal"]
        if where == "off":
            return None, []
        journal = Journal(
            where or default_path(self.get_fully_qualified_name(), self.context.get_domain_id())
        )
        try:
            return journal, journal.open()
        except JournalError as exc:
            raise ParamError(f"parameter 'journal': {exc}") from None

    def _param_changed(self, name: str, value: Any) -> None:
        self.p[name] = value
        if name == "agent_types":
            self._agent_types = parse_agent_types(self.p[name])
        elif name == "warn_period":
            self.warn.period = float(value)

    def ros_time(self, t: float) -> float:
        """Planner clock → ROS (system) time in seconds."""
        return t + self._ros_offset

    def planner_time(self, ros_t: float) -> float:
        return ros_t - self._ros_offset

    def _warn(self, key: str, text: str) -> None:
        """A warning, at most once per ``warn_period`` per ``key`` (with the count it stood for)."""
        suppressed = self.warn.allow(key)
        if suppressed is not None:
            more = f" (and {suppressed} more like it since the last report)" if suppressed else ""
            self.get_logger().warning(limits.clip(text, 500) + more)

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
        if task_id in self.open_tasks:
            self._echoes.add(task_id)
            self._task_pub.publish(msg)  # msg.task_id is the (possibly assigned) id
        return task_id

    def _intake(self, msg: Task) -> str:
        """Intake of one task (``tasks`` topic and ``plan_task`` action); returns the id its statuses
        carry (planner-assigned when empty, ``<id>#dup<n>`` for a duplicate's rejection)."""
        now = self.clock_fn()
        self.stats["received"] += 1
        agent = limits.clip(msg.agent_id, limits.MAX_AGENT_ID)
        try:
            spec = self._admit(msg, agent, now)
        except Refused as exc:  # every front-door rejection, mapped to its status and events here
            self._reject(exc.report_as, agent, now, exc.reason, exc.kind)
            return exc.report_as
        self.open_tasks.opened(spec.task_id, spec.agent_id)
        if not self.p["require_robot"] or self._robot_ready(spec.agent_id):
            self._inbound.put(ho.Submit(spec))
        else:
            self._waiting.append(ho.Waiting(spec, now + self.p["robot_grace_period"]))
        return spec.task_id

    def _admit(self, msg: Task, agent: str, now: float) -> TaskSpec:
        """The front door's checks in order (raises :class:`Refused`); sets ``msg.task_id`` to the
        id taken (an empty one is assigned: ``<agent>-<n>``, or ``task-<n>`` for an agent id that
        cannot name a topic)."""
        task_id = msg.task_id.strip()
        # ids and sizes first: the rejection must be able to name the task
        with refusal("limits", limits.clip(task_id, limits.MAX_TASK_ID)):
            limits.check_task_fields(convert.task_fields(msg))
        msg.task_id = task_id = self.ids.claim(task_id, agent if topics.valid_agent_id(agent) else "task")
        if not self._active:  # a managed planner that is not (or no longer) active: say so
            raise Refused(NOT_ACTIVE, "inactive", task_id)
        overload = overload_reason(
            self._inbound.qsize() + len(self._waiting),
            len(self.open_tasks),
            self.p["max_inbound"],
            self.p["max_queued_tasks"],
        )
        if overload:
            raise Refused(overload, "overloaded", task_id)
        with refusal("invalid", task_id):
            return self._validate(msg, now)

    def request_cancel(self, task_id: str, reason: str) -> str | None:
        """Executor thread: cancel an open task (None = under way, else why not). A task still waiting
        for its robot node ends here; any other open task is cancelled by the planner thread
        (:meth:`PlannerCore.cancel`: generation stopped, slot and KV freed) after whatever of it is
        queued before (FIFO)."""
        agent = self.open_tasks.agent_of(task_id)
        if agent is None:
            return "no open task with this id (unknown, or already ended)"
        for w in self._waiting:
            if w.spec.task_id == task_id and w.recovered is None:
                self._waiting.remove(w)
                now = self.clock_fn()
                self._put_event(ev.TraceEvent(now, ev.ARRIVAL, task_id, agent))
                self._put_event(ev.TraceEvent(now, ev.CANCEL, task_id, agent, -1, 0.0, reason))
                self._put(
                    ho.Status(convert.status_to_msg(task_id, agent, ev.CANCELLED, self.ros_time(now), reason))
                )
                self._put(ho.Closed(task_id))
                return None
        self._inbound.put(ho.Cancel(task_id, reason))
        return None

    def _validate(self, msg: Task, now: float) -> TaskSpec:
        # the field limits ran first in _admit (so a rejection names the task); not again here
        spec = convert.task_from_checked_msg(msg, now, self.p["default_max_tokens"])
        check_robot_type(spec, load_task_skill_set(spec.skill_set), self._agent_types)
        self._find_plan(spec)
        self._segment_publisher(spec.agent_id)  # last: nothing else can reject it afterwards
        return spec

    def _find_plan(self, spec: TaskSpec) -> None:
        if self.plans is None:
            return
        plan = self.plans.lookup(spec.skill_set, spec.instruction, spec.scene)
        if plan is None and not self.engine.needs_script:  # replay mode: the skill grammar then
            return
        if plan is None:
            raise TaskRejected(
                f"the simulated engine has no reference plan for this instruction in "
                f"skill set {spec.skill_set!r} (plan sources: {', '.join(self.plans.sources)})"
            )
        spec.reference_plan = plan

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
            except Exception as exc:  # invalid name, RMW refused the topic ...: this task only
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

    def _check_waiting(self) -> None:
        if not self._waiting:
            return
        now = self.clock_fn()
        ready: dict[tuple[str, bool], bool] = {}
        still: list[ho.Waiting] = []
        gone: set[str] = set()
        status_heard = self._status_readers_matched()
        for w in self._waiting:
            agent = w.spec.agent_id
            late = now >= w.deadline
            key = (agent, late)
            if key not in ready:
                ready[key] = not self.p["require_robot"] or self._robot_ready(agent, late)
            outcome = w.outcome(ready[key], status_heard, now)
            if outcome is ho.WaitOutcome.RESOLVE:
                self._inbound.put(ho.Recovered(w, "" if ready[key] else f"no robot node for agent {agent!r}"))
            elif outcome is ho.WaitOutcome.SUBMIT:
                self._inbound.put(ho.Submit(w.spec))
            elif outcome is ho.WaitOutcome.GIVE_UP:
                self.open_tasks.closed(w.spec.task_id)
                self._reject(
                    w.spec.task_id,
                    agent,
                    now,
                    f"no robot node for agent {agent!r}: nothing subscribes to "
                    f"{self.resolve_topic_name(topics.segment_topic(agent))} (waited "
                    f"{self.p['robot_grace_period']:.1f} s)",
                    "no robot",
                )
                gone.add(agent)
            else:
                still.append(w)
        self._waiting = still
        for agent in gone:  # no topic is left behind for an agent without a robot
            self._drop_idle_publisher(agent)

    def _status_readers_matched(self) -> bool:
        """Every /task_status reader the graph shows is matched (the final status of a recovered task
        is published once: a reader not yet matched would never see it)."""
        matched = self._status_pub.get_subscription_count()
        return matched > 0 and matched >= len(self.get_subscriptions_info_by_topic(topics.TASK_STATUS))

    def _reject(self, task_id: str, agent: str, t: float, reason: str, kind: str) -> None:
        """Executor-side rejection: same events and status the core emits for its own rejections."""
        self.stats["rejected"] += 1
        self._warn(f"reject:{kind}", f"task {task_id!r} from {agent!r} rejected: {reason}")
        self._put_event(ev.TraceEvent(t, ev.ARRIVAL, task_id, agent))
        self._put_event(ev.TraceEvent(t, ev.REJECT, task_id, agent, -1, 0.0, reason))
        self._put(ho.Status(convert.status_to_msg(task_id, agent, ev.REJECTED, self.ros_time(t), reason)))

    def _on_feedback(self, msg: SegmentFeedback) -> None:
        if self.core is None:  # unconfigured: no task can be open
            self.stats["feedback_ignored"] += 1
            return
        now = self.clock_fn()
        try:
            fb = convert.feedback_from_msg(msg)
        except ValueError as exc:
            self.stats["feedback_ignored"] += 1
            self._warn(
                "feedback:malformed", f"feedback for task {limits.clip(msg.task_id, 80)!r} ignored: {exc}"
            )
            return
        robot_t = self.planner_time(fb.t) if fb.t > 0 else math.nan
        self._inbound.put(ho.FeedbackIn(fb, feedback_time(now, robot_t, self.p["feedback_clock_tolerance"])))

    def _dds_lost(self, kind: str, info: Any) -> None:
        """DDS dropped samples before we took them (reader queue overflow): never silently."""
        n = int(getattr(info, "total_count_change", 0) or 0)
        self.stats[f"dds_lost_{kind}"] += n
        depth = qos.task_qos().depth if kind == "tasks" else qos.feedback_qos().depth
        self.get_logger().error(
            f"DDS lost {n} {kind} message(s) before the planner could take them "
            f"(reader queue depth {depth}; {self.stats[f'dds_lost_{kind}']} in total)"
        )

    # ------------------------------------------------------------------ executor thread: publishers
    def _drop_idle_publisher(self, agent: str) -> None:
        busy = agent in self.open_tasks.busy_agents()
        entry = self._pubs.get(agent)
        if entry is not None and not busy and not any(w.spec.agent_id == agent for w in self._waiting):
            del self._pubs[agent]
            self.destroy_publisher(entry.pub)

    def _housekeeping(self) -> None:
        """Remove the segment publishers of robots without open tasks for ``publisher_idle_timeout``."""
        now = self.clock_fn()
        busy = self.open_tasks.busy_agents()
        for agent, entry in list(self._pubs.items()):
            if agent in busy:
                entry.idle_since = math.nan
            elif math.isnan(entry.idle_since):
                entry.idle_since = now
            elif now - entry.idle_since >= self.p["publisher_idle_timeout"]:
                self._drop_idle_publisher(agent)
        backlog = self._inbound.qsize()
        if backlog > self.p["max_inbound"] // 2:
            self._warn(
                "backlog",
                f"planner busy: {backlog} messages wait for the planner thread "
                f"(tasks beyond max_inbound = {self.p['max_inbound']} are rejected as overloaded)",
            )

    # ------------------------------------------------------------------ executor thread: output
    def _put(self, item: ho.Outbound) -> None:
        self._outbound.append(item)
        self._wake.trigger()

    def _put_event(self, e: ev.TraceEvent) -> None:
        self._put(
            ho.Event(
                convert.event_to_msg(
                    ev.TraceEvent(self.ros_time(e.t), e.kind, e.task_id, e.agent_id, e.seg, e.value, e.detail)
                )
            )
        )

    def _drain_outbound(self) -> None:
        while True:
            try:
                item = self._outbound.popleft()
            except IndexError:
                return
            match item:
                case ho.Status(msg):
                    self._status_pub.publish(msg)
                    if self.plan_task is not None:
                        self.plan_task.on_status(msg)
                case ho.Event(msg):
                    self._event_pub.publish(msg)
                case ho.Closed(task_id):
                    self.open_tasks.closed(task_id)
                case ho.SegmentOut(agent, msg):
                    try:
                        self._segment_publisher(agent).publish(msg)
                    except TaskRejected as exc:  # cannot happen: created at intake; say so, never crash
                        self.get_logger().error(f"segment of task {msg.task_id!r} not sent: {exc.reason}")
                        continue
                    if self.plan_task is not None:
                        self.plan_task.on_segment(msg)

    # ------------------------------------------------------------------ crash recovery
    def _recover(self, tasks: list[OpenTask]) -> None:
        """Tasks a previous run left open wait (like new ones) for their robot, then are resumed or
        failed on the planner thread (``on_restart``)."""
        now = self.clock_fn()
        for open_task in tasks:
            try:
                arrival = self.planner_time(float(open_task.task["arrival"]))
                spec = task_from_entry(open_task.task, min(arrival, now))
            except (KeyError, ValueError, TypeError) as exc:
                self.get_logger().error(
                    f"journal entry of task {open_task.task_id!r} is unusable ({exc}); it is dropped"
                )
                if self.journal is not None:
                    self.journal.ended(open_task.task_id, ev.FAILED, RESTARTED)
                continue
            self.stats["recovered"] += 1
            self.ids.add(spec.task_id)
            self.open_tasks.opened(spec.task_id, spec.agent_id)
            try:
                self._segment_publisher(spec.agent_id)
            except TaskRejected:
                pass  # reported when it is failed: no robot can be reached
            # announced once its robot and every status reader are discovered, but not before the
            # grace period: a restarted planner does not know who else listens (recorder, senders)
            grace = self.p["robot_grace_period"]
            self._waiting.append(ho.Waiting(spec, now + max(2.0 * grace, 5.0), open_task, now + grace))
        if tasks:
            self.get_logger().warning(
                f"journal: {len(tasks)} task(s) were open when the planner stopped; "
                f"on_restart = {self.p['on_restart']}"
            )

    def _recovered(self, w: ho.Waiting, problem: str) -> None:
        """Planner thread: resume a recovered task (re-plan the rest) or end it FAILED with a reason."""
        spec, open_task = w.spec, w.recovered
        assert open_task is not None
        reason = RESTARTED if not problem else f"{RESTARTED}: {problem}"
        if self.p["on_restart"] == "resume" and not problem:
            resume = [
                ResumedSegment(
                    s.text,
                    s.min_exec,
                    s.expected_exec,
                    self.planner_time(s.started) if math.isfinite(s.started) else math.nan,
                    self.planner_time(s.done) if math.isfinite(s.done) else math.nan,
                )
                for s in open_task.segments
            ]
            try:
                self._find_plan(spec)
                self._submit(spec, resume)
                return
            except TaskRejected as exc:
                reason = f"{RESTARTED}; cannot resume: {exc.reason}"
        t = self.clock_fn()
        self._event(ev.TraceEvent(t, ev.FAIL, spec.task_id, spec.agent_id, -1, 0.0, reason))
        self._put(
            ho.Status(convert.status_to_msg(spec.task_id, spec.agent_id, ev.FAILED, self.ros_time(t), reason))
        )
        self._journal("ended", spec.task_id, ev.FAILED, reason)
        self._put(ho.Closed(spec.task_id))

    # ------------------------------------------------------------------ planner thread
    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                busy = self.core.has_work()
                self._drain_inbound(block=not busy)
                self._check_timeouts()
                if self.core.has_work() and not self.core.step():
                    self._drain_inbound(block=True, timeout=0.01)  # nothing admissible: wait a little
            except Exception as exc:  # never let the planner thread die with tasks in flight
                self.get_logger().error(f"planner loop error: {type(exc).__name__}: {exc}")
                try:
                    self.core.abort_all(f"planner error: {type(exc).__name__}: {exc}")
                except Exception as exc2:  # the core itself is broken: say so, keep serving intake
                    self.get_logger().error(f"abort after planner error failed: {exc2}")
                self._stop.wait(0.1)

    def _drain_inbound(self, block: bool, timeout: float = 0.05) -> None:
        try:
            item = self._inbound.get(timeout=timeout) if block else self._inbound.get_nowait()
        except queue.Empty:
            return
        while True:
            match item:
                case ho.Submit(spec, resume):
                    self._submit(spec, resume)
                case ho.FeedbackIn(fb, t):
                    self._feedback(fb, t)
                case ho.Recovered(waiting, problem):
                    self._recovered(waiting, problem)
                case ho.Cancel(task_id, reason):
                    self._cancel(task_id, reason)
            try:
                item = self._inbound.get_nowait()
            except queue.Empty:
                return

    def _submit(self, spec: TaskSpec, resume: list[ResumedSegment] | None = None) -> None:
        self._specs[spec.task_id] = spec
        self.stats["tasks"] += 1
        try:
            rec = self.core.submit(spec, resume)
        except TaskRejected:
            return  # the core published REJECT + REJECTED (on_state / sink), _state() closed it
        self._records[spec.task_id] = rec
        if not resume:
            return
        for i, seg in enumerate(rec.segments):  # journaled again under the new accept
            self._journal("segment", spec.task_id, i, seg.text, seg.min_exec, seg.expected_exec)
            if math.isfinite(seg.exec_start):
                self._journal("started", spec.task_id, i, self.ros_time(seg.exec_start))
            if math.isfinite(seg.exec_end):
                self._journal("done", spec.task_id, i, self.ros_time(seg.exec_end))
        self.seg_timers.resumed(spec.agent_id, spec.task_id, rec.segments)
        if resume:
            self.get_logger().info(
                f"task {spec.task_id!r} resumed after the restart: {len(resume)} segment(s) "
                "were sent before; re-planning the rest"
            )

    def _feedback(self, fb: convert.Feedback, t: float) -> None:
        why = self.core.feedback(fb.task_id, fb.index, fb.state, t, fb.detail, agent=fb.agent_id)
        if why is not None:
            self.stats["feedback_ignored"] += 1
            self._warn(
                f"feedback:{fb.agent_id}:{fb.state}",
                f"{fb.state} feedback from {fb.agent_id!r} for task {fb.task_id!r} segment {fb.index} "
                f"ignored: {why}",
            )
            return
        if fb.state == ev.STARTED:
            self.seg_timers.started(fb.agent_id, fb.task_id, fb.index, t)
            self._journal("started", fb.task_id, fb.index, self.ros_time(t))
        elif fb.state == ev.PROGRESS:
            self.seg_timers.progress(fb.agent_id, fb.task_id, fb.index, t)
        elif fb.state == ev.DONE:
            self.seg_timers.done(fb.agent_id, fb.task_id, fb.index, t)
            self._journal("done", fb.task_id, fb.index, self.ros_time(t))

    def _cancel(self, task_id: str, reason: str) -> None:
        why = self.core.cancel(task_id, reason)
        if why is None:
            self.stats["cancelled"] += 1
            mem = self.engine.memory()  # what the engine holds now that the task's generation is gone
            self.get_logger().info(
                f"task {task_id!r} cancelled: {reason} (engine now: {self.engine.running()} "
                f"generation(s) running, KV tokens running {mem.running}, suspended "
                f"{mem.suspended_device + mem.suspended_host})"
            )
        else:  # it ended (or was rejected) while the request was on its way: its final status stands
            self.get_logger().info(f"cancel of task {task_id!r} came too late: {why}")

    def segment_timeout(self, expected: float) -> float:
        """The segment watchdog's limit (:func:`segment_limit`), from the parameters as they are now."""
        return segment_limit(
            expected,
            self.p["segment_timeout"],
            self.p["segment_timeout_factor"],
            self.p["segment_timeout_margin"],
        )

    def _check_timeouts(self) -> None:
        now = self.clock_fn()
        for exp in self.seg_timers.expired(now):
            self.stats["timeouts"] += 1
            self._warn(f"timeout:{exp.agent}", f"task {exp.task_id!r}: {exp.reason}")
            self.core.feedback(exp.task_id, exp.seg, ev.FEEDBACK_FAILED, now, exp.reason)

    def _journal(self, what: str, *args: Any) -> None:
        if self.journal is None:
            return
        try:
            getattr(self.journal, what)(*args)
        except (OSError, ValueError, JournalError) as exc:  # a full disk must not stop the planner
            self._warn(
                "journal", f"journal {self.journal.path}: cannot write ({exc}); crash recovery is incomplete"
            )

    # ------------------------------------------------------------------ core callbacks (planner thread)
    def _dispatch(self, d: Dispatch) -> None:
        rec = self._records.get(d.task_id)
        seg = rec.segments[d.seg] if rec is not None and d.seg < len(rec.segments) else None
        msg = convert.segment_to_msg(
            d,
            gen_start=self.ros_time(seg.gen_start) if seg is not None else math.nan,
            gen_end=self.ros_time(d.t),
            tokens=seg.n_tokens if seg is not None else 0,
        )
        if not d.closing_marker:  # a closing marker has nothing to execute and gets no feedback
            self.stats["segments"] += 1
            self.seg_timers.dispatched(d.agent_id, d.task_id, d.seg, d.t, d.expected_exec)
            self._journal("segment", d.task_id, d.seg, d.text, d.min_exec, d.expected_exec)
        self._put(ho.SegmentOut(d.agent_id, msg))

    def _event(self, e: ev.TraceEvent) -> None:
        self._put_event(e)

    def _state(self, task_id: str, state: str, reason: str) -> None:
        rec = self._records.get(task_id)
        spec = self._specs.get(task_id)
        agent = rec.agent_id if rec is not None else (spec.agent_id if spec is not None else "")
        response = rec.response_time if rec is not None else math.nan
        utility = rec.utility if rec is not None else math.nan
        now = self.clock_fn()
        self._put(
            ho.Status(
                convert.status_to_msg(
                    task_id, agent, state, self.ros_time(now), limits.clip(reason), response, utility
                )
            )
        )
        if state == ev.ACCEPTED and spec is not None:
            self._journal("accepted", task_id, task_entry(spec, self.ros_time(spec.arrival)))
        elif state in ev.TERMINAL_STATES:
            self._journal("ended", task_id, state, limits.clip(reason))
            self.seg_timers.forget_task(agent, task_id, now)
            self._records.pop(task_id, None)
            self._specs.pop(task_id, None)
            self._put(ho.Closed(task_id))
            if state == ev.REJECTED:
                self.stats["rejected"] += 1

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Process exit (after SIGINT/SIGTERM): as the lifecycle shutdown transition."""
        self._shutdown_work("planner shut down")

    def _shutdown_work(self, reason: str) -> None:
        """Stop the planner thread and give every open task a final status: queued, generating, held
        or executing tasks FAIL with ``reason``; tasks not yet taken by the core are REJECTED. Releases
        the engine and closes the journal (a later configure opens them again)."""
        self._active = False
        if self.core is None and not self._waiting:
            return
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10.0)
        stopped = thread is None or not thread.is_alive()
        now = self.clock_fn()
        if stopped and self.core is not None:
            self.core.abort_all(reason)
            while True:  # received but never submitted (or recovered and never handled)
                try:
                    item = self._inbound.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, ho.Submit):
                    self.open_tasks.closed(item.spec.task_id)
                    self._reject(item.spec.task_id, item.spec.agent_id, now, reason, "shutdown")
                elif isinstance(item, ho.Recovered):
                    self._recovered(item.waiting, reason)
        for w in self._waiting:
            if w.recovered is not None:
                self._recovered(w, reason)
            else:
                self.open_tasks.closed(w.spec.task_id)
                self._reject(w.spec.task_id, w.spec.agent_id, now, reason, "shutdown")
        self._waiting = []
        self._drain_outbound()
        stuck = self.open_tasks.take_all()  # the planner thread is stuck in the engine: answer from the book
        for task_id, agent in stuck.items():
            self._put(
                ho.Status(
                    convert.status_to_msg(
                        task_id,
                        agent,
                        ev.FAILED,
                        self.ros_time(now),
                        f"{reason} (planner thread did not stop)",
                    )
                )
            )
        self._drain_outbound()
        # reliable topics: give subscribers (recorder, robots) a moment to acknowledge the final
        # statuses before the process exits and takes the DDS history with it
        for pub in (self._status_pub, self._event_pub):
            try:
                pub.wait_for_all_acked(Duration(seconds=2.0))
            except Exception as exc:  # an RMW without the call must not break shutdown
                self.get_logger().debug(f"wait_for_all_acked: {exc}")
        if self.journal is not None and not stuck:
            self.journal.close()
        self.journal = None
        self._records.clear()
        self._specs.clear()
        if stopped:
            self._release_engine()
        info = json.dumps({k: v for k, v in self.stats.items()})
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
