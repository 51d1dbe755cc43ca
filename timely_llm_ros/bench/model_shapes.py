"""Model directories for timing with random weights (vLLM ``load_format="dummy"``), no hub access.

vLLM's dummy loader builds a model from its config.json alone, so an 8B model's step time is
measured without its 16 GB of weights. The shapes are built into the package (the dimensions of
Meta's Llama-3-8B from its published config); the tokenizer is the one the project ships — the
SmolLM2 directory ``make vllm`` (or :mod:`timely_llm_ros.engines.vllm_model`) builds from the
embedded GGUF — and the vocabulary is that tokenizer's, so every id the engine sees is in range.
With a 49152-token vocabulary instead of Llama-3's 128256 the model has 7.4 B parameters instead
of 8.0 B: the same layers, a smaller embedding and output head ("8B-shaped").
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

#: Llama-3-8B's decoder dimensions (config.json of meta-llama/Meta-Llama-3-8B).
LLAMA3_8B: dict[str, Any] = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "max_position_embeddings": 8192,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "hidden_act": "silu",
    "tie_word_embeddings": False,
    "attention_bias": False,
    "torch_dtype": "bfloat16",
    "dtype": "bfloat16",
}
SHAPES = {"llama3-8b": LLAMA3_8B}
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "chat_template.jinja",
    "generation_config.json",
)


def build_shaped_model(out: Path, tokenizer_dir: Path, shape: str = "llama3-8b") -> Path:
    """Write ``out``: config.json of ``shape`` with the vocabulary and special ids of the model in
    ``tokenizer_dir`` (a Hugging Face directory), and that directory's tokenizer files. Idempotent."""
    if shape not in SHAPES:
        raise ValueError(f"unknown model shape {shape!r}; known: {sorted(SHAPES)}")
    src_cfg = json.loads((Path(tokenizer_dir) / "config.json").read_text())
    cfg = dict(SHAPES[shape])
    for key in ("vocab_size", "bos_token_id", "eos_token_id", "pad_token_id"):
        if key in src_cfg:
            cfg[key] = src_cfg[key]
    out.mkdir(parents=True, exist_ok=True)
    for name in TOKENIZER_FILES:
        if (Path(tokenizer_dir) / name).is_file():
            shutil.copyfile(Path(tokenizer_dir) / name, out / name)
    (out / "config.json").write_text(json.dumps(cfg, indent=1) + "\n")
    return out
