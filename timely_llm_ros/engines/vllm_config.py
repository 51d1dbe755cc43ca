"""Options of the vLLM engine, in one dataclass with their checks, and the vLLM arguments they give
(``EngineArgs`` for the engine, ``SamplingParams`` for one request).

Why a dataclass (as :mod:`.llamacpp_config`): the engine has some twenty options (batch and memory
sizes, KV offloading, scheduling, grammar, chat template, sampling, KV policy and its cost model);
as keyword arguments of one constructor they were written out in the constructor, again in
:func:`build_engine_args`, and checked on the way. Here each option has its default and meaning in
one place; :meth:`VllmConfig.from_options` turns the planner's ``engine_options`` mapping (or the
registry's keyword arguments) into one, naming an unknown option; :meth:`VllmConfig.validate` checks
them before vLLM is imported (a bad option fails fast, without a model load).

Importing this module never imports vLLM.
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.core.options.kv_policy import KVOptions, KVPolicyError
from timely_llm_ros.core.profile import EngineProfile, ProfileError, load_profile

__all__ = [
    "CPU_BLOCK_SIZE",
    "CPU_KVCACHE_GIB",
    "DEFAULT_COST_PROFILE",
    "DEFAULT_MODEL_SUBDIR",
    "VllmConfig",
    "build_engine_args",
    "default_enforce_eager",
    "default_model",
    "sampling_kwargs",
    "set_environment",
    "supported_engine_args",
]

#: Where ``make vllm`` puts the model converted from the embedded GGUF, relative to the environment.
DEFAULT_MODEL_SUBDIR = Path("share", "timely_llm_ros", "models", "SmolLM2-135M-Instruct")
#: Engine arguments that are our defaults, not the user's: left out on a vLLM that lacks them.
_OPTIONAL_DEFAULTS = ("async_scheduling",)
#: KV cache of vLLM's CPU backend (GiB) unless VLLM_CPU_KVCACHE_SPACE says otherwise: vLLM's own
#: default takes a large share of host memory, too much on a shared 2-core/24 GiB machine; 1 GiB
#: holds ~30k tokens of SmolLM2-135M.
CPU_KVCACHE_GIB = "1"
#: KV block size on vLLM's CPU backend unless given: its default, 128, caches a suspended
#: generation's KV only in whole 128-token blocks, so a resume recomputed up to 127 tokens
#: (measured: 384 of 471 tokens hit); 32 is the smallest size the CPU kernels prefer.
CPU_BLOCK_SIZE = 32
#: Fitted on vllm-cpu with the default model (``timely-llm profile``): prices prefill for the
#: token budget and kv_policy ``lamps`` when no ``cost_profile`` is given.
DEFAULT_COST_PROFILE = "smollm2-135m-vllm-cpu"
CHAT_TEMPLATES = ("auto", "none")


def default_model() -> str:
    """The model used when none is given: ``$TIMELY_VLLM_MODEL``, else the one `make vllm` built."""
    env = os.environ.get("TIMELY_VLLM_MODEL")
    if env:
        return env
    path = Path(sys.prefix) / DEFAULT_MODEL_SUBDIR
    if (path / "config.json").is_file():
        return str(path)
    raise EngineError(
        "no vLLM model given: pass model=<local model directory> (engine_options), set "
        f"TIMELY_VLLM_MODEL, or run `make vllm` (builds {DEFAULT_MODEL_SUBDIR} in .venv-vllm)"
    )


def _cpu_has_bf16() -> bool:
    """Whether this CPU computes bfloat16 natively (AVX512-BF16 or AMX). Without it vLLM's CPU
    backend emulates bfloat16 matmuls: measured on a 2-core AVX2 EPYC, a 512-token prefill of
    SmolLM2-135M took 30 s in bfloat16 and 6 s in float32, so ``dtype="auto"`` means float32 there."""
    try:
        flags = Path("/proc/cpuinfo").read_text()
    except OSError:
        return True  # unknown: keep the model's dtype
    return "avx512_bf16" in flags or "amx_bf16" in flags


def default_enforce_eager(on_cpu: bool) -> bool:
    """``enforce_eager`` when the user gives none: eager on vLLM's CPU backend (torch.compile adds
    ~90 s of start-up on 2 cores), CUDA graphs elsewhere. Why graphs on a GPU: measured on an H100
    with an 8B-shaped model, a decode step took 13 ms eager and 8 ms with graphs (the weight-read
    floor is ≈ 5 ms): eager mode spends most of a small batch's step launching kernels."""
    return on_cpu


def supported_engine_args(args: dict, fields: set[str]) -> dict:
    """``args`` without our optional defaults that this vLLM's ``EngineArgs`` does not have.

    Anything else unknown stays, so ``EngineArgs`` rejects it with a clear TypeError: a user's
    option must never be dropped silently.
    """
    return {k: v for k, v in args.items() if k in fields or k not in _OPTIONAL_DEFAULTS}


@dataclass(frozen=True)
class VllmConfig:
    """How the vLLM engine runs a model (see :class:`~.vllm.VllmEngine`)."""

    # vLLM engine arguments: batch, memory share, context length, weights, dtype
    max_num_seqs: int = 64
    gpu_memory_utilization: float = 0.9
    max_model_len: int | None = None
    load_format: str = "auto"  # "dummy": random weights from the config alone
    dtype: str = "auto"  # auto: the model's, float32 on a CPU without bfloat16 (_cpu_has_bf16)
    # GiB of host memory for vLLM's KV offloading connector (vLLM >= 0.12; CUDA/XPU) and its backend
    kv_offloading_size: float | None = None
    kv_offloading_backend: str = "native"
    priority: bool = True  # scheduling_policy "priority" (our admission order) instead of fcfs
    enforce_eager: bool | None = None  # None: default_enforce_eager()
    engine_args: dict | None = None  # more vllm.EngineArgs, over ours
    cpu_kvcache_gib: float | None = None  # VLLM_CPU_KVCACHE_SPACE (CPU backend; None: CPU_KVCACHE_GIB)
    # requests: grammar "auto" (from the skill set), None, or key -> GBNF; the model's chat template
    grammar: str | dict[str, str | None] | None = "auto"
    chat_template: str = "auto"  # auto (the model's own) or none
    temperature: float = 0.0  # 0: greedy
    seed: int = 0
    ignore_eos: bool = False  # profiling: fixed-length generations
    speed_window: int = 4  # pure decode steps averaged by speed()
    # what happens to a suspended generation's KV (.vllm_kv) and the profile pricing it
    kv_policy: str = "evict"
    cost_profile: str | EngineProfile | None = None

    @classmethod
    def from_options(cls, options: Mapping[str, object], base: VllmConfig | None = None) -> VllmConfig:
        """``base`` (default: the defaults) with ``options`` (the engine's keyword arguments) applied."""
        known = [f.name for f in dataclasses.fields(cls)]
        unknown = sorted(set(options) - set(known))
        if unknown:
            accepted = ", ".join(["model", "config", "clock", *known])
            raise EngineError(f"engine 'vllm' has no parameter(s) {unknown}; accepted: {accepted}")
        return dataclasses.replace(base or cls(), **options)  # type: ignore[arg-type]  # options checked against the fields above

    def validate(self, model: str | None) -> tuple[KVOptions, EngineProfile | None]:
        """Check the options that need no vLLM; return the KV options and the cost profile
        (``model`` None: the default model, priced by its shipped profile)."""
        try:
            kv = KVOptions(self.kv_policy)
            spec = self.cost_profile
            if spec is None and model is None:
                spec = DEFAULT_COST_PROFILE
            costs = load_profile(spec) if isinstance(spec, str) else spec
        except (KVPolicyError, ProfileError) as exc:
            raise EngineError(str(exc)) from None
        if self.kv_policy == "swap" and not self.kv_offloading_size:
            raise EngineError(
                "kv_policy 'swap' needs kv_offloading_size (GiB of host memory for vLLM's "
                "KV offloading connector, which needs a CUDA or XPU device)"
            )
        if self.kv_policy == "lamps" and costs is None:
            raise EngineError(
                "kv_policy 'lamps' weighs prefill against keeping the KV: give cost_profile "
                "(a profile fitted for this model, `timely-llm profile`)"
            )
        if self.chat_template not in CHAT_TEMPLATES:
            raise EngineError(f"chat_template must be 'auto' or 'none', got {self.chat_template!r}")
        t = self.temperature
        if isinstance(t, bool) or not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
            raise EngineError(f"temperature must be a finite number >= 0, got {t!r}")
        return kv, costs


def set_environment(cfg: VllmConfig) -> None:
    """vLLM's environment switches, set before vLLM is imported: the engine core in this process
    (lock-step, see :mod:`.vllm`), the CPU backend's KV cache size and thread binding."""
    os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
    if cfg.cpu_kvcache_gib is not None:  # read by vLLM's CPU backend only
        os.environ["VLLM_CPU_KVCACHE_SPACE"] = f"{float(cfg.cpu_kvcache_gib):g}"
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", CPU_KVCACHE_GIB)
    # vLLM's CPU backend pins its compute thread to a core ("auto"); on a shared machine two
    # engines (or an engine and a busy process) then queue on one core while the other idles.
    # A dedicated server may set VLLM_CPU_OMP_THREADS_BIND=auto (or a core list) itself.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")


def build_engine_args(
    model: str, cfg: VllmConfig | None = None, *, on_cpu: bool = False, **options: object
) -> dict:
    """Keyword arguments of ``vllm.EngineArgs`` for :class:`~.vllm.VllmEngine` (``engine_args``
    overrides ours). ``options``: config fields over ``cfg``; ``on_cpu``: vLLM's CPU backend (eager
    mode unless given, :data:`CPU_BLOCK_SIZE`, float32 without native bfloat16)."""
    cfg = VllmConfig.from_options(options, cfg)
    eager = cfg.enforce_eager if cfg.enforce_eager is not None else default_enforce_eager(on_cpu)
    args = dict(
        model=model,
        enable_prefix_caching=True,
        max_num_seqs=cfg.max_num_seqs,
        gpu_memory_utilization=cfg.gpu_memory_utilization,
        load_format=cfg.load_format,
        dtype=cfg.dtype,
        seed=cfg.seed,
        enforce_eager=eager,
        async_scheduling=False,  # lock-step (module docstring of .vllm)
        scheduling_policy="priority" if cfg.priority else "fcfs",
    )
    if cfg.max_model_len is not None:
        args["max_model_len"] = cfg.max_model_len
    if cfg.kv_offloading_size:
        args["kv_offloading_size"] = cfg.kv_offloading_size
        args["kv_offloading_backend"] = cfg.kv_offloading_backend
    args.update(cfg.engine_args or {})
    if on_cpu:
        args.setdefault("block_size", CPU_BLOCK_SIZE)
        if args.get("dtype") == "auto" and not _cpu_has_bf16():
            args["dtype"] = "float32"
    return args


def sampling_kwargs(
    *,
    max_tokens: int,
    temperature: float,
    output_kind: object,
    ignore_eos: bool,
    seed: int | None,
    first: bool,
    structured: object | None = None,
    structured_field: str = "structured_outputs",
) -> dict:
    """Keyword arguments of ``vllm.SamplingParams`` for one submission of a generation.

    ``seed`` only applies when sampling (``temperature > 0``); ``first``: nothing generated yet, so at
    least one token is required; ``structured``: the ``StructuredOutputsParams`` (or older
    ``GuidedDecodingParams``) object, passed as ``structured_field``.
    """
    params = dict(
        max_tokens=max_tokens,
        temperature=temperature,
        output_kind=output_kind,
        skip_special_tokens=True,
        ignore_eos=ignore_eos,
    )
    if temperature > 0 and seed is not None:
        params["seed"] = seed
    if first:
        params["min_tokens"] = 1  # an empty plan is useless (the grammar would allow it)
    if structured is not None:
        params[structured_field] = structured
    return params
