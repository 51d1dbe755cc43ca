"""Generation priorities: PUD (paper Eq. 4), EDF and FCFS, as small pluggable strategies.

Every queued generation (initial or suspended) is described by plain floats (see
:class:`~timely_llm_ros.core.generation.Generation`): ``ref`` (arrival for the first segment,
estimated end of the previous segment's action otherwise), ``ert_k`` (ERT for k = 0, 0 for k > 0),
``alpha``, ``beta``, ``g`` (segment generation-time estimate G) and ``net`` (planner→robot latency).

**Eq. 4 as implemented** (policy ``timely-paper``; ``t`` = now, a candidate that starts generating
now finishes its segment at ``t + G`` and its action can start ``net`` later):

* ``W(s_k; t) = t + G + net − ref`` — for k = 0 the response time if generation starts now; for
  k > 0 the delay of the action past the previous action's estimated end (negative: early);
* utility ``U = min(β, α·(max(W, 0) − ERT_k) + β)`` — TUF_0(W) for k = 0 (there W ≥ G > 0), and
  TUF_1(W) = min(β, α·max(W, 0) + β) for k > 0 (§4.2);
* slack ``L = ERT_k − W`` = (latest generation end ``ref + ERT_k − net``) − (expected generation end
  ``t + G``): how long the generation could still wait and meet its deadline;
* guard: ``L`` is replaced by ``max(L, L_MIN)`` with ``L_MIN`` = 1 ms. Eq. 4 divides by L; without
  the guard a generation would get an infinite priority at L = 0 and a sign-flipped one past it.
  With the guard a late generation keeps the largest priority its utility allows — which is the
  most negative one once its utility is below 0: the literal Eq. 4 starves such tasks;
  ``timely-paper`` keeps that on purpose;
* ``Pri = U / (G · max(L, L_MIN))``, larger first; ties by submission order.

EDF (``edf-seg``) ranks by the task's fixed deadline ``arrival + ERT`` and FCFS by arrival, for all
segments (§7.3.2: "maintaining the initial generation priority for suspended generations").

Each strategy scores a whole queue at once, in pure Python for short queues and with numpy for long
ones; both paths perform the same IEEE operations in the same order, so they agree bit for bit.
"""

from __future__ import annotations

import numpy as np

L_MIN = 1e-3  # seconds; slack guard of Eq. 4 (see module docstring)


def waiting_estimate(t: float, ref: float, g: float, net: float) -> float:
    """W(s_k; t) = t + G + net − ref."""
    return t + g + net - ref


def slack(t: float, ref: float, ert_k: float, g: float, net: float) -> float:
    """L = ERT_k − W(s_k; t) (unguarded)."""
    return ert_k - (t + g + net - ref)


def pud_priority(t: float, ref: float, ert_k: float, alpha: float, beta: float, g: float, net: float,
                 l_min: float = L_MIN) -> float:
    """Eq. 4 for one generation (reference implementation; the strategies inline the same formula)."""
    w = t + g + net - ref
    u = min(beta, alpha * (max(w, 0.0) - ert_k) + beta)
    return u / (g * max(ert_k - w, l_min))


class QueueColumns:
    """Column store of the queue: Python lists (short queues) mirrored in numpy arrays (long ones).

    Slots are dense ``0..n-1``; removal moves the last slot into the hole.
    """

    FIELDS = ("ref", "ert_k", "alpha", "beta", "g", "net", "fixed", "seq")

    def __init__(self, capacity: int = 64) -> None:
        self.n = 0
        self.cols: dict[str, list[float]] = {f: [] for f in self.FIELDS}
        self.arrs: dict[str, np.ndarray] = {f: np.empty(capacity) for f in self.FIELDS}

    def append(self, values: tuple[float, ...]) -> int:
        slot = self.n
        if slot == len(self.arrs["ref"]):
            for f in self.FIELDS:
                a = np.empty(2 * slot)
                a[:slot] = self.arrs[f]
                self.arrs[f] = a
        for f, v in zip(self.FIELDS, values, strict=True):
            self.cols[f].append(v)
            self.arrs[f][slot] = v
        self.n = slot + 1
        return slot

    def set(self, slot: int, values: tuple[float, ...]) -> None:
        for f, v in zip(self.FIELDS, values, strict=True):
            self.cols[f][slot] = v
            self.arrs[f][slot] = v

    def remove(self, slot: int) -> int:
        """Remove ``slot``; return the old index of the slot moved into it (or -1)."""
        last = self.n - 1
        for f in self.FIELDS:
            col = self.cols[f]
            v = col.pop()
            if slot != last:
                col[slot] = v
                self.arrs[f][slot] = v
        self.n = last
        return last if slot != last else -1


class PriorityStrategy:
    """Scores a queue; larger scores are fetched first. ``dynamic``: scores depend on ``t``."""

    name = "base"
    dynamic = False

    def fixed_key(self, arrival: float, ert: float) -> float:
        """Time-independent score stored with each entry (static strategies)."""
        return 0.0

    def observe(self, t: float, running: list, max_batch: int) -> None:
        """Told the running generations and the batch cap before each decision (default: ignored)."""

    def scores_py(self, t: float, c: dict[str, list[float]], n: int) -> list[float]:
        return c["fixed"][:n]

    def scores_np(self, t: float, a: dict[str, np.ndarray], n: int) -> np.ndarray:
        return a["fixed"][:n]


class FCFSPriority(PriorityStrategy):
    """First come, first served: score = −arrival (all segments keep the task's arrival)."""

    name = "fcfs"

    def fixed_key(self, arrival: float, ert: float) -> float:
        return -arrival


class EDFPriority(PriorityStrategy):
    """Earliest deadline first on the task's initial deadline ``arrival + ERT``."""

    name = "edf"

    def fixed_key(self, arrival: float, ert: float) -> float:
        return -(arrival + ert)


class PUDPriority(PriorityStrategy):
    """Paper Eq. 4 (see module docstring), recomputed at every fetch."""

    name = "pud"
    dynamic = True

    def __init__(self, l_min: float = L_MIN) -> None:
        if not l_min > 0:
            raise ValueError("l_min must be > 0")
        self.l_min = l_min

    def scores_py(self, t: float, c: dict[str, list[float]], n: int) -> list[float]:
        lm = self.l_min
        out = []
        for ref, e, al, be, g, net in zip(c["ref"], c["ert_k"], c["alpha"], c["beta"], c["g"], c["net"],
                                               strict=True):
            w = t + g + net - ref
            u = al * ((w if w > 0.0 else 0.0) - e) + be
            if u > be:
                u = be
            sl = e - w
            out.append(u / (g * (sl if sl > lm else lm)))
        return out

    def scores_np(self, t: float, a: dict[str, np.ndarray], n: int) -> np.ndarray:
        g = a["g"][:n]
        w = ((t + g) + a["net"][:n]) - a["ref"][:n]
        be = a["beta"][:n]
        u = np.minimum(a["alpha"][:n] * (np.maximum(w, 0.0) - a["ert_k"][:n]) + be, be)
        sl = np.maximum(a["ert_k"][:n] - w, self.l_min)
        return u / (g * sl)
