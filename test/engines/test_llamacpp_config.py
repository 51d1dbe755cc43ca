"""LlamaCppConfig: the llama.cpp engine's options and their checks, without loading a model."""

from __future__ import annotations

import pytest

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.llamacpp_config import LlamaCppConfig


def test_options_override_a_base_config_and_unknown_ones_are_named() -> None:
    base = LlamaCppConfig(n_ctx=1024, seed=3)
    cfg = LlamaCppConfig.from_options({"seed": 7, "prefill_chunk": 16}, base)
    assert (cfg.n_ctx, cfg.seed, cfg.prefill_chunk) == (1024, 7, 16)
    with pytest.raises(
        EngineError, match=r"no parameter\(s\) \['n_gpus'\]; accepted: model_path, config, clock"
    ):
        LlamaCppConfig.from_options({"n_gpus": 2})


@pytest.mark.parametrize(
    "options, message",
    [
        ({"chat_template": "jinja"}, "chat_template must be"),
        ({"temperature": float("nan")}, "temperature must be"),
        ({"prefill_chunk": 0}, "prefill_chunk must be a positive integer"),
        ({"prefill_fast_batch": True}, "prefill_fast_batch must be a positive integer"),
        ({"kv_policy": "sometimes"}, "kv_policy"),
        ({"kv_policy": "lamps", "cost_profile": None}, None),  # default model: the shipped profile prices it
        ({"grammar": 3}, "grammar must be"),
        ({"defrag_thold": 1.5}, "defrag_thold must be"),
        ({"defrag_thold": float("inf")}, "defrag_thold must be"),
    ],
)
def test_validate_checks_before_any_model_is_loaded(options: dict, message: str | None) -> None:
    cfg = LlamaCppConfig.from_options(options)
    if message is None:
        kv, costs = cfg.validate(None)
        assert kv.policy == "lamps" and costs is not None
    else:
        with pytest.raises(EngineError, match=message):
            cfg.validate(None)


def test_lamps_without_a_cost_profile_for_another_model_fails() -> None:
    cfg = LlamaCppConfig(kv_policy="lamps")
    with pytest.raises(EngineError, match="give cost_profile"):
        cfg.validate("/models/other.gguf")


def test_threads_default_to_half_the_cpus_and_batch_threads_follow() -> None:
    assert LlamaCppConfig(n_threads=3).threads() == (3, 3)
    assert LlamaCppConfig(n_threads=2, n_threads_batch=4).threads() == (2, 4)
    n, nb = LlamaCppConfig().threads()
    assert n >= 1 and nb == n


def test_kv_defragmentation_is_on_by_default() -> None:
    """llama.cpp attends over every cell up to the highest used one: without defragmentation a
    decoding step got 2-3x slower once long prompts had come and gone (LlamaCppConfig says how
    it was measured); the default keeps the cache compact, <= 0 turns it off."""
    assert LlamaCppConfig().defrag_thold == 0.1
    LlamaCppConfig.from_options({"defrag_thold": -1}).validate(None)
