"""The OpenAI-server dialects: request bodies, stream chunks, server detection, endpoint URLs.

Pure functions (no server): what each server kind is sent and how its answers are read. The chunk
samples are the shapes llama.cpp's server and vLLM stream (fields as in their sources / checked on
this machine, see the module docstring of timely_llm_ros.engines.openai_protocol)."""

from __future__ import annotations

import json

import pytest

from timely_llm_ros.engines.base import EngineError
from timely_llm_ros.engines.openai_http import Endpoint
from timely_llm_ros.engines.openai_protocol import (
    ProtocolError,
    completion_body,
    detect_kind,
    parse_chunk,
    parse_prometheus,
    vllm_kv_capacity,
)


def _body(kind: str, **kw: object) -> dict:
    args = dict(
        model="m",
        prompt_ids=[1, 2, 3],
        max_tokens=7,
        temperature=0.0,
        seed=5,
        grammar='root ::= "a"',
        priority=3,
        stop=["\n"],
        first=True,
    )
    args.update(kw)
    return completion_body(kind, **args)  # type: ignore[arg-type]


def test_llamacpp_body_sends_ids_grammar_and_asks_for_ids_and_cache_counts():
    b = _body("llamacpp")
    assert b["prompt"] == [1, 2, 3] and b["stream"] is True and b["max_tokens"] == 7
    assert b["grammar"] == 'root ::= "a"' and b["n_probs"] == 1 and b["cache_prompt"] is True
    assert b["timings_per_token"] is True and b["stop"] == ["\n"]
    assert "priority" not in b  # llama.cpp's server has none: never sent
    assert "seed" not in b  # greedy: a seed means nothing


def test_vllm_body_uses_structured_outputs_priority_and_token_ids():
    b = _body("vllm", temperature=0.7)
    assert b["structured_outputs"] == {"grammar": 'root ::= "a"'} and b["priority"] == 3
    assert b["return_tokens_as_token_ids"] is True and b["logprobs"] == 1
    assert b["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert b["min_tokens"] == 1 and b["seed"] == 5
    assert "min_tokens" not in _body("vllm", first=False)  # a resumption may end at once
    assert "structured_outputs" not in _body("vllm", grammar=None)


def test_unknown_kind_is_refused():
    with pytest.raises(ProtocolError):
        _body("sglang")


def test_llamacpp_chunk_ids_text_and_cached_count():
    data = json.dumps(
        {
            "choices": [
                {
                    "text": "sc(",
                    "index": 0,
                    "finish_reason": None,
                    "logprobs": {
                        "content": [
                            {"id": 1201, "token": "sc", "logprob": -0.1},
                            {"id": 7, "token": "(", "logprob": -0.2},
                        ]
                    },
                }
            ],
            "timings": {"cache_n": 420, "prompt_n": 3},
        }
    )
    ch = parse_chunk("llamacpp", data)
    assert ch is not None and ch.ids == [1201, 7] and ch.text == "sc(" and ch.finish == ""
    assert ch.cached == 420 and ch.prompt_tokens == 423


def test_vllm_chunk_token_ids_usage_and_finish():
    data = json.dumps(
        {
            "choices": [
                {
                    "text": ");",
                    "finish_reason": "stop",
                    "logprobs": {"tokens": ["token_id:12", "token_id:30"]},
                }
            ],
            "usage": {"prompt_tokens": 500, "prompt_tokens_details": {"cached_tokens": 496}},
        }
    )
    ch = parse_chunk("vllm", data)
    assert ch is not None and ch.ids == [12, 30] and ch.finish == "eos"
    assert ch.cached == 496 and ch.prompt_tokens == 500
    usage_only = parse_chunk("vllm", json.dumps({"choices": [], "usage": {"prompt_tokens": 9}}))
    assert usage_only is not None and usage_only.ids == [] and usage_only.prompt_tokens == 9


def test_vllm_token_without_id_is_a_protocol_error():
    with pytest.raises(ProtocolError, match="return_tokens_as_token_ids"):
        parse_chunk("vllm", json.dumps({"choices": [{"text": "a", "logprobs": {"tokens": ["a"]}}]}))


def test_done_errors_lengths_and_garbage():
    assert parse_chunk("vllm", "[DONE]") is None
    err = parse_chunk("llamacpp", json.dumps({"error": {"code": 500, "message": "boom"}}))
    assert err is not None and err.finish == "error" and err.error == "boom"
    length = parse_chunk("llamacpp", json.dumps({"choices": [{"text": "", "finish_reason": "length"}]}))
    assert length is not None and length.finish == "length"
    odd = parse_chunk("llamacpp", json.dumps({"choices": [{"text": "", "finish_reason": "abort"}]}))
    assert odd is not None and odd.finish == "error" and "abort" in odd.error
    with pytest.raises(ProtocolError):
        parse_chunk("llamacpp", "{not json")


def test_detect_kind():
    assert detect_kind({"data": []}, {"default_generation_settings": {}}, None) == "llamacpp"
    assert detect_kind({"data": [{"id": "m", "owned_by": "vllm"}]}, None, {"version": "0.32.0"}) == "vllm"
    with pytest.raises(ProtocolError, match="llama-cpp-python"):
        detect_kind({"data": [{"id": "m", "owned_by": "me"}]}, None, None)
    with pytest.raises(ProtocolError, match="unrecognised"):
        detect_kind({"data": [{"id": "m", "owned_by": "someone"}]}, None, None)


def test_prometheus_and_vllm_capacity():
    text = """# HELP vllm:cache_config_info info
vllm:cache_config_info{block_size="16",cache_dtype="auto",num_gpu_blocks="2048"} 1.0
vllm:num_requests_running{model_name="m"} 3.0
garbage line
"""
    m = parse_prometheus(text)
    assert m["vllm:num_requests_running"][0][1] == 3.0
    assert vllm_kv_capacity(m) == 2048 * 16
    assert vllm_kv_capacity({}) is None


def test_endpoint_urls_and_api_key(monkeypatch):
    ep = Endpoint.parse("http://127.0.0.1:8000/v1/")
    assert (ep.host, ep.port, ep.prefix) == ("127.0.0.1", 8000, "")
    assert "Authorization" not in ep.headers()
    with pytest.raises(EngineError, match="http"):
        Endpoint.parse("ftp://x:1")
    with pytest.raises(EngineError, match="MY_KEY"):
        Endpoint.parse("http://127.0.0.1:1", api_key_env="MY_KEY")
    monkeypatch.setenv("MY_KEY", "s3cret")
    assert (
        Endpoint.parse("http://127.0.0.1:1", api_key_env="MY_KEY").headers()["Authorization"]
        == "Bearer s3cret"
    )


def _dead_url() -> str:
    import socket

    with socket.socket() as s:  # a port nothing listens on (loopback): connection refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_engine_configuration_errors_are_clear():
    from timely_llm_ros.engines.openai import OpenAIEngine
    from timely_llm_ros.engines.registry import create_engine

    with pytest.raises(EngineError, match="base_url or endpoints"):
        OpenAIEngine()
    url = _dead_url()
    with pytest.raises(EngineError, match="distinct"):
        OpenAIEngine(endpoints=[url, url])
    with pytest.raises(EngineError, match="no endpoint answered.*refused"):
        OpenAIEngine(url, connect_timeout=1.0)
    with pytest.raises(EngineError, match="no parameter"):
        create_engine("openai", base_url=url, bogus=1)
    with pytest.raises(EngineError, match="server must be"):
        OpenAIEngine(url, server="sglang")


def _offline_endpoint():
    """An endpoint engine fed by hand (no server): for the failover replay logic."""
    from timely_llm_ros.engines.openai_endpoint import OpenAIEndpointEngine
    from timely_llm_ros.engines.openai_protocol import CAPS

    ep = OpenAIEndpointEngine(_dead_url(), connect=False)
    ep.kind, ep.caps, ep.connected, ep.model = "llamacpp", CAPS["llamacpp"], True, "m"
    return ep


def _feed(ep, gen_id: int, ids: list[int], text: str, finish: str = "") -> None:
    from timely_llm_ros.engines.openai_http import StreamEvent
    from timely_llm_ros.engines.openai_protocol import Chunk

    g = ep._gens[gen_id]
    ep._feed(StreamEvent((gen_id, g.sub), 0.0, chunk=Chunk(ids=ids, text=text, finish=finish)))


def _start(ep, gen_id: int) -> None:  # what _send does, without the HTTP request
    ep._begin(ep._gens[gen_id])


def test_failover_replay_swallows_what_the_planner_has_and_delivers_only_new_tokens():
    from timely_llm_ros.engines.base import Context

    ep = _offline_endpoint()
    # prompt 1..4, then a submission from the boundary at 6 delivered ids 7, 8 with text "sc('red_"
    ctx = Context(gen_id=5, token_ids=[1, 2, 3, 4, 5, 6, 7, 8], n_prompt=4)
    ep.adopt(5, ctx, max_tokens=20, prefix_key=None, boundary=6, replay_text="sc('red_")
    assert ep._gens[5].ids == [1, 2, 3, 4, 5, 6]  # restarted at the boundary
    _start(ep, 5)
    _feed(ep, 5, [7], "sc('")
    _feed(ep, 5, [8, 9], "red_box')")  # 8 verified, 9 is new: only its text is new
    outs = ep.poll()
    assert [(o.token_id, o.text) for o in outs] == [(9, "box')")]
    assert ep._gens[5].ids == [1, 2, 3, 4, 5, 6, 7, 8, 9] and ep.stats["replayed"] == 2
    det = ep.detach(5)
    assert det.boundary == 6 and det.text == "sc('red_box')" and det.context.token_ids[-1] == 9
    # adopted at a boundary, suspended and resumed later: no replay, text flows normally
    ep.adopt(5, det.context, max_tokens=20, prefix_key=None)
    for text in (";gt(", "'x');"):
        _start(ep, 5)
        _feed(ep, 5, [len(ep._gens[5].ids) + 1], text)
        assert [o.text for o in ep.poll()] == [text]
        ep.resume(5, ep.suspend(5), max_tokens=20)


def test_a_finished_replay_does_not_outlive_its_submission():
    from timely_llm_ros.engines.base import Context

    ep = _offline_endpoint()
    ep.adopt(
        7,
        Context(gen_id=7, token_ids=[1, 2, 3, 7], n_prompt=3),
        max_tokens=20,
        prefix_key=None,
        boundary=3,
        replay_text="gt('",
    )
    _start(ep, 7)
    _feed(ep, 7, [7, 8], "gt('pi")
    assert [o.text for o in ep.poll()] == ["pi"]
    ep.resume(7, ep.suspend(7), max_tokens=20)  # the planner cut a segment; later it resumes
    _start(ep, 7)
    _feed(ep, 7, [9], "pi")  # new text of the next submission: delivered, not compared with "gt('"
    assert [o.text for o in ep.poll()] == ["pi"] and not ep.take_faults()


def test_failover_replay_that_diverges_fails_the_generation_instead_of_splicing_a_plan():
    from timely_llm_ros.engines.base import Context

    ep = _offline_endpoint()
    ep.adopt(
        6,
        Context(gen_id=6, token_ids=[1, 2, 3, 7, 8], n_prompt=3),
        max_tokens=20,
        prefix_key=None,
        boundary=3,
        replay_text="sc(",
    )
    _start(ep, 6)
    _feed(ep, 6, [7], "s")
    _feed(ep, 6, [99], "x")  # 8 was delivered; the new server wrote 99
    assert ep.poll() == []
    fault = ep.take_faults()[0]
    assert fault.gen_id == 6 and not fault.transport and "regenerated token 99" in fault.message
