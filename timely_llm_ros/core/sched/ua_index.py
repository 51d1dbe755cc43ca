"""Incremental index of the queue for the robust ``timely`` policy: phases that change at known times.

Why: re-classifying and re-sorting every queued generation at every decision made the
decision cost grow linearly with the queue (≈ 20 ms at 10,000 queued). But a generation's place in
the ``timely`` order only changes at instants known when it is queued, so the index keeps sorted
lists and moves an entry only when one of those instants has passed.

Per queued generation (same inputs as Eq. 4: ``ref``, ``ERT_k``, ``α``, ``β``, ``G``, ``net``):

* ``D = ref + ERT_k − net`` — latest generation end for full utility (the segment's deadline);
* ``span = β/|α|`` (α < 0) or ``ERT_k + G`` (flat TUF: it never loses utility; the span only bounds
  its wait); ``Z = D + span`` — the generation end at which its utility reaches 0;
* ``P = Z + A·(ERT_k + span)`` with ``A`` = ``aging`` > 0 — its promotion time (never without
  aging, never for α ≥ 0: such a generation never becomes late).

Its *phase* at time ``t`` (a generation started at ``t`` ends its segment at ``t + G``):

==========  =========================  ==============================================  ==========
phase       while                      meaning                                         sort key
==========  =========================  ==============================================  ==========
ONTIME      ``t ≤ D − G``              can still end on time, utility β                ``D``
TARDY       ``D − G < t < Z − G``      live but past its deadline, utility falling     ``Z`` (*)
LATE        ``Z − G ≤ t < P``          utility ≤ 0                                     ``Z``
PROMOTED    ``t ≥ P``                  waited a zero-utility time past its zero point  ``P``
==========  =========================  ==============================================  ==========

(*) ``D`` with ``critical_zero`` off. Ties on a key go to the earlier submission.

Phases only move forward with ``t``, so the index holds one sorted list per tier (ONTIME and TARDY
share the *live* list, and LATE joins it when the late tier is off) and a heap of every entry's next
phase change. A decision at ``t`` first applies the changes due by ``t`` — ``O(log n)`` each, at most
three per queued segment — instead of touching every entry. The tiers are :class:`SortedTuples`:
sorted blocks of at most ``2·BLOCK`` items, so an insertion or removal moves at most a block, not
the whole tier (a plain sorted list's memmove dominated at 100,000 queued). A decision at an earlier
time than the previous one (tests; a clock that jumped back) rebuilds the index.
"""

from __future__ import annotations

import heapq
import math
from bisect import bisect_left, insort
from collections.abc import Iterator

from timely_llm_ros.core.generation import Generation
from timely_llm_ros.core.tuf import segment_deadline, utility, utility_span, waiting_time

ONTIME, TARDY, LATE, PROMOTED = range(4)
BLOCK = 512  # SortedTuples block load (split at twice that)
PHASE_NAMES = ("ontime", "tardy", "late", "promoted")
INF = math.inf


Item = tuple[float, int, int]  # (sort key, submission order, slot)


class SortedTuples:
    """A sorted set of tuples kept in blocks (``bisect`` over the blocks' last items).

    Why not a plain sorted list: inserting or deleting in it moves every later item, which is the
    whole cost of a decision once tens of thousands of generations are queued."""

    __slots__ = ("_blocks", "_maxes", "_n")

    def __init__(self, items: list[Item] | None = None) -> None:
        items = sorted(items or ())
        self._blocks = [items[i : i + BLOCK] for i in range(0, len(items), BLOCK)]
        self._maxes = [b[-1] for b in self._blocks]
        self._n = len(items)

    def __len__(self) -> int:
        return self._n

    def __iter__(self) -> Iterator[Item]:
        for b in self._blocks:
            yield from b

    def add(self, item: Item) -> None:
        maxes = self._maxes
        if not maxes:
            self._blocks.append([item])
            maxes.append(item)
        else:
            i = bisect_left(maxes, item)
            if i == len(maxes):
                i -= 1
            block = self._blocks[i]
            insort(block, item)
            maxes[i] = block[-1]
            if len(block) > 2 * BLOCK:
                self._blocks[i : i + 1] = [block[:BLOCK], block[BLOCK:]]
                maxes[i : i + 1] = [block[BLOCK - 1], block[-1]]
        self._n += 1

    def remove(self, item: Item) -> None:
        """Remove ``item`` (it must be present)."""
        i = bisect_left(self._maxes, item)
        block = self._blocks[i]
        del block[bisect_left(block, item)]
        if block:
            self._maxes[i] = block[-1]
        else:
            del self._blocks[i]
            del self._maxes[i]
        self._n -= 1

    def head(self, k: int) -> list[Item]:
        """The first ``k`` items."""
        out: list[Item] = []
        for b in self._blocks:
            if len(out) >= k:
                break
            out.extend(b[: k - len(out)])
        return out

    def iter_from(self, k: int) -> Iterator[Item]:
        """The items from position ``k`` on."""
        for b in self._blocks:
            if k >= len(b):
                k -= len(b)
                continue
            yield from b[k:] if k else b
            k = 0

    def __getitem__(self, k: int) -> Item:
        if k < 0:
            k += self._n
        for b in self._blocks:
            if k < len(b):
                return b[k]
            k -= len(b)
        raise IndexError(k)


def cost_density(alpha: float, g: float) -> float:
    """|α|/G: utility lost per second of delay past the deadline, per second of engine time (the
    unclamped objective's deferral order, and preemption's victim order; 0 for a flat TUF)."""
    return (-alpha if alpha < 0.0 else 0.0) / g if g > 0.0 else 0.0


class Entry:
    """One queued generation's static inputs, derived times and current place in the index."""

    __slots__ = (
        "gen",
        "slot",
        "seq",
        "ref",
        "e",
        "al",
        "be",
        "g",
        "net",
        "d",
        "z",
        "p",
        "t_tardy",
        "t_late",
        "phase",
        "item",
        "ver",
    )

    def __init__(self, gen: Generation, aging: float, chain: bool = False) -> None:
        self.gen = gen
        self.slot = gen.slot
        self.seq = gen.seq
        self.ref, self.e, self.al, self.be = gen.ref, gen.ert_k, gen.alpha, gen.beta
        self.g, self.net = gen.g, gen.net
        self.d = segment_deadline(self.ref, self.e, self.net)
        if chain and gen.chain is not None:  # robot chain: ranked as the task waiting behind it
            d = segment_deadline(gen.chain[0], gen.chain[1], self.net)
            if d < self.d:
                self.ref, self.e, self.al, self.be = gen.chain
                self.d = d
        span = utility_span(self.al, self.be) if self.al < 0.0 else self.e + self.g
        self.z = self.d + span
        self.t_tardy = self.d - self.g
        self.t_late = self.z - self.g if self.al < 0.0 else INF
        self.p = self.z + aging * (self.e + span) if aging > 0.0 and self.al < 0.0 else INF
        self.phase = -1
        self.item: tuple[float, int, int] | None = None  # its tuple in the list it is in
        self.ver = 0

    def phase_at(self, t: float) -> int:
        if t >= self.p:
            return PROMOTED
        if t >= self.t_late:
            return LATE
        return TARDY if t > self.t_tardy else ONTIME

    def next_change(self) -> float:
        """The earliest time at which :meth:`phase_at` differs from the current phase."""
        ph = self.phase
        if ph == ONTIME:
            nxt = math.nextafter(self.t_tardy, INF)  # TARDY once t > D − G
            return min(nxt, self.t_late, self.p)
        if ph == TARDY:
            return min(self.t_late, self.p)
        if ph == LATE:
            return self.p
        return INF

    def cost_density(self) -> float:
        """:func:`cost_density` of this entry (its α may be the chained task's, ``Generation.chain``)."""
        return cost_density(self.al, self.g)

    def utility(self, t: float) -> float:
        """Eq. 4's numerator: the utility if its generation starts at ``t`` (unclamped below)."""
        return utility(waiting_time(t + self.g, self.net, self.ref), self.e, self.al, self.be)


class PhaseIndex:
    """Sorted tiers of the queued generations, kept current by phase-change events (module doc)."""

    def __init__(
        self,
        aging: float,
        critical_zero: bool,
        late_tier: bool,
        late_costs: bool = False,
        chain: bool = False,
    ) -> None:
        self.aging = aging
        self.chain = chain  # rank a robot's active generation by the task waiting behind it (Entry)
        self.critical_zero = critical_zero
        self.late_tier = late_tier
        # LATE entries still lose |α| per second (unclamped Eq. 1): they count in the tardy slope
        self.late_costs = late_costs
        self.entries: dict[int, Entry] = {}  # slot -> entry
        self.live = SortedTuples()  # (C, seq, slot): ONTIME + TARDY (+ LATE without the late tier)
        self.late = SortedTuples()  # (Z, seq, slot)
        self.promoted = SortedTuples()  # (P, seq, slot)
        self._heap: list[tuple[float, int, int]] = []  # (time, slot, version)
        self._tardy_alpha: dict[float, int] = {}  # α -> number of TARDY entries with it
        self.t = -INF  # time of the last advance

    def __len__(self) -> int:
        return len(self.entries)

    # -- membership ----------------------------------------------------------------------------
    def add(self, gen: Generation) -> Entry:
        e = Entry(gen, self.aging, self.chain)
        self.entries[e.slot] = e
        self._place(e, e.phase_at(self.t))
        return e

    def discard(self, slot: int) -> None:
        e = self.entries.pop(slot, None)
        if e is not None:
            self._unplace(e)
            e.ver += 1

    # -- time ----------------------------------------------------------------------------------
    def advance(self, t: float) -> None:
        """Apply every phase change due by ``t`` (rebuild if ``t`` is before the last advance)."""
        if t < self.t:
            self.rebuild(t)
            return
        self.t = t
        heap = self._heap
        entries = self.entries
        while heap and heap[0][0] <= t:
            _, slot, ver = heapq.heappop(heap)
            e = entries.get(slot)
            if e is None or e.ver != ver:
                continue  # stale: the entry left or was re-placed since
            self._unplace(e)
            self._place(e, e.phase_at(t))

    def rebuild(self, t: float) -> None:
        self.t = t
        self._heap = []
        self._tardy_alpha = {}
        tiers: dict[int, list[Item]] = {id(self.live): [], id(self.late): [], id(self.promoted): []}
        for e in self.entries.values():
            e.phase, e.item = -1, None
            self._place(e, e.phase_at(t), into=tiers)
        self.live = SortedTuples(tiers[id(self.live)])
        self.late = SortedTuples(tiers[id(self.late)])
        self.promoted = SortedTuples(tiers[id(self.promoted)])

    def tardy_slope(self) -> float:
        """Σ|α| of the TARDY entries (and LATE ones with ``late_costs``): utility the queued tardy
        work loses per second of delay."""
        return math.fsum(-al * n for al, n in self._tardy_alpha.items())

    # -- internals -----------------------------------------------------------------------------
    def _list_and_key(self, e: Entry, phase: int) -> tuple[SortedTuples, float]:
        if phase == ONTIME:
            return self.live, e.d
        if phase == TARDY:
            return self.live, e.z if self.critical_zero else e.d
        if phase == LATE:
            if self.late_tier:
                return self.late, e.z
            # still costing: ordered like a TARDY one (else by Z, the ablation timely-no-late)
            return self.live, e.d if self.late_costs and not self.critical_zero else e.z
        return self.promoted, e.p

    def _place(self, e: Entry, phase: int, into: dict[int, list[Item]] | None = None) -> None:
        tier, key = self._list_and_key(e, phase)
        item = (key, e.seq, e.slot)
        if into is None:
            tier.add(item)
        else:  # rebuilding: collected per tier, sorted once
            into[id(tier)].append(item)
        e.phase, e.item = phase, item
        if phase == TARDY or (phase == LATE and self.late_costs):
            self._tardy_alpha[e.al] = self._tardy_alpha.get(e.al, 0) + 1
        e.ver += 1
        nxt = e.next_change()
        if nxt < INF:
            heapq.heappush(self._heap, (nxt, e.slot, e.ver))

    def _unplace(self, e: Entry) -> None:
        if e.item is None:
            return
        tier, _ = self._list_and_key(e, e.phase)
        tier.remove(e.item)
        if e.phase == TARDY or (e.phase == LATE and self.late_costs):
            n = self._tardy_alpha[e.al] - 1
            if n:
                self._tardy_alpha[e.al] = n
            else:
                del self._tardy_alpha[e.al]
        e.item = None
