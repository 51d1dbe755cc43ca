"""Priority queue of initial and suspended generations, admission strategies and the policies.

Policies (``name`` or ``name@bN`` for a fixed maximum batch N; default N = 8, the reference model's):

==============  =========  ==================================  ======================================
policy          segmented  priority (at every decision)        admission besides batch + KV memory
==============  =========  ==================================  ======================================
timely-paper    yes        PUD, Eq. 4 (:mod:`.priority`)       §4.4 latency-guided check
timely          yes        utility accrual, segment EDF (*)    utility-guided (*)
fcfs-seg        yes        arrival (fixed)                     none
fcfs-requeue    yes        queue entry (re-queued at the back) none
edf-seg         yes        arrival + ERT (fixed)               none
vllm            no         arrival                             none; whole plan dispatched at the end
vllm-stream     no         arrival                             none; each statement dispatched at once
==============  =========  ==================================  ======================================

(*) :mod:`.policy_timely`: EDF on segment deadlines in underload, PUD-based deferral under
overload, a bounded late tier, and an admission that trades measured latency against utility.

**§4.4 latency-guided admission as implemented** (:class:`LatencyGuidedAdmission`): before each
admission, among the running generations (those admitted earlier in the same decision included)
take the most urgent one ``r*`` = the one with the smallest slack ``L_r = D_r − t``, where
``D_r = ref + ERT_k − net`` is the latest end of its current segment's generation. Its worst-case
remaining generation time is ``WCET = max(0, M − n) / v`` with ``M`` the skill set's maximum segment
length, ``n`` the tokens it generated in its current segment and ``v`` the engine's measured
per-sequence decode speed (:meth:`Engine.speed`, pure decode steps only). Admit only if
``WCET ≤ L_r``. With no generation running, or no speed measured yet, the check passes (the paper's
"lag for one generation": the effect of an admission is measured, not predicted). Read literally this
refuses admissions while any running generation is already late (``L_r ≤ 0``), which stalls the
engine behind late work; ``timely-paper`` keeps it.

Every policy also needs a free batch slot and ``mem_need ≤`` free KV memory (suspended contexts
are evictable); a candidate that fails any check blocks the ones behind it (no overtaking), as in
vLLM's FCFS waiting queue. Only a policy with a :class:`~.preemption.Preemption` (``timely``
and its variants but ``timely-no-preempt``) preempts: when no slot is free, :meth:`Scheduler.decide`
may name running generations to suspend mid-segment, each for a queued one that takes its slot
(:class:`Decision`; the planner suspends them through the engine's ``suspend`` and re-queues them);
the other policies never suspend a segment before its end. Every scheduling point (before every
engine iteration) asks the priority strategy for one :class:`~.priority.Ranking` — the service order
at that time; the clock does not move within one decision, so that one ranking orders every
admission of the step, and the admission check of each candidate gets it (the explicit decision
object: which candidates are promoted, which come next, the tardy backlog's utility slope).
Strategies keep their own index of the queue, so a decision costs what changed since the previous
one, not a re-scoring of the whole queue (``bench.sched_overhead`` measures it).

Strategies are small objects (:class:`~.priority.PriorityStrategy`, :class:`~.admission.Admission`);
the policies are a closed set (:class:`~.policies.PolicyName`) built by a plain factory
(:func:`~.policies.parse_policy`); to try a new pairing, pass a :class:`~.policies.Policy` of your own.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from timely_llm_ros.core.generation import Generation
from timely_llm_ros.core.sched.policies import (
    Policy,
    parse_policy,
)
from timely_llm_ros.core.sched.priority import Ranking, check_estimate

__all__ = ["Decision", "Scheduler"]


@dataclass(slots=True)
class Decision:
    """One scheduling decision: generations to admit or resume (removed from the queue), and
    running ones to suspend mid-segment first (``(victim, candidate)``: the candidate, one of
    ``admit``, takes the victim's slot; the caller re-queues the victim, or re-queues the candidate
    if the engine refuses to suspend the victim)."""

    admit: list[Generation]
    suspend: list[tuple[Generation, Generation]] = field(default_factory=list)


class Scheduler:
    """Priority queue of generations plus the admission decision of one engine step.

    The queue itself lives in the policy's :class:`~.priority.PriorityStrategy` (each keeps the index
    its order needs); the scheduler gives every queued generation a unique ticket (``gen.slot``) and
    runs the decision: one :class:`~.priority.Ranking` per decision, candidates taken in its order
    while batch, memory and the admission check allow (no overtaking)."""

    def __init__(self, policy: str | Policy) -> None:
        self.policy = parse_policy(policy)
        self._prio = self.policy.priority
        self._adm = self.policy.admission
        self._gens: dict[int, Generation] = {}
        self._ticket = 0
        self.decisions = 0

    def __len__(self) -> int:
        return len(self._gens)

    def __contains__(self, gen: Generation) -> bool:
        return self._gens.get(gen.slot) is gen

    def push(self, gen: Generation) -> None:
        """Queue an initial or suspended generation (its fields say which segment comes next)."""
        if gen in self:
            raise ValueError(f"generation {gen.gen_id} is already queued")
        check_estimate(gen)
        gen.fixed_key = self._prio.fixed_key(gen.record.arrival, gen.ert)
        self._ticket += 1
        gen.slot = self._ticket
        self._gens[gen.slot] = gen
        self._prio.add(gen)

    def update(self, gen: Generation) -> None:
        """Re-read a queued generation's fields (e.g. after robot feedback moved ``ref``)."""
        if gen in self:
            self._prio.update(gen)

    def remove(self, gen: Generation) -> None:
        if gen not in self:
            return
        del self._gens[gen.slot]
        self._prio.discard(gen)
        gen.slot = -1

    def ranking(self, t: float, running: list[Generation] | tuple[Generation, ...] = ()) -> Ranking:
        """The service order at ``t`` (what :meth:`select` would take first, second, ...)."""
        return self._prio.rank(t, list(running), self.policy.max_batch)

    def order(self, t: float, running: list[Generation] | tuple[Generation, ...] = ()) -> list[Generation]:
        """The whole queue in service order at ``t`` (diagnostics and tests; ``O(n log n)``)."""
        return list(self.ranking(t, running))

    def pop_best(self, t: float) -> Generation | None:
        """One scheduling decision with nothing running: remove and return the best (benchmark)."""
        if not self._gens:
            return None
        gen = next(iter(self.ranking(t)), None)
        if gen is not None:
            self.remove(gen)
        self.decisions += 1
        return gen

    def select(
        self, t: float, running: list[Generation], speed: float | None, mem_free: int
    ) -> list[Generation]:
        """Generations to admit or resume before the next engine step (removed from the queue), never
        preempting (for a caller that cannot suspend running generations; the planner uses
        :meth:`decide`)."""
        return self.decide(t, running, speed, mem_free, preempt=False).admit

    def decide(
        self, t: float, running: list[Generation], speed: float | None, mem_free: int, preempt: bool = True
    ) -> Decision:
        """The decision before the next engine step: what to admit or resume, and (a policy with a
        preemption, ``preempt``) which running generations to suspend first."""
        self._adm.observe(t, running, self.policy.max_batch)
        got = self._select(t, running, speed, mem_free, preempt)
        after = running
        if got.suspend:
            gone = {v.gen_id for v, _ in got.suspend}
            after = [r for r in running if r.gen_id not in gone]
            for _, cand in got.suspend:
                self._adm.taken(t, cand)
        self._adm.decided(t, after, got.admit)
        return got

    def _select(
        self, t: float, running: list[Generation], speed: float | None, mem_free: int, may_preempt: bool
    ) -> Decision:
        free = self.policy.max_batch - len(running)
        if self.policy.admit_per_step is not None:
            free = min(free, self.policy.admit_per_step)
        preempt = self.policy.preemption if may_preempt else None
        if (free <= 0 and preempt is None) or not self._gens:
            return Decision([])
        ranking = self._prio.rank(t, list(running), self.policy.max_batch)
        self.decisions += 1
        picked: list[Generation] = []
        active = list(running)
        order = iter(ranking)
        refused = full = False
        while free > 0:  # ask for the next candidate only while a slot is free (rankings are lazy)
            cand = next(order, None)
            if cand is None:
                break
            if cand.mem_need > mem_free:
                full = True
                break
            if not self._adm.allow(t, cand, active, speed, ranking):
                refused = True
                break
            picked.append(cand)
            active.append(cand)
            mem_free -= cand.mem_need
            free -= 1
        if refused:  # the one exception to no overtaking: a promise an earlier refusal made is kept
            for cand in self._adm.due(t):
                if free <= 0 or cand.mem_need > mem_free:
                    break
                if cand in self and cand not in picked and self._adm.allow(t, cand, active, speed, ranking):
                    picked.append(cand)
                    active.append(cand)
                    mem_free -= cand.mem_need
                    free -= 1
        swaps: list[tuple[Generation, Generation]] = []
        if preempt is not None and free <= 0 and not refused and not full and len(running) > 0:
            per_step = self.policy.admit_per_step
            if per_step is None or len(picked) < per_step:
                swaps = preempt.choose(t, order, active, picked, mem_free)
                if per_step is not None:
                    swaps = swaps[: per_step - len(picked)]
                picked.extend(c for _, c in swaps)
        for gen in picked:
            self.remove(gen)
        return Decision(picked, swaps)
