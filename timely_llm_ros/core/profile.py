"""Engine timing/memory profile (TimeBill's estimator form, paper 002 §4.2) and its fitting.

One :class:`EngineProfile` describes one model on one device:

* prefill of ``N`` prompt tokens that are not already cached: ``a·N² + b·N + c`` seconds
  (TimeBill Eq. 4a: attention is quadratic in N, the feed-forward layers linear, the rest constant);
* one decoding iteration over ``B`` running sequences holding ``ΣN_kv`` KV tokens in total:
  ``q + p·ΣN_kv + r·B`` seconds (TimeBill Eq. 4b, ``q + p·N_kv``, plus a per-sequence batch term);
* what a real engine's step costs beyond the model's forward pass, learned from runs on it
  (``timely-llm realbench``'s per-phase account, :mod:`timely_llm_ros.bench.phase_account`):
  ``prefill_kv`` per cached KV token in front of a prompt chunk, once per chunk (a prompt suffix
  attends to the cached skill-set prefix: on a 2-core CPU a chunk of 7-64 tokens behind the
  1.2k-token drone prompt took about 60 ms more than the same chunk fresh, whatever its size —
  the batched attention's cost is the cached KV it reads, not rows × KV), ``token_overhead`` per emitted token (sampling, grammar checks and
  masks, detokenisation) and ``step_overhead`` per engine step (the planner's own loop between
  steps). All three are 0 in a profile that does not set them, so a GPU profile fitted from the
  forward pass alone prices exactly as before;
* KV memory: ``kv_bytes_per_token`` and a device capacity in tokens; a host (CPU) capacity for
  swapped-out contexts and the host↔device bandwidths that price a swap (paper §4.1: restoring a
  suspended context from host memory instead of re-prefilling it).

Profiles are data (``config/profiles/<name>.yaml``); every number there carries its source. The
fit helpers are plain least squares (numpy ``lstsq``) so the real engines' profiler can produce a
profile from measurements in the same form the simulator consumes.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from timely_llm_ros.core.paths import config_files, config_path
from timely_llm_ros.core.schema import SchemaError
from timely_llm_ros.core.schema import validate as validate_schema


class ProfileError(ValueError):
    """A profile file or value that cannot describe an engine (says which field and why)."""


@dataclass(frozen=True)
class EngineProfile:
    """Timing and memory model of one engine (all times in seconds, sizes in tokens/bytes)."""

    name: str
    model: str = ""
    device: str = ""
    # prefill(N) = a·N² + b·N + c for N uncached prompt tokens
    prefill_a: float = 0.0
    prefill_b: float = 0.0
    prefill_c: float = 0.0
    # decode step = q + p·ΣN_kv + r·B
    decode_q: float = 0.02
    decode_p: float = 0.0
    decode_r: float = 0.0
    # beyond the forward pass (module docstring): per prompt token × cached KV token in front of it,
    # per emitted token, per engine step
    prefill_kv: float = 0.0
    token_overhead: float = 0.0
    step_overhead: float = 0.0
    kv_bytes_per_token: int = 131072
    kv_capacity_tokens: int = 60000
    host_kv_capacity_tokens: int = 120000
    host_to_device_bytes_per_s: float = 1.8e10
    device_to_host_bytes_per_s: float = 1.8e10
    context_limit: int = 8192
    # "lru": evict the suspended context suspended longest ago; "furthest": evict the one whose
    # resumption hint lies furthest in the future (Belady), falling back to LRU without hints.
    eviction: str = "furthest"
    # Window (pure decode steps) of the per-sequence speed estimate (scheduling pitfall 2).
    speed_window: int = 4
    description: str = ""

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if f.type in ("float", "int"):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise ProfileError(f"profile {self.name!r}: {f.name} must be a finite number, got {v!r}")
                if v < 0:
                    raise ProfileError(f"profile {self.name!r}: {f.name} must be >= 0, got {v!r}")
        for name in ("kv_capacity_tokens", "context_limit", "speed_window", "kv_bytes_per_token"):
            if getattr(self, name) <= 0:
                raise ProfileError(f"profile {self.name!r}: {name} must be > 0")
        for name in ("host_to_device_bytes_per_s", "device_to_host_bytes_per_s"):
            if getattr(self, name) <= 0:
                raise ProfileError(f"profile {self.name!r}: {name} must be > 0")
        if self.eviction not in ("lru", "furthest"):
            raise ProfileError(
                f"profile {self.name!r}: eviction must be 'lru' or 'furthest', got {self.eviction!r}"
            )
        if self.decode_q + self.decode_r <= 0:
            raise ProfileError(f"profile {self.name!r}: a decode step must take time (q + r > 0)")

    # -- the model ------------------------------------------------------------------------------
    def prefill_time(self, n: int, front: int = 0) -> float:
        """Seconds to prefill ``n`` uncached prompt tokens (0 for n <= 0) behind ``front`` cached
        KV tokens (a shared prefix: ``prefill_kv`` per cached token)."""
        if n <= 0:
            return 0.0
        return (self.prefill_a * n + self.prefill_b) * n + self.prefill_kv * front + self.prefill_c

    def prefill_batch_time(self, ns: list[int], fronts: list[int] | None = None) -> float:
        """Seconds of one forward pass that prefills several sequences (``ns`` uncached tokens each,
        behind ``fronts`` cached tokens each): ``c + Σ (a·N_i² + b·N_i + prefill_kv·F_i)`` —
        attention is quadratic per sequence, the rest is shared, and the constant (reading the
        weights, launching the pass) is paid once per pass."""
        total = 0.0
        for i, n in enumerate(ns):
            if n > 0:
                front = fronts[i] if fronts is not None else 0
                total += (self.prefill_a * n + self.prefill_b) * n + self.prefill_kv * front
        return total + self.prefill_c if total > 0 else 0.0

    def chunk_time(self, offset: int, n: int, front: int = 0) -> float:
        """Seconds ``n`` prompt tokens at private offset ``offset`` add to a pass (no pass constant):
        ``a·((o+n)² − o²) + b·n + prefill_kv·front``."""
        if n <= 0:
            return 0.0
        o = offset
        return self.prefill_a * ((o + n) ** 2 - o * o) + self.prefill_b * n + self.prefill_kv * front

    def decode_time(self, batch: int, kv_tokens: int) -> float:
        """Seconds of one decoding iteration over ``batch`` sequences with ``kv_tokens`` in total."""
        if batch <= 0:
            return 0.0
        return self.decode_q + self.decode_p * kv_tokens + self.decode_r * batch

    def swap_in_time(self, tokens: int) -> float:
        """Host → device transfer of ``tokens`` KV tokens."""
        return tokens * self.kv_bytes_per_token / self.host_to_device_bytes_per_s

    def swap_out_time(self, tokens: int) -> float:
        """Device → host transfer of ``tokens`` KV tokens."""
        return tokens * self.kv_bytes_per_token / self.device_to_host_bytes_per_s

    def slowed(self, k: float) -> EngineProfile:
        """This profile on a machine ``k`` times slower (every time term × k, bandwidths ÷ k): the
        speed a shared machine's load gave an engine during a run, for a prediction at that speed."""
        if not (math.isfinite(k) and k > 0):
            raise ProfileError(f"profile {self.name!r}: slow-down factor must be > 0, got {k!r}")
        times = (
            "prefill_a prefill_b prefill_c decode_q decode_p decode_r prefill_kv token_overhead step_overhead"
        ).split()
        return replace(
            self,
            **{f: getattr(self, f) * k for f in times},
            host_to_device_bytes_per_s=self.host_to_device_bytes_per_s / k,
            device_to_host_bytes_per_s=self.device_to_host_bytes_per_s / k,
        )

    # -- persistence ----------------------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def save(self, path: str | Path) -> None:
        Path(path).write_text(yaml.safe_dump(self.to_dict(), sort_keys=False))

    @classmethod
    def from_dict(cls, data: dict[str, Any], source: str = "<dict>") -> EngineProfile:
        if not isinstance(data, dict):
            raise ProfileError(f"{source}: a profile must be a mapping, got {type(data).__name__}")
        try:  # structure first (config/schema/profile.schema.json): file, field path, reason
            validate_schema(data, "profile", source)
        except SchemaError as exc:
            raise ProfileError(str(exc)) from None
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ProfileError(f"{source}: unknown profile field(s) {unknown}; known: {sorted(known)}")
        if "name" not in data:
            raise ProfileError(f"{source}: profile has no name")
        return cls(**data)


def load_profile(name_or_path: str | Path) -> EngineProfile:
    """Load ``config/profiles/<name>.yaml`` or an explicit YAML path."""
    p = Path(name_or_path)
    if p.suffix not in (".yaml", ".yml"):
        p = config_path("profiles", f"{name_or_path}.yaml")
    if not p.is_file():
        avail = ", ".join(available_profiles()) or "none"
        raise ProfileError(f"engine profile {str(name_or_path)!r} not found ({p}); available: {avail}")
    try:
        data = yaml.safe_load(p.read_text())
    except yaml.YAMLError as exc:
        raise ProfileError(f"{p}: invalid YAML: {exc}") from exc
    return EngineProfile.from_dict(data, source=str(p))


def available_profiles() -> list[str]:
    try:
        return sorted(config_files("profiles"))
    except FileNotFoundError:
        return []


# -- least-squares fits ---------------------------------------------------------------------------
def _lstsq(cols: list[np.ndarray], t: np.ndarray, what: str) -> list[float]:
    x = np.column_stack(cols)
    if x.shape[0] < x.shape[1]:
        raise ProfileError(f"{what}: need at least {x.shape[1]} measurements, got {x.shape[0]}")
    if not np.all(np.isfinite(x)) or not np.all(np.isfinite(t)):
        raise ProfileError(f"{what}: measurements must be finite")
    coef, _, rank, _ = np.linalg.lstsq(x, t, rcond=None)
    if rank < x.shape[1]:
        raise ProfileError(
            f"{what}: measurements do not determine {x.shape[1]} coefficients (vary the inputs)"
        )
    return [float(c) for c in coef]


def fit_prefill(n: list[float], t: list[float]) -> tuple[float, float, float]:
    """Least-squares ``(a, b, c)`` of ``t ≈ a·N² + b·N + c`` (TimeBill Eq. 4a)."""
    nn = np.asarray(n, dtype=float)
    tt = np.asarray(t, dtype=float)
    if nn.shape != tt.shape:
        raise ProfileError("fit_prefill: N and t must have the same length")
    a, b, c = _lstsq([nn * nn, nn, np.ones_like(nn)], tt, "fit_prefill")
    return a, b, c


def fit_decode(n_kv: list[float], batch: list[float], t: list[float]) -> tuple[float, float, float]:
    """Least-squares ``(q, p, r)`` of ``t ≈ q + p·ΣN_kv + r·B`` (TimeBill Eq. 4b + batch term)."""
    kv = np.asarray(n_kv, dtype=float)
    b = np.asarray(batch, dtype=float)
    tt = np.asarray(t, dtype=float)
    if not (kv.shape == b.shape == tt.shape):
        raise ProfileError("fit_decode: N_kv, B and t must have the same length")
    q, p, r = _lstsq([np.ones_like(kv), kv, b], tt, "fit_decode")
    return q, p, r
