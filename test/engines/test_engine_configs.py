"""VllmConfig and OpenAIConfig: each engine's options in one dataclass, checked before a model is
loaded or a server contacted; an unknown option is named with the accepted ones (as LlamaCppConfig)."""

from __future__ import annotations

import pytest

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.openai_config import OpenAIConfig
from timely_llm_ros.engines.registry import create_engine
from timely_llm_ros.engines.vllm_config import VllmConfig, build_engine_args


def test_vllm_options_override_a_base_and_unknown_ones_are_named() -> None:
    cfg = VllmConfig.from_options({"seed": 7}, VllmConfig(max_num_seqs=8))
    assert (cfg.max_num_seqs, cfg.seed) == (8, 7)
    with pytest.raises(
        EngineError, match=r"engine 'vllm' has no parameter\(s\) \['n_gpus'\]; accepted: model"
    ):
        VllmConfig.from_options({"n_gpus": 2})
    # through the registry and the engine: named before vLLM is imported (none is needed here)
    with pytest.raises(EngineError, match=r"no parameter\(s\) \['n_gpus'\]"):
        create_engine("vllm", n_gpus=2)


@pytest.mark.parametrize(
    "options, message",
    [
        ({"kv_policy": "sometimes"}, "kv_policy"),
        ({"kv_policy": "swap"}, "needs kv_offloading_size"),
        ({"chat_template": "chatml"}, "chat_template must be 'auto' or 'none'"),
        ({"temperature": -1.0}, "temperature must be"),
        ({"cost_profile": "no-such-profile"}, "not found"),
    ],
)
def test_vllm_validate_checks_without_vllm(options: dict, message: str) -> None:
    with pytest.raises(EngineError, match=message):
        VllmConfig.from_options(options).validate(None)
    with pytest.raises(EngineError, match=message):  # the engine refuses it before importing vLLM
        create_engine("vllm", **options)


def test_vllm_lamps_needs_a_profile_for_another_model() -> None:
    assert VllmConfig(kv_policy="lamps").validate(None)[1] is not None  # default model: shipped
    with pytest.raises(EngineError, match="give cost_profile"):
        VllmConfig(kv_policy="lamps").validate("/models/other")


def test_vllm_engine_arguments_come_from_the_config() -> None:
    args = build_engine_args("m", VllmConfig(priority=False, max_model_len=512), on_cpu=True)
    assert args["scheduling_policy"] == "fcfs" and args["max_model_len"] == 512
    assert args["enforce_eager"] is True and args["block_size"] == 32  # CPU defaults
    assert (
        build_engine_args("m", enforce_eager=False, engine_args={"block_size": 16}, on_cpu=True)["block_size"]
        == 16
    )  # the user's engine_args win


def test_openai_options_and_unknown_ones_are_named() -> None:
    cfg = OpenAIConfig.from_options({"stop": [], "retry_max": 5.0})
    assert cfg.stops() == [] and OpenAIConfig().stops() == ["\n"] and cfg.retry_max == 5.0
    with pytest.raises(
        EngineError, match=r"engine 'openai' has no parameter\(s\) \['bogus'\]; accepted: base_url"
    ):
        OpenAIConfig.from_options({"bogus": 1})


@pytest.mark.parametrize(
    "options, message",
    [
        ({"server": "sglang"}, "server must be"),
        ({"chat_template": "jinja"}, "chat_template must be"),
        ({"grammar": 3}, "grammar must be"),
        ({"temperature": float("inf")}, "temperature must be"),
        ({"stall_timeout": -1}, "stall_timeout must be"),
        ({"stop": "abc"}, "stop must be a list"),
    ],
)
def test_openai_validate_checks_before_any_server_is_contacted(options: dict, message: str) -> None:
    with pytest.raises(EngineError, match=message):
        OpenAIConfig.from_options(options).validate()
    with pytest.raises(EngineError, match=message):  # a URL nothing listens on: never contacted
        create_engine("openai", base_url="http://127.0.0.1:9", **options)
