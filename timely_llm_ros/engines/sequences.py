"""The sequence table: the state machine of generations inside a lock-step engine.

Why one module: every engine — simulated, llama.cpp, vLLM, OpenAI-compatible server over HTTP —
keeps the same life cycle for every generation — admitted (pending), running, suspended (its KV on
the device, in host memory or discarded), pending resumption, finished — and the same bookkeeping
around it (which generations take part in the next step, in admission order; the checks of a
suspension and a resumption; the ids a suspension hands back; when the token budget is spent; the
priority and importance the planner sets; the order in which suspended contexts are evicted).
Written once here, the engines cannot drift apart; each keeps only what its back-end adds (prefill
pricing, llama.cpp sequence ids, vLLM request ids and aborts, HTTP streams and failover, ...).

States and transitions (``admit`` → ``PENDING_ADMIT`` → step → ``RUNNING`` → ``suspend`` →
``SUSPENDED`` → ``resume`` → ``PENDING_RESUME`` → step → ``RUNNING`` → ... → ``FINISHED``)::

    PENDING_ADMIT, RUNNING, PENDING_RESUME, SUSPENDED, FINISHED
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Generic, TypeVar

from timely_llm_ros.core.engine import Context, EngineError
from timely_llm_ros.core.options.kv_policy import KVOptions, victim_key

PENDING_ADMIT, RUNNING, PENDING_RESUME, SUSPENDED, FINISHED = range(5)
# Where a generation's KV is: in the engine's (device) memory, spilled to host memory, or dropped
# (then its resumption re-prefills prompt + generated ids).
DEVICE, HOST, DISCARDED = "device", "host", "discarded"


class Sequence:
    """One generation's state; engines subclass it with what their back-end needs."""

    __slots__ = (
        "gen_id",
        "ids",
        "n_prompt",
        "max_tokens",
        "n_gen",
        "state",
        "location",
        "hint",
        "suspended_at",
        "order",
        "priority",
        "importance",
    )

    def __init__(self, gen_id: int, ids: list[int], max_tokens: int, order: int) -> None:
        self.gen_id = gen_id
        self.ids = ids  # prompt + generated ids
        self.n_prompt = len(ids)
        self.max_tokens = max_tokens
        self.n_gen = 0
        self.state = PENDING_ADMIT
        self.location = DEVICE
        self.hint: float | None = None  # expected resumption time given at suspend()
        self.suspended_at = 0.0
        self.order = order  # admission order: ties of priority and eviction break on it
        self.priority = math.inf  # set_priority(): smaller first; equal ones in admission order
        self.importance = 0.0  # set_importance(): larger kept longer (eviction "priority")

    @property
    def spent(self) -> bool:
        """The token budget is used up: the last token ends the generation ("length")."""
        return self.n_gen >= self.max_tokens


S = TypeVar("S", bound=Sequence)


class SequenceTable(Generic[S]):
    """Every generation an engine knows (``seqs``) and those taking part in the next step
    (``active``: pending admissions and resumptions + running, in admission order)."""

    def __init__(self) -> None:
        self.seqs: dict[int, S] = {}
        self.active: dict[int, S] = {}
        self._order = 0

    def next_order(self) -> int:
        """Admission number of the next generation (1, 2, ...)."""
        self._order += 1
        return self._order

    def add(self, seq: S) -> None:
        """A new admission: it runs from the next step on."""
        self.seqs[seq.gen_id] = seq
        self.active[seq.gen_id] = seq

    def get(self, gen_id: int) -> S:
        try:
            return self.seqs[gen_id]
        except KeyError:
            raise EngineError(f"unknown generation {gen_id}") from None

    def suspended(self, gen_id: int, context: Context) -> S:
        """The suspended generation ``context`` belongs to (checked: state, ids)."""
        seq = self.get(gen_id)
        if seq.state != SUSPENDED:
            raise EngineError(f"generation {gen_id} is not suspended")
        context.check_matches(gen_id, seq.ids, seq.n_prompt)
        return seq

    def resumable(self, gen_id: int, context: Context, max_tokens: object) -> S:
        """The suspended generation ``context`` belongs to, checked, with budget left under
        ``max_tokens`` (the total generated-token budget, as at admission)."""
        seq = self.suspended(gen_id, context)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= seq.n_gen:
            raise EngineError(
                f"max_tokens {max_tokens!r} leaves no budget: generation {gen_id} already "
                f"produced {seq.n_gen} tokens"
            )
        return seq

    def running_one(self, gen_id: int, *states: int) -> S:
        """Generation ``gen_id``, which must be running (or in one of ``states``) to be suspended."""
        seq = self.get(gen_id)
        if seq.state not in (states or (RUNNING,)):
            raise EngineError(f"generation {gen_id} is not running (cannot suspend)")
        return seq

    def resume(self, seq: S, max_tokens: int) -> None:
        """Back into the next step; its KV comes back there (the engine's ``bring in``)."""
        seq.max_tokens = max_tokens
        seq.state = PENDING_RESUME
        self.active[seq.gen_id] = seq

    def suspend(self, seq: S, resume_hint: float | None, now: float) -> None:
        """Out of the batch; its KV stays where it is until the engine decides otherwise."""
        del self.active[seq.gen_id]
        seq.state = SUSPENDED
        seq.hint = resume_hint
        seq.suspended_at = now

    @staticmethod
    def context(seq: Sequence) -> Context:
        """What a suspension hands the caller: the ids (prompt + generated) and where the KV is."""
        return Context(
            gen_id=seq.gen_id,
            token_ids=list(seq.ids),
            n_prompt=seq.n_prompt,
            kv=seq.gen_id,
            location=seq.location,
        )

    def finish(self, seq: S) -> None:
        """A generation that produced its last token leaves the batch (the engine frees its KV)."""
        del self.active[seq.gen_id]
        seq.state = FINISHED

    def forget(self, gen_id: int) -> S | None:
        """Remove a generation for good (``release``); None if unknown."""
        seq = self.seqs.pop(gen_id, None)
        if seq is not None:
            self.active.pop(gen_id, None)
        return seq

    def set_priority(self, gen_id: int, priority: float) -> None:
        seq = self.seqs.get(gen_id)
        if seq is not None and isinstance(priority, (int, float)) and not math.isnan(priority):
            seq.priority = float(priority)

    def set_importance(self, gen_id: int, importance: float) -> None:
        seq = self.seqs.get(gen_id)
        if seq is not None and isinstance(importance, (int, float)) and math.isfinite(importance):
            seq.importance = float(importance)

    def suspended_on_device(self, kv: KVOptions) -> list[S]:
        """Suspended generations whose KV is in device memory, the first to evict first
        (:func:`~timely_llm_ros.core.options.kv_policy.victim_key`: the ``eviction`` order)."""
        vs = [s for s in self.seqs.values() if s.state == SUSPENDED and s.location == DEVICE]
        vs.sort(key=lambda s: victim_key(kv, s.hint, s.suspended_at, s.order, s.importance))
        return vs

    def __iter__(self) -> Iterator[S]:
        return iter(self.seqs.values())
