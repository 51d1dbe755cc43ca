"""The admission's deferrals, each promise checked against what actually happened.

Why: the utility-guided admission (:mod:`.policy_timely`) may keep a candidate waiting while a batch
slot is free, and only when its step model says the wait saves the running generations more utility
than it costs the candidate; the refusal then *promises* admission at the deferral point it assumed
(the end of a losing running segment). That is a prediction. This ledger records every promise and
what became of it, so a run can show that no segment waited beside a free slot for nothing:

* a **deferral** is one segment of one generation refused at least once with a free slot (its
  first refusal time ``t``, its promise ``p`` — the latest one, a later trade may only bring it
  forward — and the trade's expected gain, saved and cost);
* the promise is **due** at the first decision at or after ``p``;
* it is **kept** when the segment is admitted no later than that decision (or before ``p``), and
  **broken** when it is admitted later, by ``delay`` = admission − due decision; a broken promise is
  *full* when the batch was full after that decision (work ranked ahead of it took the slots:
  higher priority, not a trade) and *free* when a slot stayed free — then *behind a refusal* when
  that decision refused a candidate ranked ahead of it (a newer trade: no overtaking; the variant
  ``timely-adm-keepdue`` lets such a promise overtake, see :meth:`UtilityGuidedAdmission.due`), and
  otherwise *unexplained* (KV memory short, or a bug: a promised candidate reached at its due
  decision is always admitted);
* after the run (:func:`outcomes`), from the task records: what the whole wait (admission − ``t``)
  cost the deferred segment, and what a broken promise's extra delay cost it — its Eq. 1 utility
  (TUF_0 of the response time for a first segment, TUF_1 of its waiting time after, §4.2) had it
  started that much earlier, the rest of its timeline unchanged.

What the ledger cannot measure is the other half of the trade — what the protected running
generations really gained: that needs the schedule that did not happen. The realized cost to the
deferred segments beside the trades' expected cost is the check the ledger does make.

Counters are exact; the per-deferral entries are kept up to :data:`KEPT` (a long-running planner
does not grow without bound; a simulated run never reaches it).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from timely_llm_ros.core.tuf import utility

if TYPE_CHECKING:
    from timely_llm_ros.core.generation import Generation, TaskRecord

KEPT = 1 << 17  # closed deferrals kept for :func:`outcomes`
NAN = math.nan


@dataclass(slots=True)
class Deferral:
    """One deferred segment (module docstring)."""

    record: TaskRecord
    k: int  # segment index
    t: float  # first refusal
    promise: float
    gain: float  # expected net gain of the (latest) trade
    saved: float  # ... what it expected to save the running generations
    cost: float  # ... what it expected the wait to cost the candidates
    due: float = NAN  # first decision at or after the promise
    start: float = NAN  # admission
    free_at_due: bool = False  # a batch slot stayed free at the due decision, yet it was not admitted
    behind_refusal: bool = False  # ... and that decision refused a candidate (ranked ahead of it)

    @property
    def broken(self) -> bool:
        return self.due == self.due and self.start > self.due

    @property
    def delay(self) -> float:
        """Admission past the due decision (0 for a kept promise)."""
        return self.start - self.due if self.broken else 0.0


class DeferralLedger:
    """Open promises, the decisions at which they fall due, and the closed deferrals."""

    def __init__(self) -> None:
        self.open: dict[int, Deferral] = {}  # gen_id -> its open deferral
        self.closed: deque[Deferral] = deque(maxlen=KEPT)
        self._due: list[tuple[float, int]] = []  # (promise, gen_id), stale entries skipped
        self._just_due: list[Deferral] = []  # fell due at the current decision
        self.deferrals = 0
        self.kept = 0
        self.broken = 0
        self.broken_free = 0

    def deferred(
        self, t: float, gen: Generation, promise: float, gain: float, saved: float, cost: float
    ) -> None:
        """A refusal of ``gen`` at ``t`` promising admission at ``promise``."""
        d = self.open.get(gen.gen_id)
        if d is None or d.k != gen.k:
            d = Deferral(gen.record, gen.k, t, promise, gain, saved, cost)
            self.open[gen.gen_id] = d
            self.deferrals += 1
        elif promise < d.promise:  # brought forward (never pushed back: policy_timely)
            d.promise, d.gain, d.saved, d.cost = promise, gain, saved, cost
        else:
            return
        heapq.heappush(self._due, (promise, gen.gen_id))

    def decision(self, t: float) -> None:
        """A decision at ``t``: the promises up to ``t`` fall due now (if not already)."""
        heap = self._due
        while heap and heap[0][0] <= t:
            p, gid = heapq.heappop(heap)
            d = self.open.get(gid)
            if d is not None and d.promise == p and d.due != d.due:
                d.due = t
                self._just_due.append(d)

    def decided(self, free_left: int, refused: bool = False) -> None:
        """The end of that decision, ``free_left`` batch slots still free, ``refused`` whether it
        refused a candidate: a promise that fell due now and is still open is broken."""
        for d in self._just_due:
            if d.start != d.start and free_left > 0:
                d.free_at_due = True
                d.behind_refusal = refused
        self._just_due.clear()

    def admitted(self, t: float, gen: Generation) -> None:
        d = self.open.pop(gen.gen_id, None)
        if d is None or d.k != gen.k:
            return
        d.start = t
        if d.broken:
            self.broken += 1
            self.broken_free += d.free_at_due
        else:
            self.kept += 1
        self.closed.append(d)

    def forget_before(self, t: float) -> None:
        """Drop open deferrals of generations that left unadmitted (cancelled) before ``t``."""
        self.open = {g: d for g, d in self.open.items() if d.promise > t}


def _waiting(rec: TaskRecord, k: int) -> float:
    w = rec.waiting_times()
    return w[k] if k < len(w) else NAN


def _seg_utility(rec: TaskRecord, k: int, w: float) -> float:
    tuf = rec.tuf
    if tuf is None:
        return NAN
    return utility(w, tuf.ert if k == 0 else 0.0, tuf.alpha, tuf.beta)


def outcomes(ledger: DeferralLedger) -> dict[str, Any]:
    """The ledger's summary after a run (module docstring): counts, and utilities (Eq. 1, unclamped)
    of the deferred segments whose actions started — overall, and per task class as
    ``<class>_<key>`` (``urgent_promises_broken``, ...)."""
    out = _summary(list(ledger.closed))
    out["deferrals"] = ledger.deferrals  # exact even past KEPT
    out["promises_kept"] = ledger.kept
    out["promises_broken"] = ledger.broken
    out["promises_broken_free"] = ledger.broken_free
    out["promises_open"] = len(ledger.open)
    by_class: dict[str, list[Deferral]] = {}
    for d in ledger.closed:
        by_class.setdefault(d.record.task_class or "-", []).append(d)
    for cls, ds in sorted(by_class.items()):
        out.update({f"{cls}_{k}": v for k, v in _summary(ds).items()})
    return out


def _summary(closed: list[Deferral]) -> dict[str, Any]:
    broken_cost = wait_cost = first_broken_cost = free_cost = gain = cost = worst = 0.0
    n_broken = n_free = n_unexplained = 0
    for d in closed:
        gain += d.gain
        cost += d.cost
        n_broken += d.broken
        n_free += d.broken and d.free_at_due
        n_unexplained += d.broken and d.free_at_due and not d.behind_refusal
        w = _waiting(d.record, d.k)
        if w != w:
            continue
        u = _seg_utility(d.record, d.k, w)
        wait_cost += _seg_utility(d.record, d.k, w - (d.start - d.t)) - u
        if d.broken:
            c = _seg_utility(d.record, d.k, w - d.delay) - u
            broken_cost += c
            if d.free_at_due:
                free_cost += c
            worst = max(worst, c)
            if d.k == 0:
                first_broken_cost += c
    return {
        "deferrals": len(closed),
        "promises_kept": len(closed) - n_broken,
        "promises_broken": n_broken,
        "promises_broken_free": n_free,  # ... with a batch slot free at the due decision
        "promises_broken_unexplained": n_unexplained,  # ... and no refusal ahead of it then
        "broken_cost": broken_cost,  # utility the broken promises' extra delays cost (all segments)
        "broken_cost_first": first_broken_cost,  # ... of first segments: what %Σβ counts
        "broken_cost_worst": worst,
        "broken_free_cost": free_cost,  # ... of those broken beside a free slot
        "expected_gain": gain,  # what the trades expected to gain, net
        "expected_cost": cost,  # ... and to cost the deferred candidates
        "wait_cost": wait_cost,  # what the waits really cost the deferred segments
    }
