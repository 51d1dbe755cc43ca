"""The model directory `make vllm` builds from the embedded GGUF (timely_llm_ros.engines.vllm_model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from timely_llm_ros.engines.vllm_model import MARKER, REQUIRED_FILES, is_built

pytestmark = pytest.mark.vllm


def test_default_model_directory_is_complete_and_has_a_chat_template():
    from timely_llm_ros.engines.vllm_config import default_model

    model = Path(default_model())
    assert is_built(model) or all((model / f).is_file() for f in REQUIRED_FILES), sorted(model.iterdir())
    cfg = json.loads((model / "config.json").read_text())
    assert "quantization_config" not in cfg  # dequantized: vLLM must not load it as GGUF-quantized
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model))
    assert tok.chat_template and tok.eos_token_id is not None


def test_an_interrupted_build_is_not_taken_for_a_model(tmp_path):
    for f in REQUIRED_FILES:
        (tmp_path / f).write_text("{}")
    assert not is_built(tmp_path)  # no marker: the conversion did not finish
    (tmp_path / MARKER).write_text("{}")
    assert is_built(tmp_path)
