"""Engines by name: every backend behind one call, clear errors for unknown names, parameters and
missing backends."""

from __future__ import annotations

import importlib.util

import pytest

from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.engines.base import Engine, EngineError
from timely_llm_ros.engines.registry import (
    ENGINES,
    BackendMissing,
    available_engines,
    create_engine,
    engine_class,
)
from timely_llm_ros.engines.sim import SimEngine


def test_registered_engines():
    assert available_engines() == ["llamacpp", "openai", "sim", "vllm"]
    for name in ("sim", "llamacpp", "vllm", "openai"):  # importing a backend's module never needs the backend
        assert issubclass(engine_class(name), Engine)


def test_create_sim_engine_with_parameters():
    eng = create_engine("sim", profile=EngineProfile(name="p", decode_q=0.01))
    assert isinstance(eng, SimEngine) and eng.profile.name == "p"
    assert create_engine("sim").info.name.startswith("sim:")


def test_unknown_engine_lists_the_available_ones():
    with pytest.raises(EngineError, match="unknown engine 'gpt'; available: llamacpp, openai, sim, vllm"):
        create_engine("gpt")


def test_unknown_parameter_lists_the_accepted_ones():
    with pytest.raises(EngineError, match=r"no parameter\(s\) \['n_gpus'\]; accepted: profile"):
        create_engine("sim", n_gpus=2)


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_vllm_without_vllm_is_a_backend_missing_error():
    with pytest.raises(BackendMissing, match="pip install vllm"):
        create_engine("vllm", model="/models/none")


def test_llamacpp_with_a_missing_model_file_says_so():
    # BackendMissing (no llama-cpp-python) or the missing file: both are EngineErrors with a reason
    with pytest.raises(EngineError, match="llama-cpp-python|model file not found"):
        create_engine("llamacpp", model_path="/nonexistent/model.gguf")


def test_wall_clock_sim_is_registered_and_real_engines_are_the_same_class():
    from timely_llm_ros.engines.sim_realtime import RealtimeSimEngine

    assert engine_class("sim", wall_clock=True) is RealtimeSimEngine
    eng = create_engine("sim", wall_clock=True, clock=lambda: 5.0, kv_policy="discard")
    assert isinstance(eng, RealtimeSimEngine) and eng.now() == 5.0 and eng.kv.policy == "discard"
    for name in ("llamacpp", "vllm", "openai"):
        assert engine_class(name, wall_clock=True) is engine_class(name)
    with pytest.raises(EngineError, match=r"engine 'sim' has no parameter\(s\) \['model_path'\]"):
        create_engine("sim", wall_clock=True, model_path="/m.gguf")


def test_the_planner_node_builds_what_the_registry_builds(tmp_path):
    """The node's ``engine`` choices are the registry's names, and ``engine:=sim`` builds the
    registry's wall-clock class (one list of names, one class per name)."""
    import threading

    from timely_llm_ros.nodes.planner_params import PARAMS
    from timely_llm_ros.nodes.planner_setup import make_engine

    param = next(p for p in PARAMS if p.name == "engine")
    assert tuple(param.choices) == tuple(ENGINES) and sorted(ENGINES) == available_engines()
    p = {"engine": "sim", "engine_options": "{chunked_prefill: true}", "profile": "llama3-8b-fp16-rtx4090"}
    eng = make_engine(p, {}, threading.Event())
    assert type(eng) is engine_class("sim", wall_clock=True) and eng.chunked
