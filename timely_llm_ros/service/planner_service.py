"""The planner thread's task life: one core, one engine, driven from a queue (no ROS).

Threads: the host's callback threads (a ROS executor) only convert, validate and queue — that is
the :class:`~timely_llm_ros.service.front_desk.FrontDesk`; the planner thread (:meth:`PlannerService.start`)
owns the core, the engine (which blocks for a whole decoding iteration), the segment timers and the
journal, and hands results back through the host's outbox (:attr:`Ports.put`), so no callback ever
waits for the engine and nothing in the core is touched by two threads. Both directions carry typed
items (:mod:`~timely_llm_ros.service.handoff`), dispatched on their type.

Failure handling: a robot reporting FAILED fails the task (generation released). A robot's current
segment without feedback times out (:mod:`~timely_llm_ros.service.liveness`: its timer starts when it
becomes the robot's current segment; PROGRESS heartbeats keep a long segment alive) and its task
FAILs with the reason.

Crash recovery (:mod:`~timely_llm_ros.service.journal`): accepted tasks and their progress are
journaled; after a restart every task the journal shows open is, once its robot is discovered,
either re-planned for the rest (``on_restart: resume``) or ended FAILED "planner restarted". A clean
stop gives every open task — queued, generating, held or executing — a final status.

Clocks: the service runs on the engine clock (monotonic); what it hands out is stamped in the host's
time (ROS system time), converted with one offset measured when the engine is configured.

Parameters are read from the host's live parameter mapping (``params``: the node's declared
parameters, names as in :mod:`timely_llm_ros.nodes.planner_params`), so a changed parameter takes
effect at its next use, as before.
"""

from __future__ import annotations

import math
import queue
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from timely_llm_ros.core import events as ev
from timely_llm_ros.core import limits
from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.feedback import FeedbackRules, SegmentNonces, TooEarly
from timely_llm_ros.core.generation import Dispatch, TaskRecord
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.planner import PlannerCore, ResumedSegment
from timely_llm_ros.core.robot_liveness import RobotLiveness
from timely_llm_ros.core.sched.agent_queue import AgentQueues
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.interfaces.mapping import Feedback
from timely_llm_ros.interfaces.topics import valid_agent_id
from timely_llm_ros.service import handoff as ho
from timely_llm_ros.service.front_desk import FrontDesk
from timely_llm_ros.service.journal import RESTARTED, Journal, JournalError, OpenTask, task_entry
from timely_llm_ros.service.liveness import SegmentTimers, segment_limit
from timely_llm_ros.service.open_tasks import OpenTasks


class Logger(Protocol):
    """The few logging calls the service makes (an rclpy logger, or ``logging.Logger``)."""

    def info(self, message: str) -> Any: ...
    def warning(self, message: str) -> Any: ...
    def error(self, message: str) -> Any: ...


class PlanLookup(Protocol):
    """Reference plans of the simulated engine (``PlanTable``): a plan text, or None."""

    sources: list[str]

    def lookup(self, skill_set: str, instruction: str, scene: Any) -> str | None: ...


@dataclass
class Ports:
    """What the host (the ROS planner node) supplies: an outbox and a view of the robot graph.

    Plain callables, so a test passes lambdas and the service never imports a ROS module."""

    put: Callable[[ho.Outbound], None]  # queue an item for the host's thread to publish
    log: Logger
    robot_ready: Callable[[str, bool], bool]  # (agent, late): its robot node is discovered
    status_readers_matched: Callable[[], bool]  # every task-status reader is matched
    open_robot: Callable[[str], None]  # the robot's segment channel (TaskRejected if impossible)
    robot_topic: Callable[[str], str]  # the full name of a robot's segment topic (for reasons)
    release_robot: Callable[[str], None]  # an idle robot's channel may go


def new_stats() -> dict[str, int]:
    """The counters a planner reports when it stops (and tests read)."""
    names = (
        "received",
        "tasks",
        "rejected",
        "segments",
        "feedback_ignored",
        "timeouts",
        "dds_lost_tasks",
        "dds_lost_feedback",
        "recovered",
        "cancelled",
        "robots_down",
        "feedback_deferred",
    )
    return dict.fromkeys(names, 0)


MAX_ROBOTS = 4096  # robots whose heartbeats are followed (bounded memory against ghost beats)
MAX_DEFERRED = 1000  # feedback messages of one task held behind a deferred DONE


class PlannerService:
    """See the module docstring. ``params``: the host's live parameter mapping."""

    def __init__(self, params: Mapping[str, Any], ports: Ports, clock: Callable[[], float] = time.monotonic):
        self.p = params
        self.ports = ports
        self.log = ports.log
        self.engine: Engine | None = None
        self.core: PlannerCore | None = None
        self.journal: Journal | None = None
        self.plans: PlanLookup | None = None
        self.recovered_tasks: list[OpenTask] = []
        self.active = False
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self.clock_fn = clock  # the engines' clock (monotonic) until one is configured
        self.ros_offset = time.time() - self.clock_fn()  # planner clock -> host (ROS) time
        self.warn_limiter = limits.RateLimiter(params["warn_period"], time.monotonic)
        self.inbound: queue.Queue[ho.Inbound] = queue.Queue()
        self.open_tasks = OpenTasks()  # accepted at intake and not terminal (front door's view, locked)
        self.stats = new_stats()
        # planner thread state (open tasks only: pruned when terminal)
        self._records: dict[str, TaskRecord] = {}
        self._specs: dict[str, TaskSpec] = {}
        self.seg_timers = SegmentTimers(self.segment_timeout, lambda: self.p["heartbeat_timeout"])
        # feedback that follows the robot's own sequence (core/feedback.py), dead robots
        # (core/robot_liveness.py); planner thread unless said otherwise
        self.nonces = SegmentNonces()  # the token of every dispatched segment
        self.liveness = RobotLiveness(params["robot_down_timeout"])  # the host's thread reads is_down
        self.beats: dict[str, float] = {}  # host thread: last heartbeat per robot
        self.host_tick = time.monotonic()  # host thread: when its timers last ran (lag guard)
        # per task: feedback held behind a DONE that came too early (applied at its plausible time,
        # then the rest in the robot's order)
        self._deferred: dict[str, tuple[float, list[tuple[Feedback, float]]]] = {}
        self.desk = FrontDesk(self)

    # ------------------------------------------------------------------ clocks and warnings
    def ros_time(self, t: float) -> float:
        """Planner clock → host (ROS system) time in seconds."""
        return t + self.ros_offset

    def planner_time(self, ros_t: float) -> float:
        return ros_t - self.ros_offset

    def warn(self, key: str, text: str) -> None:
        """A warning, at most once per ``warn_period`` per ``key`` (with the count it stood for)."""
        suppressed = self.warn_limiter.allow(key)
        if suppressed is not None:
            more = f" (and {suppressed} more like it since the last report)" if suppressed else ""
            self.log.warning(limits.clip(text, 500) + more)

    def warn_backlog(self) -> None:
        """Warn (rate-limited) while more than half of ``max_inbound`` items wait for the planner thread."""
        backlog = self.inbound.qsize()
        if backlog > self.p["max_inbound"] // 2:
            self.warn(
                "backlog",
                f"planner busy: {backlog} messages wait for the planner thread "
                f"(tasks beyond max_inbound = {self.p['max_inbound']} are rejected as overloaded)",
            )

    def param_changed(self, name: str) -> None:
        """A parameter changed in the host's mapping: apply the ones held outside it (the host parses
        ``agent_types`` into ``desk.agent_types`` itself)."""
        value = self.p[name]
        if name == "warn_period":
            self.warn_limiter.period = float(value)
        elif name == "robot_down_timeout":
            self.liveness.timeout = float(value)
        elif name == "feedback_min_exec_fraction" and self.core is not None:
            self.core.feedback_rules = FeedbackRules(True, float(value))

    def describe(self) -> str:
        """One line for the log: engine, policy, journal, replay."""
        if self.engine is None or self.core is None:
            return "unconfigured"
        journal = self.journal.path if self.journal else "off"
        replay = ", replaying reference plans" if self.core.intake.replay else ""
        return f"engine {self.engine.info.name}, policy {self.core.policy.name}, journal {journal}{replay}"

    def put_event(self, e: ev.TraceEvent) -> None:
        """Hand a core event (planner clock) to the host, stamped in its time."""
        self.ports.put(
            ho.Event(
                ev.TraceEvent(self.ros_time(e.t), e.kind, e.task_id, e.agent_id, e.seg, e.value, e.detail)
            )
        )

    def put_status(
        self, task_id: str, agent: str, state: str, t: float, reason: str = "", **extra: float
    ) -> None:
        """Hand a task status (``t`` on the planner clock) to the host."""
        self.ports.put(ho.Status(task_id, agent, state, self.ros_time(t), reason, **extra))

    # ------------------------------------------------------------------ lifecycle
    def new_stop_event(self) -> threading.Event:
        """A fresh stop event for the next configuration (the real-time simulated engine waits on it)."""
        self._stop = threading.Event()
        return self._stop

    def configure(self, engine: Engine, plans: PlanLookup | None, options: PlannerOptions) -> None:
        """Build the core around ``engine`` (no task is taken yet; see :meth:`start`)."""
        self.engine = engine
        self.clock_fn = engine.now
        self.ros_offset = time.time() - self.clock_fn()
        self.plans = plans
        self.core = PlannerCore(
            engine,
            self.p["policy"],
            clock=self.clock_fn,
            dispatch=self._dispatch,
            sink=self.put_event,
            on_state=self._state,
            network_latency=self.p["network_latency"],
            agent_queues=AgentQueues(self.p["agent_queue_depth"], self.p["lookahead"]),
            retain_records=self.p["finished_retention"],
            options=options,
            feedback_rules=FeedbackRules(True, self.p["feedback_min_exec_fraction"]),
        )
        self.seg_timers = SegmentTimers(self.segment_timeout, lambda: self.p["heartbeat_timeout"])

    @property
    def running(self) -> bool:
        return self._thread is not None

    def start(self) -> None:
        """Recovered tasks wait for their robots; the planner thread runs from now on."""
        self.desk.recover(self.recovered_tasks)
        self.recovered_tasks = []
        self._thread = threading.Thread(target=self._run, name="planner-core", daemon=True)
        self._thread.start()

    def release_engine(self) -> None:
        engine, self.engine, self.core = self.engine, None, None
        if engine is not None:
            try:
                engine.close()
            except Exception as exc:  # noqa: BLE001 - releasing must not fail the transition
                self.log.warning(f"engine close: {exc}")

    def find_plan(self, spec: TaskSpec) -> None:
        """The simulated engine's reference plan for ``spec`` (TaskRejected without one)."""
        if self.plans is None:
            return
        plan = self.plans.lookup(spec.skill_set, spec.instruction, spec.scene)
        if plan is None and self.engine is not None and not self.engine.needs_script:
            return  # replay mode: a task without a reference plan keeps the skill grammar
        if plan is None:
            raise TaskRejected(
                f"the simulated engine has no reference plan for this instruction in "
                f"skill set {spec.skill_set!r} (plan sources: {', '.join(self.plans.sources)})"
            )
        spec.reference_plan = plan

    # ------------------------------------------------------------------ planner thread
    def _run(self) -> None:
        while not self._stop.is_set():
            self.pump()

    def pump(self, block: bool = True) -> None:
        """One turn of the planner thread: take what was queued, check the segment watchdogs, run one
        engine iteration. Tests call it directly (``block=False``) on a virtual clock."""
        core = self.core
        assert core is not None
        try:
            self._drain_inbound(block=block and not core.has_work())
            self._check_timeouts()
            if core.has_work() and not core.step() and block:
                self._drain_inbound(block=True, timeout=0.01)  # nothing admissible: wait a little
        except Exception as exc:  # noqa: BLE001 - never let the planner thread die with tasks in flight
            self.log.error(f"planner loop error: {type(exc).__name__}: {exc}")
            try:
                core.abort_all(f"planner error: {type(exc).__name__}: {exc}")
            except Exception as exc2:  # noqa: BLE001 - the core itself is broken: say so, keep serving intake
                self.log.error(f"abort after planner error failed: {exc2}")
            self._stop.wait(0.1)

    def _drain_inbound(self, block: bool, timeout: float = 0.05) -> None:
        try:
            item = self.inbound.get(timeout=timeout) if block else self.inbound.get_nowait()
        except queue.Empty:
            return
        while True:
            match item:
                case ho.Submit(spec, resume):
                    self._submit(spec, resume)
                case ho.FeedbackIn(fb, t):
                    self._feedback(fb, t)
                case ho.Recovered(waiting, problem):
                    self.recovered(waiting, problem)
                case ho.Cancel(task_id, reason):
                    self._cancel(task_id, reason)
            try:
                item = self.inbound.get_nowait()
            except queue.Empty:
                return

    def _submit(self, spec: TaskSpec, resume: list[ResumedSegment] | None = None) -> None:
        assert self.core is not None
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
        self.log.info(
            f"task {spec.task_id!r} resumed after the restart: {len(resume)} segment(s) "
            "were sent before; re-planning the rest"
        )

    def _feedback(self, fb: Feedback, t: float) -> None:
        assert self.core is not None
        held = self._deferred.get(fb.task_id)
        if held is not None:  # behind a deferred DONE of this task: keep the robot's order
            if len(held[1]) < MAX_DEFERRED:
                held[1].append((fb, t))
            return
        why = self.nonces.check(fb.task_id, fb.index, fb.nonce)
        if why is None:
            why = self.core.feedback(fb.task_id, fb.index, fb.state, t, fb.detail, agent=fb.agent_id)
        if isinstance(why, TooEarly):  # counts, but no earlier than a robot could have finished
            self.stats["feedback_deferred"] += 1
            self._deferred[fb.task_id] = (why.at, [(fb, why.at)])
            self.warn(
                f"deferred:{fb.agent_id}",
                f"DONE from {fb.agent_id!r} for task {fb.task_id!r} segment {fb.index} (nonce "
                f"{fb.nonce[:16]!r}, robot stamp {fb.t:.3f}) deferred by {why.at - t:.3f} s: {why}",
            )
            return
        if why is not None:
            self.stats["feedback_ignored"] += 1
            self.warn(  # the evidence: who, what, which nonce, when (rate-limited per robot and state)
                f"feedback:{fb.agent_id}:{fb.state}",
                f"{fb.state} feedback from {fb.agent_id!r} for task {fb.task_id!r} segment {fb.index} "
                f"(nonce {fb.nonce[:16]!r}, robot stamp {fb.t:.3f}) ignored: {why}",
            )
            return
        self.liveness.alive(fb.agent_id, t)  # checked feedback proves life of a beating robot too
        if fb.state == ev.STARTED:
            self.seg_timers.started(fb.agent_id, fb.task_id, fb.index, t)
            self._journal("started", fb.task_id, fb.index, self.ros_time(t))
        elif fb.state == ev.PROGRESS:
            self.seg_timers.progress(fb.agent_id, fb.task_id, fb.index, t)
        elif fb.state == ev.DONE:
            self.seg_timers.done(fb.agent_id, fb.task_id, fb.index, t)
            self._journal("done", fb.task_id, fb.index, self.ros_time(t))

    def _cancel(self, task_id: str, reason: str) -> None:
        assert self.core is not None and self.engine is not None
        why = self.core.cancel(task_id, reason)
        if why is None:
            self.stats["cancelled"] += 1
            mem = self.engine.memory()  # what the engine holds now that the task's generation is gone
            self.log.info(
                f"task {task_id!r} cancelled: {reason} (engine now: {self.engine.running()} "
                f"generation(s) running, KV tokens running {mem.running}, suspended "
                f"{mem.suspended_device + mem.suspended_host})"
            )
        else:  # it ended (or was rejected) while the request was on its way: its final status stands
            self.log.info(f"cancel of task {task_id!r} came too late: {why}")

    def segment_timeout(self, expected: float) -> float:
        """The segment watchdog's limit (:func:`segment_limit`), from the parameters as they are now."""
        return segment_limit(
            expected,
            self.p["segment_timeout"],
            self.p["segment_timeout_factor"],
            self.p["segment_timeout_margin"],
        )

    # ------------------------------------------------------------------ deferred DONEs, dead robots
    def _apply_deferred(self, now: float) -> None:
        """Deferred DONEs whose plausible time has come, then what their robot sent after them."""
        for task_id, (at, waiting) in list(self._deferred.items()):
            if at > now:
                continue
            del self._deferred[task_id]
            for i, (fb, t) in enumerate(waiting):
                self._feedback(fb, max(t, at))
                if task_id in self._deferred:  # deferred again: the rest waits behind it
                    self._deferred[task_id][1].extend(waiting[i + 1 :])
                    break

    def agent_state(self) -> dict[str, int]:
        """Sizes of the structures that hold an entry per agent or per open task (issue 27: they
        must return to their baseline once agents are gone; ``tools/ghost_memory.py`` prints them)."""
        core = self.core
        return {
            "beats": len(self.beats),
            "liveness": len(self.liveness),
            "segment_timers": len(self.seg_timers._agents),
            "open_tasks": len(self.open_tasks),
            "nonces": len(self.nonces._tokens),
            "deferred_feedback": len(self._deferred),
            "warn_keys": len(self.warn_limiter),
            "core_agents": len(core.agents._agents) if core is not None else 0,
            "core_tasks": len(core._tasks) if core is not None else 0,
        }

    def beat(self, agent: str) -> None:
        """A robot's heartbeat (host thread): only noted here; the planner thread judges."""
        if agent in self.beats or (valid_agent_id(agent) and len(self.beats) < MAX_ROBOTS):
            self.beats[agent] = self.clock_fn()
        else:
            self.warn(
                "beat",
                f"heartbeat from {limits.clip(agent, 80)!r} ignored (not an agent id, or more than "
                f"{MAX_ROBOTS} robots)",
            )

    def _check_robots(self, now: float) -> None:
        """Heartbeats in; a robot silent past ``robot_down_timeout`` is down and all its open tasks
        FAIL at once (core/robot_liveness.py); one that beats again is used again."""
        assert self.core is not None
        self.warn_limiter.prune(time.monotonic())  # warnings about agents gone: forgotten (issue 27)
        for agent, t in list(self.beats.items()):
            if self.liveness.heard(agent, t):
                self.log.warning(f"robot {agent!r} is back (heartbeat): its tasks are accepted again")
        if time.monotonic() - self.host_tick > 1.0:
            return  # the host's executor is behind (a burst, a stall): beats may wait in its queue
        for agent, _silent in self.liveness.newly_down(now):
            self.stats["robots_down"] += 1
            reason = self.liveness.reason(agent, now)
            failed = self.core.fail_agent(agent, reason)
            if not failed:  # a robot that left with nothing to do: forgotten (bounded memory)
                self.liveness.forget(agent)
                self.beats.pop(agent, None)
                self.log.info(f"{reason}; it had no open task")
                continue
            more = " ..." if len(failed) > 10 else ""
            self.log.error(
                f"{reason}; {len(failed)} open task(s) FAILED at once: {', '.join(failed[:10])}{more}"
            )

    def _check_timeouts(self) -> None:
        assert self.core is not None
        now = self.clock_fn()
        self._apply_deferred(now)
        self._check_robots(now)
        for exp in self.seg_timers.expired(now):
            self.stats["timeouts"] += 1
            self.warn(f"timeout:{exp.agent}", f"task {exp.task_id!r}: {exp.reason}")
            self.core.feedback(exp.task_id, exp.seg, ev.FEEDBACK_FAILED, now, exp.reason)

    def _journal(self, what: str, *args: Any) -> None:
        if self.journal is None:
            return
        try:
            getattr(self.journal, what)(*args)
        except (OSError, ValueError, JournalError) as exc:  # a full disk must not stop the planner
            self.warn(
                "journal", f"journal {self.journal.path}: cannot write ({exc}); crash recovery is incomplete"
            )

    def recovered(self, w: ho.Waiting, problem: str) -> None:
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
                self.find_plan(spec)
                self._submit(spec, resume)
                return
            except TaskRejected as exc:
                reason = f"{RESTARTED}; cannot resume: {exc.reason}"
        t = self.clock_fn()
        self.put_event(ev.TraceEvent(t, ev.FAIL, spec.task_id, spec.agent_id, -1, 0.0, reason))
        self.put_status(spec.task_id, spec.agent_id, ev.FAILED, t, reason)
        self._journal("ended", spec.task_id, ev.FAILED, reason)
        self.ports.put(ho.Closed(spec.task_id))

    # ------------------------------------------------------------------ core callbacks (planner thread)
    def _dispatch(self, d: Dispatch) -> None:
        rec = self._records.get(d.task_id)
        seg = rec.segments[d.seg] if rec is not None and d.seg < len(rec.segments) else None
        if not d.closing_marker:  # a closing marker has nothing to execute and gets no feedback
            self.stats["segments"] += 1
            self.seg_timers.dispatched(d.agent_id, d.task_id, d.seg, d.t, d.expected_exec)
            self._journal("segment", d.task_id, d.seg, d.text, d.min_exec, d.expected_exec)
        self.ports.put(
            ho.SegmentOut(
                d.agent_id,
                d,
                gen_start=self.ros_time(seg.gen_start) if seg is not None else math.nan,
                gen_end=self.ros_time(d.t),
                tokens=seg.n_tokens if seg is not None else 0,
                nonce="" if d.closing_marker else self.nonces.issue(d.task_id, d.seg),
            )
        )

    def _state(self, task_id: str, state: str, reason: str) -> None:
        rec = self._records.get(task_id)
        spec = self._specs.get(task_id)
        agent = rec.agent_id if rec is not None else (spec.agent_id if spec is not None else "")
        response = rec.response_time if rec is not None else math.nan
        utility = rec.utility if rec is not None else math.nan
        now = self.clock_fn()
        self.put_status(task_id, agent, state, now, limits.clip(reason), response=response, utility=utility)
        if state == ev.ACCEPTED and spec is not None:
            self._journal("accepted", task_id, task_entry(spec, self.ros_time(spec.arrival)))
        elif state in ev.TERMINAL_STATES:
            self._journal("ended", task_id, state, limits.clip(reason))
            self.seg_timers.forget_task(agent, task_id, now)
            self.nonces.forget(task_id)
            self._deferred.pop(task_id, None)
            self._records.pop(task_id, None)
            self._specs.pop(task_id, None)
            self.ports.put(ho.Closed(task_id))
            if state == ev.REJECTED:
                self.stats["rejected"] += 1

    # ------------------------------------------------------------------ shutdown
    def shutdown(self, reason: str, flush: Callable[[], None]) -> bool:
        """Stop the planner thread and give every open task a final status: queued, generating, held
        or executing tasks FAIL with ``reason``; tasks not yet taken by the core are REJECTED. Releases
        the engine and closes the journal (a later configure opens them again). ``flush``: the host
        publishes what was queued so far. Returns False when there was nothing to stop."""
        self.active = False
        if self.core is None and not self.desk.waiting:
            return False
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
                    item = self.inbound.get_nowait()
                except queue.Empty:
                    break
                if isinstance(item, ho.Submit):
                    self.open_tasks.closed(item.spec.task_id)
                    self.desk.reject(item.spec.task_id, item.spec.agent_id, now, reason, "shutdown")
                elif isinstance(item, ho.Recovered):
                    self.recovered(item.waiting, reason)
        self.desk.end_waiting(reason, now)
        flush()
        stuck = self.open_tasks.take_all()  # the planner thread is stuck in the engine: answer from the book
        for task_id, agent in stuck.items():
            self.put_status(task_id, agent, ev.FAILED, now, f"{reason} (planner thread did not stop)")
        flush()
        if self.journal is not None and not stuck:
            self.journal.close()
        self.journal = None
        self._records.clear()
        self._specs.clear()
        if stopped:
            self.release_engine()
        return True
