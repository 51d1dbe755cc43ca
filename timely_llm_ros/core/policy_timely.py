"""The robust ``timely`` policy: utility-accrual ordering of segments + utility-guided admission.

``timely-paper`` (:mod:`.priority`, :mod:`.scheduler`) is the paper's Eq. 4 and §4.4 read literally;
under overload it loses to ``edf-seg`` (``timely-llm bench --suite scenarios``): the admission check stalls
behind late or unfittable generations, the speed estimate is fragile, and Eq. 4 gives late tasks a
negative priority so they starve. This module keeps the paper's intent — utility per unit of
generation time (PUD), execution-time-aware waiting of suspended generations, latency-guided batch
size — in a form that behaves like EDF in underload (where EDF is optimal) and sheds by utility
density only under overload, in the style of Locke's best-effort scheduler and DASA.

Per queued generation ``i`` at time ``t`` (same inputs as Eq. 4: ``ref``, ``ERT_k``, ``α``, ``β``, ``G``,
``net``; a generation started now is expected to end its segment at ``t + G``):

* ``U_i = min(β, α·(max(W, 0) − ERT_k) + β)`` with ``W = t + G + net − ref`` — TUF_0 for a first
  segment, TUF_1 for later ones (§4.2; ``ref`` is the previous action's estimated end with its
  *minimum* execution time, §4.3), i.e. Eq. 4's numerator; ``PUD_i = U_i / G_i``;
* ``D_i = ref + ERT_k − net``: latest generation end for full utility (the segment's deadline);
* ``span_i = β/|α|`` (α < 0) or ``ERT_k + G_i`` (flat TUF: never loses utility; the span only bounds
  its wait), ``Z_i = D_i + span_i``: the generation end at which its utility reaches 0;
* *live* if ``U_i > 0``, else *late*; a live generation's critical time is ``C_i = D_i`` while it
  can still end on time (``t + G_i ≤ D_i``) and ``Z_i`` once tardy (what is left to save);
* *promoted*: late with ``t ≥ P_i = Z_i + A·(ERT_k + span_i)`` (``A`` = ``aging``, default 1): it
  has waited one more zero-utility time past its zero-utility point.

Order (first = served first):

1. promoted generations, by ``P_i`` (first promoted first) — the starvation bound: once promoted a
   generation only waits for those promoted before it, so with a finite backlog its wait is
   bounded (test_policy_timely.py shows a late task is served and the ≤ 3× zero-utility bound);
2. live generations kept by the utility-accrual test, by ``C_i`` (EDF; ties: higher PUD, then
   submission order);
3. live generations deferred by the test, by PUD (highest first);
4. late, not yet promoted generations, by ``Z_i`` (first to become late first).

Option ``promoted_share < 1`` lets promoted work take at most that share of the ``M`` slots ahead of
the kept live ones (the rest follow them). It trades the bound for utility under *permanent*
overload, where any bounded policy ends up serving everything late (variant ``timely-promote-half``).

Why ``Z`` for tardy segments: ordering a tardy segment by its missed deadline ``D`` (ablation
``timely-crit-d``) puts the most overdue work first — EDF's domino effect under overload.

**Utility-accrual test** (DASA-style). The batch is ``M`` slots (the policy's max batch); slot
``s`` is free at ``f_s`` (``t`` for an idle slot, ``max(t, seg_start + G)`` for a running generation:
its segment's expected end), sorted ascending. The tentative schedule lists the kept live
generations in EDF order; the ``j``-th (0-based) starts at ``f_j`` for ``j < M`` (list scheduling gives
the ``j``-th earliest slot exactly) and at ``max(f_{M−1}, t + (Σ_s (f_s − t) + Σ_{l<j} G_l)/M)`` beyond
(the average backlog: Graham's bound, never optimistic); it is feasible if every kept generation
ends by ``C_i``. If the set of all live generations is infeasible, the lowest-PUD ones (ties: latest
``C``, then newest) are deferred one by one until the rest is feasible. Deferring can only make the
start times earlier, so feasibility is monotone in the number deferred and a binary search finds
the least number (galloping from the previous decision's answer: usually two tests), ``O(n log n)``
per test. In underload nothing is deferred and the order is
EDF on segment deadlines.

**Utility-guided admission** (:class:`UtilityGuidedAdmission`, §4.4's intent: admit another
generation only if the running ones can afford it). Admitting slows every running generation: one
prefill pass ``P`` per step that admits new prompts, and a slower decode step ``T(B+1) > T(B)``. Both
are *measured* between scheduling points (:class:`StepModel`: pure decode steps per batch size; the
extra time of steps that admitted a new prompt), so the estimate is robust to prefill steps and
needs no speed window (pitfall 2). With ``B`` running generations and candidate ``c``:

* running generation ``r``, ``n_r`` = its expected tokens left (``⌈G_r / T(1)⌉`` capped at the
  maximum segment length, minus those generated, at least 1): ``F_r = t + n_r·T(B)``,
  ``F'_r = t + P + n_r·T(B+1)``; loss ``L_run = Σ_r u_r(F_r) − u_r(F'_r)`` with the *clamped* utility
  ``u(F) = max(0, min(β, α·(max(F + net − ref, 0) − ERT_k) + β))`` — a generation past its
  zero-utility point loses nothing more, so late running generations never block (pitfall 1);
* deferring ``c`` until ``t_d = min F_r`` over the losing ones costs it
  ``L_wait = u_c(t + P + G_c) − u_c(t_d + G_c)`` plus, for the idle slot, the tardy backlog's
  slope: ``(Σ|α| of the other tardy live queued generations) · (t_d − t)/M``;
* admit iff ``L_wait ≥ L_run``; a promoted candidate is always admitted (the starvation bound).

So a normal request with plenty of slack waits ~100 ms while urgent first segments finish, a fresh
urgent one is admitted at once, and under sustained overload (a tardy backlog) the batch stays full.
Option ``adm_group`` trades the whole group the ``k`` free slots would take (``T(B+k)``, the sum over
the candidate and the next ``k − 1``; variant ``timely-adm-group``): measured slightly worse except
under permanent overload. The paper's literal check is ``timely-paper``; ``timely-adm-paper`` pairs
it with this ordering.
"""

from __future__ import annotations

import math
from bisect import insort
from dataclasses import dataclass

import numpy as np

from timely_llm_ros.core.generation import Generation
from timely_llm_ros.core.priority import PriorityStrategy
from timely_llm_ros.core.scheduler import (
    DEFAULT_MAX_BATCH,
    Admission,
    LatencyGuidedAdmission,
    register_policy,
)

# Prior of the measured step model before any measurement (pitfalls note reference model: 21.5 ms
# per decode step + 0.8 ms per extra running sequence, i.e. ≈ 3.7 % of a step per sequence) and of
# a prefill pass of a short prompt suffix (bound by reading the weights, like one decode step:
# comment on prefill_c in config/profiles/llama3-8b-fp16-rtx4090.yaml).
PRIOR_MARGINAL = 0.8 / 21.5
PRIOR_PREFILL_STEPS = 1.0
EMA = 0.25  # weight of a new step measurement (≈ the 4-step window of the engine's SpeedMeter)


@dataclass(frozen=True)
class TimelyOptions:
    """Switches of the robust policy (each one is an ablation)."""

    ua_defer: bool = True  # utility-accrual test: defer lowest-PUD live segments under overload
    late_tier: bool = True  # late (U ≤ 0) segments after the live ones (else in EDF order by Z among them)
    aging: float = 1.0  # promote a late one A·(zero-utility time) past its zero point; <= 0: never
    critical_zero: bool = True  # tardy live segments are ordered/tested by Z (else by D)
    admission: str = "utility"  # "utility" (UtilityGuidedAdmission) | "paper" (§4.4 literal) | "none"
    adm_group: bool = False  # the admission trades the group the free slots would take, not c alone
    adm_capacity: bool = True  # ... and counts idle slots against the tardy backlog
    promoted_share: float = 1.0  # promoted work may take at most this share of the slots (1: all)

    def __post_init__(self) -> None:
        if self.admission not in ADMISSIONS:
            raise ValueError(f"admission must be one of {ADMISSIONS}, got {self.admission!r}")
        if not math.isfinite(self.aging):
            raise ValueError(f"aging must be finite, got {self.aging!r}")
        if not 0.0 < self.promoted_share <= 1.0:
            raise ValueError(f"promoted_share must be in (0, 1], got {self.promoted_share!r}")


ADMISSIONS = ("utility", "paper", "none")


# -------------------------------------------------------------------------------- ordering
def _classify(t: float, ref: float, e: float, al: float, be: float, g: float, net: float,
              aging: float, critical_zero: bool) -> tuple[int, float, float]:
    """(tier, key, pud) of one generation; tier 0 promoted, 1 live, 3 late (module docstring)."""
    w = t + g + net - ref
    u = al * ((w if w > 0.0 else 0.0) - e) + be
    if u > be:
        u = be
    d = ref + e - net
    span = be / -al if al < 0.0 else e + g
    z = d + span
    if u > 0.0:
        crit = d if (t + g <= d or not critical_zero) else z
        return 1, crit, u / g
    if aging > 0.0:
        p = z + aging * (e + span)
        if t >= p:
            return 0, p, u / g
    return 3, z, u / g


class UtilityAccrualPriority(PriorityStrategy):
    """EDF on segment deadlines in underload, PUD-based deferral under overload, bounded late tier.

    Scores are ranks (``n − position``): larger is served first, as the scheduler expects."""

    name = "ua-edf"
    dynamic = True

    def __init__(self, options: TimelyOptions | None = None) -> None:
        self.opt = options or TimelyOptions()
        self.max_batch = DEFAULT_MAX_BATCH
        self._slot_ends: list[float] = []  # expected segment ends of the running generations
        self._running_promoted = 0  # running generations that were promoted when admitted
        self.last_deferred = 0  # live generations deferred by the last decision (diagnostics)
        self._hint = 0  # least removals of the last decision (search start)
        self.last_live = 0
        self.last_t = math.nan
        self.last_cols = None
        self.last_order = None
        self.last_scores = None
        self.last_promoted = 0
        self.last_tardy_slope = 0.0

    def fixed_key(self, arrival: float, ert: float) -> float:
        return arrival

    def observe(self, t: float, running: list[Generation], max_batch: int) -> None:
        self.max_batch = max(1, int(max_batch))
        ends = []
        promoted = 0
        opt = self.opt
        for r in running:
            end = r.seg_start + r.g
            ends.append(end if end == end else t)  # nan seg_start: treat as free now
            if opt.promoted_share < 1.0 and r.seg_start == r.seg_start:
                tier = _classify(r.seg_start, r.ref, r.ert_k, r.alpha, r.beta, r.g, r.net, opt.aging,
                                 opt.critical_zero)[0]
                promoted += tier == 0
        self._slot_ends = ends
        self._running_promoted = promoted

    def _quota(self, n: int) -> int:
        """How many promoted generations may go first (the rest follow the kept live ones)."""
        if self.opt.promoted_share >= 1.0:
            return n
        return max(0, math.ceil(self.opt.promoted_share * self.max_batch) - self._running_promoted)

    def _slots(self, t: float) -> list[float]:
        m = self.max_batch
        ends = sorted(e if e > t else t for e in self._slot_ends)[:m]
        return [t] * (m - len(ends)) + ends

    # -- the decision, pure Python (short queues) ----------------------------------------------
    def scores_py(self, t: float, c: dict[str, list[float]], n: int) -> list[float]:
        opt = self.opt
        tiers: list[tuple] = [[], [], [], []]
        tardy = 0.0  # Σ|α| of live generations already past their deadline (they lose with any delay)
        for i, (ref, e, al, be, g, net, sq) in enumerate(zip(c["ref"], c["ert_k"], c["alpha"], c["beta"],
                                                               c["g"], c["net"], c["seq"], strict=True)):
            tier, key, pud = _classify(t, ref, e, al, be, g, net, opt.aging, opt.critical_zero)
            if tier == 1 and t + g > ref + e - net:
                tardy -= al
            tiers[tier].append((key, -pud, sq, i))
        live = sorted(tiers[1])  # EDF order: (C, -PUD, seq)
        deferred: list[tuple] = []
        if opt.ua_defer and len(live) > 1:
            live, deferred = self._ua_split_py(t, live, c["g"])
        self.last_deferred = len(deferred)
        self.last_live = len(live) + len(deferred)
        late = sorted(tiers[3])
        if not opt.late_tier:  # ablation: late ones in EDF order (by Z) among the kept live ones
            live, late = sorted(live + late), []
        promoted = sorted(tiers[0])
        q = self._quota(len(promoted))
        order = promoted[:q] + live + promoted[q:] + sorted(deferred, key=lambda x: (x[1], x[0], x[2])) + late
        out = [0.0] * n
        for rank, item in enumerate(order):
            out[item[3]] = float(n - rank)
        self._remember(t, c, [item[3] for item in order], out, min(q, len(promoted)))
        self.last_tardy_slope = tardy
        return out

    def _remember(self, t: float, cols, order, scores, n_promoted: int) -> None:
        """Keep the last decision's order for the admission (it trades a group of candidates)."""
        self.last_t = t
        self.last_cols = cols
        self.last_order = order
        self.last_scores = scores
        self.last_promoted = n_promoted

    def group(self, t: float, slot: int, k: int) -> list[int]:
        """Slots of the queued generation in ``slot`` and of the ``k − 1`` next in the last order."""
        if self.last_t != t or self.last_scores is None or not 0 <= slot < len(self.last_scores):
            return [slot]
        n = len(self.last_scores)
        rank = int(n - self.last_scores[slot])
        return [int(i) for i in self.last_order[rank:rank + k]]

    def promoted(self, t: float, slot: int) -> bool:
        if self.last_t != t or self.last_scores is None or not 0 <= slot < len(self.last_scores):
            return False
        return int(len(self.last_scores) - self.last_scores[slot]) < self.last_promoted

    def _feasible_py(self, t: float, slots: list[float], s0: float, items: list[tuple], g: list[float],
                     skip: set[int]) -> bool:
        m = len(slots)
        last = slots[-1]
        prior = 0.0
        j = 0
        for crit, _, _, i in items:
            if i in skip:
                continue
            gi = g[i]
            if j < m:
                start = slots[j]
            else:
                start = t + (s0 + prior) / m
                if start < last:
                    start = last
            if start + gi > crit:
                return False
            prior += gi
            j += 1
        return True

    def _ua_split_py(self, t: float, live: list[tuple], g: list[float]) -> tuple[list[tuple], list[tuple]]:
        slots = self._slots(t)
        s0 = 0.0
        for f in slots:
            s0 += f - t
        if self._feasible_py(t, slots, s0, live, g, set()):
            self._hint = 0
            return live, []
        # removal order: lowest PUD first; ties: latest critical time, then newest
        removal = sorted(live, key=lambda x: (-x[1], -x[0], -x[2]))

        def feasible(r: int) -> bool:
            return self._feasible_py(t, slots, s0, live, g, {x[3] for x in removal[:r]})

        r = self._hint = _least_removals(feasible, len(live), self._hint)
        gone = {x[3] for x in removal[:r]}
        return [x for x in live if x[3] not in gone], [x for x in live if x[3] in gone]

    # -- the same decision with numpy (long queues); same float operations, same order ----------
    def scores_np(self, t: float, a: dict[str, np.ndarray], n: int) -> np.ndarray:
        opt = self.opt
        ref, e, al, be = a["ref"][:n], a["ert_k"][:n], a["alpha"][:n], a["beta"][:n]
        g, net, sq = a["g"][:n], a["net"][:n], a["seq"][:n]
        w = ((t + g) + net) - ref
        u = np.minimum(al * (np.maximum(w, 0.0) - e) + be, be)
        d = (ref + e) - net
        with np.errstate(divide="ignore"):
            span = np.where(al < 0.0, be / np.where(al < 0.0, -al, 1.0), e + g)
        z = d + span
        pud = u / g
        live = u > 0.0
        crit = np.where((t + g <= d) | (not opt.critical_zero), d, z)
        key = np.where(live, crit, z)
        tier = np.where(live, 1, 3)
        if opt.aging > 0.0:
            p = z + opt.aging * (e + span)
            promoted = ~live & (t >= p)
            tier = np.where(promoted, 0, tier)
            key = np.where(promoted, p, key)
        # EDF order of everything by (tier, key, -pud, seq)
        order = np.lexsort((sq, -pud, key, tier))
        tier_sorted = tier[order]
        live_idx = order[tier_sorted == 1]
        self.last_deferred = 0
        self.last_live = len(live_idx)
        if opt.ua_defer and len(live_idx) > 1:
            keep = self._ua_keep_np(t, live_idx, key, pud, g, sq)
            if not keep.all():
                self.last_deferred = int((~keep).sum())
                dfr = live_idx[~keep]
                dfr = dfr[np.lexsort((sq[dfr], key[dfr], -pud[dfr]))]
                live_idx = np.concatenate((live_idx[keep], dfr))
        front = order[tier_sorted == 0]
        late_idx = order[tier_sorted == 3]
        if not opt.late_tier:  # ablation: late ones in EDF order (by Z) among the kept live ones
            n_kept = len(live_idx) - self.last_deferred
            merged = np.concatenate((live_idx[:n_kept], late_idx))
            merged = merged[np.lexsort((sq[merged], -pud[merged], key[merged]))]
            live_idx = np.concatenate((merged, live_idx[n_kept:]))
            late_idx = late_idx[:0]
        q = min(self._quota(len(front)), len(front))
        n_kept = len(live_idx) - self.last_deferred
        order = np.concatenate((front[:q], live_idx[:n_kept], front[q:], live_idx[n_kept:], late_idx))
        out = np.empty(n)
        out[order] = n - np.arange(n, dtype=float)
        self._remember(t, a, order, out, q)
        self.last_tardy_slope = float(-al[live & (t + g > d)].sum())
        return out

    def _ua_keep_np(self, t: float, live_idx: np.ndarray, key: np.ndarray, pud: np.ndarray, g: np.ndarray,
                    sq: np.ndarray) -> np.ndarray:
        slots = np.asarray(self._slots(t))
        m = len(slots)
        s0 = 0.0
        for f in slots:  # same summation order as the Python path
            s0 += float(f) - t
        crit = key[live_idx]
        gl = g[live_idx]
        k = len(live_idx)
        # removal rank of each live item: lowest PUD first, then latest C, then newest
        rem = np.lexsort((-sq[live_idx], -crit, pud[live_idx]))
        rank = np.empty(k, dtype=np.int64)
        rank[rem] = np.arange(k)

        def feasible(r: int) -> bool:
            kept = rank >= r
            gk = gl[kept]
            if not len(gk):
                return True
            prior = np.concatenate(([0.0], np.cumsum(gk)[:-1]))
            start = np.maximum(t + (s0 + prior) / m, slots[-1])
            j = min(m, len(gk))
            start[:j] = slots[:j]
            return bool(np.all(start + gk <= crit[kept]))

        if feasible(0):
            self._hint = 0
            return np.ones(k, dtype=bool)
        r = self._hint = _least_removals(feasible, k, max(self._hint, 1))
        return rank >= r


def _least_removals(feasible, k: int, hint: int) -> int:
    """Least ``r`` in ``[0, k]`` with ``feasible(r)``, given that ``feasible`` is monotone and
    ``feasible(k)`` holds. Gallops from ``hint`` (the previous decision's answer: consecutive decisions
    see nearly the same queue, so two tests usually suffice), then bisects. The answer does not
    depend on the hint, only the number of tests does."""
    h = min(max(hint, 0), k)
    if feasible(h):
        hi, lo, step = h, 0, 1
        while hi - step >= 0:
            c = hi - step
            if not feasible(c):
                lo = c + 1
                break
            hi = c
            step *= 2
    else:
        bad, step, hi = h, 1, k
        while bad + step < k:
            c = bad + step
            if feasible(c):
                hi = c
                break
            bad = c
            step *= 2
        lo = bad + 1
    while lo < hi:
        mid = (lo + hi) // 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid + 1
    return hi


# -------------------------------------------------------------------------------- admission
class StepModel:
    """Decode-step and prefill-pass durations measured between scheduling points.

    The planner runs exactly one engine step between two consecutive :meth:`Scheduler.select`
    calls while something runs, so ``t_i − t_{i−1}`` is the duration of a step over the batch
    decided at ``t_{i−1}``. Steps that admitted or resumed nothing are pure decode steps: their
    duration feeds a per-batch-size average (``EMA``). Steps that admitted new prompts feed the
    average extra time of a prefill pass over the pure step of that batch size. Unmeasured batch
    sizes are extrapolated linearly from the nearest measured one with the measured slope (or the
    prior ``PRIOR_MARGINAL``); nothing measured yet: ``None`` (the admission then admits — the
    paper's "lag for one generation")."""

    def __init__(self) -> None:
        self._t: float | None = None
        self._members: list[Generation] = []
        self._batch = 0
        self._admitted = 0
        self._resumed = 0
        self.pure: dict[int, float] = {}
        self._sizes: list[int] = []
        self.prefill: float | None = None

    def record_decision(self, t: float, running: list[Generation], picked: list[Generation]) -> None:
        """Call at the end of every decision: the batch the next engine step will run."""
        self._t = t
        self._members = running + picked
        self._batch = len(self._members)
        self._admitted = sum(1 for g in picked if g.context is None)
        self._resumed = len(picked) - self._admitted

    def observe(self, t: float) -> None:
        """Call at the start of every decision: measures the step since the previous one.

        If every generation of that step has finished, the planner may have idled before this
        decision (nothing queued or running), so the interval is not a step: skipped."""
        if self._t is None or self._batch <= 0:
            return
        dt = t - self._t
        self._t = None
        if all(g.finished for g in self._members):
            return
        if not dt > 0.0 or not math.isfinite(dt):
            return
        b = self._batch
        if self._admitted == 0 and self._resumed == 0:
            old = self.pure.get(b)
            if old is None:
                insort(self._sizes, b)
                self.pure[b] = dt
            else:
                self.pure[b] = old + EMA * (dt - old)
        elif self._admitted > 0:
            base = self.step(b)
            if base is not None:
                extra = max(0.0, dt - base)
                self.prefill = extra if self.prefill is None else self.prefill + EMA * (extra - self.prefill)

    def _slope(self) -> float | None:
        s = self._sizes
        if len(s) < 2:
            return None
        lo, hi = s[0], s[-1]
        return (self.pure[hi] - self.pure[lo]) / (hi - lo)

    def step(self, b: int) -> float | None:
        """Pure decode step duration with ``b`` running sequences (None before any measurement)."""
        if b <= 0 or not self._sizes:
            return None
        got = self.pure.get(b)
        if got is not None:
            return got
        near = min(self._sizes, key=lambda s: (abs(s - b), s))
        base = self.pure[near]
        slope = self._slope()
        if slope is None or slope < 0.0:
            slope = PRIOR_MARGINAL * base
        return max(base + slope * (b - near), 1e-9)

    def prefill_pass(self, b: int) -> float | None:
        if self.prefill is not None:
            return self.prefill
        s = self.step(max(b, 1))
        return None if s is None else PRIOR_PREFILL_STEPS * s


def _gen_utility(end: float, ref: float, e: float, al: float, be: float, net: float) -> float:
    """Clamped utility of a segment whose generation ends at ``end`` (action starts ``net`` later)."""
    w = end + net - ref
    u = al * ((w if w > 0.0 else 0.0) - e) + be
    if u > be:
        u = be
    return u if u > 0.0 else 0.0


class UtilityGuidedAdmission(Admission):
    """Latency-guided batch size as a utility trade (module docstring)."""

    name = "utility-guided"

    def __init__(self, prio: UtilityAccrualPriority | None = None, group: bool = False,
                 capacity: bool = True) -> None:
        self.prio = prio
        self.group = group
        self.capacity = capacity
        self.model = StepModel()
        self.refused = 0
        self._pass_at = math.nan  # time of the decision that already admitted a new prompt

    def observe(self, t: float, running: list[Generation], max_batch: int) -> None:
        self.model.observe(t)

    def decided(self, t: float, running: list[Generation], picked: list[Generation]) -> None:
        self.model.record_decision(t, list(running), picked)

    def allow(self, t: float, cand: Generation, running: list[Generation], speed: float | None) -> bool:
        b = len(running)
        tb = self.model.step(b)
        prio = self.prio
        if not running or tb is None or prio is None:
            return self._admit(t, cand)
        if prio.promoted(t, cand.slot):  # the starvation bound: promoted work is never gated
            return self._admit(t, cand)
        free = max(1, prio.max_batch - b)
        slots = prio.group(t, cand.slot, free if self.group else 1)
        cols = prio.last_cols
        k = len(slots)
        tbk = self.model.step(b + k)
        t1 = self.model.step(1) or tb
        # one prefill pass per step: only the first new prompt of this step pays its fixed cost
        pre = 0.0
        if cand.context is None and self._pass_at != t:
            pre = self.model.prefill_pass(b) or 0.0
        loss = 0.0
        t_d = math.inf
        for r in running:
            left = _tokens_left(r, t1)
            f = t + left * tb
            f2 = t + pre + left * tbk
            lr = (_gen_utility(f, r.ref, r.ert_k, r.alpha, r.beta, r.net)
                  - _gen_utility(f2, r.ref, r.ert_k, r.alpha, r.beta, r.net))
            if lr > 0.0:
                loss += lr
                if f < t_d:
                    t_d = f
        if loss <= 0.0:
            return self._admit(t, cand)
        own = 0.0
        ref, ek, al, be, g, net = (cols["ref"], cols["ert_k"], cols["alpha"], cols["beta"], cols["g"],
                                   cols["net"])
        for i in slots:
            gi = float(g[i])
            a = (float(ref[i]), float(ek[i]), float(al[i]), float(be[i]), float(net[i]))
            own += _gen_utility(t + pre + gi, *a) - _gen_utility(t_d + gi, *a)
        if self.capacity and t_d > t:
            # the idle slots delay the tardy backlog behind the group by about k·(t_d − t)/M
            behind = prio.last_tardy_slope
            for i in slots:
                if t + float(g[i]) > float(ref[i]) + float(ek[i]) - float(net[i]) and float(al[i]) < 0.0:
                    behind += float(al[i])
            if behind > 0.0:
                own += behind * k * (t_d - t) / prio.max_batch
        if own >= loss:
            return self._admit(t, cand)
        self.refused += 1
        return False

    def _admit(self, t: float, cand: Generation) -> bool:
        if cand.context is None:  # this step now holds a prefill pass
            self._pass_at = t
        return True


def _tokens_left(r: Generation, t1: float) -> int:
    """Expected tokens left in a running generation's segment: its estimate G in tokens at the
    single-sequence step time, less what it generated (at least one)."""
    expected = int(math.ceil(r.g / t1)) if t1 > 0.0 else r.max_seg_tokens
    left = min(expected, r.max_seg_tokens) - r.seg_tokens
    return left if left > 1 else 1


# -------------------------------------------------------------------------------- registration
def timely_strategies(options: TimelyOptions | None = None) -> tuple[PriorityStrategy, Admission]:
    """Fresh (priority, admission) objects of the robust ``timely`` policy."""
    opt = options or TimelyOptions()
    prio = UtilityAccrualPriority(opt)
    adm: Admission
    if opt.admission == "utility":
        adm = UtilityGuidedAdmission(prio, group=opt.adm_group, capacity=opt.adm_capacity)
    elif opt.admission == "paper":
        adm = LatencyGuidedAdmission()
    else:
        adm = Admission()
    return prio, adm


# Ablation variants (bench/ablation.py): each switches one change off (or all: timely-edf-dyn).
VARIANTS: dict[str, TimelyOptions] = {
    "timely-no-ua": TimelyOptions(ua_defer=False),
    "timely-no-late": TimelyOptions(late_tier=False, aging=0.0),
    "timely-no-aging": TimelyOptions(aging=0.0),
    "timely-promote-half": TimelyOptions(promoted_share=0.5),
    "timely-crit-d": TimelyOptions(critical_zero=False),
    "timely-adm-group": TimelyOptions(adm_group=True),
    "timely-adm-nocap": TimelyOptions(adm_capacity=False),
    "timely-adm-paper": TimelyOptions(admission="paper"),
    "timely-no-adm": TimelyOptions(admission="none"),
    "timely-edf-dyn": TimelyOptions(ua_defer=False, late_tier=False, aging=0.0, critical_zero=False,
                                    admission="none"),
}


def _register() -> None:
    for name, opt in VARIANTS.items():
        register_policy(name, True, True, lambda opt=opt: timely_strategies(opt))


_register()
