"""``timely-llm realbench``: one scaled workload on a *real* engine under several policies, next to
the simulator's prediction of the same runs (do the headline numbers hold on an engine
that really computes?).

For each policy the workload's tasks go through :class:`~timely_llm_ros.core.planner.PlannerCore`
on the real engine (``llamacpp`` or ``vllm``) in wall time, with the simulated robots of the
benchmark simulator (:class:`~timely_llm_ros.core.robot_sim.RobotSim`, execution times drawn per
task from the execution-time model with a fixed seed): the same scheduler code as the ROS planner,
without DDS in between, so what differs from the simulator is the engine alone. Then the simulator
predicts *the same run*: the same tasks, policy, robots and seed, on :class:`SimEngine` timed by the
engine's fitted profile (``timely-llm profile``), emitting the plans the real engine generated
(greedy decoding: a plan does not depend on the policy) tokenized by the real model's tokenizer.

Why ERTs are scaled: the paper's TUFs assume a GPU; ``--tuf-scale auto`` measures the real
engine's first-segment time of an urgent task served alone and divides it by the GPU profile's
(≈ 0.12 s, see ``timely_llm_ros/demo.py``), so an urgent TUF keeps the paper's slack over the best
possible response on this engine; utilities keep their paper values.

The simulated engine predicts the same way the real one runs: llama.cpp's prompt schedule (16-token
chunks or one 64-token batch, most urgent first, held back behind more urgent decoding;
:mod:`timely_llm_ros.engines.prompt_rule`) and prompts as long as the real chat template makes them.
``--profile fit`` fits the profile on the engine right before the runs: the quick sweep of
``timely-llm profile`` plus one task per skill set served alone through the planner
(:mod:`.calibrate`: the forward pass refitted with those steps, and what a planner run adds to it —
prefix attention, grammar sampling, the planner's loop). Right before each policy's run a speed check
(one probe task served alone three times) slows the profile by the engine's current real/priced
ratio, the median of the three (``--no-speed-check``: off), since a shared machine's load changes the engine's speed within minutes.

Every run is observed by a :class:`~.phase_account.PhaseTap`: per task, the phases of its response
(pickup, queued, prefill, decode, to robot; then suspended, resume, later decoding) real vs
predicted, and the run's time by kind (steps, forward pass, sampling, planner loop, the profile's
price of the real steps); ``--phases`` prints it, the JSON always has it. The table also gives the
ordering of the policies real vs predicted
(:mod:`.ordering`: by %Σβ over all and urgent tasks and by mean response; pairs the real runs cannot
separate are ties, never swaps; then "ordering reproduced: yes/no (reason)") and the prediction's
error at the speed the engine had during the run (load drift removed; a diagnostic).

``--time-scale K`` multiplies the world's time axis, for the real and the predicted runs alike: the
tasks' arrivals, the robots' execution times and the planner's model of them (ERTs follow
``--tuf-scale``). ``K < 1`` gives the engine the same bursts closer together (contention where a
slow-paced trace leaves the engine idle) and shortens a run whose length is the trace's wall-clock
span (the GPU check). ``--repeats N`` runs each policy N times, interleaved; the ordering check then
also calls pairs whose real ranges overlap ties. ``--strict``: exit status 1 unless the ordering is
reproduced and the mean error is within :data:`ERROR_GOAL`.

Reported per policy and class: %Σβ (100·ΣU/Σβ), mean response time W(s₀), on-time %; per task the
real and predicted response times and the prediction's relative error; the mean absolute error
and the ratios between policies (mean response and %Σβ relative to the first policy), real vs
predicted. Writes ``realbench.json`` and ``realbench.png`` to ``--out``.

``--plans reference`` (replay mode, :mod:`timely_llm_ros.core.options.replay`): every task with a reference
plan (an LRTrace task's plan) has the engine write exactly that plan — its structured-output
constraint is the literal — so the real and the predicted run execute the same plans whatever the
model (dummy weights included). Each task then reports whether its plan equals the reference, the
tokens it took and the tokenizer's own count for the same text (``tokens``, ``own_tokens``; the model
may spell the literal in more tokens than the tokenizer would), and each policy a ``replay`` summary.
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.bench.calibrate import joint_fit, overheads, probe_tap
from timely_llm_ros.bench.ordering import by_policy, ordering, ordering_check
from timely_llm_ros.bench.ordering import lines as ordering_lines
from timely_llm_ros.bench.phase_account import PhaseTap, compare_phases, phase_table, price_step
from timely_llm_ros.core import events as ev
from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.exectime import load_exec_time_model
from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.options.replay import MODEL, PLAN_SOURCES, REFERENCE, token_counts
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import EngineProfile, load_profile
from timely_llm_ros.core.robot_sim import RobotSim
from timely_llm_ros.core.task import TaskRejected, TaskSpec, task_class
from timely_llm_ros.engines.prompt_rule import PromptRule
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.engines.sim_tokenizer import SimTokenizer

#: The simulator's mean absolute response-time error a real run should stay within (issue goal).
ERROR_GOAL = 0.10
GPU_URGENT_FIRST_SEGMENT = 0.12  # s, Llama-3-8B/RTX 4090 profile (demo.py docstring)
#: Engine options of the runs (the planner node's defaults for llama.cpp; a short context for vLLM,
#: whose ``enforce_eager`` follows the device: eager on a CPU, CUDA graphs on a GPU).
ENGINE_OPTIONS: dict[str, dict[str, Any]] = {
    "llamacpp": {"prefill_chunk": 16, "prefill_fast_batch": 64},
    "vllm": {"max_model_len": 2048},
    "sim": {},
}
#: Profiles shipped in config/profiles for the engines' default models.
DEFAULT_PROFILES = {
    "llamacpp": "smollm2-135m-q4_1-cpu",
    "vllm": "smollm2-135m-vllm-cpu",
    "sim": "llama3-8b-fp16-rtx4090",
}


class ModelPieces(SimTokenizer):
    """The simulated engine's tokenizer cut like a real model's: each real token is one piece, so
    prompts and plans have the real token counts and boundaries in the prediction."""

    def __init__(self, engine: Engine) -> None:
        super().__init__()
        self._tokenize = engine.tokenize
        self._cache: dict[int, str] = {}
        # generated texts -> the real engine's pieces of them (a model may spell a replayed plan in
        # more tokens than its tokenizer would; the prediction then emits as many)
        self.known: dict[str, list[str]] = {}
        detok = getattr(engine, "detokenize", None)
        if callable(detok):
            self._decode_one = lambda i: detok([i])
        else:
            tok = engine.tokenizer  # type: ignore[attr-defined]  # engines without detokenize have a tokenizer
            self._decode_one = lambda i: tok.decode([i])

    def pieces(self, text: str) -> list[str]:  # type: ignore[override]  # a SimTokenizer stand-in that only needs pieces()
        known = self.known.get(text)
        if known is not None:  # a plan the real run generated: exactly its tokens
            return list(known)
        out = []
        for i in self._tokenize(text):
            if i not in self._cache:
                self._cache[i] = self._decode_one(i)
            out.append(self._cache[i])
        return out


@dataclasses.dataclass
class Run:
    policy: str
    records: list
    plans: dict[str, str]
    wall: float
    tokens: dict[str, int] = dataclasses.field(default_factory=dict)  # generated tokens with text, per task
    own_tokens: dict[str, int] = dataclasses.field(default_factory=dict)  # the tokenizer's count of the plan
    # the text of each generated token, per task: the model's own spelling of its plan (a replayed
    # plan may take more tokens than the tokenizer's encoding of the same text)
    pieces: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    tap: PhaseTap | None = None
    span: float = 0.0  # the run's length on the engine's clock (virtual time on the simulated engine)
    preemptions: int = 0  # running segments suspended mid-segment for urgent work (timely-preempt)


def drive(
    engine: Engine,
    tasks: list[TaskSpec],
    policy: str,
    *,
    realtime: bool,
    seed: int = 0,
    exec_mode: str = "sampled",
    network_latency: float = 0.008,
    options: Any = None,
    tap: PhaseTap | None = None,
    exec_scale: float = 1.0,
) -> Run:
    """Run ``tasks`` (arrivals relative to the start) through the planner on ``engine`` with
    simulated robots; wall time on a real engine (``realtime``), the engine's virtual clock else.
    ``tap`` observes the run for the per-phase account (:mod:`.phase_account`). ``exec_scale``
    multiplies the robots' execution times and the planner's model of them alike (``--time-scale``)."""
    heap: list[tuple[float, int, int, Any]] = []
    n = 0
    t0 = engine.now()

    def schedule(t: float, task_id: str, seg: int, state: str) -> None:
        nonlocal n
        n += 1
        heapq.heappush(heap, (t, n, 1, (task_id, seg, state)))

    exec_model = load_exec_time_model().scaled(exec_scale)
    robot = RobotSim(exec_model, schedule, exec_mode=exec_mode, network_latency=network_latency, seed=seed)
    planner = PlannerCore(
        engine,
        policy,
        dispatch=robot.dispatch,
        exec_model=exec_model,
        network_latency=network_latency,
        options=options,
        sink=tap.sink if tap is not None else None,
    )  # options: PlannerOptions
    for spec in tasks:
        n += 1
        heap.append((t0 + spec.arrival, n, 0, dataclasses.replace(spec, arrival=t0 + spec.arrival)))
    heapq.heapify(heap)
    # every generated piece of text per generation, seen before the planner consumes it (it drops a
    # generation's text once the plan is dispatched, and the task's generation once the task ends)
    texts: dict[int, list[str]] = {}
    consume = planner._token

    counts: dict[int, int] = {}

    def token(out: Any) -> None:
        gen = planner._running.get(out.gen_id)
        if out.text and out.reason != "error" and gen is not None:
            texts.setdefault(out.gen_id, []).append(out.text)
            counts[out.gen_id] = counts.get(out.gen_id, 0) + 1  # the end token carries no text
        if tap is not None and gen is not None:
            tap.token(gen.record.task_id, out.t)
        consume(out)

    planner._token = token  # type: ignore[method-assign]  # observes the planner's token path for the benchmark tap
    gens: dict[str, int] = {}
    if tap is not None:
        tap.attach(engine)
    started = time.monotonic()
    begin = engine.now()
    while True:
        now = engine.now()
        while heap and heap[0][0] <= now:
            t, _, kind, payload = heapq.heappop(heap)
            if kind == 0:
                try:
                    rec = planner.submit(payload)
                except TaskRejected:
                    continue
                robot.register(rec.task_id, payload.exec_times or [])
                gen = planner._tasks.get(rec.task_id)
                if gen is not None:
                    gens[rec.task_id] = gen.gen_id
            else:
                task_id, seg, state = payload[:3]
                planner.on_feedback(task_id, seg, state, t)
        if planner.has_work() and planner.step():
            continue
        if not heap:
            if planner.has_work():
                planner.abort_all("run stalled: queued work could not be admitted")
            break
        t_wait = engine.now()
        if realtime:
            time.sleep(min(max(heap[0][0] - engine.now(), 0.0), 0.05))
        else:
            engine.advance_to(heap[0][0])  # type: ignore[attr-defined]  # virtual-clock engines only (realtime=False)
        if tap is not None:
            tap.wait(engine.now() - t_wait)
    if tap is not None:
        tap.detach(engine)
        tap.busy(engine.now() - begin - tap.idle - sum(s.duration for s in tap.steps))
    # the whole generated text (dispatched segments and any tail after the last one) of each task
    plans = {tid: "".join(texts.get(gid, [])) for tid, gid in gens.items()}
    wall = time.monotonic() - started
    tokens = {tid: counts.get(gid, 0) for tid, gid in gens.items()}
    own = {tid: len(engine.tokenize(text)) if text else 0 for tid, text in plans.items()}
    pieces = {tid: list(texts.get(gid, [])) for tid, gid in gens.items()}
    pre = planner.policy.preemption
    return Run(
        policy,
        list(planner.records),
        plans,
        wall,
        tokens,
        own,
        pieces,
        tap,
        span=engine.now() - begin,
        preemptions=pre.count if pre is not None else 0,
    )


def fit_now(
    engine: Engine, out: Path, probes: list[TaskSpec] | None = None, options: PlannerOptions | None = None
) -> EngineProfile:
    """A profile of ``engine`` measured now, so that the prediction sees the machine as loaded as the
    runs do; written to ``out`` for the record. The forward pass: the quick sweep of ``timely-llm
    profile`` with prompt sizes around the engine's chunks and contexts as long as the probes'
    (a decoding step attends to the whole skill-set prompt). Then what a planner run adds to it
    (:mod:`.calibrate`), from ``probes`` served alone (one per skill set: the workload's first task
    of it)."""
    from timely_llm_ros.bench import profile_cli as pc

    probes = probes or []
    longest = max((prompt_tokens(engine, t) for t in probes), default=0)
    plan = pc.SweepPlan.quick()
    plan.prefill_sizes, plan.prefill_repeats = (8, 16, 64, 128), 2
    plan.kv_sizes = tuple(sorted({*plan.kv_sizes, *((longest + 16,) if longest else ())}))
    # as `timely-llm profile` runs it: whole prompts in one step, fixed-length generations
    saved = {k: getattr(engine, k) for k in ("prefill_chunk", "ignore_eos") if hasattr(engine, k)}
    for k, v in (("prefill_chunk", None), ("ignore_eos", True)):
        if k in saved:
            setattr(engine, k, v)
    try:
        meas = pc.measure(engine, plan)
    finally:
        for k, v in saved.items():
            setattr(engine, k, v)
    coef = pc.fit(meas)
    prof = pc.build_profile(engine, coef, f"{Path(engine.info.name).name}-now", pc.machine_description())
    taps = [probe_tap(engine, t, options=options) for t in probes]
    joint: dict[str, Any] = joint_fit(meas, taps) if taps else {}
    prof = dataclasses.replace(prof, **joint)
    terms: dict[str, Any] = {
        **overheads(prof, taps),
        **({"prefill_kv": joint["prefill_kv"]} if "prefill_kv" in joint else {}),
    }
    prof = dataclasses.replace(prof, **terms)
    load = os.getloadavg()[0]
    head = pc.header("realbench --profile fit", engine, coef, pc.machine_description(), (load, load))
    head += (
        f"# Refitted with the steps of {len(taps)} probe task(s) served alone through the planner "
        "(bench/calibrate.py: joint_fit, overheads); the coefficients below are those, the fit "
        "diagnostics above the sweep's alone. Planner-run terms: "
        + ", ".join(f"{k} {v:.3g}" for k, v in terms.items())
        + ".\n"
    )
    pc.write_profile(out, prof, head)
    return prof


def prompt_tokens(engine: Engine, task: TaskSpec) -> int:
    """Tokens of ``task``'s prompt as the engine evaluates it (skill-set prefix, chat template)."""
    from timely_llm_ros.core.intake import Intake

    prep = Intake(engine).prepare(dataclasses.replace(task, reference_plan=task.reference_plan or " "))
    ids, prefix = prep.prompt_ids, prep.prefix_len
    wrap = getattr(engine, "wrapped_prompt", None)
    return len(wrap(ids, prefix)[0]) if callable(wrap) else len(ids)


def engine_rule(engine: Engine) -> PromptRule | None:
    """The real engine's prompt schedule, for the simulator (llama.cpp; None: whole prompts)."""
    if hasattr(engine, "prefill_chunk") and hasattr(engine, "prefill_fast_batch"):
        return PromptRule(engine.prefill_chunk, engine.prefill_fast_batch)
    return None


def template_tokens(engine: Engine) -> tuple[int, int]:
    """Tokens the real engine's chat template adds to a prompt's shared prefix and to its private
    part (the simulator pads its prompts by as many)."""
    wrap = getattr(engine, "wrapped_prompt", None)
    if not callable(wrap):
        return (0, 0)
    ids, plen = wrap([1, 2, 3, 4], 2)
    return (plen - 2, len(ids) - 4 - (plen - 2))


def predictor(
    engine: Engine, profile: str | EngineProfile, probe: TaskSpec, skill_sets: list[str]
) -> SimEngine:
    """The simulated engine that predicts the real runs, prepared like the real one: the same probe
    and warm-up before the first run (a warm prefix cache and speed meter, as on the real engine),
    the same prompt schedule (:mod:`timely_llm_ros.engines.prompt_rule`) and prompt lengths."""
    sim = SimEngine(
        profile if isinstance(profile, EngineProfile) else load_profile(profile),
        tokenizer=ModelPieces(engine),
        prompt_rule=engine_rule(engine),
        template_tokens=template_tokens(engine),
    )
    first_segment_time(sim, probe)
    PlannerCore(sim, "timely").warm_up(skill_sets)
    sim.advance_to(engine.now())  # the same clock origin as the run it predicts (same float rounding)
    return sim


def predict(
    sim: SimEngine,
    tasks: list[TaskSpec],
    run: Run,
    seed: int,
    tap: PhaseTap | None = None,
    exec_scale: float = 1.0,
) -> Run:
    """The simulator's run of the same tasks, emitting the plans the real engine generated, token for
    token as the real engine emitted them."""
    if isinstance(sim.tokenizer, ModelPieces):
        for tid, text in run.plans.items():
            if text and run.pieces.get(tid) and "".join(run.pieces[tid]) == text:
                sim.tokenizer.known[text] = run.pieces[tid]
    with_plans = [dataclasses.replace(t, reference_plan=run.plans.get(t.task_id) or None) for t in tasks]
    return drive(sim, with_plans, run.policy, realtime=False, seed=seed, tap=tap, exec_scale=exec_scale)


def first_segment_time(engine: Engine, task: TaskSpec, options: PlannerOptions | None = None) -> float:
    """Seconds from arrival to the first dispatched segment of ``task`` served alone (warm cache)."""
    seen: list[float] = []
    planner = PlannerCore(
        engine, "timely", dispatch=lambda d: seen.append(d.t), network_latency=0.0, options=options
    )
    planner.warm_up([task.skill_set])
    t0 = engine.now()
    planner.submit(dataclasses.replace(task, task_id="probe", arrival=t0))
    while planner.has_work() and not seen:
        planner.step()
    planner.abort_all("probe done")
    return (seen[0] if seen else engine.now()) - t0


def load_tasks(workload: str, limit: int | None, scale: float, time_scale: float = 1.0) -> list[TaskSpec]:
    """The first ``limit`` tasks of ``workload``, arrivals from 0 and multiplied by ``time_scale``
    (< 1: the same bursts, closer together), ERTs multiplied by ``scale`` (the TUF scale)."""
    from timely_llm_ros.workload.fileformat import resolve_workload

    if not (math.isfinite(time_scale) and time_scale > 0):
        raise ValueError(f"time scale must be a finite number > 0, got {time_scale!r}")
    wl = resolve_workload(workload)
    tasks = sorted(wl.tasks, key=lambda t: t.arrival)[:limit]
    base = tasks[0].arrival if tasks else 0.0
    return [
        dataclasses.replace(
            t, arrival=(t.arrival - base) * time_scale, tuf=t.tuf.scaled(scale) if t.tuf else None
        )
        for t in tasks
    ]


def _response(rec: Any) -> float:
    return rec.response_time


def compare(real: Run, pred: Run, references: dict[str, str] | None = None) -> dict[str, Any]:
    """Per-class metrics of both runs and the per-task response-time error of the prediction.

    ``references``: replay mode's reference plan per task; each task then says whether its plan is
    exactly that text, and the result sums up the tokens replayed plans took (:func:`replay_summary`).
    """
    by_id = {r.task_id: r for r in pred.records}
    per_task, errs = [], []
    for r in real.records:
        p = by_id.get(r.task_id)
        rr, pr = _response(r), (_response(p) if p else math.nan)
        err = abs(pr - rr) / rr if rr > 0 and math.isfinite(pr) else math.nan
        if math.isfinite(err):
            errs.append(err)
        per_task.append(
            {
                "task": r.task_id,
                "class": r.task_class,
                "state": r.state,
                "real_s": rr,
                "sim_s": pr,
                "rel_err": err,
                "plan": real.plans.get(r.task_id, ""),
                "tokens": real.tokens.get(r.task_id, 0),
                "own_tokens": real.own_tokens.get(r.task_id, 0),
            }
        )
        if references is not None:
            ref = references.get(r.task_id)
            per_task[-1]["reference"] = ref
            per_task[-1]["replayed_exactly"] = ref is not None and real.plans.get(r.task_id) == ref
    out = {
        "policy": real.policy,
        "real": {k: v.as_dict() for k, v in summarize(real.records).items()},
        "sim": {k: v.as_dict() for k, v in summarize(pred.records).items()},
        "per_task": per_task,
        "mean_abs_rel_err": statistics.fmean(errs) if errs else math.nan,
        "completed": sum(r.state == ev.COMPLETED for r in real.records),
        "tasks": len(real.records),
        "wall_s": real.wall,
        "preemptions": {"real": real.preemptions, "sim": pred.preemptions},
    }
    if references is not None:
        out["replay"] = replay_summary(per_task)
    return out


def replay_summary(per_task: list[dict[str, Any]]) -> dict[str, Any]:
    """Replay mode: how many plans equal their reference, and the tokens the replayed plans took vs
    the model tokenizer's own tokenization of the same texts (:func:`~timely_llm_ros.core.options.replay.
    token_counts`; the model picks among the tokenizations of the literal)."""
    replayed = [t for t in per_task if t.get("reference")]
    exact = [t for t in replayed if t["replayed_exactly"]]
    counts = token_counts(sum(t["tokens"] for t in exact), sum(t["own_tokens"] for t in exact))
    return {
        "tasks_with_reference": len(replayed),
        "replayed_exactly": len(exact),
        "not_exact": [t["task"] for t in replayed if not t["replayed_exactly"]],
        **counts,
        "tasks_with_extra_tokens": sum(t["tokens"] > t["own_tokens"] for t in exact),
    }


def account(real: PhaseTap, sim: PhaseTap, profile: EngineProfile) -> dict[str, Any]:
    """The per-phase account of a real run next to its prediction (:mod:`.phase_account`)."""
    out = compare_phases(real.tasks(), sim.tasks())
    out["run"] = {"real": real.run_account(profile), "sim": sim.run_account(profile)}
    out["steps"] = {"real": real.step_rows(), "sim": sim.step_rows()}
    return out


def estimate_runs(
    engine: Engine,
    profile: EngineProfile,
    tasks: list[TaskSpec],
    policies: list[str],
    seed: int,
    probe: TaskSpec,
    sets: list[str],
    exec_scale: float = 1.0,
    options: PlannerOptions | None = None,
) -> dict[str, float]:
    """Seconds each policy's real run should take: the simulator's run of the same tasks on
    ``profile`` (its makespan: arrivals, engine and robots), before any real run (a long slice shows
    up here, not half-way through it)."""
    out = {}
    for pol in policies:
        sim = predictor(engine, profile, probe, sets)
        out[pol] = drive(
            sim, tasks, pol, realtime=False, seed=seed, options=options, exec_scale=exec_scale
        ).span
    return out


def speed_check(
    engine: Engine,
    profile: EngineProfile,
    probe: TaskSpec,
    options: PlannerOptions | None = None,
    probes: int = 3,
) -> float:
    """How much slower (> 1) than ``profile`` the engine runs right now: ``probes`` times one probe
    task served alone to the end of its plan (:func:`~.calibrate.probe_tap`), its steps' real time ÷
    their price, and the median of those ratios (one probe that meets a neighbour's burst on a shared
    machine measured x1.89 where the run that followed had x0.98). 1.0 on an engine whose steps do not
    say what they fed (vLLM, servers, the simulated engine)."""
    ratios_ = []
    for _ in range(max(1, probes)):
        steps = probe_tap(engine, probe, options=options).steps
        if not steps or any(math.isnan(s.forward_s) for s in steps):
            return 1.0
        ratios_.append((sum(s.duration for s in steps), sum(price_step(profile, s) for s in steps)))
    return median_ratio(ratios_)


def median_ratio(pairs: list[tuple[float, float]]) -> float:
    """The median of real/priced over ``pairs`` (real seconds, priced seconds), leaving out pairs
    without a price; 1.0 when none is left (no evidence the engine is off its profile)."""
    ks = [real / priced for real, priced in pairs if priced > 0 and math.isfinite(real / priced) and real > 0]
    return statistics.median(ks) if ks else 1.0


def at_run_speed(
    engine: Engine,
    profile: EngineProfile,
    tasks: list[TaskSpec],
    real: Run,
    seed: int,
    probe: TaskSpec,
    sets: list[str],
    exec_scale: float = 1.0,
) -> dict[str, float]:
    """The prediction again with the profile slowed to the speed the engine had during the run (its
    steps' time ÷ the profile's price of the same steps; > 1 when the machine got busier after the
    fit): how much of the error is the machine's load drift, how much the model. A diagnostic next
    to the real prediction, never instead of it."""
    steps = real.tap.steps if real.tap is not None else []
    if any(math.isnan(s.forward_s) for s in steps):  # the engine does not say what its steps fed
        steps = []
    priced = sum(price_step(profile, s) for s in steps)
    k = sum(s.duration for s in steps) / priced if priced > 0 else math.nan
    if not math.isfinite(k) or k <= 0:
        return {"speed_ratio": math.nan, "mean_abs_rel_err": math.nan, "sim_response_mean": math.nan}
    sim = predictor(engine, profile.slowed(k), probe, sets)
    res = compare(real, predict(sim, tasks, real, seed, exec_scale=exec_scale))
    return {
        "speed_ratio": k,
        "mean_abs_rel_err": res["mean_abs_rel_err"],
        "sim_response_mean": res["sim"]["all"]["response_mean"],
    }


def ratios(results: list[dict[str, Any]], key: str, cls: str = "all") -> list[dict[str, float]]:
    """``key`` of each policy relative to the first policy's, real and predicted (``results``: one
    entry per policy, e.g. :func:`~.ordering.by_policy`'s)."""
    base = results[0]
    out = []
    for res in results:
        row = {"policy": res["policy"]}
        for side in ("real", "sim"):
            b, v = base[side][cls][key], res[side][cls][key]
            row[side] = v / b if b else math.nan
        row["diff_pct"] = 100 * abs(row["sim"] - row["real"]) / row["real"] if row["real"] else math.nan
        out.append(row)
    return out


def table(results: list[dict[str, Any]], engine: str) -> str:
    lines = [
        f"real engine {engine} vs simulator (profile-predicted), per policy and class",
        f"{'policy':10s} {'class':7s} {'n':>3s} {'%Σβ real':>9s} {'%Σβ sim':>8s} {'resp real':>10s} "
        f"{'resp sim':>9s} {'on-time real':>12s} {'|err| mean':>10s}",
    ]
    for res in results:
        for cls in [c for c in res["real"] if c != "all"] + ["all"]:
            r, s = res["real"][cls], res["sim"].get(cls, {})
            errs = [
                t["rel_err"]
                for t in res["per_task"]
                if (cls == "all" or t["class"] == cls) and math.isfinite(t["rel_err"])
            ]
            label = res["policy"] + (f"#{res['repeat'] + 1}" if res.get("repeat") else "")
            lines.append(
                f"{label:10s} {cls:7s} {r['n']:3d} {r['pct_beta']:9.1f} "
                f"{s.get('pct_beta', math.nan):8.1f} {r['response_mean']:10.2f} "
                f"{s.get('response_mean', math.nan):9.2f} {r['on_time_pct']:12.0f} "
                f"{100 * statistics.fmean(errs) if errs else math.nan:9.1f}%"
            )
    for res in results:
        rp = res.get("replay")
        if rp:
            lines.append(
                f"replay {res['policy']}: {rp['replayed_exactly']}/{rp['tasks_with_reference']} plans "
                f"equal their reference; tokens {rp['replayed_tokens']} vs the tokenizer's "
                f"{rp['own_tokens']} (x{rp['ratio']:.3f}, {rp['tasks_with_extra_tokens']} tasks took more)"
            )
    for r in results:
        ars = r.get("at_run_speed", {})
        during = (
            f"x{ars['speed_ratio']:.2f} during it; |err| at the run's speed "
            f"{100 * ars.get('mean_abs_rel_err', math.nan):.1f}% (load drift removed)"
            if math.isfinite(ars.get("speed_ratio", math.nan))
            else "not measured during it (this engine's steps do not say what they fed)"
        )
        lines.append(
            f"{r['policy']}: engine speed vs fitted profile x{r.get('speed_check', 1.0):.2f} before the run "
            f"(prediction uses it), {during}; load {r.get('load_average', math.nan):.1f}"
        )
    merged = by_policy(results)
    for key in ("response_mean", "pct_beta"):
        lines.append(
            f"ratio to {results[0]['policy']} of {key} (all tasks"
            + (", mean of the repeats" if len(merged) < len(results) else "")
            + "): "
            + "; ".join(
                f"{r['policy']} real {r['real']:.2f} sim {r['sim']:.2f} (diff {r['diff_pct']:.0f}%)"
                for r in ratios(merged, key)
            )
        )
    err = mean_error(results)
    if math.isfinite(err):
        lines.append(
            f"simulator's mean |response error| over the runs: {100 * err:.1f}% "
            f"(goal <= {100 * ERROR_GOAL:.0f}%: {'met' if err <= ERROR_GOAL else 'MISSED'}; per run "
            + ", ".join(f"{100 * r['mean_abs_rel_err']:.1f}%" for r in results)
            + f"; load average {min(r.get('load_average', math.nan) for r in results):.1f}"
            f"-{max(r.get('load_average', math.nan) for r in results):.1f})"
        )
    lines += ordering_lines(ordering_check(results))
    return "\n".join(lines)


def mean_error(results: list[dict[str, Any]]) -> float:
    """The simulator's mean absolute response-time error over every run (each run's own mean)."""
    errs = [r["mean_abs_rel_err"] for r in results if math.isfinite(r.get("mean_abs_rel_err", math.nan))]
    return statistics.fmean(errs) if errs else math.nan


def figure(results: list[dict[str, Any]], engine: str, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    results = by_policy(results)  # repeats: their means
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6))
    pols = [r["policy"] for r in results]
    classes = [c for c in results[0]["real"] if c != "all"]
    width = 0.8 / (2 * len(classes))
    for ax, key, label in ((axes[0], "pct_beta", "%Σβ"), (axes[1], "response_mean", "mean response (s)")):
        for j, cls in enumerate(classes):
            for k, side in enumerate(("real", "sim")):
                xs = [i + (2 * j + k) * width - 0.4 + width / 2 for i in range(len(pols))]
                ys = [r[side].get(cls, {}).get(key, math.nan) for r in results]
                ax.bar(
                    xs, ys, width, label=f"{cls} {side}", color=f"C{j}", alpha=1.0 if side == "real" else 0.45
                )
        ax.set_xticks(range(len(pols)), pols)
        ax.set_ylabel(label)
    axes[0].legend(fontsize=7)
    fig.suptitle(f"{engine}: real engine (solid) vs simulator prediction (light)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def _clean(x: Any) -> Any:
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {k: _clean(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_clean(v) for v in x]
    return x


def _param(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), yaml.safe_load(v)


def _positive(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        v = math.nan
    if not (math.isfinite(v) and v > 0):
        raise argparse.ArgumentTypeError(f"expected a number > 0, got {text!r}")
    return v


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        required=True,
        choices=sorted(ENGINE_OPTIONS),
        help="real engine (sim: the simulated engine in virtual time, to check this command itself)",
    )
    parser.add_argument("--policies", default="timely,edf-seg,vllm", help="comma-separated policies")
    parser.add_argument("--workload", default="demo", help="workload (preset, public sample or file)")
    parser.add_argument(
        "--tasks",
        type=int,
        default=7,
        help="the first N tasks of the workload (default 7: "
        "the demo's first two waves, the paper's Figure 2 situation)",
    )
    parser.add_argument("--tuf-scale", default="auto", help="ERT multiplier, or auto (module docstring)")
    parser.add_argument(
        "--profile",
        help="profile the simulator predicts with: a name or file (default: "
        "the engine's shipped profile), or 'fit' to measure one on the engine right before "
        "the runs (a shared machine's load changes the engine's speed)",
    )
    parser.add_argument(
        "--param",
        type=_param,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="engine constructor parameter (YAML value), repeatable",
    )
    parser.add_argument(
        "--plans",
        choices=PLAN_SOURCES,
        default=MODEL,
        help="model: the model writes its own plans (skill grammar); reference: replay mode, each "
        "task's reference plan (its LRTrace plan) is the engine's structured-output constraint, so "
        "the engine writes exactly that plan (timing comparable across engines and the simulator)",
    )
    parser.add_argument(
        "--time-scale",
        type=_positive,
        default=1.0,
        help="multiply the world's time axis by this, for the real and the predicted runs alike: task "
        "arrivals and the robots' execution times (and the planner's model of them); ERTs follow "
        "--tuf-scale. < 1 brings the bursts closer together for the engine (more contention) and "
        "shortens a run whose length is the trace's wall-clock span (default 1: the trace's times)",
    )
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        help="run each policy N times (interleaved); the ordering check then calls a pair whose "
        "real ranges overlap a tie (the run-to-run spread), and averages the repeats",
    )
    parser.add_argument(
        "--strict",
        action="store_true",
        help="exit status 1 when the prediction does not order the policies as the real runs did "
        f"(bench/ordering.py) or its mean |response error| over the runs exceeds {100 * ERROR_GOAL:.0f} %%",
    )
    parser.add_argument("--seed", type=int, default=0, help="robot execution-time draws")
    parser.add_argument(
        "--no-speed-check",
        dest="speed_check",
        action="store_false",
        help="predict every policy's run with the profile as fitted (default: right before each run, "
        "time one probe task served alone three times and slow the profile by the median "
        "real/priced ratio: a shared machine's load changes the engine's speed between the fit and the runs)",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="print each policy's per-phase account, real vs simulated (always in the JSON)",
    )
    parser.add_argument("--out", type=Path, default=Path("results/realbench"), help="output directory")


def run(args: argparse.Namespace) -> int:
    from timely_llm_ros.engines.registry import create_engine

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    if args.repeats < 1:
        print(f"timely-llm realbench: error: --repeats must be >= 1, got {args.repeats}", file=sys.stderr)
        return 2
    t_start = time.monotonic()
    timing: dict[str, Any] = {}
    profile = args.profile or DEFAULT_PROFILES[args.engine]
    if profile != "fit":
        load_profile(profile)  # fail before the slow part
    params = {**ENGINE_OPTIONS[args.engine], **dict(args.param)}
    engine = (
        create_engine(args.engine, **params)
        if args.engine != "sim"
        else SimEngine(DEFAULT_PROFILES["sim"] if profile == "fit" else profile)
    )
    realtime = args.engine != "sim"
    options = PlannerOptions(plan_source=args.plans)
    timing["engine_start_s"] = time.monotonic() - t_start
    try:
        t0 = time.monotonic()
        probe = load_tasks(args.workload, args.tasks, 1.0, args.time_scale)
        urgent = next((t for t in probe if task_class(t) == "urgent"), probe[0])
        if args.tuf_scale == "auto":
            first = first_segment_time(engine, urgent, options)
            scale = max(1.0, round(first / GPU_URGENT_FIRST_SEGMENT))
            print(
                f"[realbench] urgent first segment alone: {first:.2f} s -> TUF scale x{scale:g}", flush=True
            )
        else:
            scale = float(args.tuf_scale)
        tasks = load_tasks(args.workload, args.tasks, scale, args.time_scale)
        references = (
            {t.task_id: t.reference_plan for t in tasks if t.reference_plan}
            if args.plans == REFERENCE
            else None
        )
        sets = sorted({t.skill_set for t in tasks})
        PlannerCore(engine, "timely").warm_up(sets)
        if profile == "fit":
            args.out.mkdir(parents=True, exist_ok=True)
            probes = list({t.skill_set: t for t in reversed(tasks)}.values())
            prof = fit_now(engine, args.out / "profile-fit.yaml", probes, options)
            print(f"[realbench] fitted now: {args.out / 'profile-fit.yaml'}", flush=True)
            PlannerCore(engine, "timely").warm_up(sets)  # the sweep's prompts may have evicted them
        timing["probe_and_fit_s"] = time.monotonic() - t0
        base = prof if profile == "fit" else load_profile(profile)
        est = estimate_runs(engine, base, tasks, policies, args.seed, urgent, sets, args.time_scale, options)
        timing["estimated_run_s"] = est
        print(
            "[realbench] estimated run time per policy (the profile's makespan): "
            + ", ".join(f"{p} {v:.0f} s" for p, v in est.items())
            + f"; x{args.repeats} repeat(s), plus a speed check and a prediction each",
            flush=True,
        )
        results = []
        for rep in range(args.repeats):
            for pol in policies:
                t_pol = time.monotonic()
                speed = speed_check(engine, base, urgent, options) if args.speed_check else 1.0
                sim = predictor(engine, base.slowed(speed) if speed != 1.0 else base, urgent, sets)
                print(
                    f"[realbench] {args.engine} / {pol}"
                    + (f" (repeat {rep + 1}/{args.repeats})" if args.repeats > 1 else "")
                    + f": {len(tasks)} tasks (speed check x{speed:.2f}, load {os.getloadavg()[0]:.1f}) ...",
                    flush=True,
                )
                real_tap, sim_tap = PhaseTap(engine.now), PhaseTap(sim.now)
                t_run = time.monotonic()
                real = drive(
                    engine,
                    tasks,
                    pol,
                    realtime=realtime,
                    seed=args.seed,
                    options=options,
                    tap=real_tap,
                    exec_scale=args.time_scale,
                )
                t_pred = time.monotonic()
                pred = predict(sim, tasks, real, args.seed, tap=sim_tap, exec_scale=args.time_scale)
                results.append(compare(real, pred, references))
                res = results[-1]
                res["repeat"] = rep
                res["speed_check"] = speed
                res["load_average"] = os.getloadavg()[0]
                res["phases"] = account(real_tap, sim_tap, sim.profile)
                res["at_run_speed"] = at_run_speed(
                    engine, sim.profile, tasks, real, args.seed, urgent, sets, args.time_scale
                )
                res["timing"] = {
                    "run_s": real.wall,
                    "estimated_run_s": est.get(pol, math.nan),
                    "predicted_makespan_s": pred.span,
                    "speed_check_s": t_run - t_pol,
                    "prediction_s": time.monotonic() - t_pred,
                    "total_s": time.monotonic() - t_pol,
                }
                if args.phases:
                    print(phase_table(pol, res["phases"]), flush=True)
                print(
                    f"[realbench]   done in {real.wall:.0f} s (estimated {est.get(pol, math.nan):.0f} s, "
                    f"{res['timing']['total_s']:.0f} s with the speed check and prediction); mean |err| "
                    f"{100 * res['mean_abs_rel_err']:.1f}%",
                    flush=True,
                )
    finally:
        engine.close()
    text = table(results, args.engine)
    print(text)
    args.out.mkdir(parents=True, exist_ok=True)
    out = {
        "engine": args.engine,
        "engine_options": params,
        "plans": args.plans,
        "profile": profile,
        "tuf_scale": scale,
        "workload": args.workload,
        "tasks": len(tasks),
        "skill_sets": sets,
        "seed": args.seed,
        "load_average": os.getloadavg()[0],
        "results": results,
        "time_scale": args.time_scale,
        "repeats": args.repeats,
        "ratios": {k: ratios(by_policy(results), k) for k in ("response_mean", "pct_beta")},
        "ordering": {k: ordering(results, k) for k in ("response_mean", "pct_beta")},  # all tasks
        "ordering_check": ordering_check(results),
        "mean_abs_rel_err": mean_error(results),
        "timing": {**timing, "total_s": time.monotonic() - t_start},
    }
    (args.out / "realbench.json").write_text(json.dumps(_clean(out), indent=1))
    (args.out / "realbench.txt").write_text(text + "\n")
    figure(results, args.engine, args.out / "realbench.png")
    print(f"[realbench] wrote {args.out}/realbench.json, realbench.txt, realbench.png")
    if args.strict and not (out["ordering_check"]["reproduced"] and out["mean_abs_rel_err"] <= ERROR_GOAL):
        print("[realbench] --strict: the ordering or the error goal was missed (above)", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="timely-llm realbench", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
