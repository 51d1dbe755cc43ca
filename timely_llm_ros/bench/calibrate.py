"""The profile terms a real engine adds to its forward pass, measured on a planner run of one task.

``timely-llm profile`` fits the forward pass (TimeBill's prefill and decode forms) from synthetic
sweeps: random prompts, no grammar, no planner. A planner run on the same engine also pays
(the per-phase account of ``timely-llm realbench`` shows each, :mod:`.phase_account`):

* attention of every prompt token to the cached skill-set prefix in front of it — a real task's
  prompt is a short suffix behind a long cached prefix, which a sweep of fresh prompts never has
  (``prefill_kv``, seconds per cached token in front of a prompt chunk);
* sampling under the skill set's grammar (a rejected greedy token masks the whole vocabulary) and
  detokenisation (``token_overhead``, seconds per emitted token);
* the planner's Python loop between engine steps: scheduling, segment checks, parsing, dispatch
  (``step_overhead``, seconds per step).

:func:`probe_tap` runs one task alone through :class:`~timely_llm_ros.core.planner.PlannerCore`
to the end of its plan with a :class:`~.phase_account.PhaseTap`; :func:`overheads` turns such taps
into the three terms, given the forward-pass profile. Fitted before the measured runs (never from
them), so the simulator's prediction stays a prediction.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable
from typing import Any

import numpy as np

from timely_llm_ros.bench.phase_account import PhaseTap, StepSample, price_step
from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.task import TaskSpec


def probe_tap(
    engine: Engine, task: TaskSpec, max_steps: int = 400, options: PlannerOptions | None = None
) -> PhaseTap:
    """Run ``task`` alone (its skill set's prefix warm) until its generation ends, observed. Under
    the ``vllm`` policy: the whole plan in one generation (no robot resumes a suspension here).
    ``options``: the runs' planner options (replay mode constrains the plan as in the runs)."""
    tap = PhaseTap(engine.now)
    planner = PlannerCore(engine, "vllm", sink=tap.sink, network_latency=0.0, options=options)
    planner.warm_up([task.skill_set])
    consume = planner._token

    def token(out: object) -> None:
        gen = planner._running.get(out.gen_id)  # type: ignore[attr-defined]  # a TokenOut; the planner's private table of running generations
        if gen is not None:
            tap.token(gen.record.task_id, out.t)  # type: ignore[attr-defined]  # a TokenOut
        consume(out)  # type: ignore[arg-type]  # a TokenOut

    planner._token = token  # type: ignore[method-assign]  # observes the planner's token path for the calibration tap
    tap.attach(engine)
    t0 = engine.now()
    try:
        planner.submit(dataclasses.replace(task, task_id="calibration-probe", arrival=t0))
        for _ in range(max_steps):
            if not planner.has_work() or not planner.step():
                break
    finally:
        planner.abort_all("calibration probe done")
        tap.detach(engine)
    tap.busy(engine.now() - t0 - sum(s.duration for s in tap.steps))
    return tap


def overheads(profile: EngineProfile, taps: Iterable[PhaseTap]) -> dict[str, float]:
    """``prefill_kv``, ``token_overhead`` and ``step_overhead`` (module docstring) from observed runs
    of an engine whose forward pass ``profile`` prices; each term >= 0 (0 where nothing measured it).

    ``prefill_kv``: what prompt steps' forward passes took beyond the profile's price, per cached
    token in front of their chunks (steps without decoding rows, so the front is the fed
    sequence's KV before the step). ``token_overhead``: sampling time per emitted token.
    ``step_overhead``: the loop's time outside steps per step."""
    steps: list[StepSample] = []
    busy = 0.0
    for tap in taps:
        steps.extend(tap.steps)
        busy += tap.loop_busy
    bare = dataclasses.replace(profile, prefill_kv=0.0, token_overhead=0.0, step_overhead=0.0)
    extra = weight = 0.0
    for s in steps:
        if s.prompt_rows <= 0 or s.decode_rows or math.isnan(s.forward_s):
            continue
        extra += s.forward_s - price_step(bare, s)
        if s.chunks:
            weight += sum(f for _o, _n, f in s.chunks)
        else:  # one sequence fed alone: what is in front of its rows is its KV before the step
            weight += max(0, s.kv_tokens - s.prompt_rows)
    sampled = [s for s in steps if not math.isnan(s.sample_s)]
    emitted = sum(s.emitted for s in sampled)
    return {
        "prefill_kv": max(0.0, extra / weight) if weight > 0 else 0.0,
        "token_overhead": max(0.0, sum(s.sample_s for s in sampled) / emitted) if emitted else 0.0,
        "step_overhead": max(0.0, busy / len(steps)) if steps else 0.0,
    }


def calibrated(profile: EngineProfile, taps: Iterable[PhaseTap]) -> EngineProfile:
    """``profile`` with the three terms measured on ``taps`` (:func:`overheads`)."""
    terms: dict[str, Any] = overheads(profile, taps)
    return dataclasses.replace(profile, **terms)


def joint_fit(meas: Any, taps: Iterable[PhaseTap]) -> dict[str, float]:
    """The forward-pass coefficients from the sweep *and* the probes' steps together (non-negative
    least squares on per-configuration medians).

    Why: the sweep alone measures fresh prompts and short synthetic contexts; on a shared machine
    its few samples are noisy, and a decode slope ``p`` or a quadratic ``a`` fitted from them is
    often clamped to 0, although a task's decoding step attends to a 1.2k-token skill prompt. The
    probes' steps are the planner's real mix (chunks behind the cached prefix, decoding at the
    task's context), measured minutes before the runs. Prefill: ``t = c + b·N + a·((o+N)² − o²) +
    prefill_kv·F`` (N rows at private offset o behind F cached tokens; the sweep's prompts have
    o = F = 0); decode: ``t = q + p·ΣN_kv + r·B``. A probe step's time excludes its sampling (that is
    ``token_overhead``). ``meas``: :class:`~timely_llm_ros.bench.profile_cli.Measurements`."""
    from timely_llm_ros.bench import profile_cli as pc

    pre: list[tuple[float, float, float, float]] = []  # (a-feature, N, F, t)
    for n, t in pc._medians(meas.prefill, key=lambda s: (s[0],), t_index=1):
        pre.append((n * n, n, 0.0, t))
    dec: list[tuple[float, float, float]] = []  # (ΣN_kv, B, t)
    for s in pc._medians(meas.decode, key=lambda s: (s[1], s[3] if len(s) > 3 else s[0]), t_index=2):
        dec.append((s[0], s[1], s[2]))
    groups_p: dict[tuple, list[tuple[float, float, float, float]]] = {}
    groups_d: dict[tuple, list[tuple[float, float, float]]] = {}
    for tap in taps:
        for st in tap.steps:
            if math.isnan(st.sample_s):
                continue
            t = st.duration - st.sample_s
            if st.chunks and not st.decode_rows:
                feat_a = sum((o + n) ** 2 - o * o for o, n, _f in st.chunks)
                nf = sum(f for _o, _n, f in st.chunks)
                key = (st.prompt_rows, round(nf, -2))
                groups_p.setdefault(key, []).append((feat_a, st.prompt_rows, nf, t))
            elif st.decode_rows and not st.prompt_rows:
                groups_d.setdefault((st.decode_rows, round(st.decode_kv, -2)), []).append(
                    (st.decode_kv, st.decode_rows, t)
                )
    for gp in groups_p.values():
        a, n, f, t = (statistics.median(c) for c in zip(*gp, strict=True))
        pre.append((a, n, f, t))
    for gd in groups_d.values():
        kv, b, t = (statistics.median(c) for c in zip(*gd, strict=True))
        dec.append((kv, b, t))
    out: dict[str, float] = {}
    tp = np.array([p[3] for p in pre])
    cols = [np.array([p[0] for p in pre]), np.array([p[1] for p in pre]), np.ones(len(pre))]
    names = ["prefill_a", "prefill_b", "prefill_c"]
    if any(p[2] > 0 for p in pre):
        cols.append(np.array([p[2] for p in pre]))
        names.append("prefill_kv")
    out.update(_nonneg_fit(cols, tp, names))
    td = np.array([d[2] for d in dec])
    dcols = [np.ones(len(dec)), np.array([d[0] for d in dec]), np.array([d[1] for d in dec])]
    out.update(_nonneg_fit(dcols, td, ["decode_q", "decode_p", "decode_r"]))
    if out["decode_q"] + out["decode_r"] <= 0:
        out["decode_q"] = 1e-6
    return out


def _nonneg_fit(cols: list[np.ndarray], t: np.ndarray, names: list[str]) -> dict[str, float]:
    """Least squares with every coefficient >= 0 (exhaustive over which ones are fixed at 0)."""
    from timely_llm_ros.bench import profile_cli as pc

    if len(t) < len(cols):
        return dict.fromkeys(names, 0.0)
    x = np.column_stack(cols)
    coef, *_ = np.linalg.lstsq(x, t, rcond=None)
    vals, _zeroed = pc._nonneg(cols, t, tuple(float(c) for c in coef))
    return {n: max(0.0, float(v)) for n, v in zip(names, vals, strict=True)}
