"""Every engine keeps its generations in the shared state machine (engines/sequences.py): the HTTP
engine's and the vLLM engine's generations are Sequences in a SequenceTable, with the same checks
and the same words as the simulated and llama.cpp engines."""

from __future__ import annotations

import socket

import pytest

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.sequences import (
    PENDING_ADMIT,
    PENDING_RESUME,
    RUNNING,
    SUSPENDED,
    Sequence,
    SequenceTable,
)


def test_the_vllm_and_http_generations_are_sequences():
    from timely_llm_ros.engines.openai_gen import ServerGen
    from timely_llm_ros.engines.vllm import _Req  # importing it never imports vLLM

    assert issubclass(ServerGen, Sequence) and issubclass(_Req, Sequence)


def _offline_endpoint():
    from timely_llm_ros.engines.openai_endpoint import OpenAIEndpointEngine
    from timely_llm_ros.engines.openai_protocol import CAPS

    with socket.socket() as s:  # a port nothing listens on: never contacted
        s.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{s.getsockname()[1]}"
    ep = OpenAIEndpointEngine(url, connect=False)
    ep.kind, ep.caps, ep.connected, ep.model = "llamacpp", CAPS["llamacpp"], True, "m"
    return ep


def test_http_generation_life_cycle_on_the_shared_table():
    ep = _offline_endpoint()
    assert isinstance(ep._table, SequenceTable)
    ep.admit(1, [1, 2, 3], max_tokens=2)
    gen = ep._table.get(1)
    assert gen.state == PENDING_ADMIT and ep.running() == 1
    ep._begin(gen)  # what sending the request does, without HTTP
    assert gen.state == RUNNING
    gen.push(9)
    ctx = ep.suspend(1, resume_hint=5.0)
    assert gen.state == SUSPENDED and ep.running() == 0 and gen.hint == 5.0
    assert (ctx.token_ids, ctx.n_prompt, ctx.kv, ctx.location) == ([1, 2, 3, 9], 3, ep.url, "device")
    with pytest.raises(EngineError, match="is not running"):
        ep.suspend(1)
    with pytest.raises(EngineError, match="leaves no budget: generation 1 already produced 1 tokens"):
        ep.resume(1, ctx, max_tokens=1)
    ep.resume(1, ctx, max_tokens=2)
    assert gen.state == PENDING_RESUME and ep.running() == 1
    ep._begin(gen)
    gen.push(10)
    assert gen.spent  # the budget is used up: the next delivery ends with "length"
    ep.release(1)
    assert ep.running() == 0 and not ep.holds(1)
    with pytest.raises(EngineError, match="unknown generation 1"):
        ep.suspend(1)


def test_http_generation_resumes_mid_segment_only_without_the_skill_grammar():
    """A resumed HTTP request is a new derivation: under the skill grammar it gets the continuation
    grammar (what may follow a complete statement), so preemption must not suspend it mid-statement;
    a replayed literal (its rest) or an unconstrained generation goes on where it stopped."""
    ep = _offline_endpoint()
    ep.admit(1, [1, 2, 3], max_tokens=4, prefix_key="tello_minispec", prefix_len=1)
    ep.admit(2, [1, 2, 3], max_tokens=4, prefix_key="tello_minispec", prefix_len=1, plan="tp();")
    ep.admit(3, [1, 2, 3], max_tokens=4)  # no skill set: no grammar
    assert [ep.resumes_mid_segment(g) for g in (1, 2, 3, 4)] == [False, True, True, False]
