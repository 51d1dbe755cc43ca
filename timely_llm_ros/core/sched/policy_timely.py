"""The robust ``timely`` policy: utility-accrual ordering of segments + utility-guided admission.

``timely-paper`` (:mod:`.priority`, :mod:`.scheduler`) is the paper's Eq. 4 and §4.4 read literally;
under overload it loses to ``edf-seg`` (``timely-llm bench --suite scenarios``): the admission check stalls
behind late or unfittable generations, the speed estimate is fragile, and Eq. 4 gives late tasks a
negative priority so they starve. This module keeps the paper's intent — utility per unit of
generation time (PUD), execution-time-aware waiting of suspended generations, latency-guided batch
size — in a form that behaves like EDF in underload (where EDF is optimal) and sheds by utility
density only under overload, in the style of Locke's best-effort scheduler and DASA.

Per queued generation (``ref``, ``ERT_k``, ``α``, ``β``, ``G``, ``net`` as in Eq. 4; ``ref`` is the
previous action's estimated end with its *minimum* execution time for k > 0, §4.3) the index of
:mod:`.ua_index` keeps its deadline ``D``, zero-utility time ``Z``, promotion time ``P`` and its phase
(ONTIME, TARDY, LATE, PROMOTED); its utility if started now is ``U = min(β, α·(max(W, 0) − ERT_k) + β)``
with ``W = t + G + net − ref`` (TUF_0 for a first segment, TUF_1 after, §4.2) and ``PUD = U / G``.
*Live* = ONTIME or TARDY; the critical time ``C`` of a live one is ``D`` while ONTIME and ``Z`` once
TARDY (what is left to save; ordering a tardy segment by its missed deadline — ablation
``timely-crit-d`` — puts the most overdue work first: EDF's domino effect under overload).

**Objective** (option ``objective``). ``"lex"`` (default, policy ``timely``): save first what can
still be saved, then charge the rest by the paper's Eq. 1 as reported, unbounded below — a
lexicographic objective. (1) *Clamped*: a live segment (ONTIME or TARDY: it still ends before its
zero-utility time if started now) is tested against its critical time ``C``, and when not all can
make it, the lowest PUD ``U/G`` (the utility still left to save per second of engine time) yields
first. (2) *Unclamped*: a LATE segment cannot be saved, but each further second still costs it
|α|: it keeps its place in the live order (by ``Z``, so it goes first wherever that costs no live
segment its critical time — never parked in a tier), counts in the tardy slope, and yields before
any live segment, by cost density |α|/G (Smith's rule for weighted tardiness). Why both, measured on
the stress matrix (docs/scheduling.md, "Objective"): ``"unclamped"`` alone (``timely-unclamped``,
the default before) ranks every segment by |α|/G and tests only ONTIME ones, so a normal task that
could still be answered in time waits behind late urgent work that gains only |α|·G from going
first, and ``fcfs-seg`` answered more normal tasks in time on eight rows; ``"clamped"`` alone
(``timely-clamped``: utility below 0 is worth 0, the late tier, PUD) parks late work behind work
that has slack to spare.

Order (first = served first):

1. promoted generations, by ``P`` (first promoted first) — the starvation bound: once promoted a
   generation only waits for those promoted before it, so with a finite backlog its wait is
   bounded (test_policy_timely.py shows a late task is served within 3× its zero-utility time);
2. live generations kept by the utility-accrual test, by ``C`` (EDF; ties: submission order);
3. live generations deferred by the test, by PUD (highest first);
4. late, not yet promoted generations, by ``Z`` (first to become late first).

Option ``promoted_share < 1`` lets promoted work take at most that share of the ``M`` slots ahead of
the kept live ones (the rest follow them): it trades the bound for utility under *permanent*
overload, where any bounded policy ends up serving everything late (variant ``timely-promote-half``).

**Robot chain** (option ``chain``, default on; ablation ``timely-no-chain``). A robot executes one
task at a time (:mod:`.agent_queue`): the next task of a busy robot cannot start its first action
before the active task's plan ends, however early its own first segment is generated. So while a
task waits behind its robot's active task, the active task's queued generation is indexed with the
waiting task's first-segment numbers (``ref`` = its arrival, its ``ERT``, ``α``, ``β``: the planner
sets ``Generation.chain``) whenever that deadline is earlier than its own — priority inheritance
along the robot's chain. Without it, under saturation with shared robots, the active task's later
segment (deadline: its own action's end, ``ERT_k`` = 0) is promoted only a zero-utility time after
that end, behind every first segment that arrived before, while the waiting task's first segment,
generated ahead, sits held (wid2 bursts ×0.5, shared agents, seed 12, cap 2: 286 of 355 tasks arrive
while their robot is busy and lose nearly all the utility; their urgent ones waited 10.7 s on average
for a first action, 9.9 s under ``edf-seg``, whose task deadline keeps a plan's later segments first,
and 7.2 s with the chain: urgent −2673 %Σβ → −1758, ``edf-seg`` −2554).

**Utility-accrual test** (DASA-style) over the first ``window`` live generations in EDF order (the
*lookahead*; default 128 — more than the live queue of any preset, so there it is the whole queue).
The batch is ``M`` slots; slot ``s`` is free at ``f_s`` (``t`` for an idle slot, ``max(t, seg_start +
G)`` for a running generation), sorted ascending. The tentative schedule lists the kept live
generations in EDF order; the ``j``-th (0-based) starts at ``f_j`` for ``j < M`` and at
``max(f_{M−1}, t + (Σ_s (f_s − t) + Σ_{l<j} G_l)/M)`` beyond (the average backlog: Graham's bound,
never optimistic); it is feasible if every kept generation ends by ``C``. If not, the lowest-PUD ones
(ties: latest ``C``, then newest) are deferred one by one until the rest is feasible; feasibility
is monotone in the number deferred, so a binary search finds the least number (galloping from the
previous decision's answer: usually two tests). Live generations beyond the lookahead follow the
kept ones in EDF order untested: their deadlines lie behind ``window`` others, so this decision's
picks do not hinge on them, and the test's cost stays bounded however long the queue (≤ 1 ms
per decision at 10,000 queued, ``bench.sched_overhead``). In underload nothing is deferred and the order is EDF on
segment deadlines.

**Utility-guided admission** (:class:`UtilityGuidedAdmission`, §4.4's intent: admit another
generation only if that does not cost the running ones more than waiting costs the candidate).
Admitting delays every running generation: one prefill pass ``P`` per step that admits new prompts,
and a slower decode step ``T(B+k) > T(B)``. Both are *measured* (:class:`StepModel`: pure decode steps
per batch size; the extra time of steps that admitted a prompt), so the estimate is robust to prefill
steps and needs no speed window (a windowed speed estimate that mixes in prefill steps is fragile). With ``B`` running and the group ``c`` of ``k`` candidates
(``k`` = 1, or the free slots with ``adm_group``), ``n_x`` = expected tokens left of ``x``'s segment
(``⌈G_x / T(1)⌉`` capped at the maximum segment length, minus those generated, at least 1), and the
*clamped* utility ``u_x(F) = max(0, min(β, α·(max(F + net − ref, 0) − ERT_k) + β))`` of a generation
ending at ``F`` (past its zero-utility point a generation loses nothing more, so late running work never blocks admissions):

* running ``r`` ends at ``F_r = t + n_r·T(B)``; admitting now makes it ``F_r + δ_r`` with
  ``δ_r = P + n_r·(T(B+k) − T(B))``: it loses ``ℓ_r = u_r(F_r) − u_r(F_r + δ_r)``;
* the candidates, admitted now, end at ``E_i = t + P + n_i·T(B+k)`` — the same step model as the
  running ones (an earlier rule, ablation ``timely-adm-g``, used the bare estimate ``G`` = 90 ms here, which ignores
  the prefill pass and the batch's slower steps — a drone first segment takes a pass plus about five
  loaded steps, ~150 ms — so an urgent candidate seemed to have tens of milliseconds of slack it
  did not have, and was held back until that phantom slack was spent while slots were free);
* deferring the group until the ``j``-th losing generation ends (``t_j``, ascending ``F``) is credited
  only with what that wait really saves: the whole loss of the losers that end by ``t_j``, and for
  the others the slowdown of the tokens they generate before ``t_j`` — they still pay the prefill
  pass and the rest when the group is admitted later (the earlier rule credited waiting
  with every running generation's loss, so a few tardy urgent generations kept a slot idle while an
  urgent candidate waited) — unless the pass at ``t_j`` is one another new prompt opens anyway
  (one that is queued behind the group and not admitted now): then the group rides it and the
  still-running losers are spared the whole pass. Waiting costs the group
  ``Σ u_i(E_i) − u_i(E_i + t_j − t)`` plus, for the idle slot, the tardy backlog's slope:
  ``(Σ|α| of the other tardy live queued generations) · k · (t_j − t)/M``;
* admit unless some ``t_j`` saves more than it costs; if several do, the group is deferred to the one
  that saves the most, and that is a *promise*: a later decision admits it once ``t_j`` has come,
  without trading again (the trade assumed admission at ``t_j``; re-trading at every step could defer
  it step after step), and a trade before ``t_j`` may bring the promise forward but never push it
  back (re-trading at every step kept urgent first segments waiting past their promise beside free
  slots at cap 16); a promoted candidate is always admitted (the starvation bound);
  with nothing running or nothing measured yet, admit (the paper's "lag for one generation").

**Preemption** (option ``preempt``, default 1; :mod:`.preemption`): when no slot is free, an urgent
candidate that is on time now but would miss its deadline waiting for the earliest running end
takes the slot of the running segment of lowest ``|α|/G`` whose own deadline survives the delay;
that segment is suspended mid-segment and continues later (at most once per segment;
``timely-no-preempt`` never preempts). A candidate already late may preempt too, but only a victim
whose deadline survives even if its segment runs to the skill set's maximum length (option
``preempt_tardy_victim="max"``; ``timely-preempt-ontime``: on-time candidates only,
``timely-preempt-late``: a late one on the victim's expected length). It recovers the clump that the admission's holds can cause
below: a burst no longer waits behind ~290 ms normal segments admitted together. The victim was
chosen on the premise that it still ends by its deadline, so that promise is kept (option
``preempt_claim``, default on): the utility-accrual test never defers a preempted segment, though
EDF may still serve earlier deadlines first; without it (``timely-no-claim``) later urgent arrivals
push it back until it misses.

So a normal request with plenty of slack waits a few steps while urgent first segments finish, a
fresh urgent one waits at most for losing segments that end within its real slack, and under
sustained overload (a tardy backlog) the batch stays full. Ablations: ``timely-adm-g`` (the
earlier rule), ``timely-adm-nopromise``, ``timely-adm-group``, ``timely-adm-nocap``; the paper's
literal check is ``timely-paper``, and ``timely-adm-paper`` pairs it with this ordering.
"""

from __future__ import annotations

import math
from bisect import insort
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from itertools import islice

from timely_llm_ros.core.generation import Generation
from timely_llm_ros.core.sched.admission import DEFAULT_MAX_BATCH, Admission, LatencyGuidedAdmission
from timely_llm_ros.core.sched.deferral_ledger import DeferralLedger
from timely_llm_ros.core.sched.priority import PriorityStrategy, Ranking, check_estimate
from timely_llm_ros.core.sched.ua_index import INF, LATE, ONTIME, PROMOTED, Entry, PhaseIndex
from timely_llm_ros.core.tuf import utility, waiting_time

# Prior of the measured step model before any measurement (paper Table 1 profile: 21.5 ms
# per decode step + 0.8 ms per extra running sequence, i.e. ≈ 3.7 % of a step per sequence) and of
# a prefill pass of a short prompt suffix (bound by reading the weights, like one decode step:
# comment on prefill_c in config/profiles/llama3-8b-fp16-rtx4090.yaml).
PRIOR_MARGINAL = 0.8 / 21.5
PRIOR_PREFILL_STEPS = 1.0
EMA = 0.25  # weight of a new step measurement (≈ the 4-step window of the engine's SpeedMeter)
DEFAULT_WINDOW = 128  # live generations the utility-accrual test looks ahead (module docstring)
PROMISES_KEPT = 4096  # deferral promises kept before old ones are pruned


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
    window: int = DEFAULT_WINDOW  # lookahead of the utility-accrual test (live generations)
    adm_promise: bool = True  # a refusal promises admission at the deferral point it assumed
    adm_bare_g: bool = False  # the earlier admission rule (candidates timed by G, every loser credited)
    adm_keep_due: bool = False  # a due promise overtakes a refused candidate (UtilityGuidedAdmission.due)
    # a deferral must expect to gain more than this share of the candidates' β (0: any gain defers;
    # UtilityGuidedAdmission.gain_floor says why a floor, docs/scheduling.md what it measured)
    adm_gain_floor: float = 0.0
    adm_floor_free: int = 1  # ... applied only when at least this many batch slots are free
    # What the policy maximises (module docstring, "Objective"): "lex" = Eq. 1 clamped at 0 first
    # (the utility still to be saved), then unclamped Eq. 1 for the work that is past saving (it keeps
    # costing |α| per second, so it stays in the order, ranked by that cost, never parked);
    # "unclamped" Eq. 1 alone (timely-unclamped); "clamped" alone (late work is worthless: the late
    # tier, timely-clamped).
    objective: str = "lex"
    # robot chain: a robot's active task's generation is ranked by the first segment of the robot's
    # next task when that one's deadline is earlier (its action cannot start before this plan ends;
    # module docstring "Robot chain")
    chain: bool = True
    # preemption of a running segment for urgent work (core.sched.preemption): at most this many
    # mid-segment suspensions per segment (0: never preempt, the paper's behaviour: timely-no-preempt)
    preempt: int = 1
    preempt_outrun: str = "expected"  # ... and how a running segment past its G is timed (Preemption.outrun)
    preempt_tardy: bool = True  # ... and whether a candidate already late may preempt (Preemption.tardy)
    preempt_tardy_live: bool = False  # ... only while its utility is still positive (Preemption.tardy_live)
    preempt_tardy_victim: str = "max"  # ... and how its victim is timed (Preemption.tardy_victim)
    # a preempted generation (suspended mid-segment) was chosen on the premise that its deadline
    # still holds after the delay (core.sched.preemption), which later arrivals must not undo: the
    # utility-accrual test never defers it (the order stays EDF); off: ranked like any other segment
    preempt_claim: bool = True

    def __post_init__(self) -> None:
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective must be one of {OBJECTIVES}, got {self.objective!r}")
        if self.admission not in ADMISSIONS:
            raise ValueError(f"admission must be one of {ADMISSIONS}, got {self.admission!r}")
        if not math.isfinite(self.aging):
            raise ValueError(f"aging must be finite, got {self.aging!r}")
        if not 0.0 < self.promoted_share <= 1.0:
            raise ValueError(f"promoted_share must be in (0, 1], got {self.promoted_share!r}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be a positive integer, got {self.window!r}")
        if not 0.0 <= self.adm_gain_floor < 1.0:
            raise ValueError(f"adm_gain_floor must be in [0, 1), got {self.adm_gain_floor!r}")
        if (
            isinstance(self.adm_floor_free, bool)
            or not isinstance(self.adm_floor_free, int)
            or self.adm_floor_free < 1
        ):
            raise ValueError(f"adm_floor_free must be a positive integer, got {self.adm_floor_free!r}")
        if isinstance(self.preempt, bool) or not isinstance(self.preempt, int) or self.preempt < 0:
            raise ValueError(f"preempt must be an integer >= 0, got {self.preempt!r}")
        if self.preempt_outrun not in ("expected", "again"):
            raise ValueError(f"preempt_outrun must be 'expected' or 'again', got {self.preempt_outrun!r}")
        if self.preempt_tardy_victim not in ("expected", "max"):
            raise ValueError(
                f"preempt_tardy_victim must be 'expected' or 'max', got {self.preempt_tardy_victim!r}"
            )


ADMISSIONS = ("utility", "paper", "none")
OBJECTIVES = ("unclamped", "clamped", "lex")


# -------------------------------------------------------------------------------- ordering
class TimelyRanking(Ranking):
    """One decision's order (module docstring) over the index's tiers; built lazily."""

    def __init__(
        self,
        t: float,
        index: PhaseIndex,
        first_promoted: int,
        kept: list[Entry],
        n_window: int,
        deferred: list[Entry],
        tardy_slope: float,
    ) -> None:
        super().__init__(t)
        self._ix = index
        self._q = first_promoted
        self._kept = kept
        self._w = n_window
        self._deferred = deferred
        self.tardy_slope = tardy_slope
        self.n_deferred = len(deferred)  # live generations this decision deferred (diagnostics)

    def __iter__(self) -> Iterator[Generation]:
        ix = self._ix
        ent = ix.entries
        q = self._q
        for item in islice(ix.promoted, q):
            yield ent[item[2]].gen
        for e in self._kept:
            yield e.gen
        for item in ix.live.iter_from(self._w):
            yield ent[item[2]].gen
        for item in ix.promoted.iter_from(q):
            yield ent[item[2]].gen
        for e in self._deferred:
            yield e.gen
        for item in ix.late:
            yield ent[item[2]].gen

    def promoted(self, gen: Generation) -> bool:
        e = self._ix.entries.get(gen.slot)
        if e is None or e.gen is not gen or e.phase != PROMOTED:
            return False
        assert e.item is not None  # a PROMOTED entry sits in the promoted tier
        return self._q >= len(self._ix.promoted) or e.item < self._ix.promoted[self._q]


class UtilityAccrualPriority(PriorityStrategy):
    """EDF on segment deadlines in underload, PUD-based deferral under overload, bounded late tier."""

    name = "ua-edf"
    dynamic = True

    def __init__(self, options: TimelyOptions | None = None) -> None:
        self.opt = opt = options or TimelyOptions()
        self.max_batch = DEFAULT_MAX_BATCH
        # "lex" keeps late work in the order and costing like "unclamped"; only the test differs
        self.unclamped = opt.objective in ("unclamped", "lex")
        self.lex = opt.objective == "lex"
        # unclamped: no late tier (late work keeps costing), and it counts in the tardy slope
        self.index = PhaseIndex(
            opt.aging,
            opt.critical_zero,
            opt.late_tier and not self.unclamped,
            late_costs=self.unclamped,
            chain=opt.chain,
        )
        self._hint = 0  # least removals of the last decision (search start)

    def fixed_key(self, arrival: float, ert: float) -> float:
        return arrival

    def add(self, gen: Generation) -> None:
        check_estimate(gen)
        self.index.add(gen)

    def discard(self, gen: Generation) -> None:
        self.index.discard(gen.slot)

    def update(self, gen: Generation) -> None:
        check_estimate(gen)
        if gen.slot in self.index.entries:
            self.index.discard(gen.slot)
            self.index.add(gen)

    def rank(self, t: float, running: list[Generation], max_batch: int) -> TimelyRanking:
        opt = self.opt
        ix = self.index
        self.max_batch = m = max(1, int(max_batch))
        ix.advance(t)
        ends = []
        run_promoted = 0
        for r in running:
            end = r.seg_start + r.g
            ends.append(end if end > t else t)  # nan seg_start (not started): free now
            if opt.promoted_share < 1.0 and r.seg_start == r.seg_start:
                run_promoted += Entry(r, opt.aging).phase_at(r.seg_start) == PROMOTED
        n_prom = len(ix.promoted)
        q = (
            n_prom
            if opt.promoted_share >= 1.0
            else min(n_prom, max(0, math.ceil(opt.promoted_share * m) - run_promoted))
        )
        ent = ix.entries
        window = [ent[item[2]] for item in ix.live.head(opt.window)]
        kept, deferred = window, []
        if opt.ua_defer:
            tested = window if ix.late_tier or self.unclamped else [e for e in window if e.phase != LATE]
            if len(tested) > 1:
                ends.sort()
                slots = [t] * (m - len(ends)) + ends[:m] if len(ends) < m else ends[:m]
                gone = self._ua_removed(t, slots, tested)
                if gone:
                    kept = [e for e in window if e.slot not in gone]
                    deferred = sorted(
                        (e for e in window if e.slot in gone),
                        key=lambda e: (-gone[e.slot][0], -gone[e.slot][1], e.item),
                    )
        return TimelyRanking(t, ix, q, kept, len(window), deferred, ix.tardy_slope())

    def _ua_removed(self, t: float, slots: list[float], live: list[Entry]) -> dict[int, tuple[float, float]]:
        """The live generations the utility-accrual test defers: slot -> (tier, density) (module
        docstring; deferred ones are served highest first)."""
        m = len(slots)
        s0 = 0.0
        for f in slots:
            s0 += f - t
        last = slots[-1]
        k = len(live)
        crit = [e.item[0] for e in live]  # type: ignore[index]  # live: indexed (no check per decision)
        g = [e.g for e in live]
        rank = [k] * k  # removal rank of each live item (k: never removed)
        if self.lex:  # live work can still be saved: ONTIME by D, TARDY by Z; late work only takes its slot
            crit = [c if e.phase != LATE else INF for c, e in zip(crit, live, strict=True)]
        elif self.unclamped:  # only on-time work can still be saved; tardy work only takes its slot
            crit = [c if e.phase == ONTIME else INF for c, e in zip(crit, live, strict=True)]

        def feasible(r: int) -> bool:
            prior = 0.0
            j = 0
            for i in range(k):
                if rank[i] < r:
                    continue
                if j < m:
                    start = slots[j]
                else:
                    start = t + (s0 + prior) / m
                    if start < last:
                        start = last
                gi = g[i]
                if start + gi > crit[i]:
                    return False
                prior += gi
                j += 1
            return True

        if feasible(0):
            self._hint = 0
            return {}
        # removal order: lowest (tier, density) first; ties: latest critical time, then newest.
        # "lex": late work (tier 0) yields before live work (tier 1); late work by cost density |α|/G
        # (each further second still costs |α|: Smith's rule for weighted tardiness), live work by
        # PUD U/G (the utility still to be saved). "unclamped": every segment by |α|/G, so normal
        # work yields to urgent work first. "clamped": PUD.
        if self.lex:
            pud = [(1.0, e.utility(t) / e.g) if e.phase != LATE else (0.0, e.cost_density()) for e in live]
        elif self.unclamped:
            pud = [(0.0, e.cost_density()) for e in live]
        else:
            pud = [(0.0, e.utility(t) / e.g) for e in live]
        if self.opt.preempt_claim:  # a preemption victim is deferred last
            pud = [(2.0, p[1]) if e.gen.partial else p for p, e in zip(pud, live, strict=True)]
        removal = sorted(range(k), key=lambda i: (pud[i], -live[i].item[0], -live[i].seq))  # type: ignore[index]  # live: indexed
        for pos, i in enumerate(removal):
            rank[i] = pos
        r = self._hint = _least_removals(feasible, k, self._hint)
        return {live[i].slot: pud[i] for i in removal[:r]}


def _least_removals(feasible: Callable[[int], bool], k: int, hint: int) -> int:
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


def _gen_utility(end: float, gen: Generation) -> float:
    """Clamped utility of ``gen``'s segment if its generation ends at ``end`` (action ``net`` later)."""
    u = utility(waiting_time(end, gen.net, gen.ref), gen.ert_k, gen.alpha, gen.beta)
    return u if u > 0.0 else 0.0


def _tokens_expected(g: Generation, t1: float) -> int:
    """Expected tokens of a segment: its estimate G in tokens at the single-sequence step time,
    capped at the skill set's maximum segment length."""
    expected = int(math.ceil(g.g / t1)) if t1 > 0.0 else g.max_seg_tokens
    return min(expected, g.max_seg_tokens)


def _tokens_left(r: Generation, t1: float) -> int:
    """Expected tokens left in a running generation's segment (at least one)."""
    left = _tokens_expected(r, t1) - r.seg_tokens
    return left if left > 1 else 1


class UtilityGuidedAdmission(Admission):
    """Latency-guided batch size as a utility trade (module docstring)."""

    name = "utility-guided"

    def __init__(
        self,
        group: bool = False,
        capacity: bool = True,
        promise: bool = True,
        bare_g: bool = False,
        keep_due: bool = False,
        gain_floor: float = 0.0,
        floor_free: int = 1,
    ) -> None:
        self.keep_due = keep_due
        # A deferral keeps slots idle on a *predicted* gain (step model, expected segment lengths);
        # a gain of a fraction of a percent of what the candidates are worth is within that
        # prediction's error, yet each such hold can release several slack-rich prompts together
        # just before an urgent burst finds every slot taken (docs/scheduling.md, "Where `timely`
        # still trails"). The floor is relative to the candidates' β so that it scales with the
        # utility at stake, whatever the workload's units.
        self.gain_floor = gain_floor
        # A clump needs several idle slots filled at once: with floor_free = 2 a single free slot
        # (saturation at small caps, where every small trade counts) keeps every trade.
        self.floor_free = floor_free
        self.group = group
        self.capacity = capacity
        self.promise = promise
        self.bare_g = bare_g
        self.model = StepModel()
        self.max_batch = DEFAULT_MAX_BATCH
        self.refused = 0
        self._pass_at = math.nan  # time of the decision that already admitted a new prompt
        self._promised: dict[int, float] = {}  # gen_id -> time it was deferred to
        self._promised_gen: dict[int, Generation] = {}  # gen_id -> the deferred generation
        self.ledger = DeferralLedger()  # every promise and what became of it (core.sched.deferral_ledger)
        self._batch = 0  # running generations at the current decision
        self._refused_at = math.nan  # time of the last refusal

    def observe(self, t: float, running: list[Generation], max_batch: int) -> None:
        self.max_batch = max(1, int(max_batch))
        self._batch = len(running)
        self.model.observe(t)
        self.ledger.decision(t)
        if len(self._promised) > PROMISES_KEPT:  # generations that left without being admitted
            self._promised = {k: v for k, v in self._promised.items() if v > t - 1.0}
            self._promised_gen = {k: self._promised_gen[k] for k in self._promised}
            self.ledger.forget_before(t - 1.0)

    def decided(self, t: float, running: list[Generation], picked: list[Generation]) -> None:
        self.model.record_decision(t, list(running), picked)
        self.ledger.decided(self.max_batch - len(running) - len(picked), self._refused_at == t)

    def allow(
        self, t: float, cand: Generation, running: list[Generation], speed: float | None, ranking: Ranking
    ) -> bool:
        b = len(running)
        tb = self.model.step(b)
        if not running or tb is None or ranking.promoted(cand):
            return self._admit(t, cand)
        promised = self._promised.get(cand.gen_id)
        if promised is not None and t >= promised:
            return self._admit(t, cand)  # an earlier decision deferred it until now: keep its word
        free = max(1, self.max_batch - b)
        group = ranking.group(cand, free if self.group else 1)
        k = len(group)
        dstep = (self.model.step(b + k) or tb) - tb
        t1 = self.model.step(1) or tb
        # one prefill pass per step: only the first new prompt of this step pays its fixed cost
        pre = 0.0
        if cand.context is None and self._pass_at != t:
            pre = self.model.prefill_pass(b) or 0.0
        losers: list[tuple[float, float, Generation]] = []  # (F_r, its loss if admitted now, r)
        for r in running:
            f = t + _tokens_left(r, t1) * tb
            loss = _gen_utility(f, r) - _gen_utility(f + pre + _tokens_left(r, t1) * dstep, r)
            if loss > 0.0:
                losers.append((f, loss, r))
        if not losers:
            return self._admit(t, cand)
        losers.sort(key=lambda x: x[0])
        behind = 0.0
        if self.capacity:  # the idle slots delay the tardy backlog behind the group by about k·wait/M
            behind = ranking.tardy_slope + sum(
                c.alpha for c in group if c.alpha < 0.0 and t + c.g > c.deadline()
            )
        if self.bare_g:
            gain, until = self._bare_g_gain(t, group, losers, pre, behind)
            saved, cost = gain, 0.0
        else:
            gain, until, saved, cost = self._best_deferral(
                t, cand, group, losers, pre, tb, dstep, t1, free, behind, ranking
            )
        floor = self.gain_floor if self.max_batch - b >= self.floor_free else 0.0
        if gain > 0.0 and gain > floor * sum(c.beta for c in group):
            if self.promise:
                # a later trade may bring the promise forward, never push it back: re-deferring at
                # every step moved urgent first segments past their promise while slots were free
                if promised is None or until < promised:
                    self._promised[cand.gen_id] = until
                    self._promised_gen[cand.gen_id] = cand
                    self.ledger.deferred(t, cand, until, gain, saved, cost)
            self.refused += 1
            self._refused_at = t
            return False
        return self._admit(t, cand)

    def _best_deferral(
        self,
        t: float,
        cand: Generation,
        group: list[Generation],
        losers: list[tuple[float, float, Generation]],
        pre: float,
        tb: float,
        dstep: float,
        t1: float,
        free: int,
        behind: float,
        ranking: Ranking,
    ) -> tuple[float, float, float, float]:
        """(largest net gain of deferring the group to the end of one of the losers, that end, what
        that deferral saves the running generations, what it costs the group)."""
        # A deferred new prompt rides a prefill pass that another new prompt, not admitted now
        # anyway, will open when enough slots have freed: from that deferral point on, the running
        # generations pay no extra pass for the group.
        shared_from = len(losers)
        if pre > 0.0:
            ahead = ranking.group(cand, free + len(losers))
            for idx in range(max(1, free), len(ahead)):
                if ahead[idx].context is None:
                    shared_from = idx - free
                    break
        ends = [t + pre + _tokens_expected(c, t1) * (tb + dstep) for c in group]
        best, until, best_saved, best_cost = 0.0, t, 0.0, 0.0
        for j, (tj, _, _) in enumerate(losers):
            wait = tj - t
            pre_later = 0.0 if j >= shared_from else pre
            saved = 0.0
            for i, (f, loss, r) in enumerate(losers):
                if i <= j:
                    saved += loss  # it ends before the deferred admission: spared entirely
                else:  # still running then: it pays the pass and the slowdown of its last tokens
                    later = (f - tj) / tb * dstep
                    saved += loss - (_gen_utility(f, r) - _gen_utility(f + pre_later + later, r))
            cost = behind * len(group) * wait / self.max_batch if behind > 0.0 else 0.0
            for c, e in zip(group, ends, strict=True):
                cost += _gen_utility(e, c) - _gen_utility(e + wait, c)
            if saved - cost > best:
                best, until, best_saved, best_cost = saved - cost, tj, saved, cost
        return best, until, best_saved, best_cost

    def _bare_g_gain(
        self,
        t: float,
        group: list[Generation],
        losers: list[tuple[float, float, Generation]],
        pre: float,
        behind: float,
    ) -> tuple[float, float]:
        """The earlier rule (ablation ``timely-adm-g``): the candidates' ends by their bare
        estimate G, and waiting until the first loser ends credited with every loser's loss."""
        t_d = losers[0][0]
        own = sum(_gen_utility(t + pre + c.g, c) - _gen_utility(t_d + c.g, c) for c in group)
        if behind > 0.0 and t_d > t:
            own += behind * len(group) * (t_d - t) / self.max_batch
        gain = sum(x[1] for x in losers) - own
        return (gain, t_d) if gain > 0.0 else (0.0, t)

    def due(self, t: float) -> list[Generation]:
        """With ``keep_due`` (variant ``timely-adm-keepdue``): the queued generations whose promise is
        due at ``t`` and whom a further wait would cost utility, earliest promise first; the
        scheduler admits them past a refused candidate (:meth:`Scheduler.select`). Default: none.

        Why a variant and not the default: a refusal blocks every candidate behind it (no
        overtaking), so a later trade for a candidate ranked ahead breaks an earlier trade's promise
        beside free slots — the deferral ledger counts such breaks and what they cost the promised
        candidate (up to 5.5 utility on a stress row: wid2 bursts ×0.35, one robot per task, cap 12).
        Keeping those promises cuts that cost (5.5 → 0.6 there) but loses more than it saves
        elsewhere: admitting the promised candidate slows the running generations the newer trade
        protects (×0.35 at cap 16: urgent 79.7 → 76.4 %Σβ, normal 68.8 → 68.5; ×0.5 at cap 16:
        86.9 → 85.8 and 90.7 → 87.8), and keeping
        every due promise, even of candidates still on time, cost WID 2's urgent tasks 0.9 utility.
        The ledger sees only the promised candidate's side of the trade."""
        if not self.keep_due or not self._promised:
            return []
        b = self._batch
        tb = self.model.step(b + 1)
        if tb is None:
            return []
        t1 = self.model.step(1) or tb
        out = []
        for gid, p in self._promised.items():
            if t >= p:
                g = self._promised_gen.get(gid)
                if g is None or g.slot < 0:  # left the queue (the scheduler sets -1 on removal)
                    continue
                pre = (self.model.prefill_pass(b) or 0.0) if g.context is None else 0.0
                end = t + pre + _tokens_expected(g, t1) * tb
                if _gen_utility(end + tb, g) < _gen_utility(end, g):  # another step would cost it
                    out.append((p, gid, g))
        out.sort(key=lambda x: (x[0], x[1]))
        return [g for _, _, g in out]

    def taken(self, t: float, cand: Generation) -> None:
        self._admit(t, cand)  # its promise is settled and this step holds its prefill pass

    def _admit(self, t: float, cand: Generation) -> bool:
        self._promised.pop(cand.gen_id, None)
        self._promised_gen.pop(cand.gen_id, None)
        self.ledger.admitted(t, cand)
        if cand.context is None:  # this step now holds a prefill pass
            self._pass_at = t
        return True


# -------------------------------------------------------------------------------- strategies
def timely_strategies(options: TimelyOptions | None = None) -> tuple[PriorityStrategy, Admission]:
    """Fresh (priority, admission) objects of the robust ``timely`` policy."""
    opt = options or TimelyOptions()
    prio = UtilityAccrualPriority(opt)
    adm: Admission
    if opt.admission == "utility":
        adm = UtilityGuidedAdmission(
            group=opt.adm_group,
            capacity=opt.adm_capacity,
            promise=opt.adm_promise,
            bare_g=opt.adm_bare_g,
            keep_due=opt.adm_keep_due,
            gain_floor=opt.adm_gain_floor,
            floor_free=opt.adm_floor_free,
        )
    elif opt.admission == "paper":
        adm = LatencyGuidedAdmission()
    else:
        adm = Admission()
    return prio, adm


# Ablation variants (bench/ablation.py): each switches one change off (or all: timely-edf-dyn). Each
# is a member of core.sched.policies.PolicyName, whose factory builds it with timely_strategies(VARIANTS[name]).
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
    "timely-edf-dyn": TimelyOptions(
        ua_defer=False, late_tier=False, aging=0.0, critical_zero=False, admission="none"
    ),
    "timely-full-ua": TimelyOptions(window=1 << 30),
    "timely-adm-nopromise": TimelyOptions(adm_promise=False),
    "timely-adm-g": TimelyOptions(adm_bare_g=True, adm_promise=False),
    "timely-clamped": TimelyOptions(objective="clamped"),
    "timely-unclamped": TimelyOptions(objective="unclamped", preempt_claim=False),
    "timely-no-claim": TimelyOptions(preempt_claim=False),
    "timely-adm-keepdue": TimelyOptions(adm_keep_due=True),
    "timely-floor05": TimelyOptions(adm_gain_floor=0.005),
    "timely-floor1": TimelyOptions(adm_gain_floor=0.01),
    "timely-floor2": TimelyOptions(adm_gain_floor=0.02),
    "timely-floor1-idle2": TimelyOptions(adm_gain_floor=0.01, adm_floor_free=2),
    "timely-no-chain": TimelyOptions(chain=False),
    "timely-no-preempt": TimelyOptions(preempt=0),
    "timely-preempt2": TimelyOptions(preempt=2),
    "timely-preempt-again": TimelyOptions(preempt=1, preempt_outrun="again"),
    "timely-preempt-ontime": TimelyOptions(preempt=1, preempt_tardy=False),
    "timely-preempt-late": TimelyOptions(preempt=1, preempt_tardy_victim="expected"),
    "timely-preempt-late0": TimelyOptions(
        preempt=1, preempt_tardy_victim="expected", preempt_tardy_live=True
    ),
}
