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

**Strategies keep their own index of the queue** (a decision must not re-score the whole queue:
at 10,000 queued that cost ~20 ms). The scheduler tells a strategy of every queued, updated and removed generation
(:meth:`PriorityStrategy.add` / :meth:`~PriorityStrategy.update` / :meth:`~PriorityStrategy.discard`)
and asks it once per decision for a :class:`Ranking` — the service order of that decision, produced
lazily, plus what an admission check may ask about it. Static keys (FCFS, EDF) live in a sorted list
(``O(log n)`` search + a memmove per change, ``O(1)`` per decision). Eq. 4 depends on ``t`` for every
entry, so :class:`PUDPriority` re-scores the queue each decision (pure Python for short queues, numpy
for long ones; both paths perform the same IEEE operations in the same order and agree bit for bit).
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterator
from typing import TYPE_CHECKING

import numpy as np

from timely_llm_ros.core.tuf import utilities, utility, waiting_time

if TYPE_CHECKING:
    from timely_llm_ros.core.generation import Generation

L_MIN = 1e-3  # seconds; slack guard of Eq. 4 (see module docstring)
NUMPY_THRESHOLD = 48  # queues at least this long are scored with numpy (PUDPriority)


def pud_priority(
    t: float, ref: float, ert_k: float, alpha: float, beta: float, g: float, net: float, l_min: float = L_MIN
) -> float:
    """Eq. 4 for one generation (reference implementation; :class:`PUDPriority` scores the queue with
    the same operations)."""
    w = waiting_time(t + g, net, ref)
    return utility(w, ert_k, alpha, beta) / (g * max(ert_k - w, l_min))


def check_estimate(gen: Generation) -> None:
    """A queued generation needs a positive segment generation estimate G (every priority divides by
    it or adds it to a deadline): a clear error at push time instead of a nan ranking later."""
    if not gen.g > 0:
        raise ValueError(f"generation {gen.gen_id}: segment generation estimate G must be > 0, got {gen.g}")


class Ranking:
    """The service order of one scheduling decision, and what an admission check may ask about it.

    Iterating yields the queued generations, best first (lazily: a decision usually looks at the
    first few). Valid until the queue changes (the scheduler removes what it picked only after the
    decision). Subclasses add what their policy knows: which candidates are *promoted* (never gated
    by an admission check), the tardy backlog's utility slope."""

    def __init__(self, t: float) -> None:
        self.t = t
        # Σ|α| of the queued live generations already past their deadline: the utility the backlog
        # loses per second of delay (0 when the strategy does not track it).
        self.tardy_slope = 0.0

    def __iter__(self) -> Iterator[Generation]:
        return iter(())

    def promoted(self, gen: Generation) -> bool:
        """Whether ``gen`` is served ahead of everything for its starvation bound (default: no)."""
        return False

    def group(self, gen: Generation, k: int) -> list[Generation]:
        """``gen`` and the ``k − 1`` generations that follow it in this order."""
        out: list[Generation] = []
        it = iter(self)
        for g in it:
            if g is gen:
                out.append(g)
                break
        else:
            return [gen]
        for g in it:
            if len(out) >= k:
                break
            out.append(g)
        return out


class PriorityStrategy:
    """Orders the queue. The scheduler reports queue changes and asks for one ranking per decision."""

    name = "base"
    dynamic = False  # the order depends on the time of the decision

    def fixed_key(self, arrival: float, ert: float) -> float:
        """Time-independent score stored with each entry (static strategies; larger first)."""
        return 0.0

    def add(self, gen: Generation) -> None:
        """``gen`` was queued (its ``slot`` is a ticket unique within the scheduler)."""
        raise NotImplementedError

    def discard(self, gen: Generation) -> None:
        """``gen`` left the queue (admitted, resumed, cancelled)."""
        raise NotImplementedError

    def update(self, gen: Generation) -> None:
        """``gen``'s fields changed while queued (e.g. robot feedback moved ``ref``)."""
        self.discard(gen)
        self.add(gen)

    def rank(self, t: float, running: list[Generation], max_batch: int) -> Ranking:
        """The service order at time ``t`` given the running generations and the batch cap."""
        raise NotImplementedError


class _SortedRanking(Ranking):
    def __init__(self, t: float, entries: list[tuple[float, int, int]], gens: dict[int, Generation]) -> None:
        super().__init__(t)
        self._entries = entries
        self._gens = gens

    def __iter__(self) -> Iterator[Generation]:
        gens = self._gens
        for e in self._entries:
            yield gens[e[-1]]


class FixedKeyStrategy(PriorityStrategy):
    """Static scores (:meth:`fixed_key`, larger first; ties: earlier submission) in a sorted list."""

    def __init__(self) -> None:
        self._sorted: list[tuple[float, int, int]] = []  # (−key, seq, slot)
        self._entry: dict[int, tuple[float, int, int]] = {}
        self._gens: dict[int, Generation] = {}

    def add(self, gen: Generation) -> None:
        check_estimate(gen)
        e = (-gen.fixed_key, gen.seq, gen.slot)
        insort(self._sorted, e)
        self._entry[gen.slot] = e
        self._gens[gen.slot] = gen

    def discard(self, gen: Generation) -> None:
        e = self._entry.pop(gen.slot, None)
        if e is None:
            return
        del self._sorted[bisect_left(self._sorted, e)]
        del self._gens[gen.slot]

    def update(self, gen: Generation) -> None:
        check_estimate(gen)  # the key is fixed at push time: nothing else to do

    def rank(self, t: float, running: list[Generation], max_batch: int) -> Ranking:
        return _SortedRanking(t, self._sorted, self._gens)


class FCFSPriority(FixedKeyStrategy):
    """First come, first served: score = −arrival (all segments keep the task's arrival)."""

    name = "fcfs"

    def fixed_key(self, arrival: float, ert: float) -> float:
        return -arrival


class RequeueFCFSPriority(FixedKeyStrategy):
    """First come, first served on *queue entry*: a suspended generation goes to the back of the
    queue when its segment is done, behind every request that arrived meanwhile.

    Why: this is the FCFS-seg of TimelyLLM's public code (a resumed segment is re-queued with the
    time of its re-queueing as priority), which differs from the paper's text (§7.3.2: "maintaining
    the initial generation priority", our ``fcfs-seg``); ``bench --suite paper`` runs both."""

    name = "fcfs-requeue"

    def add(self, gen: Generation) -> None:
        check_estimate(gen)
        e = (float(gen.slot), gen.seq, gen.slot)  # tickets grow with every push: queue-entry order
        insort(self._sorted, e)
        self._entry[gen.slot] = e
        self._gens[gen.slot] = gen


class EDFPriority(FixedKeyStrategy):
    """Earliest deadline first on the task's initial deadline ``arrival + ERT``."""

    name = "edf"

    def fixed_key(self, arrival: float, ert: float) -> float:
        return -(arrival + ert)


class QueueColumns:
    """Column store of a queue: Python lists (short queues) mirrored in numpy arrays (long ones).

    Positions are dense ``0..n-1``; removal moves the last position into the hole.
    """

    FIELDS = ("ref", "ert_k", "alpha", "beta", "g", "net", "seq")

    def __init__(self, capacity: int = 64) -> None:
        self.n = 0
        self.cols: dict[str, list[float]] = {f: [] for f in self.FIELDS}
        self.arrs: dict[str, np.ndarray] = {f: np.empty(capacity) for f in self.FIELDS}

    def append(self, values: tuple[float, ...]) -> int:
        pos = self.n
        if pos == len(self.arrs["ref"]):
            for f in self.FIELDS:
                a = np.empty(2 * pos)
                a[:pos] = self.arrs[f]
                self.arrs[f] = a
        for f, v in zip(self.FIELDS, values, strict=True):
            self.cols[f].append(v)
            self.arrs[f][pos] = v
        self.n = pos + 1
        return pos

    def set(self, pos: int, values: tuple[float, ...]) -> None:
        for f, v in zip(self.FIELDS, values, strict=True):
            self.cols[f][pos] = v
            self.arrs[f][pos] = v

    def remove(self, pos: int) -> int:
        """Remove ``pos``; return the old index of the position moved into it (or -1)."""
        last = self.n - 1
        for f in self.FIELDS:
            col = self.cols[f]
            v = col.pop()
            if pos != last:
                col[pos] = v
                self.arrs[f][pos] = v
        self.n = last
        return last if pos != last else -1


def _values(gen: Generation) -> tuple[float, ...]:
    return (gen.ref, gen.ert_k, gen.alpha, gen.beta, gen.g, gen.net, float(gen.seq))


class _ScoredRanking(Ranking):
    """Order by a score array (larger first, ties: earlier submission); the best one by a linear
    scan, the full order sorted only if more than one is asked for."""

    def __init__(
        self, t: float, scores: list[float] | np.ndarray, seq: list[float], gens: list[Generation]
    ) -> None:
        super().__init__(t)
        self._s = scores
        self._seq = seq
        self._gens = gens

    def __iter__(self) -> Iterator[Generation]:
        s, seq, gens = self._s, self._seq, self._gens
        n = len(gens)
        if not n:
            return
        if isinstance(s, np.ndarray):
            m = s.max()
            ties = np.flatnonzero(s == m)
            first = int(ties[0]) if len(ties) == 1 else min((int(i) for i in ties), key=seq.__getitem__)
        else:
            first = 0
            for i in range(1, n):
                if s[i] > s[first] or (s[i] == s[first] and seq[i] < seq[first]):
                    first = i
        yield gens[first]
        for i in sorted(range(n), key=lambda i: (-s[i], seq[i])):
            if i != first:
                yield gens[i]


class ColumnStrategy(PriorityStrategy):
    """A strategy that scores every queued generation from its columns at each decision."""

    dynamic = True

    def __init__(self) -> None:
        self._q = QueueColumns()
        self._pos: dict[int, int] = {}  # slot -> position
        self._gens: list[Generation] = []

    def add(self, gen: Generation) -> None:
        check_estimate(gen)
        self._pos[gen.slot] = self._q.append(_values(gen))
        self._gens.append(gen)

    def update(self, gen: Generation) -> None:
        check_estimate(gen)
        pos = self._pos.get(gen.slot)
        if pos is not None:
            self._q.set(pos, _values(gen))

    def discard(self, gen: Generation) -> None:
        pos = self._pos.pop(gen.slot, None)
        if pos is None:
            return
        moved = self._q.remove(pos)
        last = self._gens.pop()
        if moved >= 0:
            self._gens[pos] = last
            self._pos[last.slot] = pos

    def scores(self, t: float) -> list[float] | np.ndarray:
        """Scores of the queued generations in position order (larger first)."""
        q = self._q
        if q.n >= NUMPY_THRESHOLD:
            return self.scores_np(t, q.arrs, q.n)
        return self.scores_py(t, q.cols, q.n)

    def score_of(self, t: float, gen: Generation) -> float:
        """The score of one queued generation at ``t`` (diagnostics and tests)."""
        return float(self.scores(t)[self._pos[gen.slot]])

    def rank(self, t: float, running: list[Generation], max_batch: int) -> Ranking:
        seq = self._q.cols["seq"]
        return _ScoredRanking(t, self.scores(t), seq, list(self._gens))

    def scores_py(self, t: float, c: dict[str, list[float]], n: int) -> list[float]:
        raise NotImplementedError

    def scores_np(self, t: float, a: dict[str, np.ndarray], n: int) -> np.ndarray:
        raise NotImplementedError


class PUDPriority(ColumnStrategy):
    """Paper Eq. 4 (see module docstring), recomputed at every fetch."""

    name = "pud"

    def __init__(self, l_min: float = L_MIN) -> None:
        if not l_min > 0:
            raise ValueError("l_min must be > 0")
        super().__init__()
        self.l_min = l_min

    def scores_py(self, t: float, c: dict[str, list[float]], n: int) -> list[float]:
        lm = self.l_min
        out = []
        for ref, e, al, be, g, net in zip(
            c["ref"], c["ert_k"], c["alpha"], c["beta"], c["g"], c["net"], strict=True
        ):
            w = waiting_time(t + g, net, ref)
            sl = e - w
            out.append(utility(w, e, al, be) / (g * (sl if sl > lm else lm)))
        return out

    def scores_np(self, t: float, a: dict[str, np.ndarray], n: int) -> np.ndarray:
        g = a["g"][:n]
        w = waiting_time(t + g, a["net"][:n], a["ref"][:n])
        u = utilities(w, a["ert_k"][:n], a["alpha"][:n], a["beta"][:n])
        sl = np.maximum(a["ert_k"][:n] - w, self.l_min)
        out: np.ndarray = u / (g * sl)
        return out
