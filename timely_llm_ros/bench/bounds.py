"""Upper bounds on what any policy can get from a workload, per task class (% of Σβ).

Why: "≥ 1.3× edf-seg urgent utility" is only a fair goal where a perfect scheduler could reach it,
and that must be *computed*, not argued. Three bounds, each tighter than the one before:

1. **alone** — every task served alone on an idle engine at its arrival (prefix cached): batching
   only slows a decode step and queueing only adds waiting, so no policy answers a task sooner.
   At the published loads this is ~100 % on every urgent row and proves nothing.
2. **chain** — the simulated robots run one task at a time in arrival order (core.sched.agent_queue): a
   task's first segment goes out only when the robot's previous task ``j`` has ended, ``net``
   later, and ``j`` cannot end before ``a_j + W_j + E_j`` (its own earliest response plus the robot
   time of its whole plan). So ``W_i ≥ max(alone_i, a_j + lb(W_j) + E_j + net − a_i)``, down each
   robot's chain (:func:`.bound_math.chain_lower_bounds`). Binds when agents are shared.
3. **capacity** (the reported ``bound``) — the engine's per-pass costs. Every decode pass runs at
   most ``B`` sequences (the batch cap) and costs ``q + p·ΣN_kv + r·b``; every prefill pass
   prefills at most ``B`` and costs ``c + Σ(a·N² + b·N)`` (profile, :mod:`~timely_llm_ros.core.
   profile`). Charge each sequence ``q/B + r + p·N_kv`` per decode token and ``a·N² + b·N`` (+ ``c/B``
   without chunked prefill) for its prompt: the charges of one pass never exceed its duration. The
   first segment of task ``i`` (``n_i`` tokens: the prefill yields one, ``n_i − 1`` decode steps)
   thus needs a *work* ``p_i`` of engine time after its arrival, and the engine is a single machine
   of unit speed doing that work (a relaxation: it may even run one sequence faster than a step
   allows, and every other task and later segment is dropped, which only frees the machine).
   On one machine with releases, preemptive shortest-remaining-work-first completes as many jobs by
   every time ``t`` as any schedule can, so the ``k``-th generation end of the class is no earlier
   than SRPT's ``k``-th completion ``L_k`` (:func:`.bound_math.srpt_completions`). With ``R``
   engine replicas (``SimConfig.replicas``) the machine runs ``R`` times as fast.

   With ``C_i = a_i + W_i − net`` (when the first segment must be generated for response ``W_i``),
   a schedule needs ``C_i ≥ e_i = a_i + lb(W_i) − net`` (bound 2) and ``sorted(C) ≥ L``. Eq. 1 gives
   ``U_i = h_i − |α_i|·max(0, C_i − D'_i)`` with ``D'_i = max(a_i + ERT_i − net, e_i)`` and ``h_i``
   the utility at ``e_i``: the cost is convex in ``C − D'``, so pairing sorted ``L`` with sorted
   ``D'`` is the optimal assignment (charged at the class's smallest |α|): that is the unclamped
   bound. Clamped at 0, tasks may also be given up (costing no engine time): an O(n²) DP over
   kept subsets (:func:`.bound_math.clamped_bound`). ``all`` is the sum of the class bounds.

Each step only removes constraints from the real system (the simulated engine and robots), so the
result is an upper bound of every policy's %Σβ on that workload and batch cap, unclamped and
clamped — as long as every task runs its whole plan (no ``kill``/``skip-next`` overrun option, which
frees a robot early; the benchmarks run the default ``continue``). It is exact in simple cases: a
burst on a one-slot engine (``B = 1``) is a single machine whose work per task is its alone time.

The per-task inputs (alone response, first-segment tokens, prompt lengths, robot time of the plan)
come from simulating each distinct task shape once (a handful per workload) as the second of two
identical requests far apart, so the skill set's shared prompt prefix is already cached.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import Any

from timely_llm_ros.bench.bound_math import (
    ChainTask,
    PairingTask,
    chain_lower_bounds,
    clamped_bound,
    srpt_completions,
    tardiness_bound,
)
from timely_llm_ros.core import events as ev
from timely_llm_ros.core.intake import Intake
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.profile import EngineProfile, load_profile
from timely_llm_ros.core.sched.admission import DEFAULT_MAX_BATCH
from timely_llm_ros.core.task import TaskSpec, task_class
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.sim.simulator import SimConfig, simulate

GAP_S = 10_000.0  # seconds between the warm-up copy and the measured one (both long done by then)


@dataclasses.dataclass(frozen=True)
class TaskFacts:
    """What the bounds need of one task, from its alone run."""

    alone: float  # response time W(s_0) served alone (nan: never served)
    first_tokens: int  # tokens generated up to the end of the first segment
    suffix: int  # prompt tokens not covered by the skill set's cached prefix
    prompt: int  # whole prompt (KV tokens of the sequence before its first token)
    exec_total: float  # robot time of the whole plan (0 when not deterministic: exec_mode sampled)


def _shape(spec: TaskSpec, exec_mode: str) -> tuple[Any, ...]:
    key: tuple[Any, ...] = (
        spec.skill_set,
        spec.robot_type,
        spec.prompt_text,
        spec.reference_plan,
        spec.max_tokens,
    )
    if exec_mode == "recorded":  # the robot time of the plan depends on the recorded times
        key += (tuple(tuple(e) for e in (spec.exec_times or ())),)
    return key


def task_facts(tasks: Sequence[TaskSpec], config: SimConfig | None = None) -> list[TaskFacts]:
    """:class:`TaskFacts` of every task (one simulation per distinct shape)."""
    base = config or SimConfig()
    cfg = dataclasses.replace(base, policy="fcfs-seg")  # alone, every segmented policy is the same
    intake = Intake(SimEngine(base.profile))
    cache: dict[tuple, TaskFacts] = {}
    out = []
    for spec in tasks:
        key = _shape(spec, base.exec_mode)
        if key not in cache:
            warm = dataclasses.replace(spec, task_id="warm", agent_id="warm", arrival=0.0)
            probe = dataclasses.replace(spec, task_id="probe", agent_id="probe", arrival=GAP_S)
            rec = simulate([warm, probe], cfg).records[1]
            try:
                prep = intake.prepare(spec)
                prompt, suffix = len(prep.prompt_ids), len(prep.prompt_ids) - prep.prefix_len
            except (ValueError, KeyError):  # rejected task: it gets no response either
                prompt = suffix = 0
            served = not math.isnan(rec.response_time)
            whole = served and rec.state == ev.COMPLETED and base.exec_mode != "sampled"
            cache[key] = TaskFacts(
                alone=rec.response_time,
                first_tokens=rec.segments[0].n_tokens if served else 0,
                suffix=suffix,
                prompt=prompt,
                exec_total=rec.exec_time if whole else 0.0,
            )
        out.append(cache[key])
    return out


def first_segment_work(facts: TaskFacts, prof: EngineProfile, max_batch: int, chunked: bool) -> float:
    """Engine time charged to one task's first segment (module docstring, bound 3)."""
    n, big_p, big_n = facts.first_tokens, facts.prompt, facts.suffix
    if n <= 0:
        return 0.0
    work = prof.prefill_a * big_n * big_n + prof.prefill_b * big_n
    if not chunked:
        work += prof.prefill_c / max_batch
    steps = n - 1  # the prefill pass yields the first token
    work += steps * (prof.decode_q / max_batch + prof.decode_r)
    work += prof.decode_p * (steps * big_p + steps * (steps + 1) / 2)  # KV = prompt + k at step k
    return work


def _chunked(config: SimConfig) -> bool:
    if config.chunked_prefill is not None:
        return bool(config.chunked_prefill)
    return (config.options or PlannerOptions()).token_budget != "whole"


def class_bounds(
    tasks: list[TaskSpec], config: SimConfig | None = None, max_batch: int = DEFAULT_MAX_BATCH
) -> dict[str, dict[str, Any]]:
    """Per task class (and ``all``): Σβ and the three bounds of the module docstring as Σ utility
    and % of Σβ — ``alone_pct``, ``chain_pct`` (per-task bounds, unclamped), ``pct_beta`` (the
    capacity bound, unclamped) and ``pct_beta_clamped`` (the capacity bound on utilities clamped at
    0), for the batch cap ``max_batch``."""
    base = config or SimConfig()
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise ValueError(f"max batch must be a positive integer, got {max_batch!r}")
    prof = base.profile if isinstance(base.profile, EngineProfile) else load_profile(base.profile)
    facts = task_facts(tasks, base)
    net = base.network_latency
    lb = chain_lower_bounds(
        [
            ChainTask(s.arrival, str(s.agent_id), f.alone, f.exec_total)
            for s, f in zip(tasks, facts, strict=True)
        ],
        net,
    )
    chunked = _chunked(base)
    groups: dict[str, list[int]] = {}
    for i, spec in enumerate(tasks):
        groups.setdefault(task_class(spec), []).append(i)
    out: dict[str, dict[str, Any]] = {}
    for cls, idx in groups.items():
        out[cls] = _class_bound(tasks, facts, lb, idx, prof, max_batch, chunked, net, max(1, base.replicas))
    total = {k: math.fsum(v[k] for v in out.values()) for k in _SUMS}
    out["all"] = {**total, **_pcts(total)}
    return out


_SUMS = ("sum_beta", "sum_alone", "sum_chain", "sum_utility", "sum_utility_clamped")


def _pcts(s: dict[str, float]) -> dict[str, float]:
    b = s["sum_beta"]

    def pct(v: float) -> float:
        return 100.0 * v / b if b > 0 else math.nan

    return {
        "alone_pct": pct(s["sum_alone"]),
        "chain_pct": pct(s["sum_chain"]),
        "pct_beta": pct(s["sum_utility"]),
        "pct_beta_clamped": pct(s["sum_utility_clamped"]),
    }


def _class_bound(
    tasks: list[TaskSpec],
    facts: list[TaskFacts],
    lb: list[float],
    idx: list[int],
    prof: EngineProfile,
    max_batch: int,
    chunked: bool,
    net: float,
    replicas: int = 1,
) -> dict[str, Any]:
    """The bounds of one class (tasks ``idx``); never-served tasks count 0 (they get no response)."""
    sums = dict.fromkeys(_SUMS, 0.0)
    jobs, pairing = [], []
    for i in idx:
        spec, f = tasks[i], facts[i]
        tuf = spec.reference_tuf or spec.tuf  # the TUF the metrics judge it by (TaskRecord.from_spec)
        assert tuf is not None  # a workload task has one (or a reference TUF)
        sums["sum_beta"] += tuf.beta
        if math.isnan(f.alone):
            continue
        sums["sum_alone"] += tuf(f.alone)
        sums["sum_chain"] += tuf(lb[i])
        # R engine replicas (SimConfig.replicas) are a machine R times as fast
        jobs.append((spec.arrival, first_segment_work(f, prof, max_batch, chunked) / replicas))
        pairing.append(
            PairingTask(
                earliest=spec.arrival + lb[i] - net,
                deadline=spec.arrival + tuf.ert - net,
                beta=tuf.beta,
                slope=abs(tuf.alpha),
            )
        )
    slots = srpt_completions(jobs)
    sums["sum_utility"] = min(tardiness_bound(pairing, slots), sums["sum_chain"])
    sums["sum_utility_clamped"] = clamped_bound(pairing, slots)
    return {**sums, **_pcts(sums), "n": len(idx)}
