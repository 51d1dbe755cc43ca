"""Skip a test module when the llama.cpp engine cannot run here (no llama-cpp-python or no model)."""

from __future__ import annotations

import pytest

from timely_llm_ros.engines.base import EngineError


def require_llamacpp() -> None:
    """Call at module level, before importing the engine."""
    try:
        from timely_llm_ros.engines.llamacpp_native import default_model_path, load_llama_cpp

        load_llama_cpp()
        default_model_path()
    except EngineError as exc:  # BackendMissing or the model package is absent
        pytest.skip(f"llamacpp engine cannot run here: {exc}", allow_module_level=True)
