"""The engine port's ``admit`` carries nothing simulator-only; a scripted engine gets its script.

Why: the simulated engine's reference plan (``script``) is an extension of the scripted engines
(``needs_script``), not part of the contract a real engine or a user's plug-in implements.
"""

from __future__ import annotations

import inspect

from timely_llm_ros.core.engine import Engine, script_kwargs
from timely_llm_ros.engines.replicas import simulated_replicas
from timely_llm_ros.engines.sim import SimEngine


def test_the_port_and_the_real_engines_admit_take_no_script() -> None:
    from timely_llm_ros.engines.llamacpp import LlamaCppEngine
    from timely_llm_ros.engines.openai_endpoint import OpenAIEndpointEngine
    from timely_llm_ros.engines.vllm import VllmEngine

    for cls in (Engine, LlamaCppEngine, OpenAIEndpointEngine, VllmEngine):
        assert "script" not in inspect.signature(cls.admit).parameters, cls.__name__
        assert not cls.needs_script, cls.__name__


def test_script_kwargs_only_for_scripted_engines() -> None:
    sim = SimEngine("llama3-8b-fp16-rtx4090")
    assert script_kwargs(sim, [5, 6]) == {"script": [5, 6]}
    assert script_kwargs(simulated_replicas("llama3-8b-fp16-rtx4090", 2), [5]) == {"script": [5]}

    class Generating:
        needs_script = False

    assert script_kwargs(Generating(), [5]) == {}  # type: ignore[arg-type]


def test_a_scripted_engine_emits_its_script_then_eos() -> None:
    sim = SimEngine("llama3-8b-fp16-rtx4090")
    script = sim.tokenize("tp();")
    sim.admit(0, sim.tokenize("Task: take a picture"), max_tokens=16, **script_kwargs(sim, script))
    out: list[int] = []
    for _ in range(32):
        for tok in sim.step():
            out.append(tok.token_id)
        if out and out[-1] == sim.info.eos_id:
            break
    assert out == [*script, sim.info.eos_id]
