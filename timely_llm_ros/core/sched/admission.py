"""Admission checks: may a candidate join the running batch in this step (besides batch and memory)?

Why a module of its own: the policies (:mod:`.policies`) pair an admission with a priority strategy,
and the robust ``timely`` policy (:mod:`.policy_timely`) builds on these classes, while the scheduler
(:mod:`.scheduler`) only calls them. Keeping them below all three lets every import point one way.

Every check gets the decision's :class:`~.priority.Ranking` — the explicit decision object of the
priority strategy (the service order, which candidates are promoted, the tardy backlog's utility
slope) — and reads nothing else of the strategy.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from timely_llm_ros.core.generation import Generation
    from timely_llm_ros.core.sched.priority import Ranking

DEFAULT_MAX_BATCH = 8  # maximum batch of a policy without @bN (the reference model's)


class Admission:
    """Extra admission check (batch size and memory are checked by the scheduler itself)."""

    name = "none"

    def allow(
        self, t: float, cand: Generation, running: list[Generation], speed: float | None, ranking: Ranking
    ) -> bool:
        """Whether ``cand`` (the next in ``ranking``) may join ``running`` in this step."""
        return True

    def observe(self, t: float, running: list[Generation], max_batch: int) -> None:
        """Called at the start of every decision (default: ignored)."""

    def decided(self, t: float, running: list[Generation], picked: list[Generation]) -> None:
        """Called at the end of every decision with what it admitted or resumed (default: ignored)."""

    def taken(self, t: float, cand: Generation) -> None:
        """``cand`` takes a preempted generation's slot in this decision, without :meth:`allow`
        (:mod:`.preemption`; default: ignored)."""

    def due(self, t: float) -> list[Generation]:
        """Queued generations an earlier refusal promised admission by ``t`` (default: none): the
        scheduler admits them past a refused candidate."""
        return []


class LatencyGuidedAdmission(Admission):
    """Paper §4.4 (see :mod:`.scheduler`'s docstring for the exact rule)."""

    name = "latency-guided"

    def allow(
        self,
        t: float,
        cand: Generation,
        running: list[Generation],
        speed: float | None,
        ranking: Ranking | None = None,
    ) -> bool:
        if not running or speed is None or not speed > 0:
            return True
        urgent = running[0]
        best = urgent.deadline()
        for g in running:
            d = g.deadline()
            if d < best:
                best, urgent = d, g
        remaining = urgent.max_seg_tokens - urgent.seg_tokens
        wcet = remaining / speed if remaining > 0 else 0.0
        return wcet <= best - t
