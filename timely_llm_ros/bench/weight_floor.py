"""The weight-read floor of one decode step: how fast a GPU *could* run a batch-1 step.

At batch 1 a decode step reads every weight of the model once from device memory and does little
arithmetic per byte, so its time cannot be below ``parameter bytes ÷ memory bandwidth``. The ratio
of a measured step to that floor says how far an engine runs from the hardware (the issue that
introduced this: 13 ms eager vs ≈ 4.9 ms floor for an 8B-shaped model on an H100). The KV cache
read is left out: at batch 1 with a short context it is < 1 % of the weights.

Nothing here imports torch or vLLM: the device name, the model's config.json (or a parameter count
from the loaded model) come from the caller, so the maths is tested without a GPU.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Peak memory bandwidth in TB/s by device name (vendor data sheets), most specific pattern first:
#: every word of a pattern must occur in the device name as torch reports it
#: (``torch.cuda.get_device_name()``, e.g. "NVIDIA H100 80GB HBM3", "NVIDIA H100 PCIe").
KNOWN_BANDWIDTH_TBS: tuple[tuple[str, float], ...] = (
    ("GH200", 4.0),
    ("H200", 4.8),
    ("H100 NVL", 3.9),
    ("H100 PCIe", 2.0),
    ("H100", 3.35),  # SXM5, HBM3
    ("H800", 3.35),
    ("B200", 8.0),
    ("A100 80GB", 2.0),
    ("A100", 1.555),  # 40 GB
    ("L40S", 0.864),
    ("L40", 0.864),
    ("RTX 6000 Ada", 0.96),
    ("RTX 4090", 1.0),
    ("RTX 3090", 0.936),
    ("A10G", 0.6),
    ("A10", 0.6),
    ("L4", 0.3),
    ("T4", 0.32),
)
DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "half": 2, "float32": 4, "float": 4, "float8": 1, "int8": 1}


def bandwidth_for(device_name: str) -> tuple[str, float] | None:
    """(pattern, TB/s) of ``device_name`` from :data:`KNOWN_BANDWIDTH_TBS`, None when unknown."""
    words = device_name.upper().replace("-", " ").split()
    for pattern, tbs in KNOWN_BANDWIDTH_TBS:
        want = pattern.upper().replace("-", " ").split()
        if all(w in words for w in want):
            return pattern, tbs
    return None


def parameter_count(config: dict[str, Any]) -> int:
    """Parameters of a Llama-type decoder (Llama, Mistral, Qwen2, SmolLM2) from its config.json:
    embeddings (+ an untied output head), per layer the Q/K/V/O projections, the gated MLP and two
    norms, and the final norm. Raises KeyError on a config without those fields."""
    h = int(config["hidden_size"])
    layers = int(config["num_hidden_layers"])
    heads = int(config["num_attention_heads"])
    kv = int(config.get("num_key_value_heads") or heads)
    hd = int(config.get("head_dim") or h // heads)
    inter = int(config["intermediate_size"])
    vocab = int(config["vocab_size"])
    attn = h * heads * hd + 2 * h * kv * hd + heads * hd * h
    if config.get("attention_bias"):
        attn += heads * hd + 2 * kv * hd
    per_layer = attn + 3 * h * inter + 2 * h
    emb = vocab * h * (1 if config.get("tie_word_embeddings") else 2)
    return emb + layers * per_layer + h


def config_of(model_dir: str | Path) -> dict[str, Any] | None:
    """The model directory's config.json, or None (a hub name, a missing file)."""
    path = Path(model_dir) / "config.json"
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


@dataclass
class Floor:
    """The floor of one model on one device, and where each number came from."""

    param_bytes: int | None
    params_from: str  # "loaded model" | "config.json" | "unknown"
    bandwidth_tbs: float | None
    bandwidth_from: str  # "flag" | "table: <pattern>" | "unknown device" | "cpu"
    device_name: str

    @property
    def floor_ms(self) -> float | None:
        if not self.param_bytes or not self.bandwidth_tbs:
            return None
        return self.param_bytes / (self.bandwidth_tbs * 1e12) * 1e3

    def ratio(self, step_ms: float | None) -> float | None:
        """Measured step ÷ floor (None when either is unknown)."""
        floor = self.floor_ms
        return step_ms / floor if floor and step_ms else None

    def describe(self, step_ms: float | None) -> str:
        gb = f"{self.param_bytes / 1e9:.2f} GB ({self.params_from})" if self.param_bytes else "unknown size"
        if self.floor_ms is None:
            return f"weight-read floor: n/a on {self.device_name} ({self.bandwidth_from}; weights {gb})"
        r = self.ratio(step_ms)
        return (
            f"weight-read floor: {gb} / {self.bandwidth_tbs:g} TB/s ({self.bandwidth_from}) = "
            f"{self.floor_ms:.2f} ms; decode step at batch 1 = "
            + (f"{step_ms:.2f} ms = {r:.2f}x the floor" if r else "n/a")
        )


def weight_floor(
    device_name: str,
    *,
    on_cpu: bool,
    param_count: int | None,
    params_from: str,
    dtype: str,
    bandwidth_tbs: float | None = None,
) -> Floor:
    """Assemble the floor: ``bandwidth_tbs`` (a flag) wins over the table; a CPU has no table entry
    (its bandwidth depends on the memory channels in use, not the name): n/a unless given."""
    nbytes = param_count * DTYPE_BYTES.get(dtype.replace("torch.", ""), 2) if param_count else None
    if bandwidth_tbs:
        return Floor(nbytes, params_from, bandwidth_tbs, "flag", device_name)
    if on_cpu:
        return Floor(nbytes, params_from, None, "cpu: pass --bandwidth TB/s", device_name)
    known = bandwidth_for(device_name)
    if known is None:
        return Floor(nbytes, params_from, None, "unknown device: pass --bandwidth TB/s", device_name)
    return Floor(nbytes, params_from, known[1], f"table: {known[0]}", device_name)
