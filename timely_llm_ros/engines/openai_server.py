"""What the HTTP engine asks a server and keeps about it: its kind, model, context and capacity
(:meth:`ServerFacts.connect`), its tokenizer and chat template, its llama.cpp slots, prefix warm-up,
health and load.

A mixin of :class:`~.openai_endpoint.OpenAIEndpointEngine` (as the llama.cpp engine is put
together from :mod:`.llamacpp_kv` and :mod:`.llamacpp_batch`): the endpoint module keeps the
generations and their streams, this one the server.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from timely_llm_ros.core.engine import EngineError, EngineInfo
from timely_llm_ros.engines.chat_template import wrap_ids
from timely_llm_ros.engines.openai_http import Endpoint, HttpFailure, call
from timely_llm_ros.engines.openai_protocol import (
    CAPS,
    ProtocolError,
    completion_body,
    detect_kind,
    parse_prometheus,
    prefix_cache_counters,
    vllm_kv_blocks,
    vllm_kv_capacity,
)
from timely_llm_ros.engines.sequences import RUNNING, SUSPENDED

if TYPE_CHECKING:
    from timely_llm_ros.engines.openai_gen import ServerGen

log = logging.getLogger("timely_llm_ros.engines.openai_endpoint")

_CHATML = ("<|im_start|>system\n", "<|im_end|>\n<|im_start|>user\n", "<|im_end|>\n<|im_start|>assistant\n")
UNKNOWN_CAPACITY = 1 << 30


class ServerFacts:
    """The server side of an endpoint engine (see the module docstring)."""

    # What the host engine (OpenAIEndpointEngine.__init__) sets, declared for the type checker.
    endpoint: Endpoint
    url: str
    model: str | None
    kind: str
    timeouts: dict[str, float]
    capacity: int
    max_running: int | None
    info: EngineInfo
    stats: dict[str, int]
    _kv_override: int | None
    _max_running_override: int | None
    _template_mode: str
    _template: tuple[list[int], list[int], list[int]] | None
    _tok_cache: dict[tuple[str, bool], list[int]]
    _clock: Callable[[], float]
    _gens: dict[int, ServerGen]
    _slot_owner: dict[int, int]
    _slot_used: dict[int, float]

    # -- set-up -----------------------------------------------------------------------------------
    def connect(self, timeout: float | None = None) -> None:
        """Ask the server what it is and serves; raises :class:`HttpFailure` if it does not answer."""
        to = timeout if timeout is not None else max(self.timeouts["connect_timeout"], 1.0)
        ep = self.endpoint
        models: Any = call(ep, "GET", "/v1/models", timeout=to)
        props: Any = _try(ep, "/props", to)
        version: Any = _try(ep, "/version", to)
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
        self.capacity = self._kv_override or capacity or UNKNOWN_CAPACITY
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
        head, mid, tail = (self._tokenize(p, special=True) for p in _CHATML)
        return head, mid, tail

    def _need_connection(self) -> None:
        if not self.connected:
            self.connect()

    # -- tokens -----------------------------------------------------------------------------------
    def _tokenize(self, text: str, special: bool = False) -> list[int]:
        key = (text, special)
        hit = self._tok_cache.get(key)
        if hit is not None:
            return list(hit)
        ans: Any
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
        return wrap_ids(self._template, prompt, prefix_len)

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

    def _pick_slot(self, gen: ServerGen) -> int | None:
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
        busy = {g.slot for g in self._gens.values() if g.state == RUNNING and g.slot is not None}
        if gen.slot is not None and gen.slot not in busy and self._slot_owner.get(gen.slot) == gen.gen_id:
            slot = gen.slot
            self.stats["slot_pins"] += 1
        else:
            free = [k for k in range(self.max_running) if k not in busy]
            if not free:
                return None

            def keeps_kv(k: int) -> bool:
                owner = self._gens.get(self._slot_owner.get(k, -1))
                return owner is not None and owner.state == SUSPENDED

            slot = min(free, key=lambda k: (keeps_kv(k), self._slot_used.get(k, -math.inf)))
        gen.slot = slot
        self._slot_owner[slot] = gen.gen_id
        self._slot_used[slot] = self._clock()
        return slot

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
                pick: dict[str, float] = {
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
