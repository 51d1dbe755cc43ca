"""LLM engines behind one small interface (the engine port :mod:`timely_llm_ros.core.engine`,
re-exported by :mod:`timely_llm_ros.engines.base`): simulated, llama.cpp (embedded CPU default)
and vLLM (GPU). Importing this package never imports an inference library; each engine module
imports its own lazily."""
