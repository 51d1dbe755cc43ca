"""PlannerCore: TimelyLLM's segmented-generation loop (paper §3, §4.1–4.4), shared by the simulator,
the real engines and the ROS planner node.

One :meth:`PlannerCore.step` = one scheduling point + one engine iteration:

1. the scheduler picks generations to admit (new) or resume (suspended) — priorities recomputed at
   the current time, batch size, KV memory and the policy's admission check (:mod:`.sched.scheduler`);
   with the batch full, ``timely`` may first have running generations suspended mid-segment for
   urgent ones (:mod:`.sched.preemption`, :meth:`PlannerCore._preempt`: the partial segment is kept
   and continues after its resumption, without a GEN_START);
2. ``engine.step()`` advances every running generation by one token;
3. each token's text goes to that generation's :class:`SegmentChecker`. When it reports an
   executable segment, the segment is parsed and validated — a segment that does not parse is never
   dispatched: the task FAILs with the parser's reason — then (segmented policies) the generation is
   suspended (token ids + KV handle kept) and re-queued with its next segment's parameters, and the
   segment is dispatched to the robot through the ``dispatch`` callback;
4. at EOS / token limit the remaining text is the final segment if it holds skills (``vllm``: the
   whole plan is one segment), and the generation is released.

One task at a time per robot (:mod:`.sched.agent_queue`): only the robot's *active* task has its segments
dispatched; the next task may generate ahead, but its segments are *held* (SEGMENT_READY now, DISPATCH
when the robot's previous task is terminal), and its suspended generation is parked outside the
scheduler until then; further tasks wait unscheduled. A task beyond the per-robot depth is REJECTED.

The last segment of a plan is dispatched with ``final``. A plan's tail after the last executable
segment that still holds something to execute (a loop's closing ``}``, which runs the loop's replays;
a ``->`` return) is dispatched as a real final segment; when nothing but whitespace and ``;`` is left,
a *closing marker* (no text, no calls, ``final``) is dispatched instead.

Robot feedback (:meth:`feedback`: STARTED / PROGRESS / DONE / FAILED of a segment, checked by
:func:`.feedback.feedback_problem`: only for the segment the robot holds, from that robot, never
twice) refines the estimated end
of the robot's current action, which is the reference point ``ref`` of the suspended generation's
waiting time: ``est_end(k) = max(dispatch_k + net, est_end(k−1)) + min_exec_k`` until the action
starts (§4.3: the *minimum* execution time), ``exec_start_k + min_exec_k`` once it started, and
``exec_end_k`` once done. A task COMPLETEs when its generation has finished and every dispatched
segment is DONE; its completion time is the last action's end. A task whose every generated
segment is dispatched and whose generation is suspended or finished is EXECUTING once its robot
works on it.

Cancel (:meth:`PlannerCore.cancel`, the PlanTask action's cancel): the generation stops wherever it
is, its slot and KV are released, the task ends CANCELLED (``CANCEL`` event).

Bounded memory (long-running planners): with ``retain_records`` set, a terminal task's generation
is dropped and only the last ``retain_records`` records are kept (the simulator keeps all).

Options beyond the paper (``options``, :mod:`.options.planner_options`): a TUF derived from the instruction
for tasks without one (semantic urgency), G(·) from an online segment-length predictor, overrun
strategies that EXPIRE a task once its utility horizon has passed (an EXPIRED task is terminal like a
FAILED one: its robot's next task becomes active), and a per-step prompt-token budget.

The planner is clock-agnostic: ``clock()`` (default: the engine's) gives "now". Events go to ``sink``
(:class:`TraceEvent`) and state changes to ``on_state(task_id, state, reason)``.
"""

from __future__ import annotations

import math
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.engine import (
    Engine,
    EngineError,
    EngineOutOfMemory,
    TokenOut,
    check_replays,
    plan_kwargs,
    script_kwargs,
)
from timely_llm_ros.core.exectime import ExecTimeModel, load_exec_time_model
from timely_llm_ros.core.feedback import TRUSTED, FeedbackRules, feedback_problem
from timely_llm_ros.core.generation import Dispatch, Generation, Segment, TaskRecord, estimated_action_end
from timely_llm_ros.core.intake import Intake
from timely_llm_ros.core.motion_budget import PlanBudgets
from timely_llm_ros.core.options.planner_options import PlannerExtras, PlannerOptions
from timely_llm_ros.core.options.replay import REFERENCE
from timely_llm_ros.core.sched.agent_queue import ACTIVE, AHEAD, WAITING, AgentQueueFull, AgentQueues
from timely_llm_ros.core.sched.policies import Policy
from timely_llm_ros.core.sched.scheduler import Scheduler
from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.core.skills.model import SkillCall, SkillParseError
from timely_llm_ros.core.task import TaskRejected, TaskSpec

# The simulator and benchmarks queue every task of a robot (their workloads decide the load); the ROS
# planner node passes its bounded ``agent_queue_depth`` parameter.
UNBOUNDED_AGENT_DEPTH = 1_000_000


@dataclass(frozen=True, slots=True)
class ResumedSegment:
    """A segment a robot received before a planner restart (from the journal, see :mod:`timely_llm_ros.service.journal`)."""

    text: str
    min_exec: float
    expected_exec: float
    exec_start: float = math.nan  # planner clock of the new process (nan: not known to have started)
    exec_end: float = math.nan  # nan: not known to be DONE


class PlannerCore:
    """Segmented generation + scheduling over one :class:`Engine` (see module docstring)."""

    def __init__(
        self,
        engine: Engine,
        policy: str | Policy = "timely",
        *,
        clock: Callable[[], float] | None = None,
        dispatch: Callable[[Dispatch], None] | None = None,
        sink: Callable[[ev.TraceEvent], None] | None = None,
        on_state: Callable[[str, str, str], None] | None = None,
        exec_model: ExecTimeModel | None = None,
        network_latency: float = 0.008,
        agent_queues: AgentQueues | None = None,
        retain_records: int | None = None,
        options: PlannerOptions | None = None,
        feedback_rules: FeedbackRules = TRUSTED,
    ) -> None:
        if not (
            isinstance(network_latency, (int, float))
            and math.isfinite(network_latency)
            and network_latency >= 0
        ):
            raise ValueError(f"network_latency must be a finite number >= 0, got {network_latency!r}")
        self.engine = engine
        self.scheduler = Scheduler(policy)
        self.policy = self.scheduler.policy
        self.clock = clock or engine.now
        self._dispatch = dispatch
        self._sink = sink
        self._on_state = on_state
        self.exec_model = exec_model or load_exec_time_model()
        self.net = float(network_latency)
        self.agents = agent_queues if agent_queues is not None else AgentQueues(UNBOUNDED_AGENT_DEPTH, 1)
        if retain_records is not None and retain_records < 1:
            raise ValueError(f"retain_records must be >= 1 or None, got {retain_records!r}")
        self.retain = retain_records
        self.records: list[TaskRecord] | deque[TaskRecord] = (
            [] if retain_records is None else deque(maxlen=retain_records)
        )
        self.budgets = PlanBudgets(self.exec_model)  # per-plan motion budgets (core/motion_budget.py)
        self._tasks: dict[str, Generation] = {}
        self._finished: OrderedDict[str, TaskRecord] = OrderedDict()  # retained terminal tasks
        self._running: dict[int, Generation] = {}
        self._next_id = 0
        self._use_checker = self.policy.stream
        self.options = options or PlannerOptions()
        replay = self.options.plan_source == REFERENCE
        if replay:
            check_replays(engine)  # an engine that cannot replay is refused now, with the reason
        self.intake = Intake(engine, replay=replay)
        self.extras = PlannerExtras(self.options)
        self._costs = engine.cost_profile()
        self.feedback_rules = feedback_rules  # strict in the ROS node (core/feedback.py)

    # -- events ---------------------------------------------------------------------------------
    def _emit(
        self, t: float, kind: str, rec: TaskRecord, seg: int = -1, detail: str = "", value: float = 0.0
    ) -> None:
        if self._sink is not None:
            self._sink(ev.TraceEvent(t, kind, rec.task_id, rec.agent_id, seg, value, detail))

    def _state(self, rec: TaskRecord, state: str, reason: str = "") -> None:
        rec.state = state
        if reason:
            rec.reason = reason
        if self._on_state is not None:
            self._on_state(rec.task_id, state, reason)

    # -- submission -----------------------------------------------------------------------------
    def submit(self, spec: TaskSpec, resume: list[ResumedSegment] | None = None) -> TaskRecord:
        """Validate and queue a task; raises :class:`TaskRejected` (after a REJECT event) if invalid.

        ``resume``: the segments its robot received before a planner restart; the task continues
        with the rest of its plan (:meth:`Intake.prepare` seeds the prompt with their text).
        """
        t = self.clock()
        sent = spec
        if isinstance(spec, TaskSpec):
            spec = self.extras.derive_tuf(spec)  # a task without a TUF: semantic urgency
        rec = TaskRecord.from_spec(spec) if isinstance(spec, TaskSpec) else None
        if rec is None:
            raise TaskRejected(f"expected a TaskSpec, got {type(spec).__name__}")
        # The ARRIVAL event carries the task's own arrival (the ROS node stamps it on receipt): the
        # planner thread only learns of a task after the engine step in flight, which on the CPU
        # model can last a second; stamping the submit time would hide that wait from every metric.
        arrived = spec.arrival
        self._emit(
            arrived if isinstance(arrived, (int, float)) and math.isfinite(arrived) and arrived <= t else t,
            ev.ARRIVAL,
            rec,
        )
        try:
            self.agents.check_room(rec.agent_id)  # cheap, before tokenising the prompt (bursts)
            gen = self._prepare(spec, rec, resume or [])
            role = self.agents.enter(rec.agent_id, rec.task_id)
        except (TaskRejected, AgentQueueFull) as exc:
            reason = exc.reason if isinstance(exc, TaskRejected) else str(exc)
            self.records.append(rec)
            rec.terminal_time = t
            self._state(rec, ev.REJECTED, reason)
            self._emit(t, ev.REJECT, rec, detail=reason)
            self._retire(rec)
            raise TaskRejected(reason) from None
        self.records.append(rec)
        self._tasks[spec.task_id] = gen
        self._state(rec, ev.ACCEPTED)
        busy = self._robot_busy(rec, role)
        self._emit(t, ev.ADMIT, rec, detail=f"{ev.ROBOT_BUSY} {busy}" if busy else "")
        skipped = self._skipped_by(rec)
        if skipped is not None:
            self._expire(gen, t, skipped)
            return rec
        gen.parked = role == WAITING
        if role != ACTIVE:
            self._rechain(rec.agent_id)
        if self.extras.wants_llm(sent):  # the embedded LLM classifies it first (a probe generation)
            self.extras.wait(gen, sent.task_class)
            self._state(rec, ev.QUEUED, "deriving its urgency from the instruction")
        elif gen.parked:
            self._state(rec, ev.QUEUED, busy)
        else:
            self._state(rec, ev.QUEUED, f"queued for the engine; {busy}" if busy else "")
            self._push(gen)
        return rec

    def _robot_busy(self, rec: TaskRecord, role: str) -> str:
        """Why a new task waits for its own robot ('' when the robot is free for it): the per-robot
        queue, named as such in its status reason and ADMIT detail (ev.ROBOT_BUSY)."""
        active = self.agents.active(rec.agent_id)
        if role == WAITING:
            return f"waiting for robot {rec.agent_id!r} to end task {active!r}"
        if role == AHEAD:
            return f"generating ahead while robot {rec.agent_id!r} ends task {active!r} (segments held until then)"
        return ""

    def _push(self, gen: Generation) -> None:
        """Queue a generation for its next segment: G from the length predictor (option), horizon."""
        self.extras.estimate(gen, self.engine.speed(), self._costs)
        gen.chain = self._chain_of(gen)
        self.scheduler.push(gen)
        self.extras.overrun.track(gen)

    def _chain_of(self, gen: Generation) -> tuple[float, float, float, float] | None:
        """(ref, ERT, α, β) of the first segment of the task that waits for ``gen``'s robot to end
        ``gen``'s task (robot chain: its action cannot start before this plan ends); None when
        ``gen``'s task is not its robot's active one or nothing waits behind it."""
        rec = gen.record
        if not self.agents.may_dispatch(rec.agent_id, rec.task_id):
            return None
        nxt = self.agents.next_of(rec.agent_id)
        w = self._tasks.get(nxt) if nxt is not None else None
        if w is None or w.finished or (w.record.segments and not math.isnan(w.record.segments[0].exec_start)):
            return None
        return (w.record.arrival, w.ert, w.alpha, w.beta)

    def _rechain(self, agent: str) -> None:
        """The robot's queue changed: re-rank its active task's queued generation (robot chain)."""
        act = self.agents.active(agent)
        gen = self._tasks.get(act) if act is not None else None
        if gen is None or gen.finished:
            return
        chain = self._chain_of(gen)
        if chain != gen.chain:
            gen.chain = chain
            self.scheduler.update(gen)

    def _unpark(self, gen: Generation) -> None:
        """Its robot is free for it: schedule it (unless it still waits for its urgency probe, whose
        answer queues it)."""
        gen.parked = False
        if gen.record.task_id not in self.extras.waiting:
            if gen.context is None and not gen.record.segments:  # waited for its robot unscheduled
                rec = gen.record
                ahead = self._robot_busy(rec, self.agents.role(rec.agent_id, rec.task_id) or "")
                why = (
                    f"queued for the engine; {ahead}"
                    if ahead
                    else f"robot {rec.agent_id!r} is free for it: queued for the engine"
                )
                self._emit(self.clock(), ev.ADMIT, rec, detail=f"{ev.ROBOT_SCHEDULED} {why}")
                self._state(rec, ev.QUEUED, why)
            self._push(gen)

    def warm_up(self, skill_sets: list[str], max_steps: int = 64) -> dict[str, float]:
        """Prefill each skill set's fixed prompt (the shared prefix) before any task arrives.

        Why: an engine with a prefix cache pays for the long skill prompt once, on the first task that
        uses it (about 8 s for the Tello prompt on the CPU model); a warm-up moves that cost to start-up
        so no robot's first task is late because of it. Runs a one-token throw-away generation per
        skill set; returns the seconds each took on the planner clock. Call while the engine is idle.
        Raises ``KeyError`` (UnknownSkillSet) for an unknown set, ``EngineError`` if the engine fails.
        """
        took: dict[str, float] = {}
        for name in skill_sets:
            sset = load_skill_set(name)
            prefix = self.intake.prefix_ids(sset)
            suffix = self.engine.tokenize("\nTask: warm-up")
            gen_id = self._next_id
            self._next_id += 1
            t0 = self.clock()
            self.engine.admit(
                gen_id,
                prefix + suffix,
                max_tokens=1,
                prefix_key=sset.name,
                prefix_len=len(prefix),
                **script_kwargs(self.engine, suffix),
            )
            try:
                for _ in range(max_steps):
                    if any(out.gen_id == gen_id and out.finished for out in self.engine.step()):
                        break
            finally:
                self.engine.release(gen_id)
            took[name] = self.clock() - t0
        return took

    def _prepare(self, spec: TaskSpec, rec: TaskRecord, resume: list[ResumedSegment]) -> Generation:
        if not isinstance(spec.task_id, str) or not spec.task_id.strip():
            raise TaskRejected("task_id is empty")
        if spec.task_id in self._tasks:
            raise TaskRejected(f"duplicate task_id {spec.task_id!r}")
        seed = "".join(r.text for r in resume)
        prep = self.intake.prepare(spec, seed)
        gen = Generation(self._next_id, spec, rec, prep.skill_set, self.net)
        self._next_id += 1
        gen.robot_type = prep.skill_set.robot_type
        gen.prompt_ids = prep.prompt_ids
        gen.prefix_len = prep.prefix_len
        gen.script = prep.script
        gen.plan = prep.plan
        gen.max_tokens = prep.max_tokens
        # KV tokens the admission takes: the private prompt part plus room for one segment
        gen.mem_need = len(prep.prompt_ids) - prep.prefix_len + gen.max_seg_tokens
        gen.checker = prep.skill_set.new_checker() if self._use_checker else None
        if resume:
            self._restore(gen, resume)
        return gen

    def _restore(self, gen: Generation, resume: list[ResumedSegment]) -> None:
        """Records of the segments a robot received before a restart; the checker continues after them."""
        rec = gen.record
        t = self.clock()
        for r in resume:
            try:
                calls = gen.skill_set.parse(r.text)
            except SkillParseError as exc:
                raise TaskRejected(
                    f"cannot resume: segment {len(rec.segments)} sent before the restart "
                    f"does not parse: {exc}"
                ) from None
            rec.segments.append(
                Segment(
                    idx=len(rec.segments),
                    text=r.text,
                    skills=tuple(c.name for c in calls),
                    dispatch=t,
                    exec_start=r.exec_start,
                    exec_end=r.exec_end,
                    min_exec=r.min_exec,
                    expected_exec=r.expected_exec,
                    calls=tuple(calls),
                )
            )
            if gen.checker is not None:  # same parse state (open blocks) as when it was generated
                gen.checker.feed(r.text)
                while gen.checker.ready:
                    gen.checker.cut()
        gen.dispatched = gen.k = len(rec.segments)
        gen.done_segments = sum(not math.isnan(s.exec_end) for s in rec.segments)
        gen.ert_k = 0.0
        gen.ref = estimated_action_end(rec, self.net)

    # -- the loop -------------------------------------------------------------------------------
    def has_work(self) -> bool:
        """True while a generation is queued or running."""
        return bool(self._running) or len(self.scheduler) > 0 or bool(self.extras.waiting)

    def step(self) -> bool:
        """One scheduling point + one engine iteration; False if nothing could run."""
        t = self.clock()
        ex = self.extras
        for gen in ex.overrun.due(t):
            self._overrun(gen, t)
        for gen, exc in ex.admit_probes(self.engine, self._new_id, t):
            self._fail(gen, t, f"urgency classifier: the engine refused its probe: {exc}")
        decision = self.scheduler.decide(
            t, list(self._running.values()), self.engine.speed(), self.engine.memory().free
        )
        picked = decision.admit
        preempted: list[Generation] = []
        for victim, cand in decision.suspend:  # free the slots first (the batch never grows)
            if self._preempt(victim, cand, t):
                preempted.append(victim)
            else:
                picked.remove(cand)
        for gen in picked:
            try:
                self._start(gen, t)
            except EngineError as exc:  # a real engine refused the sequence: that task fails, not all
                self._fail(gen, t, f"engine refused the generation: {exc}")
        for gen in preempted:  # after the admissions: a victim never retakes its slot in this step
            self._push(gen)
        probing = ex.probes is not None and len(ex.probes) > 0
        if not self._running and not probing:
            return bool(picked)
        if ex.opt.token_budget != "whole":
            self.engine.set_prefill_budget(
                ex.budget(t, self._running.values(), self.engine.speed(), self._costs)
            )
        try:
            outs = self.engine.step()
        except EngineOutOfMemory as exc:
            # The admission check keeps room for every running generation's next segment, so this
            # needs a profile/engine whose memory is nearly full; shed the newest generation, keep going.
            if self._running:
                newest = max(self._running.values(), key=lambda g: g.gen_id)
                self._fail(newest, self.clock(), f"engine KV memory exhausted: {exc}")
            else:
                self._fail_probes(f"engine KV memory exhausted: {exc}")
            return True
        except EngineError as exc:
            for gen in list(self._running.values()):
                self._fail(gen, self.clock(), f"engine error: {exc}")
            self._fail_probes(f"engine error: {exc}")
            return True
        for out in outs:
            if probing and ex.probes is not None and ex.probes.owns(out.gen_id):
                self._probe_token(out)
            else:
                self._token(out)
        return True

    def _new_id(self) -> int:
        gid = self._next_id
        self._next_id += 1
        return gid

    def _probe_token(self, out: TokenOut) -> None:
        """A token of the LLM classifier's probe: once it names a class, the task gets that class's
        TUF and is queued (its response time still counts from its arrival) — or stays parked while
        its robot executes another task."""
        ex = self.extras
        book = ex.probes
        assert book is not None  # only probes' tokens come here
        tid = book.task_of(out.gen_id)
        res = book.on_token(out.gen_id, out.text, out.finished or out.reason == "error", out.t)
        if res is None:
            return
        self.engine.release(out.gen_id)
        gen = ex.answered(res, tid) if tid is not None else None
        if gen is None or gen.record.state in ev.TERMINAL_STATES:
            return
        why = f"urgency {res.label} ({res.source}, {1000 * res.latency_s:.0f} ms)"
        if gen.parked:
            why += f"; waiting for robot {gen.record.agent_id!r} to end task {self.agents.active(gen.record.agent_id)!r}"
        self._state(gen.record, ev.QUEUED, why)
        if not gen.parked:
            self._push(gen)

    def _fail_probes(self, reason: str) -> None:
        for tid in list(self.extras.waiting):
            gen = self.extras.waiting[tid].gen
            self._fail(gen, self.clock(), f"urgency classifier: {reason}")

    def _preempt(self, gen: Generation, by: Generation, t: float) -> bool:
        """Suspend a running generation mid-segment so that ``by`` takes its slot (the scheduler's
        preemption, :mod:`.sched.preemption`); False (``by`` goes back to the queue) if the engine
        cannot suspend it now. Its partial segment stays: tokens so far (in the context), the stop
        checker's state, ``seg_tokens``; the caller re-queues it after this step's admissions."""
        try:
            ctx = self.engine.suspend(gen.gen_id, resume_hint=t + by.g)
        except EngineError:  # e.g. its prompt is still being fed: not preempted
            self._push(by)
            return False
        del self._running[gen.gen_id]
        gen.context = ctx
        private = len(ctx.token_ids) - gen.prefix_len
        if ctx.location == "device" and self.engine.memory().pinned:
            private = 0
        gen.mem_need = private + max(1, gen.max_seg_tokens - gen.seg_tokens)
        gen.state = ev.SUSPENDED
        gen.partial = True
        gen.preempted += 1
        gen.seg_start = t - gen.seg_start  # the time it ran; shifted back on resumption
        gen.record.n_suspensions += 1
        why = f"preempted mid-segment (after {gen.seg_tokens} tokens) for task {by.record.task_id!r}"
        self._state(gen.record, ev.SUSPENDED, why)
        self._emit(t, ev.SUSPEND, gen.record, gen.k, detail=why)
        return True

    def _start(self, gen: Generation, t: float) -> None:
        rec = gen.record
        self.extras.started(gen.gen_id, gen.context is None or gen.context.location == "discarded")
        if gen.context is None:
            self.engine.admit(
                gen.gen_id,
                gen.prompt_ids,
                max_tokens=gen.max_tokens,
                prefix_key=gen.skill_set.name,
                prefix_len=gen.prefix_len,
                **script_kwargs(self.engine, gen.script),
                **plan_kwargs(self.engine, gen.plan),
            )
            rec.first_admit = t
            self._emit(t, ev.GEN_START, rec, gen.k)
        elif gen.partial:  # preempted mid-segment: the same segment goes on, no GEN_START
            self.engine.resume(gen.gen_id, gen.context, max_tokens=gen.max_tokens)
            gen.context = None
            self._emit(t, ev.RESUME, rec, gen.k, detail="mid-segment")
        else:
            self.engine.resume(gen.gen_id, gen.context, max_tokens=gen.max_tokens)
            gen.context = None
            self._emit(t, ev.GEN_START, rec, gen.k)
            self._emit(t, ev.RESUME, rec, gen.k)
        # the segment's deadline orders prompt work inside a step on engines that can use it, and the
        # task's initial utility ranks its KV in engines that evict by importance (paper 001)
        self.engine.set_priority(gen.gen_id, gen.deadline())
        self.engine.set_importance(gen.gen_id, gen.beta)
        gen.mid_resume = self.engine.resumes_mid_segment(gen.gen_id)
        if gen.partial:  # seg_start: as if it had run without the pause (the scheduler's end estimate)
            gen.partial = False
            gen.seg_start = t - gen.seg_start
        else:
            gen.seg_tokens = 0
            gen.seg_start = gen.seg_first = t
            gen.preempted = 0
        gen.state = ev.GENERATING
        self._state(rec, ev.GENERATING)
        self._running[gen.gen_id] = gen

    def _token(self, out: TokenOut) -> None:
        gen = self._running.get(out.gen_id)
        if gen is None:
            return
        self.extras.token(out.gen_id)
        if out.reason == "error":  # the engine gave up on this generation: fail it, keep the rest
            self._emit(out.t, ev.GEN_STOP, gen.record, len(gen.record.segments), "error", gen.seg_tokens)
            self._fail(
                gen,
                out.t,
                f"engine error: {out.text or 'the engine ended the generation without finishing it'}",
            )
            return
        gen.seg_tokens += 1
        gen.record.n_tokens += 1
        if out.text:
            gen.text.append(out.text)
            chk = gen.checker
            if chk is not None and chk.feed(out.text):
                parts = [chk.cut()]
                while chk.ready:
                    parts.append(chk.cut())
                self._segment("".join(parts), gen, out.t, last=out.finished)
        if out.finished and not gen.finished:
            self._finish(gen, out)

    def _segment(self, text: str, gen: Generation, t: float, last: bool) -> None:
        """An executable segment is complete: parse, suspend (segmented), dispatch or hold, re-queue."""
        try:
            calls = gen.skill_set.parse(text)
        except SkillParseError as exc:
            self._fail(gen, t, f"segment {len(gen.record.segments)} does not parse: {exc}")
            return
        if not calls:
            return
        if not self._dispatch_segment(gen, text, calls, t):
            return
        if self.policy.segmented and not last:
            ctx = self.engine.suspend(gen.gen_id, resume_hint=gen.ref)
            del self._running[gen.gen_id]
            gen.context = ctx
            # resuming moves the private KV (prompt suffix + generated) back among the running ones;
            # a context the engine keeps pinned on the device (kv_policy keep) is counted as used
            # already, so its resumption needs room for the new segment only
            private = len(ctx.token_ids) - gen.prefix_len
            if ctx.location == "device" and self.engine.memory().pinned:
                private = 0
            gen.mem_need = private + gen.max_seg_tokens
            gen.state = ev.SUSPENDED
            gen.record.n_suspensions += 1
            held = bool(gen.held)
            self._state(
                gen.record,
                ev.SUSPENDED,
                f"holding the plan until robot {gen.record.agent_id!r} "
                f"ends task {self.agents.active(gen.record.agent_id)!r}"
                if held
                else "",
            )
            self._emit(t, ev.GEN_STOP, gen.record, gen.k - 1, "segment", gen.seg_tokens)
            self._emit(
                t,
                ev.SUSPEND,
                gen.record,
                gen.k,
                detail=f"{ev.ROBOT_BUSY} holding the segment until robot {gen.record.agent_id!r} is free"
                if held
                else "",
            )
            if held:  # generate no further ahead: parked until its robot is free (core.sched.agent_queue)
                gen.parked = True
            else:
                self._push(gen)
        else:
            gen.seg_tokens = 0
            gen.seg_start = gen.seg_first = t
            gen.preempted = 0

    def _dispatch_segment(
        self, gen: Generation, text: str, calls: list[SkillCall], t: float, final: bool = False
    ) -> bool:
        rec = gen.record
        idx = len(rec.segments)
        why = self.budgets.check(gen.gen_id, gen.skill_set, [s.text for s in rec.segments], text)
        if why:  # the plan could move the robot past its per-plan budget: fail it, send nothing
            self._fail(gen, t, f"segment {idx} exceeds the motion budget: {why}")
            return False
        try:
            # timed as the robot runs it: a loop's replays belong to the segment with its '}'
            est = self.exec_model.estimate_segment(
                gen.robot_type, gen.skill_set, [s.text for s in rec.segments], text
            )
        except (ValueError, KeyError) as exc:
            self._fail(gen, t, f"segment {idx} cannot be timed: {exc}")
            return False
        seg = Segment(
            idx=idx,
            text=text,
            skills=tuple(c.name for c in calls),
            n_tokens=gen.seg_tokens,
            gen_start=gen.seg_first,
            gen_end=t,
            dispatch=t,
            min_exec=est.minimum,
            expected_exec=est.expected,
            calls=tuple(calls),
            final=final,
        )
        rec.segments.append(seg)
        self.extras.learned(gen, idx, seg.n_tokens)
        gen.dispatched += 1
        gen.k = idx + 1
        gen.ert_k = 0.0
        self._emit(t, ev.SEGMENT_READY, rec, idx, text)
        self._send(
            gen,
            Dispatch(
                rec.task_id,
                rec.agent_id,
                gen.robot_type,
                idx,
                text,
                tuple(calls),
                t,
                est.minimum,
                est.expected,
                final,
            ),
        )
        gen.ref = estimated_action_end(rec, self.net, held_at=t)
        return True

    def _send(self, gen: Generation, d: Dispatch) -> None:
        """Dispatch ``d`` now if its task is its robot's active one, else hold it (core.sched.agent_queue)."""
        rec = gen.record
        if gen.held or not self.agents.may_dispatch(rec.agent_id, rec.task_id):
            if not d.closing_marker:
                rec.segments[d.seg].dispatch = math.nan
            gen.held.append(d)
            return
        if not d.closing_marker:
            rec.segments[d.seg].dispatch = d.t
            self._emit(d.t, ev.DISPATCH, rec, d.seg, value=d.min_exec)
        if self._dispatch is not None:
            self._dispatch(d)

    def _finish(self, gen: Generation, out: TokenOut) -> None:
        rec = gen.record
        t = out.t
        gen.finished = True
        self._running.pop(gen.gen_id, None)
        self.engine.release(gen.gen_id)
        rec.gen_end = t
        if rec.state == ev.FAILED:
            self._emit(t, ev.GEN_STOP, rec, len(rec.segments), out.reason, gen.seg_tokens)
            return
        tail = "".join(gen.text) if gen.checker is None else gen.checker.finish()
        calls: list[SkillCall] = []
        stop_detail = out.reason
        # statement separators and whitespace execute nothing: such a tail ends with the closing marker
        send_tail = bool(tail.replace(";", "").strip())
        if send_tail:
            try:
                calls = gen.skill_set.parse(tail)
            except SkillParseError as exc:
                if out.reason != "length":
                    self._emit(t, ev.GEN_STOP, rec, len(rec.segments), out.reason, gen.seg_tokens)
                    self._fail(gen, t, f"segment {len(rec.segments)} does not parse: {exc}")
                    return
                # The token budget cut the plan inside a statement: a legitimate end of a generation
                # on any engine. The unfinished statement is never sent (nor guessed at); the GEN_STOP
                # event and the task's end say so. Complete segments already sent stand, and the task
                # completes with what was planned (reason: truncated); with none, it fails.
                cut = tail.strip()
                cut = cut if len(cut) <= 80 else "…" + cut[-79:]  # the cut is at the end
                rec.truncated = (
                    f"plan truncated at max_tokens ({gen.max_tokens} tokens): unfinished statement "
                    f"{cut!r} was not sent ({exc.reason})"
                )
                stop_detail = f"length: {rec.truncated}"
                if not rec.segments:
                    self._emit(t, ev.GEN_STOP, rec, 0, stop_detail, gen.seg_tokens)
                    self._fail(gen, t, f"{rec.truncated}; nothing of the plan was sent")
                    return
                calls, send_tail = [], False
        self._emit(t, ev.GEN_STOP, rec, len(rec.segments), stop_detail, gen.seg_tokens)
        if not rec.segments and not calls:
            self._fail(gen, t, "the plan holds no executable skill")
            return
        # A tail with text is a real final segment even without a call: a loop's closing '}' runs the
        # loop's replays on the robot (2{mf(50);tc(90)} flies twice only once '}' arrives), so it is
        # timed, budget-checked, dispatched and waits for feedback like any segment.
        if send_tail and not self._dispatch_segment(gen, tail, calls, t, final=True):
            return
        if not send_tail:  # the last executable segment was already sent: close the plan with a marker
            rec.segments[-1].final = True
            self._send(
                gen,
                Dispatch(
                    rec.task_id,
                    rec.agent_id,
                    gen.robot_type,
                    len(rec.segments),
                    "",
                    (),
                    t,
                    0.0,
                    0.0,
                    final=True,
                ),
            )
        gen.text = []
        gen.prompt_ids = []
        if gen.held:  # the whole plan is ready but its robot still executes another task
            self._state(
                rec,
                ev.SUSPENDED,
                f"plan ready; holding it until robot {rec.agent_id!r} ends task "
                f"{self.agents.active(rec.agent_id)!r}",
            )
            return
        self._maybe_complete(gen, t)
        self._executing(gen, t)

    def _executing(self, gen: Generation, t: float) -> None:
        """EXECUTING: every generated segment is with the robot and the generation is not running."""
        rec = gen.record
        if (
            rec.state not in (ev.EXECUTING, *ev.TERMINAL_STATES)
            and not gen.held
            and gen.gen_id not in self._running
            and rec.segments
        ):
            self._state(rec, ev.EXECUTING)

    def _maybe_complete(self, gen: Generation, t: float) -> None:
        rec = gen.record
        if (
            gen.finished
            and rec.state not in ev.TERMINAL_STATES
            and not gen.held
            and gen.done_segments == len(rec.segments)
        ):
            rec.completion_time_abs = rec.segments[-1].exec_end
            rec.terminal_time = t
            self._state(rec, ev.COMPLETED, rec.truncated)
            self._emit(t, ev.COMPLETE, rec, len(rec.segments) - 1, value=rec.utility)
            self._closed(gen, t)

    def _fail(self, gen: Generation, t: float, reason: str) -> None:
        self._end(gen, t, ev.FAILED, ev.FAIL, reason)

    def _end(self, gen: Generation, t: float, state: str, kind: str, reason: str) -> None:
        """End a task before completion: stop its generation (slot and KV released), state + event."""
        rec = gen.record
        if rec.state in ev.TERMINAL_STATES:
            return
        self._stop(gen)
        rec.terminal_time = t
        self._state(rec, state, reason)
        self._emit(t, kind, rec, detail=reason)
        self._closed(gen, t)

    def _stop(self, gen: Generation) -> None:
        """Take a generation out of the scheduler, the engine and the options' bookkeeping (its
        urgency probe included)."""
        gen.finished = True
        self.scheduler.remove(gen)
        if self._running.pop(gen.gen_id, None) is not None or gen.context is not None:
            self.engine.release(gen.gen_id)
            gen.context = None
        probe = self.extras.drop_waiting(gen.record.task_id)
        if probe is not None:
            self.engine.release(probe)
        self.extras.overrun.forget(gen)
        self.extras.token(gen.gen_id)

    def _expire(self, gen: Generation, t: float, reason: str) -> None:
        """EXPIRED: the task's utility horizon has passed (overrun ``kill``) or it was skipped
        (``skip-next``). Terminal like FAILED: its robot is told by TaskStatus EXPIRED + reason, a
        segment it holds is not taken back (the robot ends it; feedback for it is then ignored), and
        the robot's next task becomes active."""
        self._end(gen, t, ev.EXPIRED, ev.EXPIRE, reason)

    def _overrun(self, gen: Generation, t: float) -> None:
        """A tracked generation's utility horizon has passed (core/options/overrun.py)."""
        rec = gen.record
        how = self.extras.overrun.strategy(gen.spec)
        seg = len(rec.segments)
        late = t - rec.arrival if seg == 0 else t - gen.ref
        what = "its first segment" if seg == 0 else f"segment {seg}"
        if how == "kill":
            self.extras.overrun.expired += 1
            self._expire(
                gen,
                t,
                f"overrun (kill): {what} could no longer start with positive utility "
                f"({late:.3f} s after {'arrival' if seg == 0 else 'the previous action ended'})",
            )
            return
        agent = rec.agent_id
        self.extras.overrun.overrunning[agent] = rec.task_id
        for other in list(self._tasks.values()):  # skip-next: this robot's tasks that have not started
            o = other.record
            if (
                o.agent_id == agent
                and o.task_id != rec.task_id
                and not o.segments
                and o.state not in ev.TERMINAL_STATES
            ):
                self._expire(other, t, self._skipped_by(o) or "skipped")

    def _skipped_by(self, rec: TaskRecord) -> str | None:
        """The skip-next reason when the task's robot is busy with an overrunning task, else None."""
        busy = self.extras.overrun.overrunning.get(rec.agent_id)
        if busy is None or busy == rec.task_id:
            return None
        other = self._tasks.get(busy)
        if other is None or other.record.state in ev.TERMINAL_STATES:
            return None
        self.extras.overrun.skipped += 1
        return (
            f"skipped (skip-next): robot {rec.agent_id!r} is still on task {busy!r}, which overran its "
            "utility horizon"
        )

    # -- end of a task: the robot's next task, bounded memory ----------------------------------
    def _closed(self, gen: Generation, t: float) -> None:
        """A task is terminal: its robot's next task becomes active (held segments go out, its parked
        generation is scheduled) and the next one may generate ahead; the task's memory is released."""
        rec = gen.record
        gen.held = []
        gen.parked = False
        gen.checker = None
        gen.prompt_ids = []
        gen.script = None
        gen.plan = None
        gen.text = []
        promo = self.agents.leave(rec.agent_id, rec.task_id)
        if promo.active is not None and promo.active != rec.task_id:
            nxt = self._tasks.get(promo.active)
            if nxt is not None:
                self._activate(nxt, t)
        for tid in promo.ahead:
            ahead = self._tasks.get(tid)
            if ahead is not None and ahead.parked and ahead.context is None and not ahead.finished:
                self._unpark(ahead)
        self._rechain(rec.agent_id)
        self._retire(rec)

    def _activate(self, gen: Generation, t: float) -> None:
        held, gen.held = gen.held, []
        for d in held:
            self._send(
                gen,
                Dispatch(
                    d.task_id,
                    d.agent_id,
                    d.robot_type,
                    d.seg,
                    d.text,
                    d.calls,
                    t,
                    d.min_exec,
                    d.expected_exec,
                    d.final,
                ),
            )
        rec = gen.record
        if rec.segments:  # a first segment still generating keeps its task's arrival as ref
            gen.ref = estimated_action_end(rec, self.net)
        if gen.parked and not gen.finished:
            self._unpark(gen)
        elif gen.finished:
            self._executing(gen, t)

    def _retire(self, rec: TaskRecord) -> None:
        """Bounded memory (``retain_records``): forget a terminal task's generation, keep its record."""
        if self.retain is None:
            return
        self._tasks.pop(rec.task_id, None)
        self._finished[rec.task_id] = rec
        while len(self._finished) > self.retain:
            self._finished.popitem(last=False)

    # -- robot feedback -------------------------------------------------------------------------
    def on_feedback(self, task_id: str, seg: int, state: str, t: float, reason: str = "") -> bool:
        """Robot feedback for segment ``seg`` of ``task_id``; False if ignored (see :meth:`feedback`)."""
        return self.feedback(task_id, seg, state, t, reason) is None

    def feedback(
        self, task_id: str, seg: int, state: str, t: float, reason: str = "", agent: str | None = None
    ) -> str | None:
        """Apply robot feedback; returns why it was ignored (None when applied).

        Only feedback for the segment the robot holds, from ``agent`` = the task's robot (None: not
        checked), that moves it forward is applied (:func:`.feedback.feedback_problem`); duplicates
        and forgeries change nothing. PROGRESS (a heartbeat) changes no estimate: it only proves life.
        """
        gen = self._tasks.get(task_id)
        if gen is None:
            done = self._finished.get(task_id)
            return f"the task is already {done.state}" if done is not None else "unknown task"
        rec = gen.record
        problem = feedback_problem(rec, seg, state, agent, t, self.feedback_rules)
        if problem is not None:
            return problem
        s = rec.segments[seg]
        if state == ev.PROGRESS:
            return None
        if state == ev.FEEDBACK_FAILED:
            self._fail(gen, t, reason or f"robot failed to execute segment {seg}")
            return None
        if state == ev.STARTED:
            s.exec_start = t
            self._emit(t, ev.EXEC_START, rec, seg, value=t - rec.arrival if seg == 0 else 0.0)
        else:  # DONE
            if math.isnan(s.exec_start):
                s.exec_start = t
            s.exec_end = t
            gen.done_segments += 1
            self._emit(t, ev.EXEC_END, rec, seg)
        if not gen.finished:
            gen.ref = estimated_action_end(rec, self.net)
            self.scheduler.update(gen)
            if state == ev.DONE:
                self.extras.overrun.track(gen)  # the robot waits from now on: its horizon counts
        self._maybe_complete(gen, t)
        if state == ev.STARTED:
            self._executing(gen, t)
        return None

    def open_tasks(self) -> list[TaskRecord]:
        """Records of every task not terminal yet (accepted, queued, generating or executing)."""
        return [g.record for g in self._tasks.values() if g.record.state not in ev.TERMINAL_STATES]

    def cancel(self, task_id: str, reason: str = "cancelled") -> str | None:
        """Cancel an open task on request; returns why not (None when cancelled).

        Wherever the task is — queued, parked behind its robot's previous task, generating, suspended
        or executing — its generation stops and is released (scheduler slot and KV cache freed via
        ``engine.release``), held segments are dropped, the task ends CANCELLED with a ``CANCEL``
        event, and its robot's next task becomes active. The robot learns it from the terminal
        status (``on_state``): robots stop a task and its running motion on a terminal TaskStatus.
        """
        gen = self._tasks.get(task_id)
        if gen is None:
            done = self._finished.get(task_id)
            return f"the task is already {done.state}" if done is not None else "unknown task"
        if gen.record.state in ev.TERMINAL_STATES:
            return f"the task is already {gen.record.state}"
        self._end(gen, self.clock(), ev.CANCELLED, ev.CANCEL, reason)
        return None

    def fail_agent(self, agent: str, reason: str) -> list[str]:
        """Fail every open task of robot ``agent`` at once (the robot is down); returns their ids.

        Its waiting tasks end first, then the active one, so ending the active task promotes none of
        them (no segment is dispatched to a robot known to be down)."""
        t = self.clock()
        mine = [g for g in self._tasks.values() if g.record.agent_id == agent]
        mine = [g for g in mine if g.record.state not in ev.TERMINAL_STATES]
        active = self.agents.active(agent)
        mine.sort(key=lambda g: g.record.task_id == active)
        for gen in mine:
            self._fail(gen, t, reason)
        return [g.record.task_id for g in mine]

    def abort_all(self, reason: str) -> None:
        """Fail every task that is not terminal yet — queued, generating, held or still executing — so
        each ends with a final status (e.g. the engine stopped, the planner shuts down)."""
        t = self.clock()
        for gen in list(self._tasks.values()):
            if gen.record.state not in ev.TERMINAL_STATES:
                self._fail(gen, t, reason)
