"""Options of the llama.cpp engine, in one dataclass with their checks.

Why a dataclass: the engine has two dozen options (context size, threads, prefill chunking, KV
budget and policy, grammar, chat template, sampling, device settings); as keyword arguments of one
constructor they were read, checked and stored in ~90 lines. Here each option has its default and
its meaning in one place, :meth:`LlamaCppConfig.from_options` turns the planner's
``engine_options`` mapping (or the registry's keyword arguments) into one, naming an unknown option
as the registry does for other engines, and :meth:`LlamaCppConfig.validate` checks them before the
model is loaded (a bad option fails fast, without a multi-second model load).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.core.options.kv_policy import KVOptions, KVPolicyError
from timely_llm_ros.core.profile import EngineProfile, ProfileError, load_profile

# Fitted on this engine with the default model (timely-llm profile); prices prefill and transfers.
DEFAULT_COST_PROFILE = "smollm2-135m-q4_1-cpu"
CHAT_TEMPLATES = ("auto", "chatml", "none")


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


def load_costs(spec: str | EngineProfile | None, model_path: str | Path | None) -> EngineProfile | None:
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


@dataclass(frozen=True)
class LlamaCppConfig:
    """How the llama.cpp engine runs a model (see :class:`~.llamacpp.LlamaCppEngine`)."""

    # the one llama.cpp context: KV cells of all sequences together, sequence slots, tokens per decode call
    n_ctx: int = 4096
    n_seq_max: int = 32
    n_batch: int = 512
    # threads of a one-token step (None: default_threads()) and of a bigger step (None: n_threads)
    n_threads: int | None = None
    n_threads_batch: int | None = None
    # prompt tokens per step (None: whole prompts) and the size fed at once when that much is left
    prefill_chunk: int | None = None
    prefill_fast_batch: int | None = None
    # KV cells the sequences may use (None: n_ctx) and KV tokens that may be spilled to host memory
    kv_budget: int | None = None
    host_kv_budget: int | None = None
    grammar: str | dict[str, str | None] | None = "auto"  # "auto" (from the skill set), None, key → GBNF
    chat_template: str = "auto"  # auto (the model's own), chatml, none or a path to a .jinja file
    temperature: float = 0.0  # 0: greedy
    seed: int = 0
    ignore_eos: bool = False
    newline_ends_plan: bool = True
    speed_window: int = 4  # pure decode steps averaged by speed()
    # llama.cpp device options
    n_gpu_layers: int = 0
    flash_attn: str = "auto"
    cache_type_k: str = "f16"
    cache_type_v: str = "f16"
    # llama.cpp defragments the KV cache when free holes exceed this fraction of it (<= 0: never).
    # Why on: with the unified cache a step attends over every cell up to the highest one in use;
    # after an 800-2500-token prompt was processed and released, SmolLM2's one-sequence decoding step
    # at a 1.2k context went from 18 ms to 35-60 ms and stayed there; with 0.1 it stayed at 18-21 ms
    # (measured on this project's 2-core CPU, bench/phase_account.py found it)
    defrag_thold: float = 0.1
    # what happens to suspended generations' KV (timely_llm_ros.core.options.kv_policy) and its cost model
    kv_policy: str = "evict"
    eviction: str = "furthest"
    reload: str = "host-first"
    cost_profile: str | EngineProfile | None = None

    @classmethod
    def from_options(
        cls, options: Mapping[str, object], base: LlamaCppConfig | None = None
    ) -> LlamaCppConfig:
        """``base`` (default: the defaults) with ``options`` (the engine's keyword arguments) applied."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            accepted = ", ".join(["model_path", "config", "clock", *known])
            raise EngineError(f"engine 'llamacpp' has no parameter(s) {unknown}; accepted: {accepted}")
        return dataclasses.replace(base or cls(), **options)  # type: ignore[arg-type]  # options were checked against the field names above

    def validate(self, model_path: str | Path | None) -> tuple[KVOptions, EngineProfile | None]:
        """Check the options that need no model; return the KV options and the cost profile."""
        chat_template = self.chat_template
        if not isinstance(chat_template, str) or not (
            chat_template in CHAT_TEMPLATES or chat_template.endswith(".jinja")
        ):
            raise EngineError(
                "chat_template must be 'auto' (the model's own), 'chatml', 'none' or a path "
                f"to a .jinja file, got {chat_template!r}"
            )
        temperature = self.temperature
        if not (isinstance(temperature, (int, float)) and math.isfinite(temperature) and temperature >= 0):
            raise EngineError(f"temperature must be a finite number >= 0, got {temperature!r}")
        for name, v in (
            ("prefill_chunk", self.prefill_chunk),
            ("prefill_fast_batch", self.prefill_fast_batch),
        ):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
                raise EngineError(f"{name} must be a positive integer or None, got {v!r}")
        try:
            kv = KVOptions(self.kv_policy, self.eviction, self.reload)
        except KVPolicyError as exc:
            raise EngineError(str(exc)) from None
        costs = load_costs(self.cost_profile, model_path)
        if costs is None and (self.kv_policy == "lamps" or self.reload == "threshold"):
            raise EngineError(
                f"kv_policy {self.kv_policy!r} / reload {self.reload!r} weigh prefill against "
                "transfer costs: give cost_profile (a profile fitted for this model)"
            )
        d = self.defrag_thold
        if isinstance(d, bool) or not isinstance(d, (int, float)) or not math.isfinite(d) or d >= 1:
            raise EngineError(f"defrag_thold must be a number below 1 (<= 0: off), got {d!r}")
        grammar = self.grammar
        if not (grammar is None or grammar == "auto" or isinstance(grammar, dict)):
            raise EngineError(f"grammar must be 'auto', None or a mapping, got {grammar!r}")
        return kv, costs

    def threads(self) -> tuple[int, int]:
        """(threads of a one-token step, threads of a bigger step), defaults filled in."""
        n = self.n_threads if self.n_threads is not None else default_threads()
        return n, (self.n_threads_batch if self.n_threads_batch is not None else n)
