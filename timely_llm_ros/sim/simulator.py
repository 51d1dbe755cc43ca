"""Discrete-event simulation of a workload in virtual time (no sleeping, no wall clock).

:func:`simulate` runs a list of :class:`TaskSpec` through :class:`PlannerCore` on a
:class:`SimEngine` (or a replica set of them) with :class:`RobotSim` robots. This module composes core
with the simulated engines, which is why it sits in the ``sim`` layer above ``engines`` (core imports
nothing else of the package). Timeline rules:

* pending events (task arrivals, robot STARTED/DONE) sit in a heap ordered by (time, insertion
  order); before every scheduling point all events due at the engine's current time are delivered —
  an event that falls inside an engine iteration is seen when the iteration ends, as in a real
  lock-step server, but keeps its exact timestamp;
* while generations are queued or running the planner steps the engine (each step advances the
  virtual clock by its modelled duration); when the engine has nothing to run, the clock jumps to the
  next event;
* a rejected task (bad input) gets a REJECT event and a record; the others are unaffected;
* each robot executes one task at a time (:mod:`timely_llm_ros.core.sched.agent_queue`): a task whose
  robot is busy waits, its response time counted from its own arrival.

Same inputs + same seed give identical results bit for bit: no wall clock, no hash-order iteration,
per-task RNGs (:mod:`timely_llm_ros.core.robot_sim`).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.exectime import load_exec_time_model
from timely_llm_ros.core.generation import TaskRecord
from timely_llm_ros.core.options.kv_policy import KVOptions
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.planner import UNBOUNDED_AGENT_DEPTH, PlannerCore
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.robot_sim import RobotSim
from timely_llm_ros.core.sched.agent_queue import AgentQueues
from timely_llm_ros.core.sched.deferral_ledger import outcomes
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.engines.replicas import ReplicaSetEngine, simulated_replicas
from timely_llm_ros.engines.sim import SimEngine

_ARRIVAL = 0
_FEEDBACK = 1


@dataclass
class SimConfig:
    """Simulation settings (the bench CLI builds these)."""

    policy: str = "timely"
    profile: str | EngineProfile = "llama3-8b-fp16-rtx4090"
    exec_mode: str = "recorded"  # recorded (trace's exe_time_detail) | min | sampled
    network_latency: float = 0.008  # planner -> robot (public TimelyLLM code: 8 ms)
    seed: int = 0
    replicas: int = 1  # engine replicas behind the one planner (engines.replicas.ReplicaSetEngine)
    # one task at a time per robot (core.sched.agent_queue): how many of a robot's queued tasks may generate
    # ahead while its current task executes (their segments are held until it ends)
    lookahead: int = 1
    options: PlannerOptions | None = None  # planner options beyond the paper (None: defaults)
    kv: KVOptions | None = None  # suspended contexts' KV handling (None: the profile's eviction order)
    # the engine fuses prompt chunks into decode passes (None: when the options' token budget is not
    # ``whole``, i.e. when the planner sizes the chunks)
    chunked_prefill: bool | None = None


@dataclass
class SimResult:
    """Per-task records (submission order), the event trace and run statistics."""

    records: list[TaskRecord]
    events: list[ev.TraceEvent]
    stats: dict[str, Any] = field(default_factory=dict)


def simulate(
    tasks: list[TaskSpec],
    config: SimConfig | None = None,
    progress: Callable[[int, int, float], None] | None = None,
    engine: SimEngine | ReplicaSetEngine | None = None,
) -> SimResult:
    """Run ``tasks`` to completion; ``progress(done, total, sim_time)`` is called as tasks finish.

    ``engine``: a prepared virtual-clock engine (e.g. simulated replicas sharing a real model's
    tokenizer); default: ``config.replicas`` simulated engines timed by ``config.profile``."""
    config = config or SimConfig()
    engine = (
        engine
        if engine is not None
        else simulated_replicas(
            config.profile, config.replicas, kv=config.kv, chunked_prefill=_chunked(config)
        )
    )
    heap: list[tuple[float, int, int, object]] = []
    counter = 0

    def schedule(t: float, task_id: str, seg: int, state: str) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (t, counter, _FEEDBACK, (task_id, seg, state)))

    exec_model = load_exec_time_model()
    robot = RobotSim(
        exec_model,
        schedule,
        exec_mode=config.exec_mode,
        network_latency=config.network_latency,
        seed=config.seed,
    )
    trace: list[ev.TraceEvent] = []
    total = len(tasks)
    done = 0

    def sink(e: ev.TraceEvent) -> None:
        nonlocal done
        trace.append(e)
        if e.kind in (ev.COMPLETE, ev.FAIL, ev.REJECT, ev.EXPIRE, ev.CANCEL):
            done += 1
            if progress is not None:
                progress(done, total, e.t)

    planner = PlannerCore(
        engine,
        config.policy,
        dispatch=robot.dispatch,
        sink=sink,
        exec_model=exec_model,
        network_latency=config.network_latency,
        options=config.options,
        agent_queues=AgentQueues(UNBOUNDED_AGENT_DEPTH, config.lookahead),
    )
    order = sorted(range(len(tasks)), key=lambda i: (_arrival(tasks[i]), i))
    for i in order:
        counter += 1
        heap.append((_arrival(tasks[i]), counter, _ARRIVAL, tasks[i]))
    heapq.heapify(heap)
    if heap:
        engine.advance_to(heap[0][0])
    while True:
        now = engine.now()
        while heap and heap[0][0] <= now:
            t, _, kind, payload = heapq.heappop(heap)
            if kind == _ARRIVAL:
                _submit(planner, robot, payload)
            else:
                task_id, seg, state = cast("tuple[str, int, str]", payload)
                planner.on_feedback(task_id, seg, state, t)
        if planner.has_work() and planner.step():
            continue
        if not heap:
            if planner.has_work():  # cannot happen with a work-conserving admission; never hang
                planner.abort_all("simulation stalled: queued work could not be admitted")
            break
        engine.advance_to(heap[0][0])
    profile = engine.profile
    assert profile is not None  # simulated engines are timed by a profile
    stats = {
        "policy": planner.policy.name,
        "profile": profile.name,
        "exec_mode": config.exec_mode,
        "end_time": engine.now(),
        "tasks": total,
        "completed": sum(r.state == ev.COMPLETED for r in planner.records),
        "failed": sum(r.state == ev.FAILED for r in planner.records),
        "expired": sum(r.state == ev.EXPIRED for r in planner.records),
        "rejected": sum(r.state == ev.REJECTED for r in planner.records),
        "decisions": planner.scheduler.decisions,
        "exec_unused_recorded": robot.unused_recorded(),
        **{f"robot_{k}": v for k, v in robot.stats.items()},
        **{f"engine_{k}": v for k, v in engine.stats.items()},
        **_extras_stats(planner),
    }
    assert isinstance(planner.records, list)  # retain_records is None: every record is kept
    return SimResult(records=planner.records, events=trace, stats=stats)


def _chunked(config: SimConfig) -> bool:
    if config.chunked_prefill is not None:
        return bool(config.chunked_prefill)
    return (config.options or PlannerOptions()).token_budget != "whole"


def _extras_stats(planner: PlannerCore) -> dict:
    """What the options did (classifications, expiries, the length predictor's error)."""
    ex = planner.extras
    out: dict = {f"urgency_{k}": v for k, v in sorted(ex.classified.items())}
    out["overrun_killed"] = ex.overrun.expired
    out["overrun_skipped"] = ex.overrun.skipped
    if ex.predictor is not None:
        out.update({f"predictor_{k}": v for k, v in ex.predictor.error.as_dict().items()})
    ledger = getattr(planner.scheduler.policy.admission, "ledger", None)
    if ledger is not None:  # the admission's deferral promises against what happened
        out.update({f"deferral_{k}": v for k, v in outcomes(ledger).items()})
    return out


def _arrival(spec: object) -> float:
    a = getattr(spec, "arrival", 0.0)
    return float(a) if isinstance(a, (int, float)) and a == a and abs(a) != float("inf") else 0.0


def _submit(planner: PlannerCore, robot: RobotSim, spec: object) -> None:
    try:
        rec = planner.submit(spec)  # type: ignore[arg-type]  # any object: submit() rejects a malformed one
    except TaskRejected:
        return
    robot.register(rec.task_id, getattr(spec, "exec_times", []) or [])
