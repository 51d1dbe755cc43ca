"""Options of the ``openai`` engine (OpenAI-compatible servers over HTTP), in one dataclass with
their checks.

Why a dataclass (as :mod:`.llamacpp_config`): the options of one server (kind, key, grammar, chat
template, sampling, stop strings, time-outs, capacity overrides) and of the replica set around the
servers (retries, failover, placement) were written out in the replica engine's constructor and
again in each endpoint's, then checked there. Here each option has its default and meaning in one
place; :meth:`OpenAIConfig.from_options` turns the planner's ``engine_options`` mapping (or the
registry's keyword arguments) into one, naming an unknown option, and :meth:`OpenAIConfig.validate`
checks them before any server is contacted.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.openai_protocol import KINDS
from timely_llm_ros.engines.skill_grammar import GrammarSpec, check_grammar_spec

__all__ = ["CHAT_TEMPLATES", "OpenAIConfig"]

CHAT_TEMPLATES = ("auto", "chatml", "none")


@dataclass(frozen=True)
class OpenAIConfig:
    """How the ``openai`` engine drives its servers (:mod:`.openai`, :mod:`.openai_endpoint`)."""

    # per server: auto | llamacpp | vllm, the environment variable holding the API key (Bearer)
    server: str = "auto"
    api_key_env: str | None = None
    grammar: GrammarSpec = "auto"  # "auto" (from the skill set), None or key -> GBNF
    chat_template: str = "auto"  # auto (ChatML when the model has its control tokens), chatml, none
    temperature: float = 0.0  # 0: greedy
    seed: int = 0
    # stop strings; None: a line break (ends a one-line plan, as the embedded engine does)
    stop: list[str] | tuple[str, ...] | None = None
    # seconds: a step's wait for a first token, the first contact, a first token, a silent stream
    step_wait: float = 0.1
    connect_timeout: float = 5.0
    first_token_timeout: float = 300.0
    stall_timeout: float = 60.0
    kv_capacity: int | None = None  # KV tokens (None: what the server states)
    max_running: int | None = None  # concurrent generations (None: llama.cpp's slots, else unbounded)
    speed_window: int = 16  # token gaps averaged by speed()
    # the replica set: probe backoff, how long a generation waits for a healthy server, placement
    retry_base: float = 0.5
    retry_max: float = 30.0
    failover_timeout: float = 60.0
    placement_tokens: int = 32

    @classmethod
    def from_options(cls, options: Mapping[str, object], base: OpenAIConfig | None = None) -> OpenAIConfig:
        """``base`` (default: the defaults) with ``options`` (the engine's keyword arguments) applied."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            accepted = ", ".join(["base_url", "model", "endpoints", "config", "clock", *known])
            raise EngineError(f"engine 'openai' has no parameter(s) {unknown}; accepted: {accepted}")
        return dataclasses.replace(base or cls(), **options)  # type: ignore[arg-type]  # options checked against the fields above

    def validate(self) -> OpenAIConfig:
        """Check every option (no server needed); returns ``self``."""
        if self.server not in ("auto", *KINDS):
            raise EngineError(f"server must be 'auto' or one of {', '.join(KINDS)}, got {self.server!r}")
        if self.chat_template not in CHAT_TEMPLATES:
            raise EngineError(f"chat_template must be 'auto', 'chatml' or 'none', got {self.chat_template!r}")
        check_grammar_spec(self.grammar)
        t = self.temperature
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
            raise EngineError(f"temperature must be a finite number >= 0, got {t!r}")
        for name in ("step_wait", "connect_timeout", "first_token_timeout", "stall_timeout"):
            v = getattr(self, name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise EngineError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.stop is not None and not (
            isinstance(self.stop, (list, tuple)) and all(isinstance(x, str) for x in self.stop)
        ):
            raise EngineError(f"stop must be a list of strings or None, got {self.stop!r}")
        return self

    def stops(self) -> list[str]:
        """The stop strings sent with a request (None: a line break)."""
        return ["\n"] if self.stop is None else list(self.stop)

    def timeouts(self) -> dict[str, float]:
        """The stream time-outs (:class:`~.openai_http.Stream` keywords)."""
        return {
            "connect_timeout": float(self.connect_timeout),
            "first_token_timeout": float(self.first_token_timeout),
            "stall_timeout": float(self.stall_timeout),
        }
