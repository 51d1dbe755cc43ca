"""Preemption of a running segment for urgent work (``timely``'s default; ``timely-no-preempt`` without).

Why: without it a running segment is never suspended before its end, so an urgent burst that finds
every batch slot taken by ~290 ms normal segments waits for the first of them to end
(docs/scheduling.md, "Where `timely` still trails": the *clump*). Every engine can already suspend a
generation at any token and resume it without re-prefill (:mod:`timely_llm_ros.core.engine`: the
same ``suspend``/``resume`` as at a segment boundary), so the scheduler may free a slot at once:
the planner suspends the chosen running generation mid-segment, keeps its partial segment (tokens
so far, the stop checker's state) and re-queues it; it continues where it stopped.

The rule (:meth:`Preemption.choose`), at a decision that found no free slot, for the next
candidates of the ranking in order (at most ``lookahead`` of them):

* the candidate ``c`` must be worth a slot now: on time if admitted now (``t + E_c ≤ D_c``; or late,
  see ``tardy`` below) and late (or later) if it waits for the earliest expected end of a running segment
  (``F_min + E_c > D_c``), with
  ``E_c`` = a prefill pass (new prompts) + its expected tokens at the current step time;
* the victim ``v`` is the running generation with the lowest cost density ``|α|/G`` (the
  unclamped objective's deferral order) strictly below ``c``'s, whose own deadline still holds
  after the delay: ``F_v + E_c + T(B) ≤ D_v`` (its expected end, plus ``c``'s whole segment, plus one
  step to resume it; for a late candidate ``F_v`` at its maximum segment length); ties: the most
  slack left. Such a ``v`` is on time, hence neither tardy nor
  promoted (promotion only follows lateness), so late or promoted work is never preempted;
* a segment is preempted at most ``max_per_segment`` times (the count restarts with each segment),
  and a generation admitted or resumed in this very step is never a victim (its prompt may not be
  fed yet), so nothing is suspended twice in a row and nothing starves: every preemption is paid
  from slack the victim is expected to keep.

Each victim frees exactly the slot its candidate takes, so the batch never grows. Once re-queued,
the victim keeps the promise it was chosen on (``TimelyOptions.preempt_claim``, default on):
the utility-accrual test never defers it for later arrivals, which would otherwise push it back
until it misses (urgent-heavy bursts ×0.5, seed 33, cap 2: a normal segment preempted at 6.56 s
resumed at 9.29 s).

Options (:class:`~.policy_timely.TimelyOptions`): ``preempt`` = ``max_per_segment`` (0: never
preempt); ``preempt_tardy`` (default on; off: variant ``timely-preempt-ontime``): a candidate
already late if admitted now may preempt as well, as long as waiting for the earliest end delays it
further — under the unclamped objective each further second still costs it ``|α|`` — but with
``preempt_tardy_victim="max"`` (the default) only a victim whose deadline holds even if its segment
runs to the skill set's maximum length (:func:`_left_max`); ``"expected"`` (variant
``timely-preempt-late``) times the victim as for an on-time candidate, ``timely-preempt-late0``
also only while the candidate's utility is still positive;
``preempt_outrun="again"`` (variant ``timely-preempt-again``): a running segment
that has outrun its expected length is expected to run as long again (see :func:`_left_again`).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from itertools import islice

from timely_llm_ros.core.generation import Generation
from timely_llm_ros.core.sched.policy_timely import StepModel, _gen_utility, _tokens_expected, _tokens_left
from timely_llm_ros.core.sched.ua_index import cost_density

__all__ = ["Preemption"]


@dataclass
class Preemption:
    """Which running generations to suspend mid-segment for which queued ones (module docstring).

    ``model`` is the admission's measured step model (the same estimate of step and prefill times
    the utility-guided admission trades with); nothing measured yet: no preemption."""

    model: StepModel
    max_per_segment: int = 1
    lookahead: int = 8
    # a running segment that has outrun its expected length: "expected" counts one token left (the
    # admission's optimistic floor), "again" as many as it has run (capped at the maximum segment)
    outrun: str = "expected"
    # a candidate already late if admitted now may preempt too (each further second still costs it
    # |α| under the unclamped objective); default: only one that is still on time
    tardy: bool = True
    # ... but only while its utility if admitted now is still positive (before its zero-utility time)
    tardy_live: bool = False
    # ... and how the victim's end is timed when the candidate is late: "expected" (as for an on-time
    # candidate) or "max" (its segment runs to the skill set's maximum length: :func:`_left_max`)
    tardy_victim: str = "max"
    count: int = 0  # preemptions decided so far (diagnostics)

    def choose(
        self,
        t: float,
        order: Iterator[Generation],
        running: list[Generation],
        fresh: list[Generation],
        mem_free: int,
    ) -> list[tuple[Generation, Generation]]:
        """(victim, candidate) pairs: suspend each victim, admit its candidate in its slot.

        ``order``: the ranking's candidates after those already picked; ``running``: the batch of
        the next step (``fresh``: those of it admitted or resumed by this decision)."""
        b = len(running)
        tb = self.model.step(b)
        if tb is None or b == 0:
            return []
        t1 = self.model.step(1) or tb
        pre = self.model.prefill_pass(b) or 0.0
        left = _tokens_left if self.outrun == "expected" else _left_again
        ends = {r.gen_id: t + left(r, t1) * tb for r in running}
        pool = [
            r
            for r in running
            if r not in fresh
            and r.mid_resume
            and r.preempted < self.max_per_segment
            and r.seg_tokens > 0
            and r.alpha < 0.0
        ]
        out: list[tuple[Generation, Generation]] = []
        for cand in islice(order, self.lookahead):
            if not pool:
                break
            if cand.alpha >= 0.0 or cand.mem_need > mem_free:
                continue
            e_c = (pre if cand.context is None else 0.0) + _left(cand, t1) * tb
            d_c = cand.deadline()
            if t + e_c > d_c and (not self.tardy or (self.tardy_live and _gen_utility(t + e_c, cand) <= 0.0)):
                continue  # too late to be on time, and late candidates may not preempt
            if min(ends.values()) + e_c <= d_c:
                continue  # cannot be saved now, or can wait for a slot without missing
            worst = t + e_c > d_c and self.tardy_victim == "max"  # a late candidate: time victims long
            dens = cost_density(cand.alpha, cand.g)
            best: tuple[float, float, int] | None = None
            victim = None
            for v in pool:
                dv = cost_density(v.alpha, v.g)
                if dv >= dens:
                    continue
                end_v = t + _left_max(v, t1) * tb if worst else ends[v.gen_id]
                slack = v.deadline() - (end_v + e_c + tb)
                if slack < 0.0:
                    continue
                key = (dv, -slack, v.gen_id)
                if best is None or key < best:
                    best, victim = key, v
            if victim is None:
                continue
            pool.remove(victim)
            del ends[victim.gen_id]
            ends[cand.gen_id] = t + e_c
            mem_free -= cand.mem_need
            out.append((victim, cand))
        self.count += len(out)
        return out


def _left(g: Generation, t1: float) -> int:
    """Expected tokens of a queued generation's segment, less those a preempted one already has."""
    n = _tokens_expected(g, t1) - (g.seg_tokens if g.partial else 0)
    return n if n > 1 else 1


def _left_max(r: Generation, t1: float) -> int:
    """Tokens left of a running victim timed pessimistically for a late candidate: up to the skill
    set's maximum segment length (never fewer than expected).

    Why: an on-time candidate preempts to avoid missing its deadline; a late one gains only ``|α|``
    per second saved. The victim's slack is judged on one estimate G per skill set (which cannot
    tell a short segment from a long one), and a victim pushed past its deadline loses as much, so
    the late candidate's marginal gain is taken only where the victim keeps its deadline even if
    its segment runs long (seed 13 urgent-heavy bursts ×0.35 at cap 2: a late urgent task preempted
    a normal segment judged 27 ms from missing, which then missed; timing the victim "as long again"
    as it has run, like :func:`_left_again`, still preempted it)."""
    n = max(r.max_seg_tokens - r.seg_tokens, _tokens_left(r, t1))
    return n if n > 1 else 1


def _left_again(r: Generation, t1: float) -> int:
    """Tokens left of a running segment, pessimistic once it has outrun its expected length: as many
    again as it has generated, capped at the skill set's maximum segment length.

    Why: one estimate G per skill set cannot tell an urgent drone segment (~4 tokens) from a normal
    first segment (~10-15); a segment already past G says only that it is a long one, and the
    optimistic floor of one token left made an urgent candidate believe a slot was about to free
    when it was ~300 ms away (seed 21 wid1 bursts ×0.35, cap 12)."""
    exp = _tokens_expected(r, t1)
    n = r.seg_tokens
    if n < exp:
        return exp - n
    rest = min(n, r.max_seg_tokens - n)
    return rest if rest > 1 else 1
