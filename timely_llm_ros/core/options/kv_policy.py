"""What happens to a suspended generation's KV cache while its robot executes (related papers 003, 001).

A suspended generation (paper 000 §4.1) holds its KV cache until it resumes, which is roughly when
its robot finishes the dispatched segment. Three things can be done with that memory:

* **preserve** (``keep``) — leave it on the device; resuming is free;
* **discard** (``drop``) — free it now and re-prefill prompt suffix + generated tokens on resume;
* **swap** (``host``) — copy it to host memory now and back on resume.

Policies (engine option ``kv_policy``, the simulated and llama.cpp engines):

==========  ===============================================================================
evict       (default) keep it; when a step needs room, evict suspended contexts in ``eviction``
            order, each to host or dropped as ``reload`` says (the behaviour before this option)
keep        always preserve: suspended contexts are never evicted, admissions wait for memory
discard     always drop at suspension
swap        always swap to host at suspension (drop when the host budget is full)
lamps       per suspension, the action with the least memory-over-time waste (:func:`lamps_waste`)
==========  ===============================================================================

**LAMPS waste** (paper 003 §4.2, the INFERCEPT equations it builds on, in tokens·seconds; the
bytes per token cancel): with ``C_i`` the context's private KV tokens, ``C_other`` the KV tokens of
the generations still running, ``T`` the pause (the time until the planner resumes it: the resume
hint it passed at suspension, i.e. the time model's predicted end of the dispatched segment's
action), ``T_fwd(C_i)`` the re-prefill time and ``T_swap(C_i)`` one transfer:

* preserve: ``T · C_i`` — the memory sits idle for the whole pause;
* discard: ``T_fwd(C_i) · (C_i + C_other)`` — the recomputation occupies the context and stalls
  the batch;
* swap: ``(T_out(C_i) + T_in(C_i)) · (C_i + C_other)`` — both transfers stall the batch.

**Eviction order** (``eviction``): ``furthest`` — the context whose resume hint lies furthest ahead
first (Belady), then least recently suspended; ``lru`` — least recently suspended first;
``priority`` — paper 001's eviction heap: lowest semantic importance first (the planner passes each
generation's initial utility β with ``Engine.set_importance``), then furthest resume.

**Destination of an evicted context** (``reload``): ``host-first`` — host memory while its budget
lasts, else dropped; ``threshold`` — paper 001's cache-vs-recompute rule (its Eq. 3): keep it in host
memory only if restoring costs less than recomputing, ``T_out(n) + T_in(n) < T_fwd(n)``, else drop.
(001 writes the test with β as the *loading speed*; read with β as a time per token, as its text
uses it, caching wins when loading is *faster* than recomputing, which is what is implemented.)

The costs come from the engine's :class:`~timely_llm_ros.core.profile.EngineProfile` (the
simulator's timing model; for llama.cpp the fitted CPU profile of its model).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from timely_llm_ros.core.profile import EngineProfile

KV_POLICIES = ("evict", "keep", "discard", "swap", "lamps")
EVICTION_ORDERS = ("furthest", "lru", "priority")
RELOADS = ("host-first", "threshold")
KEEP, HOST, DROP = "keep", "host", "drop"


class KVPolicyError(ValueError):
    """An unknown policy, eviction order or reload rule."""


@dataclass(frozen=True)
class KVOptions:
    """The three switches (module docstring); the default is the rule the engines had before."""

    policy: str = "evict"
    eviction: str = "furthest"
    reload: str = "host-first"

    def __post_init__(self) -> None:
        for name, value, known in (
            ("kv_policy", self.policy, KV_POLICIES),
            ("eviction", self.eviction, EVICTION_ORDERS),
            ("reload", self.reload, RELOADS),
        ):
            if value not in known:
                raise KVPolicyError(f"{name} must be one of {', '.join(known)}, got {value!r}")


@dataclass(frozen=True, slots=True)
class Waste:
    """LAMPS memory-over-time waste of each action (tokens·s) and the chosen one."""

    keep: float
    drop: float
    host: float
    choice: str


def lamps_waste(c_i: int, c_other: int, pause: float, costs: EngineProfile, host_room: bool) -> Waste:
    """The three wastes of module docstring and the least one (``host`` only with ``host_room``).

    Ties go to the cheaper-to-resume action (keep, then host, then drop)."""
    pause = max(0.0, pause) if math.isfinite(pause) else math.inf
    batch = c_i + max(0, c_other)
    w_keep = pause * c_i
    w_drop = costs.prefill_time(c_i) * batch
    w_host = (costs.swap_out_time(c_i) + costs.swap_in_time(c_i)) * batch if host_room else math.inf
    choice = min(((w_keep, 0, KEEP), (w_host, 1, HOST), (w_drop, 2, DROP)))[2]
    return Waste(w_keep, w_drop, w_host, choice)


def cache_beats_recompute(n: int, costs: EngineProfile) -> bool:
    """Paper 001 Eq. 3 as implemented (module docstring): restoring ``n`` tokens from host memory is
    cheaper than re-prefilling them."""
    if n <= 0:
        return False
    return costs.swap_out_time(n) + costs.swap_in_time(n) < costs.prefill_time(n)


def evict_destination(n: int, host_room: bool, opts: KVOptions, costs: EngineProfile) -> str:
    """``host`` or ``drop`` for a context of ``n`` private tokens evicted under memory pressure."""
    if not host_room:
        return DROP
    if opts.reload == "threshold" and not cache_beats_recompute(n, costs):
        return DROP
    return HOST


def victim_key(
    opts: KVOptions, hint: float | None, suspended_at: float, order: int, importance: float
) -> tuple[bool | float | int, ...]:
    """Sort key of an eviction candidate: the first one is evicted first (module docstring)."""
    if opts.eviction == "lru":
        return (suspended_at, order)
    far = (hint is None, -(hint if hint is not None else 0.0), suspended_at, order)
    if opts.eviction == "priority":
        return (importance, *far)
    return far


def at_suspension(
    opts: KVOptions, c_i: int, c_other: int, pause: float, costs: EngineProfile, host_room: bool
) -> str:
    """The action taken when a generation is suspended: keep (also for ``evict``/``keep``), host or drop."""
    if opts.policy == "discard":
        return DROP
    if opts.policy == "swap":
        return HOST if host_room else DROP
    if opts.policy == "lamps":
        return lamps_waste(c_i, c_other, pause, costs, host_room).choice
    return KEEP
