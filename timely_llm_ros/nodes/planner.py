"""Planner node: TimelyLLM segmented generation for a robot fleet over ROS 2.

A thin adapter over :class:`~timely_llm_ros.core.planner.PlannerCore` (scheduling, segmented
generation, suspension; paper §3-§4) and one engine (``engine`` parameter: ``sim`` — the simulated
engine run in real time, see :mod:`.sim_support` — or ``llamacpp`` / ``vllm`` through
``timely_llm_ros.engines.registry``).

Topics (:mod:`timely_llm_ros.ros.topics`, QoS in :mod:`timely_llm_ros.ros.qos`):
``/tasks`` (Task, in) → validation → core; each segment → ``/<agent>/skill_segments`` (Segment,
lifespan = the task's utility horizon); ``/segment_feedback`` (in) → ``PlannerCore.on_feedback``
(actual execution start/end replace the estimates); ``/task_status`` (every state change) and
``/trace_events`` (every core event) out.

Threads: the ROS executor thread only converts, validates and queues; the planner thread owns the
core and the engine (which blocks for a whole decoding iteration) and hands messages back through a
queue and a guard condition, so no callback ever waits for the engine and nothing in the core is
touched by two threads.

Validation (each failure → ``TaskStatus`` REJECTED with the reason, plus ARRIVAL + REJECT events):
malformed fields or TUF, unknown skill set, robot type that does not match the skill set (or the
``agent_types`` table), an agent id that cannot name a topic, a duplicate ``task_id`` (an empty one
is assigned: ``<agent>-<n>``), no robot node — no node in namespace ``/<agent>`` subscribed to
``/<agent>/skill_segments`` within ``robot_grace_period`` — and, for the simulated engine, an
instruction without a reference plan. The core then rejects what only it can judge (a prompt longer
than the context).

Failure handling: a robot reporting FAILED fails the task (generation released). A dispatched
segment without feedback times out — per agent, the oldest outstanding segment must finish within
``segment_timeout`` (or expected execution time × ``segment_timeout_factor`` +
``segment_timeout_margin``) counted from when it became the robot's next segment (or from its
STARTED) — and its task FAILs with the reason, freeing the generation. Unparsable or out-of-range
segments are never sent (the core checks every segment with the skill-set parser).

Clocks: the planner runs on the engine clock (monotonic); stamps on messages are ROS (system) time,
converted with one offset measured at start. Robot feedback stamps are used when they lie within
``feedback_clock_tolerance`` of the planner's own reading, else the receipt time (clock skew).
"""

from __future__ import annotations

import itertools
import json
import math
import queue
import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass
from typing import Any

import yaml
from rclpy.duration import Duration
from rclpy.node import Node
from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus, TraceEvent

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.generation import Dispatch, TaskRecord
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.scheduler import UnknownPolicy, parse_policy
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.engines.base import Engine, EngineError
from timely_llm_ros.nodes.common import Param, ParamError, declare_params, nonempty, run_node
from timely_llm_ros.nodes.sim_support import CATALOG, PlanTable, RealtimeSimEngine
from timely_llm_ros.ros import convert, qos, topics

ENGINES = ("sim", "llamacpp", "vllm", "openai")


# Options the planner gives an engine unless engine_options says otherwise. llama.cpp: feed prompts in
# chunks of 16 tokens, or 64 at once while a prompt has 64 left, so that an urgent prompt takes over
# from a normal one at a chunk boundary (LlamaCppEngine.set_priority). Measured on the embedded model
# (2-core dev machine, 1 thread, 1.2k-token skill prompt cached): a step feeding n prompt tokens
# costs ~12 ms/token for n < 64 (16 tokens: 0.2 s) and ~7 ms/token from n = 64 (0.47 s), so these
# chunks make no prompt slower than feeding it whole, and an urgent request waits at most one chunk.
ENGINE_DEFAULTS: dict[str, dict[str, Any]] = {"llamacpp": {"prefill_chunk": 16, "prefill_fast_batch": 64}}


def _policy_check(value: str) -> str | None:
    try:
        parse_policy(value)
    except UnknownPolicy as exc:
        return str(exc)
    return None


def _mapping_check(value: str) -> str | None:
    try:
        _parse_mapping(value)
    except ValueError as exc:
        return str(exc)
    return None


def _parse_mapping(text: str) -> dict[str, Any]:
    if not text.strip():
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ValueError(f"not a YAML/JSON mapping: {exc}") from None
    if not isinstance(data, dict):
        raise ValueError(f"must be a YAML/JSON mapping, got {text!r}")
    return data


def parse_agent_types(entries: list[str]) -> dict[str, str]:
    """``["drone_1:drone", "arm_1:arm"]`` → ``{"drone_1": "drone", ...}``; ValueError with the entry."""
    out: dict[str, str] = {}
    for entry in entries:
        agent, sep, rtype = entry.partition(":")
        if not sep or not agent.strip() or not rtype.strip():
            raise ValueError(f"entry {entry!r} is not 'agent:robot_type'")
        out[agent.strip()] = rtype.strip()
    return out


def _agent_types_check(value: list[str]) -> str | None:
    try:
        parse_agent_types(value)
    except ValueError as exc:
        return str(exc)
    return None


PARAMS = (
    Param("engine", "sim", "LLM engine: sim (simulated engine in real time), llamacpp, vllm or openai",
          choices=ENGINES, read_only=True),
    Param("engine_options", "", "YAML/JSON mapping of options for the llamacpp/vllm engine "
          "(passed to timely_llm_ros.engines.registry.create_engine, over the planner's defaults: "
          "llamacpp {prefill_chunk: 16, prefill_fast_batch: 64}; null turns one off)",
          read_only=True, check=_mapping_check),
    Param("profile", "llama3-8b-fp16-rtx4090", "engine profile (config/profiles) timing the sim engine",
          read_only=True, check=nonempty),
    Param("policy", "timely", "scheduling policy: timely, timely-paper, fcfs-seg, edf-seg, vllm, "
          "vllm-stream, optionally @bN for a fixed max batch", read_only=True, check=_policy_check),
    Param("network_latency", 0.008, "planner -> robot latency assumed by the scheduler (s)", low=0.0,
          high=1.0, read_only=True),
    Param("sim_plans", [CATALOG], "sim engine: where reference plans come from: 'catalog' (LRTrace tasks) "
          "and workload specs (preset, public sample or file)", read_only=True),
    Param("require_robot", True, "reject tasks whose agent has no robot node on /<agent>/skill_segments"),
    Param("robot_grace_period", 2.0, "how long a task waits for its robot node to be discovered (s)",
          low=0.0, high=600.0),
    Param("agent_types", [], "optional 'agent:robot_type' entries; a task whose robot_type differs is "
          "rejected", check=_agent_types_check),
    Param("segment_timeout", 0.0, "fixed time a robot has to finish its next segment (s); 0 = expected "
          "execution time x segment_timeout_factor + segment_timeout_margin", low=0.0, high=86400.0),
    Param("segment_timeout_factor", 3.0, "multiplier of the expected execution time in the segment "
          "timeout", low=1.0, high=1000.0),
    Param("segment_timeout_margin", 5.0, "added to the segment timeout (s): delivery, robot start-up",
          low=0.0, high=86400.0),
    Param("segment_lifespan_floor", 0.5, "lower bound of the segment QoS lifespan (s); the lifespan is "
          "the task's utility horizon", low=0.01, high=86400.0, read_only=True),
    Param("default_max_tokens", 256, "generation budget of tasks that send max_tokens = 0", low=1,
          high=1_000_000, read_only=True),
    Param("feedback_clock_tolerance", 5.0, "robot feedback stamps further than this from the planner's "
          "clock are replaced by the receipt time (s)", low=0.0, high=86400.0),
    Param("warmup_skill_sets", [], "skill sets whose fixed prompt is prefilled at start-up, before /tasks "
          "is subscribed, so no task pays for it (useful with llamacpp/vllm)", read_only=True),
    Param("max_queued_tasks", 100_000, "tasks beyond this many unfinished ones are rejected as "
          "overload", low=1, high=10_000_000),
)


@dataclass
class _Outstanding:
    """A dispatched segment not yet DONE, for the per-agent timeout."""

    task_id: str
    seg: int
    dispatch: float
    expected: float
    started: float = math.nan
    head_since: float = math.nan  # when it became the robot's oldest outstanding segment


@dataclass
class _Waiting:
    """An accepted-looking task waiting for its robot node to be discovered."""

    spec: TaskSpec
    deadline: float
    publisher: Any


class PlannerNode(Node):
    """See the module docstring."""

    def __init__(self, name: str = "planner", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        if self.get_parameter("use_sim_time").value:
            raise ParamError("use_sim_time is not supported: the planner runs on the engine's wall clock")
        self.p = declare_params(self, PARAMS, on_change=self._param_changed)
        self._stop = threading.Event()
        self.engine = self._make_engine()
        self.clock_fn = self.engine.now
        # planner clock (engine, monotonic) -> ROS time (system clock) offset
        self._ros_offset = time.time() - self.clock_fn()
        self.plans: PlanTable | None = None
        if self.engine.needs_script:
            self.plans = PlanTable()
            for source in self.p["sim_plans"]:
                try:
                    n = self.plans.load(source)
                except Exception as exc:  # WorkloadError, OSError, ...: name the source
                    raise ParamError(f"parameter 'sim_plans': cannot load {source!r}: {exc}") from None
                self.get_logger().info(f"sim engine: {n} reference plans from {source!r}")
        self.core = PlannerCore(self.engine, self.p["policy"], clock=self.clock_fn, dispatch=self._dispatch,
                                sink=self._event, on_state=self._state,
                                network_latency=self.p["network_latency"])
        self._warm_up(self.p["warmup_skill_sets"])
        self._agent_types = parse_agent_types(self.p["agent_types"])
        # executor thread state
        self._seen_ids: set[str] = set()
        self._id_counter = itertools.count(1)
        self._waiting: list[_Waiting] = []
        self._seg_pubs: dict[tuple[str, float], Any] = {}
        # hand-off queues
        self._inbound: queue.Queue = queue.Queue()
        self._outbound: deque = deque()
        self._open_tasks = 0  # accepted (or waiting) and not yet terminal; guarded by _lock
        self._lock = threading.Lock()
        # planner thread state
        self._records: dict[str, TaskRecord] = {}
        self._specs: dict[str, TaskSpec] = {}
        self._outstanding: dict[str, OrderedDict[tuple[str, int], _Outstanding]] = {}
        self.stats = {"tasks": 0, "rejected": 0, "segments": 0, "feedback_ignored": 0, "timeouts": 0}

        self._status_pub = self.create_publisher(TaskStatus, topics.TASK_STATUS, qos.status_qos())
        self._event_pub = self.create_publisher(TraceEvent, topics.TRACE_EVENTS, qos.event_qos())
        self.create_subscription(Task, topics.TASKS, self._on_task, qos.task_qos())
        self.create_subscription(SegmentFeedback, topics.SEGMENT_FEEDBACK, self._on_feedback,
                                 qos.feedback_qos())
        self._wake = self.create_guard_condition(self._drain_outbound)
        self.create_timer(0.05, self._check_waiting)
        self._thread = threading.Thread(target=self._run, name="planner-core", daemon=True)
        self._thread.start()
        self.get_logger().info(f"planner ready: engine {self.engine.info.name}, "
                               f"policy {self.core.policy.name}")

    # ------------------------------------------------------------------ set-up
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

    # ------------------------------------------------------------------ set-up
    def _make_engine(self) -> Engine:
        name = self.p["engine"]
        if name == "sim":
            try:
                return RealtimeSimEngine(self.p["profile"], clock=time.monotonic, stop=self._stop)
            except (KeyError, ValueError, OSError) as exc:
                raise ParamError(f"parameter 'profile': {exc}") from None
        try:
            from timely_llm_ros.engines.registry import create_engine  # type: ignore[import-not-found]
        except ImportError as exc:
            raise ParamError(f"engine {name!r} needs timely_llm_ros.engines.registry, which cannot be "
                             f"imported here ({exc}); use engine:=sim") from None
        options = {**ENGINE_DEFAULTS.get(name, {}), **_parse_mapping(self.p["engine_options"])}
        try:
            return create_engine(name, **options)
        except Exception as exc:  # model file missing, GPU library absent, bad option ...
            raise ParamError(f"engine {name!r} could not be created: {type(exc).__name__}: {exc}") from None

    def _param_changed(self, name: str, value: Any) -> None:
        self.p[name] = value
        if name == "agent_types":
            self._agent_types = parse_agent_types(self.p[name])

    def ros_time(self, t: float) -> float:
        """Planner clock → ROS (system) time in seconds."""
        return t + self._ros_offset

    def planner_time(self, ros_t: float) -> float:
        return ros_t - self._ros_offset

    # ------------------------------------------------------------------ executor thread: intake
    def _on_task(self, msg: Task) -> None:
        now = self.clock_fn()
        agent = msg.agent_id
        task_id = msg.task_id.strip()
        if not task_id:
            task_id = self._new_id(agent)
        elif task_id in self._seen_ids:
            self._reject(task_id, agent, now, f"duplicate task_id {task_id!r}", seen=True)
            return
        self._seen_ids.add(task_id)
        msg.task_id = task_id
        try:
            spec = self._validate(msg, now)
            publisher = self._segment_publisher(spec)
        except TaskRejected as exc:
            self._reject(task_id, agent, now, exc.reason)
            return
        with self._lock:
            if self._open_tasks >= self.p["max_queued_tasks"]:
                overloaded = True
            else:
                overloaded = False
                self._open_tasks += 1
        if overloaded:
            self._reject(task_id, agent, now, f"planner overloaded: {self.p['max_queued_tasks']} unfinished "
                         "tasks (parameter max_queued_tasks)")
            return
        if not self.p["require_robot"] or self._robot_ready(spec.agent_id, publisher):
            self._inbound.put(("task", spec))
        else:
            self._waiting.append(_Waiting(spec, now + self.p["robot_grace_period"], publisher))

    def _new_id(self, agent: str) -> str:
        base = agent if topics.valid_agent_id(agent) else "task"
        while True:
            candidate = f"{base}-{next(self._id_counter)}"
            if candidate not in self._seen_ids:
                return candidate

    def _validate(self, msg: Task, now: float) -> TaskSpec:
        spec = convert.task_from_msg(msg, now, self.p["default_max_tokens"])
        try:
            topics.segment_topic(spec.agent_id)
        except ValueError as exc:
            raise TaskRejected(str(exc)) from None
        try:
            sset = load_skill_set(spec.skill_set)
        except KeyError as exc:
            raise TaskRejected(str(exc.args[0]) if exc.args else str(exc)) from None
        except ValueError as exc:  # a broken skill-set file: the task cannot be planned
            raise TaskRejected(f"skill set {spec.skill_set!r} cannot be loaded: {exc}") from None
        if sset.robot_type != spec.robot_type:
            raise TaskRejected(f"robot type mismatch: the task is for a {spec.robot_type!r} robot but skill "
                               f"set {spec.skill_set!r} is for {sset.robot_type!r} robots")
        expected = self._agent_types.get(spec.agent_id)
        if expected is not None and expected != spec.robot_type:
            raise TaskRejected(f"robot type mismatch: agent {spec.agent_id!r} is a {expected!r} robot, the "
                               f"task asks for a {spec.robot_type!r} robot")
        if self.plans is not None:
            plan = self.plans.lookup(spec.skill_set, spec.instruction, spec.scene)
            if plan is None:
                raise TaskRejected(f"the simulated engine has no reference plan for this instruction in "
                                   f"skill set {spec.skill_set!r} (plan sources: "
                                   f"{', '.join(self.plans.sources)})")
            spec.reference_plan = plan
        return spec

    def _lifespan(self, spec: TaskSpec) -> float:
        return qos.lifespan_for(spec.tuf.zero_time, self.p["segment_lifespan_floor"])

    def _segment_publisher(self, spec: TaskSpec) -> Any:
        key = (spec.agent_id, self._lifespan(spec))
        pub = self._seg_pubs.get(key)
        if pub is None:
            pub = self.create_publisher(Segment, topics.segment_topic(spec.agent_id), qos.segment_qos(key[1]))
            self._seg_pubs[key] = pub
        return pub

    def _robot_ready(self, agent: str, publisher: Any, late: bool = False) -> bool:
        """A robot node — a node in namespace ``/<agent>`` — subscribes to the agent's segment topic,
        and our publisher has matched every subscription the graph shows on it.

        Observers (recorder, time model) subscribe from other namespaces and do not count as the
        robot: a task is never accepted for a fleet without its robot. But they are waited for: the
        segment topic is volatile, and a publisher created for a new lifespan must not send a
        segment before the recorder's reader is matched (it would be missing from the bag). With
        ``late`` (grace period over) one matched subscription is enough: a reader that can never match
        (incompatible QoS) must not block the robot's tasks.
        """
        matched = publisher.get_subscription_count()
        if matched == 0:
            return False
        infos = self.get_subscriptions_info_by_topic(topics.segment_topic(agent))
        if not any(info.node_namespace == f"/{agent}" for info in infos):
            return False
        return late or matched >= len(infos)

    def _check_waiting(self) -> None:
        if not self._waiting:
            return
        now = self.clock_fn()
        still: list[_Waiting] = []
        for w in self._waiting:
            late = now >= w.deadline
            if not self.p["require_robot"] or self._robot_ready(w.spec.agent_id, w.publisher, late):
                self._inbound.put(("task", w.spec))
            elif late:
                with self._lock:
                    self._open_tasks -= 1
                self._reject(w.spec.task_id, w.spec.agent_id, now,
                             f"no robot node for agent {w.spec.agent_id!r}: nothing subscribes to "
                             f"{topics.segment_topic(w.spec.agent_id)} (waited "
                             f"{self.p['robot_grace_period']:.1f} s)")
            else:
                still.append(w)
        self._waiting = still

    def _reject(self, task_id: str, agent: str, t: float, reason: str, seen: bool = False) -> None:
        """Executor-side rejection: same events and status the core emits for its own rejections."""
        self.stats["rejected"] += 1
        self.get_logger().warning(f"task {task_id!r} from {agent!r} rejected: {reason}")
        self._put_event(ev.TraceEvent(t, ev.ARRIVAL, task_id, agent))
        self._put_event(ev.TraceEvent(t, ev.REJECT, task_id, agent, -1, 0.0, reason))
        self._put(("status", convert.status_to_msg(task_id, agent, ev.REJECTED, self.ros_time(t), reason)))

    def _on_feedback(self, msg: SegmentFeedback) -> None:
        now = self.clock_fn()
        try:
            fb = convert.feedback_from_msg(msg)
        except ValueError as exc:
            self.stats["feedback_ignored"] += 1
            self.get_logger().warning(f"feedback for task {msg.task_id!r} ignored: {exc}")
            return
        t = now
        if fb.t > 0:
            t_robot = self.planner_time(fb.t)
            if abs(t_robot - now) <= self.p["feedback_clock_tolerance"]:
                t = min(t_robot, now)  # never in the future of the planner's own clock
        self._inbound.put(("feedback", fb, t))

    # ------------------------------------------------------------------ executor thread: output
    def _put(self, item: tuple) -> None:
        self._outbound.append(item)
        self._wake.trigger()

    def _put_event(self, e: ev.TraceEvent) -> None:
        self._put(("event", convert.event_to_msg(ev.TraceEvent(self.ros_time(e.t), e.kind, e.task_id,
                                                               e.agent_id, e.seg, e.value, e.detail))))

    def _drain_outbound(self) -> None:
        while True:
            try:
                item = self._outbound.popleft()
            except IndexError:
                return
            kind = item[0]
            if kind == "status":
                self._status_pub.publish(item[1])
            elif kind == "event":
                self._event_pub.publish(item[1])
            else:  # ("segment", publisher key, msg)
                pub = self._seg_pubs.get(item[1])
                if pub is None:  # cannot happen: created at intake; never lose a segment silently
                    pub = self._seg_pubs[item[1]] = self.create_publisher(
                        Segment, topics.segment_topic(item[1][0]), qos.segment_qos(item[1][1]))
                pub.publish(item[2])

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
            if item[0] == "task":
                self._submit(item[1])
            elif item[0] == "feedback":
                self._feedback(item[1], item[2])
            try:
                item = self._inbound.get_nowait()
            except queue.Empty:
                return

    def _submit(self, spec: TaskSpec) -> None:
        self._specs[spec.task_id] = spec
        self.stats["tasks"] += 1
        try:
            rec = self.core.submit(spec)
        except TaskRejected:
            self._specs.pop(spec.task_id, None)
            return  # the core published REJECT + REJECTED (on_state / sink), _closed() counted it
        self._records[spec.task_id] = rec

    def _feedback(self, fb: convert.Feedback, t: float) -> None:
        rec = self._records.get(fb.task_id)
        if rec is None or fb.agent_id != rec.agent_id:
            self.stats["feedback_ignored"] += 1
            why = "unknown task" if rec is None else f"task belongs to {rec.agent_id!r}"
            self.get_logger().warning(f"{fb.state} feedback from {fb.agent_id!r} for task {fb.task_id!r} "
                                      f"segment {fb.index} ignored: {why}")
            return
        if not self.core.on_feedback(fb.task_id, fb.index, fb.state, t, fb.detail):
            self.stats["feedback_ignored"] += 1
            self.get_logger().warning(f"{fb.state} feedback for task {fb.task_id!r} segment {fb.index} "
                                      f"ignored: the task has {len(rec.segments)} segments")
            return
        pending = self._outstanding.get(rec.agent_id)
        if pending is None:
            return
        key = (fb.task_id, fb.index)
        if fb.state == ev.STARTED and key in pending:
            pending[key].started = t
        elif fb.state == ev.DONE:
            pending.pop(key, None)
        elif fb.state == ev.FEEDBACK_FAILED:
            self._forget_task(rec.agent_id, fb.task_id)
        self._refresh_head(rec.agent_id, t)

    def _forget_task(self, agent: str, task_id: str) -> None:
        pending = self._outstanding.get(agent)
        if pending:
            for key in [k for k in pending if k[0] == task_id]:
                del pending[key]

    def _refresh_head(self, agent: str, t: float) -> None:
        pending = self._outstanding.get(agent)
        if pending:
            head = next(iter(pending.values()))
            if math.isnan(head.head_since):
                head.head_since = max(t, head.dispatch)

    def segment_timeout(self, expected: float) -> float:
        if self.p["segment_timeout"] > 0:
            return self.p["segment_timeout"]
        return expected * self.p["segment_timeout_factor"] + self.p["segment_timeout_margin"]

    def _check_timeouts(self) -> None:
        now = self.clock_fn()
        for agent, pending in self._outstanding.items():
            while pending:
                head = next(iter(pending.values()))
                since = head.started if not math.isnan(head.started) else head.head_since
                limit = self.segment_timeout(head.expected)
                if now - since <= limit:
                    break
                self.stats["timeouts"] += 1
                what = "finish" if not math.isnan(head.started) else "start"
                reason = (f"segment {head.seg} timed out: robot {agent!r} did not {what} it within "
                          f"{limit:.1f} s (no SegmentFeedback)")
                self._forget_task(agent, head.task_id)
                rec = self._records.get(head.task_id)
                if rec is not None and rec.state not in ev.TERMINAL_STATES:
                    self.get_logger().warning(f"task {head.task_id!r}: {reason}")
                    self.core.on_feedback(head.task_id, head.seg, ev.FEEDBACK_FAILED, now, reason)
                self._refresh_head(agent, now)

    # ------------------------------------------------------------------ core callbacks (planner thread)
    def _dispatch(self, d: Dispatch) -> None:
        rec = self._records.get(d.task_id)
        spec = self._specs[d.task_id]
        seg = rec.segments[d.seg] if rec is not None and d.seg < len(rec.segments) else None
        final = rec is not None and not math.isnan(rec.gen_end)
        msg = convert.segment_to_msg(
            d, final=final, gen_start=self.ros_time(seg.gen_start) if seg is not None else math.nan,
            gen_end=self.ros_time(d.t), tokens=seg.n_tokens if seg is not None else 0)
        self.stats["segments"] += 1
        pending = self._outstanding.setdefault(d.agent_id, OrderedDict())
        pending[(d.task_id, d.seg)] = _Outstanding(d.task_id, d.seg, d.t, d.expected_exec)
        self._refresh_head(d.agent_id, d.t)
        self._put(("segment", (d.agent_id, self._lifespan(spec)), msg))

    def _event(self, e: ev.TraceEvent) -> None:
        self._put_event(e)

    def _state(self, task_id: str, state: str, reason: str) -> None:
        rec = self._records.get(task_id)
        spec = self._specs.get(task_id)
        agent = rec.agent_id if rec is not None else (spec.agent_id if spec is not None else "")
        response = rec.response_time if rec is not None else math.nan
        utility = rec.utility if rec is not None else math.nan
        now = self.clock_fn()
        self._put(("status", convert.status_to_msg(task_id, agent, state, self.ros_time(now), reason,
                                                   response, utility)))
        if state in ev.TERMINAL_STATES:
            with self._lock:
                self._open_tasks -= 1
            if state == ev.REJECTED:
                self.stats["rejected"] += 1

    # ------------------------------------------------------------------ shutdown
    def close(self) -> None:
        """Stop the planner thread, fail what is still open (with a status each), flush output."""
        self._stop.set()
        self._thread.join(timeout=10.0)
        if not self._thread.is_alive():
            self.core.abort_all("planner shut down")
        now = self.clock_fn()
        for w in self._waiting:
            self._reject(w.spec.task_id, w.spec.agent_id, now, "planner shut down")
        self._waiting = []
        self._drain_outbound()
        # reliable topics: give subscribers (recorder, robots) a moment to acknowledge the final
        # statuses before the process exits and takes the DDS history with it
        for pub in (self._status_pub, self._event_pub):
            try:
                pub.wait_for_all_acked(Duration(seconds=2.0))
            except Exception as exc:  # an RMW without the call must not break shutdown
                self.get_logger().debug(f"wait_for_all_acked: {exc}")
        info = json.dumps({k: v for k, v in self.stats.items()})
        self.get_logger().info(f"planner stopped: {info}")


def main(argv: list[str] | None = None) -> int:
    return run_node(PlannerNode, argv, params=PARAMS,
                    description="TimelyLLM planner node (see timely_llm_ros.nodes.planner)")


if __name__ == "__main__":
    raise SystemExit(main())
