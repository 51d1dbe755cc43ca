"""One OpenAI-compatible inference server (llama.cpp's ``llama-server`` or vLLM) as an :class:`Engine`.

The planner's engine protocol is lock-step; a server streams asynchronously. How the mapping stays
honest:

* **admit / resume** only queue a submission; the next :meth:`step` sends it — then the planner's
  :meth:`set_priority` (the segment deadline) is known and becomes vLLM's ``priority``. The prompt is
  always token ids (template-wrapped planner ids; a resumption sends prompt + every generated id the
  planner has seen), never text, so nothing is re-tokenised.
* **step** returns at most **one token per generation**: the oldest token that arrived since the last
  step, stamped with its arrival time (the per-token timestamp). With nothing arrived it waits up to
  ``step_wait`` seconds for the first one, so the planner neither spins nor waits long for admissions.
  One token per step keeps the protocol exact: when the planner cuts a segment at token k, tokens
  k+1… that already arrived are dropped by :meth:`suspend`, never half-delivered. A step therefore is
  *not* a server iteration; see "estimates" below.
* **suspend** closes the stream (the server cancels the request: llama.cpp when its next write fails,
  vLLM on disconnect). The KV of prompt + generated tokens stays in the server's prefix cache (llama.cpp
  ``cache_prompt`` + its RAM prompt cache; vLLM automatic prefix caching), so **resume** re-submits the
  ids and the server recomputes only what it lost: on vLLM at most the last partial KV block (16
  tokens on GPUs, 128 with its CPU backend), on llama.cpp one token while the slot still holds them
  (this engine picks the slot, :meth:`_pick_slot`). Each resumption's hit is recorded from the
  server's own count where it streams one (:attr:`OpenAIEndpointEngine.resume_log`: llama.cpp on every
  chunk; vLLM only in a request's final chunk — its ``/metrics`` prefix-cache counters,
  :meth:`server_state`, cover the others).
* **grammar**: the skill set's GBNF in the server's field (:mod:`.openai_protocol`); a resumed request
  is a new derivation and gets :func:`~.vllm.continuation_gbnf`. ``grammar: None`` turns it off
  explicitly (the segment parser still gates every segment). **Replay mode** (``admit(...,
  plan=text)``): the grammar is the literal (:func:`~timely_llm_ros.core.options.replay.gbnf_literal`) — on
  a resumption the rest of it after the text delivered so far — and no stop strings apply (the literal
  ends the plan); text that leaves the literal fails the generation with the reason.

Scheduler estimates that become approximate over HTTP: :meth:`speed` is the mean gap between streamed
tokens of recent generations (not a lock-step iteration time: it includes the server's batching and
the loopback/network delay); :meth:`memory` is the token count of our own generations against the
capacity the server states (llama.cpp: slots × per-slot context from ``/props``; vLLM: KV blocks ×
block size from ``/metrics``), so other clients of the same server are invisible; a server with a
fixed number of slots (llama.cpp ``--parallel``) reports no free memory while all slots hold our
generations, so waiting generations stay in the planner's priority queue instead of the server's FIFO.
Faults (:class:`~.openai_http.HttpFailure`) are not turned into failed tasks here: :meth:`take_faults`
hands them to the replica set (:mod:`.replicas`), which re-places the generation elsewhere.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

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
from timely_llm_ros.core.options.replay import PlanLiteral, ReplayError, gbnf_literal
from timely_llm_ros.engines.chat_template import wrap_ids
from timely_llm_ros.engines.openai_http import Endpoint, HttpFailure, Stream, StreamEvent, call
from timely_llm_ros.engines.openai_protocol import (
    CAPS,
    KINDS,
    Chunk,
    ProtocolError,
    completion_body,
    detect_kind,
    parse_prometheus,
    prefix_cache_counters,
    vllm_kv_blocks,
    vllm_kv_capacity,
)

log = logging.getLogger(__name__)

_CHATML = ("<|im_start|>system\n", "<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
_PENDING, _RUNNING, _SUSPENDED, _FINISHED, _FAULTED = range(5)
_UNKNOWN_CAPACITY = 1 << 30


@dataclass
class ResumeRecord:
    """Prefix-cache hit of one resumed submission, as the server counted it."""

    gen_id: int
    prompt_tokens: int  # ids re-submitted (prompt + generated)
    cached_tokens: int | None = None  # from the server's first chunk with a count


@dataclass
class Detached:
    """A generation taken off a server: its ids, budget, prefix key, and the segment boundary where
    its interrupted submission began with the text delivered since (for a verified replay); in replay
    mode its literal, positioned at that boundary."""

    context: Context
    max_tokens: int
    key: str | None
    boundary: int
    text: str
    plan: PlanLiteral | None = None


@dataclass
class Fault:
    """A generation whose stream failed; ``transport`` = the server is at fault (re-place it)."""

    gen_id: int
    message: str
    transport: bool


class _Gen:
    __slots__ = (
        "gen_id",
        "ids",
        "n_prompt",
        "max_tokens",
        "key",
        "state",
        "sub",
        "stream",
        "buf",
        "priority",
        "fault",
        "record",
        "last_t",
        "sent_at",
        "uncached",
        "text_carry",
        "slot",
        "sub_start",
        "sub_text",
        "replay_ids",
        "replay_text",
        "replay_seen",
        "plan",
        "plan_start",
    )

    def __init__(self, gen_id: int, ids: list[int], n_prompt: int, max_tokens: int, key: str | None) -> None:
        self.gen_id = gen_id
        self.ids = ids  # template-wrapped prompt + generated ids the planner has received
        self.n_prompt = n_prompt
        self.max_tokens = max_tokens
        self.key = key
        self.state = _PENDING
        self.sub = 0  # submission number; events of older submissions are stale
        self.stream: Stream | None = None
        self.buf: deque[list] = deque()  # [id | None, text, t, finish reason] not yet delivered
        self.priority = math.nan
        self.fault: HttpFailure | None = None
        self.record: ResumeRecord | None = None
        self.last_t = math.nan
        self.sent_at = math.nan
        self.uncached = 0
        self.text_carry = ""
        self.slot: int | None = None  # llama.cpp slot of the last submission
        self.sub_start = len(ids)  # ids at the start of the current submission (a segment boundary)
        self.sub_text: list[str] = []  # text delivered since then
        # failover replay (see adopt): ids and text the planner already has, to regenerate and verify
        self.replay_ids: deque[int] = deque()
        self.replay_text = ""
        self.replay_seen = ""
        self.plan: PlanLiteral | None = None  # replay mode: the literal and how much was delivered
        self.plan_start = 0  # the literal's position at the start of the current submission

    @property
    def n_gen(self) -> int:
        return len(self.ids) - self.n_prompt


class OpenAIEndpointEngine(Engine):
    """Engine over one server (see the module docstring).

    ``base_url``: ``http://127.0.0.1:8080`` (a trailing ``/v1`` is accepted); ``model``: the served
    model name (None: the server's only/first model); ``server``: ``auto`` | ``llamacpp`` | ``vllm``;
    ``api_key_env``: name of the environment variable holding the API key (sent as a Bearer token);
    ``grammar``: ``auto`` (from the skill set named by the prefix key), None (off) or a mapping key →
    GBNF; ``chat_template``: ``auto`` (ChatML when the model has its control tokens), ``chatml`` or
    ``none``; ``stop``: stop strings (a line break ends a one-line plan, as the embedded engine does);
    ``kv_capacity``/``max_running`` override what the server states. ``connect=False`` defers the first
    contact to :meth:`connect` (a replica that is down at start-up). ``admit(..., plan=text)``:
    replay mode, the generation writes exactly ``text``.
    """

    replays_plans = True

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        server: str = "auto",
        api_key_env: str | None = None,
        grammar: str | dict[str, str | None] | None = "auto",
        chat_template: str = "auto",
        temperature: float = 0.0,
        seed: int = 0,
        stop: list[str] | tuple[str, ...] = ("\n",),
        step_wait: float = 0.1,
        connect_timeout: float = 5.0,
        first_token_timeout: float = 300.0,
        stall_timeout: float = 60.0,
        kv_capacity: int | None = None,
        max_running: int | None = None,
        speed_window: int = 16,
        connect: bool = True,
        wake: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if server not in ("auto", *KINDS):
            raise EngineError(f"server must be 'auto' or one of {', '.join(KINDS)}, got {server!r}")
        if chat_template not in ("auto", "chatml", "none"):
            raise EngineError(f"chat_template must be 'auto', 'chatml' or 'none', got {chat_template!r}")
        if not (grammar is None or grammar == "auto" or isinstance(grammar, dict)):
            raise EngineError(f"grammar must be 'auto', None or a mapping, got {grammar!r}")
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise EngineError(f"temperature must be a finite number >= 0, got {temperature!r}")
        for name, v in (
            ("step_wait", step_wait),
            ("connect_timeout", connect_timeout),
            ("first_token_timeout", first_token_timeout),
            ("stall_timeout", stall_timeout),
        ):
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise EngineError(f"{name} must be a finite number >= 0, got {v!r}")
        self.endpoint = Endpoint.parse(base_url, api_key_env)
        self.url = self.endpoint.url
        self.model = model
        self.kind = server if server != "auto" else ""
        self.temperature = float(temperature)
        self.seed = int(seed)
        self.stop = list(stop or ())
        self.step_wait = float(step_wait)
        self.timeouts = dict(
            connect_timeout=float(connect_timeout),
            first_token_timeout=float(first_token_timeout),
            stall_timeout=float(stall_timeout),
        )
        self._kv_override = kv_capacity
        self._max_running_override = max_running
        self.capacity = kv_capacity or _UNKNOWN_CAPACITY
        self.max_running = max_running
        self._grammar_spec = grammar
        self._grammars: dict[tuple[str, bool], str | None] = {}
        self._template_mode = chat_template
        self._template: tuple[list[int], list[int], list[int]] | None = None
        self._clock = clock
        self._t0 = clock()
        self._events: queue.Queue[StreamEvent] = queue.Queue()
        self._wake_flag = threading.Event()
        self._external_wake = wake
        self._gens: dict[int, _Gen] = {}
        self._slot_owner: dict[int, int] = {}  # llama.cpp slot -> generation that used it last
        self._slot_used: dict[int, float] = {}  # llama.cpp slot -> when it was last given out
        self._faults: list[Fault] = []
        self._tok_cache: dict[tuple[str, bool], list[int]] = {}
        self._meter = SpeedMeter(speed_window)
        self._prefill_tps: float | None = None
        self.last_token_at = -math.inf  # engine clock of the last streamed token (estimates' freshness)
        self._admissions = 0
        self.connected = False
        self.info = EngineInfo(
            name=f"openai:{self.url}", context_limit=1 << 30, eos_id=-1, extra={"url": self.url}
        )
        self.resume_log: list[ResumeRecord] = []
        self.stats = {
            "submissions": 0,
            "resubmits": 0,
            "closed_streams": 0,
            "faults": 0,
            "cached_tokens": 0,
            "tokens": 0,
            "prefix_cached_resumes": 0,
            "slot_pins": 0,
            "replayed": 0,
        }
        if connect:
            self.connect()

    # -- set-up -----------------------------------------------------------------------------------
    def connect(self, timeout: float | None = None) -> None:
        """Ask the server what it is and serves; raises :class:`HttpFailure` if it does not answer."""
        to = timeout if timeout is not None else max(self.timeouts["connect_timeout"], 1.0)
        ep = self.endpoint
        models = call(ep, "GET", "/v1/models", timeout=to)
        props = _try(ep, "/props", to)
        version = _try(ep, "/version", to)
        if not self.kind:
            try:
                self.kind = detect_kind(models, props, version)
            except ProtocolError as exc:
                raise EngineError(f"{self.url}: {exc}") from None
        served = [str(m.get("id")) for m in (models or {}).get("data", []) if isinstance(m, dict)]
        if self.model is None:
            if not served:
                raise EngineError(f"{self.url} serves no model (/v1/models is empty)")
            self.model = served[0]
        elif served and self.model not in served:
            raise EngineError(f"{self.url} does not serve model {self.model!r}; it serves {served}")
        ctx_limit, capacity, slots, block_size = 1 << 30, None, None, None
        if self.kind == "llamacpp" and isinstance(props, dict):
            dgs = props.get("default_generation_settings") or {}
            n_ctx = int(dgs.get("n_ctx") or 0)
            slots = int(props.get("total_slots") or 1)
            if n_ctx > 0:
                ctx_limit, capacity = n_ctx, n_ctx * slots
        elif self.kind == "vllm":
            for m in (models or {}).get("data", []):
                if isinstance(m, dict) and m.get("id") == self.model and m.get("max_model_len"):
                    ctx_limit = int(m["max_model_len"])
            metrics = _try(ep, "/metrics", to, raw=True)
            if isinstance(metrics, str):
                parsed = parse_prometheus(metrics)
                capacity = vllm_kv_capacity(parsed)
                blocks = vllm_kv_blocks(parsed)
                block_size = blocks[1] if blocks else None
        self.capacity = self._kv_override or capacity or _UNKNOWN_CAPACITY
        self.max_running = self._max_running_override or slots
        self.caps = CAPS[self.kind]
        self._structured_field = self._vllm_grammar_field(version)
        self.connected = True
        self._template = self._split_template() if self._template_mode != "none" else None
        eos = self._eos_id(props)
        self.info = EngineInfo(
            name=f"openai:{self.kind}:{self.model}@{self.url}",
            context_limit=ctx_limit,
            eos_id=eos,
            extra={
                "url": self.url,
                "kind": self.kind,
                "model": self.model,
                "slots": slots,
                "kv_capacity": self.capacity,
                "block_size": block_size,
                "version": (version or {}).get("version") if isinstance(version, dict) else None,
            },
        )

    def _vllm_grammar_field(self, version: object) -> str:
        """vLLM >= 0.11 takes ``structured_outputs``; older ones ``guided_grammar`` (same GBNF)."""
        if self.kind != "vllm" or not isinstance(version, dict):
            return "structured_outputs"
        try:
            major, minor = (int(x) for x in str(version.get("version", "0.11")).split(".")[:2])
        except ValueError:
            return "structured_outputs"
        return "structured_outputs" if (major, minor) >= (0, 11) else "guided_grammar"

    def _eos_id(self, props: object) -> int:
        name = props.get("eos_token") if isinstance(props, dict) else None
        name = name or ("<|im_end|>" if self._template is not None else None)
        if not name:
            return -1
        ids = self._tokenize(str(name), special=True)
        return ids[0] if len(ids) == 1 else -1

    def _split_template(self) -> tuple[list[int], list[int], list[int]] | None:
        """ChatML pieces as ids, when the model has the ChatML control tokens (``auto``) or always."""
        if self._template_mode == "auto" and len(self._tokenize("<|im_start|>", special=True)) != 1:
            log.warning("%s: model has no ChatML tokens; prompts are sent without a chat template", self.url)
            return None
        return tuple(self._tokenize(p, special=True) for p in _CHATML)  # type: ignore[return-value]

    def _need_connection(self) -> None:
        if not self.connected:
            self.connect()

    # -- tokens -----------------------------------------------------------------------------------
    def _tokenize(self, text: str, special: bool = False) -> list[int]:
        key = (text, special)
        hit = self._tok_cache.get(key)
        if hit is not None:
            return list(hit)
        if self.kind == "llamacpp":
            ans = call(
                self.endpoint,
                "POST",
                "/tokenize",
                {"content": text, "add_special": False, "parse_special": special},
                timeout=self.timeouts["first_token_timeout"],
            )
        else:
            ans = call(
                self.endpoint,
                "POST",
                "/tokenize",
                {"model": self.model, "prompt": text, "add_special_tokens": False},
                timeout=self.timeouts["first_token_timeout"],
            )
        ids = [int(t["id"]) if isinstance(t, dict) else int(t) for t in (ans or {}).get("tokens", [])]
        if len(self._tok_cache) > 4096:
            self._tok_cache.clear()
        self._tok_cache[key] = ids
        return list(ids)

    def tokenize(self, text: str) -> list[int]:
        self._need_connection()
        return self._tokenize(text)

    def _wrap(self, prompt: list[int], prefix_len: int) -> list[int]:
        return wrap_ids(self._template, prompt, prefix_len)  # type: ignore[arg-type]

    def _grammar(self, key: str | None, resumed: bool) -> str | None:
        if key is None or self._grammar_spec is None:
            return None
        cache_key = (key, resumed)
        if cache_key not in self._grammars:
            if isinstance(self._grammar_spec, dict):
                text = self._grammar_spec.get(key)
            else:
                from timely_llm_ros.core.grammar import GrammarError, build_gbnf
                from timely_llm_ros.core.skills import load_skill_set

                try:
                    text = build_gbnf(load_skill_set(key))
                except (KeyError, GrammarError):
                    text = None
            if text and resumed:
                from timely_llm_ros.engines.vllm import continuation_gbnf

                text = continuation_gbnf(text)
            self._grammars[cache_key] = text
        return self._grammars[cache_key]

    # -- Engine API -------------------------------------------------------------------------------
    def now(self) -> float:
        return self._clock()

    def running(self) -> int:
        return sum(1 for g in self._gens.values() if g.state in (_PENDING, _RUNNING))

    def speed(self) -> float | None:
        return self._meter.speed()

    def prefill_speed(self) -> float | None:
        """Uncached prompt tokens per second, from the time to first token of recent submissions."""
        return self._prefill_tps

    def memory(self) -> MemoryInfo:
        running = sum(len(g.ids) for g in self._gens.values() if g.state in (_PENDING, _RUNNING))
        suspended = sum(len(g.ids) for g in self._gens.values() if g.state == _SUSPENDED)
        if self.max_running is not None and self.running() >= self.max_running:
            running = max(running, self.capacity)  # no free slot: nothing more fits (module docstring)
        return MemoryInfo(
            capacity=self.capacity,
            running=min(running, self.capacity),
            prefix=0,
            suspended_device=suspended,
            suspended_host=0,
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
        check_admission(gen_id in self._gens, gen_id, prompt_ids, max_tokens)
        self._need_connection()
        ids = self._wrap(list(prompt_ids), prefix_len if prefix_key is not None else 0)
        self._check_fits(len(ids))
        gen = _Gen(gen_id, ids, len(ids), max_tokens, prefix_key)
        gen.plan = PlanLiteral(plan) if plan is not None else None
        self._gens[gen_id] = gen

    def adopt(
        self,
        gen_id: int,
        context: Context,
        *,
        max_tokens: int,
        prefix_key: str | None,
        boundary: int | None = None,
        replay_text: str = "",
        plan: PlanLiteral | None = None,
    ) -> None:
        """Continue on this server a generation that another replica started.

        ``boundary``: where the interrupted submission began (a segment boundary: the grammar of a
        new submission is valid there, not in the middle of a statement). The generation restarts
        from there and the ids after it — already delivered to the planner, with ``replay_text`` — are
        regenerated and *verified* instead of delivered again: greedy decoding of the same model
        gives the same tokens; a different one fails the generation with the reason (never a spliced
        plan). None: the context ends at a boundary (a suspended generation), nothing to replay.
        """
        if gen_id in self._gens:
            raise EngineError(f"generation {gen_id} already on {self.url}")
        self._need_connection()
        self._check_fits(len(context.token_ids))
        ids = list(context.token_ids)
        cut = len(ids) if boundary is None else max(context.n_prompt, min(boundary, len(ids)))
        gen = _Gen(gen_id, ids[:cut], context.n_prompt, max_tokens, prefix_key)
        gen.replay_ids = deque(ids[cut:])
        gen.replay_text = replay_text if gen.replay_ids else ""
        gen.plan = plan.at(plan.done) if plan is not None else None
        if len(ids) - context.n_prompt >= max_tokens:
            raise EngineError(f"generation {gen_id} has no token budget left")
        self._gens[gen_id] = gen

    def _check_fits(self, n: int) -> None:
        if n >= self.info.context_limit:
            raise EngineError(
                f"context overflow: prompt of {n} tokens does not fit the server's context of "
                f"{self.info.context_limit} tokens"
            )

    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        gen = self._get(gen_id)
        if gen.state != _SUSPENDED:
            raise EngineError(f"generation {gen_id} is not suspended")
        context.check_matches(gen_id, gen.ids, gen.n_prompt)
        if max_tokens <= gen.n_gen:
            raise EngineError(f"max_tokens {max_tokens} leaves no budget after {gen.n_gen} generated tokens")
        gen.max_tokens = max_tokens
        gen.state = _PENDING

    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        gen = self._get(gen_id)
        if gen.state not in (_RUNNING, _PENDING):
            raise EngineError(f"generation {gen_id} is not running (cannot suspend)")
        self._close(gen)
        gen.state = _SUSPENDED
        return Context(
            gen_id=gen_id, token_ids=list(gen.ids), n_prompt=gen.n_prompt, kv=self.url, location="device"
        )

    def detach(self, gen_id: int) -> Detached:
        """Take a generation off this server (for re-placement): what :meth:`adopt` needs elsewhere."""
        gen = self._gens.pop(gen_id)
        self._close(gen)
        ids = list(gen.ids) + list(gen.replay_ids)  # ids still being verified: the planner has them
        return Detached(
            Context(gen_id=gen_id, token_ids=ids, n_prompt=gen.n_prompt, kv=None, location="discarded"),
            gen.max_tokens,
            gen.key,
            gen.sub_start,
            "".join(gen.sub_text),
            gen.plan.at(gen.plan_start) if gen.plan is not None else None,
        )

    def plan_of(self, gen_id: int) -> PlanLiteral | None:
        """A copy of a generation's literal at the text delivered so far (replay mode; else None)."""
        gen = self._gens.get(gen_id)
        return gen.plan.at(gen.plan.done) if gen is not None and gen.plan is not None else None

    def release(self, gen_id: int) -> None:
        gen = self._gens.pop(gen_id, None)
        if gen is not None:
            self._close(gen)
            gen.state = _FINISHED

    def set_priority(self, gen_id: int, priority: float) -> None:
        gen = self._gens.get(gen_id)
        if gen is not None and math.isfinite(priority):
            gen.priority = priority

    def warm_prefix(self, prefix_ids: list[int], prefix_len: int) -> float:
        """Prefill a shared prompt prefix (a skill set's fixed prompt) into every slot; seconds taken.

        Why: llama.cpp's server keeps one KV cache per slot and does not share a prefix between slots
        (its RAM prompt cache only holds prompts of slots that were idle when a task started), so
        without this every slot pays the skill prompt's prefill on its first task — 40 s for the
        1.2k-token drone prompt on the loaded 2-core machine. vLLM shares cached blocks across all
        requests: one request suffices. A blocking, one-time cost per skill set and server.
        """
        self._need_connection()
        t0 = self._clock()
        head = self._wrap(list(prefix_ids), prefix_len)
        if self._template is not None:  # keep head + prefix + the user-turn header: shared by every task
            head = head[: len(self._template[0]) + prefix_len + len(self._template[1])]
        slots = range(self.max_running or 1) if self.kind == "llamacpp" else [None]
        for k in slots:
            body = completion_body(
                self.kind,
                model=str(self.model),
                prompt_ids=head,
                max_tokens=1,
                temperature=0.0,
                seed=None,
                grammar=None,
                priority=None,
                stop=[],
                first=True,
            )
            body["stream"] = False
            body.pop("stream_options", None)
            if k is not None:
                body["id_slot"] = k
            # a long prefill, not a first token of a running task: its own generous bound
            call(
                self.endpoint,
                "POST",
                "/v1/completions",
                body,
                timeout=max(600.0, self.timeouts["first_token_timeout"]),
            )
        return self._clock() - t0

    def take_faults(self) -> list[Fault]:
        """Generations whose stream failed since the last call (they are no longer running here)."""
        out, self._faults = self._faults, []
        return out

    def holds(self, gen_id: int) -> bool:
        return gen_id in self._gens

    def close(self) -> None:
        """Close every stream and forget every generation (the port's contract; the replica set
        calls it for each server). The stream threads end once their sockets are closed."""
        for gen in self._gens.values():
            self._close(gen)
            gen.state = _FINISHED
        self._gens.clear()

    # -- step -------------------------------------------------------------------------------------
    def step(self) -> list[TokenOut]:
        deadline = self._clock() + self.step_wait
        while True:
            self._wake_flag.clear()
            outs = self.poll()
            if outs or self._faults or not self.running():
                return outs
            remaining = deadline - self._clock()
            if remaining <= 0 or not self._wake_flag.wait(remaining):
                return self.poll()

    def poll(self) -> list[TokenOut]:
        """Send queued submissions, take in what arrived, deliver one token per generation; no waiting."""
        for gen in list(self._gens.values()):
            if gen.state == _PENDING:
                self._send(gen)
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                break
            self._feed(event)
        out: list[TokenOut] = []
        for gen in list(self._gens.values()):
            if gen.state != _RUNNING:
                continue
            if gen.buf:
                out.append(self._deliver(gen))
            elif gen.fault is not None:
                self._fault(gen)
        return out

    def _wake(self) -> None:
        self._wake_flag.set()
        if self._external_wake is not None:
            self._external_wake()

    def _send(self, gen: _Gen) -> None:
        resumed = gen.n_gen > 0
        if self.caps.priority:
            prio = (
                int(max(-(2**31), min(2**31 - 1, (gen.priority - self._t0) * 1000)))
                if math.isfinite(gen.priority)
                else self._admissions
            )
        else:
            prio = None
        self._admissions += 1
        body = completion_body(
            self.kind,
            model=str(self.model),
            prompt_ids=gen.ids,
            max_tokens=gen.max_tokens - gen.n_gen,
            temperature=self.temperature,
            seed=self.seed + gen.gen_id,
            grammar=gbnf_literal(gen.plan.rest())
            if gen.plan is not None
            else self._grammar(gen.key, resumed),
            priority=prio,
            stop=self.stop if gen.plan is None else [],
            first=not resumed,
        )
        slot = self._pick_slot(gen)
        if slot is not None:
            body["id_slot"] = slot
        if (
            self.kind == "vllm"
            and "structured_outputs" in body
            and self._structured_field != "structured_outputs"
        ):
            body[self._structured_field] = body.pop("structured_outputs")["grammar"]
        self._begin(gen)
        if resumed:
            gen.record = ResumeRecord(gen.gen_id, len(gen.ids))
            self.resume_log.append(gen.record)
            self.stats["resubmits"] += 1
        self.stats["submissions"] += 1
        gen.stream = Stream(
            self.endpoint,
            self.kind,
            body,
            (gen.gen_id, gen.sub),
            self._events,
            self._clock,
            wake=self._wake,
            **self.timeouts,
        )
        gen.state = _RUNNING
        gen.stream.start()

    def _begin(self, gen: _Gen) -> None:
        """Per-submission state: a new submission number (late events of the old one are ignored),
        the segment boundary it starts at, and what a failover replay still has to verify."""
        gen.sub += 1
        gen.sub_start = len(gen.ids)
        gen.plan_start = gen.plan.done if gen.plan is not None else 0
        if not gen.replay_ids:  # a replay only ever covers the submission that adopt() restarted
            gen.replay_text = ""
        gen.sub_text = [gen.replay_text] if gen.replay_text else []
        gen.replay_seen = ""
        gen.buf.clear()
        gen.fault = None
        gen.text_carry = ""
        gen.last_t = math.nan
        gen.sent_at = self._clock()
        gen.uncached = len(gen.ids)
        gen.record = None
        gen.state = _RUNNING

    def _pick_slot(self, gen: _Gen) -> int | None:
        """llama.cpp: the slot for this submission, chosen here rather than by the server.

        Why: the server picks the slot whose cached prompt is most similar *among idle slots*, but
        a request whose stream we just closed keeps its slot busy until the server notices (at its
        next token); a generation resumed at once would land on another slot and recompute its task
        and plan tokens there (measured: 60 tokens, 2 s on this CPU). Pinning ``id_slot`` makes the
        server wait for that slot instead (one token's time). Choice: the slot of the generation's
        previous submission if none of our running generations holds it; else a free slot whose KV
        belongs to no suspended generation of ours; else the free slot left longest ago. Assumes
        this planner is the server's only client (another client's request on a pinned slot would
        make ours wait for it). None (server's choice) when the slot count is unknown or all are busy.
        """
        if self.kind != "llamacpp" or not self.max_running:
            return None
        busy = {g.slot for g in self._gens.values() if g.state == _RUNNING and g.slot is not None}
        if gen.slot is not None and gen.slot not in busy and self._slot_owner.get(gen.slot) == gen.gen_id:
            slot = gen.slot
            self.stats["slot_pins"] += 1
        else:
            free = [k for k in range(self.max_running) if k not in busy]
            if not free:
                return None

            def keeps_kv(k: int) -> bool:
                owner = self._gens.get(self._slot_owner.get(k, -1))
                return owner is not None and owner.state == _SUSPENDED

            slot = min(free, key=lambda k: (keeps_kv(k), self._slot_used.get(k, -math.inf)))
        gen.slot = slot
        self._slot_owner[slot] = gen.gen_id
        self._slot_used[slot] = self._clock()
        return slot

    def _feed(self, ev: StreamEvent) -> None:
        gen = self._gens.get(ev.key[0])
        if gen is None or gen.sub != ev.key[1] or gen.state != _RUNNING:
            return  # a closed submission's late event
        if ev.failure is not None:
            gen.fault = ev.failure
            return
        ch = ev.chunk
        if ch is None:
            return
        if ch.cached is not None:
            if gen.record is not None and gen.record.cached_tokens is None:
                gen.record.cached_tokens = ch.cached
                self.stats["cached_tokens"] += ch.cached
                if ch.cached >= gen.record.prompt_tokens - 16:
                    self.stats["prefix_cached_resumes"] += 1
            if math.isnan(gen.last_t):
                gen.uncached = max(0, len(gen.ids) - ch.cached)
        if ch.error:
            gen.fault = HttpFailure(f"{self.url}: {ch.error}", transport=False)
            return
        if gen.replay_ids or len(gen.replay_seen) < len(gen.replay_text):
            ch = self._replay(gen, ch)
            if ch is None:
                return
        if ch.ids:
            if math.isnan(gen.last_t):  # first token: prefill (+ queueing) time
                ttft = ev.t - gen.sent_at
                if ttft > 0 and gen.uncached > 32:
                    tps = gen.uncached / ttft
                    self._prefill_tps = tps if self._prefill_tps is None else 0.5 * (self._prefill_tps + tps)
            else:
                gap = (ev.t - gen.last_t) / len(ch.ids)
                for _ in ch.ids:
                    self._meter.record(gap, pure_decode=True)
            gen.last_t = ev.t
            self.last_token_at = ev.t
            for tok in ch.ids:
                gen.buf.append([tok, "", ev.t, ""])
            gen.buf[-1][1] = gen.text_carry + ch.text
            gen.text_carry = ""
        elif ch.text:
            if gen.buf:
                gen.buf[-1][1] += ch.text
            else:  # text released later than its token (a held-back stop-string prefix)
                gen.text_carry += ch.text
        if ch.finish:
            if ch.finish == "error":
                gen.fault = HttpFailure(f"{self.url}: {ch.error}", transport=False)
                return
            if gen.buf:
                gen.buf[-1][3] = ch.finish
                gen.buf[-1][1] += gen.text_carry
            else:
                gen.buf.append([None, gen.text_carry, ev.t, ch.finish])
            gen.text_carry = ""

    def _replay(self, gen: _Gen, ch: Chunk) -> Chunk | None:
        """Verify regenerated tokens/text against what the planner already has (see :meth:`adopt`);
        return the chunk's new part, or None after a divergence (the generation then fails)."""
        new_ids = []
        for tok in ch.ids:
            if not gen.replay_ids:
                new_ids.append(tok)
            elif tok == gen.replay_ids[0]:
                gen.ids.append(gen.replay_ids.popleft())  # verified; the planner has it already
                self.stats["replayed"] += 1
            else:
                gen.fault = HttpFailure(
                    f"{self.url}: after a failover the server regenerated token {tok} where "
                    f"{gen.replay_ids[0]} had been delivered; the plan cannot be continued "
                    "consistently",
                    transport=False,
                )
                return None
        seen = gen.replay_seen + ch.text
        want = gen.replay_text
        if not (want.startswith(seen) if len(seen) <= len(want) else seen.startswith(want)):
            gen.fault = HttpFailure(
                f"{self.url}: after a failover the regenerated text {seen[:60]!r} differs from "
                f"the delivered {want[:60]!r}",
                transport=False,
            )
            return None
        if gen.plan is not None:  # verified text is the planner's already: the literal moves past it
            gen.plan.feed(seen[: len(want)][len(gen.replay_seen) :])
        gen.replay_seen = seen[: len(want)]
        if not gen.replay_ids and len(seen) >= len(want):  # replay complete: back to normal delivery
            gen.replay_text = gen.replay_seen = ""
        return dataclasses.replace(ch, ids=new_ids, text=seen[len(want) :])

    def _deliver(self, gen: _Gen) -> TokenOut:
        tok, text, t, finish = gen.buf.popleft()
        if tok is not None:
            gen.ids.append(int(tok))
            self.stats["tokens"] += 1
        if text:
            gen.sub_text.append(text)
            if gen.plan is not None:
                try:
                    gen.plan.feed(text)
                except ReplayError as exc:  # the server ignored the constraint: never another plan
                    self._close(gen)
                    gen.state = _FINISHED
                    return TokenOut(gen.gen_id, -1, f"{self.url}: {exc}", t, True, "error")
        if not finish and gen.n_gen >= gen.max_tokens:
            finish = "length"
        if finish:
            self._close(gen)
            gen.state = _FINISHED
        return TokenOut(
            gen.gen_id, int(tok) if tok is not None else self.info.eos_id, text, t, bool(finish), finish
        )

    def _fault(self, gen: _Gen) -> None:
        fault = gen.fault
        assert fault is not None
        self._close(gen)
        gen.state = _FAULTED
        self.stats["faults"] += 1
        log.warning("generation %d on %s: %s", gen.gen_id, self.url, fault)
        self._faults.append(Fault(gen.gen_id, str(fault), fault.transport))

    def _close(self, gen: _Gen) -> None:
        if gen.stream is not None:
            gen.stream.close()
            gen.stream = None
            self.stats["closed_streams"] += 1
        gen.buf.clear()
        gen.text_carry = ""

    def _get(self, gen_id: int) -> _Gen:
        try:
            return self._gens[gen_id]
        except KeyError:
            raise EngineError(f"unknown generation {gen_id}") from None

    # -- server facts -----------------------------------------------------------------------------
    def health(self, timeout: float = 2.0) -> bool:
        """True if the server answers ``/v1/models`` now (used by the replica set's probes)."""
        try:
            call(self.endpoint, "GET", "/v1/models", timeout=timeout)
        except HttpFailure:
            return False
        return True

    def server_state(self) -> dict:
        """What the server says about its load now (llama.cpp ``/slots``, vLLM ``/metrics``)."""
        if self.kind == "llamacpp":
            slots = _try(self.endpoint, "/slots", 2.0)
            if isinstance(slots, list):
                return {"slots": len(slots), "busy": sum(bool(s.get("is_processing")) for s in slots)}
        elif self.kind == "vllm":
            text = _try(self.endpoint, "/metrics", 2.0, raw=True)
            if isinstance(text, str):
                m = parse_prometheus(text)
                pick = {
                    k: sum(v for _, v in m[k])
                    for k in (
                        "vllm:num_requests_running",
                        "vllm:num_requests_waiting",
                        "vllm:kv_cache_usage_perc",
                    )
                    if k in m
                }
                counters = prefix_cache_counters(m)
                if counters is not None:  # streamed requests report cached tokens only at their end
                    pick["prefix_cache_queries"], pick["prefix_cache_hits"] = counters
                return pick
        return {}


def _try(ep: Endpoint, path: str, timeout: float, raw: bool = False) -> object:
    try:
        return call(ep, "GET", path, timeout=timeout, raw=raw)
    except HttpFailure:
        return None
