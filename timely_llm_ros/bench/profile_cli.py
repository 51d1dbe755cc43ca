"""``timely-llm profile --engine X``: measure a real engine and fit its :class:`EngineProfile`.

TimeBill's estimator (paper 002 §4.2) models one prefill of ``N`` uncached tokens as
``a·N² + b·N + c`` and one decoding iteration as ``q + p·N_kv`` (+ our per-sequence batch term
``r·B``). This command runs both sweeps through the :class:`~timely_llm_ros.engines.base.Engine`
interface — the same calls the planner makes — and fits the coefficients by least squares with
:func:`~timely_llm_ros.core.profile.fit_prefill` / :func:`~timely_llm_ros.core.profile.fit_decode`:

* **prefill**: one generation with an ``N``-token prompt (distinct random-order ids, so no cache
  can help), ``max_tokens=1``: the step that admits it is the prefill (+ sampling one token);
* **decode**: ``B`` generations sharing a ``K``-token prefix (the way skill-set prompts are
  shared) plus 8 private tokens each; after the admitting step, every step is one decoding
  iteration over ``B`` sequences holding ``ΣN_kv = B·(K + 8 + generated)`` KV tokens;
* **swap** (engines with ``spill``, i.e. llama.cpp): time to save a suspended context of ``N``
  tokens to host memory and to restore it, giving the two bandwidths of the profile.

Times come from the engine's own clock (``engine.now()``): wall time for real engines, the
virtual clock for the simulated engine (profiling ``--engine sim`` recovers its profile exactly,
which is how this command is tested). A least-squares coefficient that comes out negative (noise on
a term too small to measure) is refitted at 0 — profiles must be non-negative — and the header of
the written YAML says so, together with the machine, the load, the sample counts and the fit error.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import random
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from timely_llm_ros.core.engine import Engine, script_kwargs
from timely_llm_ros.core.profile import EngineProfile, ProfileError, fit_decode, fit_prefill, load_profile

# Engine parameters that make generation lengths predictable for profiling.
PROFILE_PARAMS: dict[str, dict[str, object]] = {
    "llamacpp": {"chat_template": "none", "grammar": None, "ignore_eos": True},
    # vLLM: a short context; enforce_eager follows the device (eager on a CPU, CUDA graphs on a GPU)
    "vllm": {
        "chat_template": "none",
        "grammar": None,
        "ignore_eos": True,
        "max_model_len": 2048,
    },
    "sim": {},
}
PRIVATE = 8  # private prompt tokens per generation in the decode sweep
HOST_BUDGET_BYTES = 2 * 1024**3  # ASSUMED host memory for spilled contexts when the engine has no cap


@dataclass
class SweepPlan:
    prefill_sizes: tuple[int, ...] = (16, 32, 64, 128, 256, 512, 1024)
    prefill_repeats: int = 2
    batches: tuple[int, ...] = (1, 2, 4, 8)
    kv_sizes: tuple[int, ...] = (64, 256, 1024)
    decode_steps: int = 6
    swap_sizes: tuple[int, ...] = (256, 1024)

    @classmethod
    def quick(cls) -> SweepPlan:
        return cls((16, 64, 256), 1, (1, 4), (64, 256), 3, (128,))


@dataclass
class Measurements:
    prefill: list[tuple[int, float]] = field(default_factory=list)  # (N, s)
    decode: list[tuple] = field(default_factory=list)  # (ΣN_kv, B, s[, K: the sweep's prefix length])
    swap_out: list[tuple[int, int, float]] = field(default_factory=list)  # (tokens, bytes, s)
    swap_in: list[tuple[int, int, float]] = field(default_factory=list)


class _Ids:
    """Valid, distinct prompt ids: a tokenised text in a fresh random order each time."""

    def __init__(self, engine: Engine, seed: int = 0) -> None:
        from timely_llm_ros.core.skills.loader import load_skill_set

        text = load_skill_set("tello_minispec").prompt
        self.base = engine.tokenize(text) or [1]
        self.rng = random.Random(seed)

    def take(self, n: int) -> list[int]:
        out: list[int] = []
        while len(out) < n:
            chunk = list(self.base)
            self.rng.shuffle(chunk)
            out += chunk
        return out[:n]


def _timed_step(engine: Engine) -> tuple[list, float]:
    t0 = engine.now()
    outs = engine.step()
    return outs, engine.now() - t0


def measure(engine: Engine, plan: SweepPlan, progress: Callable[[str], None] | None = None) -> Measurements:
    """Run the sweeps (module docstring) on ``engine``; every generation is released afterwards."""
    say = progress or (lambda _m: None)
    ids = _Ids(engine)
    meas = Measurements()
    gid = itertools.count(1_000_000)
    script = script_kwargs(engine, [ids.base[0]] * 4096)  # output ids, for the simulated engine only
    limit = engine.info.context_limit
    for rep in range(plan.prefill_repeats):
        for n in plan.prefill_sizes:
            if n + 2 >= limit:
                continue
            g = next(gid)
            engine.admit(g, ids.take(n), max_tokens=1, **script)
            _outs, dt = _timed_step(engine)
            submitted = getattr(getattr(engine, "last_step", None), "n_tokens", n)
            meas.prefill.append((submitted, dt))
            engine.release(g)
            say(f"prefill N={submitted} rep {rep + 1}: {dt * 1000:.1f} ms")
    for k in plan.kv_sizes:
        shared = k - PRIVATE
        if shared <= 0 or k + plan.decode_steps + 2 >= limit:
            continue
        prefix = ids.take(shared)
        key = f"profile-prefix-{k}"
        for b in plan.batches:
            gens = [next(gid) for _ in range(b)]
            for g in gens:
                engine.admit(
                    g,
                    prefix + ids.take(PRIVATE),
                    max_tokens=plan.decode_steps + 1,
                    prefix_key=key,
                    prefix_len=shared,
                    **script,
                )
            engine.step()  # admission: prefill of the private parts (and the prefix once)
            generated = 1
            for _ in range(plan.decode_steps):
                outs, dt = _timed_step(engine)
                if len(outs) != b:
                    break
                meas.decode.append((b * (k + generated), b, dt, k))
                generated += 1
            for g in gens:
                engine.release(g)
            recent = [m[2] for m in meas.decode[-plan.decode_steps :]]
            say(f"decode K={k} B={b}: {statistics.median(recent) * 1000:.1f} ms/step")
    if hasattr(engine, "spill"):
        for n in plan.swap_sizes:
            if n + 4 >= limit:
                continue
            g = next(gid)
            engine.admit(g, ids.take(n), max_tokens=4, **script)
            engine.step()
            ctx = engine.suspend(g)
            t0 = time.perf_counter()
            nbytes = engine.spill(g)
            meas.swap_out.append((n, nbytes, time.perf_counter() - t0))
            engine.resume(g, ctx, max_tokens=4)
            engine.step()
            meas.swap_in.append((n, nbytes, engine.last_step.restore_s))  # type: ignore[attr-defined]  # llama.cpp engine's step record
            engine.release(g)
            say(
                f"swap N={n}: {nbytes} B out {meas.swap_out[-1][2] * 1000:.2f} ms, "
                f"in {meas.swap_in[-1][2] * 1000:.2f} ms"
            )
    return meas


# ------------------------------------------------------------------------------------------ fitting
def _nonneg(cols: list[np.ndarray], t: np.ndarray, full: tuple[float, ...]) -> tuple[list[float], list[int]]:
    """``full`` if all >= 0, else the best least-squares fit with some coefficients fixed at 0."""
    if all(c >= 0 for c in full):
        return list(full), []
    best: tuple[float, list[float], list[int]] | None = None
    k = len(cols)
    for r in range(k - 1, 0, -1):
        for keep in itertools.combinations(range(k), r):
            x = np.column_stack([cols[i] for i in keep])
            coef, *_ = np.linalg.lstsq(x, t, rcond=None)
            if np.any(coef < 0):
                continue
            vals = [0.0] * k
            for i, c in zip(keep, coef, strict=True):
                vals[i] = float(c)
            err = float(np.sum((x @ coef - t) ** 2))
            if best is None or err < best[0]:
                best = (err, vals, [i for i in range(k) if i not in keep])
        if best is not None:
            break
    if best is None:
        return [0.0] * k, list(range(k))
    return best[1], best[2]


def _quality(pred: np.ndarray, t: np.ndarray) -> dict[str, float]:
    ss_res = float(np.sum((pred - t) ** 2))
    ss_tot = float(np.sum((t - t.mean()) ** 2)) or 1e-30
    rel = np.abs(pred - t) / np.maximum(t, 1e-12)
    return {
        "r2": 1 - ss_res / ss_tot,
        "median_rel_err": float(np.median(rel)),
        "max_rel_err": float(rel.max()),
    }


def _medians(samples: list[tuple], key: Callable[[tuple], tuple], t_index: int) -> list[tuple]:
    """One point per configuration: the median time, the mean of the other coordinates.

    Step times on a shared CPU have long upper tails (another process takes the core for a while);
    fitting per-configuration medians keeps those spikes from steering the coefficients.
    """
    groups: dict[tuple, list[tuple]] = {}
    for s in samples:
        groups.setdefault(key(s), []).append(s)
    out = []
    for g in groups.values():
        cols = list(zip(*g, strict=True))
        out.append(
            tuple(statistics.median(c) if i == t_index else float(np.mean(c)) for i, c in enumerate(cols))
        )
    return out


def fit(meas: Measurements, robust: bool = True) -> dict:
    """Coefficients (non-negative) and fit diagnostics from the measurements (per-configuration
    medians when ``robust``; the decode sweep's configuration is (prefix length, batch))."""
    if len(meas.prefill) < 3 or len(meas.decode) < 3:
        raise ProfileError(
            f"too few measurements to fit ({len(meas.prefill)} prefill, {len(meas.decode)} decode)"
        )
    pre, dec = meas.prefill, meas.decode
    if robust:  # decode samples may carry their configuration's prefix length K as a 4th value
        pre = _medians(pre, key=lambda s: (s[0],), t_index=1)
        dec = _medians(dec, key=lambda s: (s[1], s[3] if len(s) > 3 else s[0]), t_index=2)
        if len(pre) < 3 or len(dec) < 3:
            pre, dec = meas.prefill, meas.decode
    n = np.array([m[0] for m in pre], dtype=float)
    tp = np.array([m[1] for m in pre], dtype=float)
    a, b, c = fit_prefill(n.tolist(), tp.tolist())
    (a, b, c), zp = _nonneg([n * n, n, np.ones_like(n)], tp, (a, b, c))
    kv = np.array([m[0] for m in dec], dtype=float)
    bb = np.array([m[1] for m in dec], dtype=float)
    td = np.array([m[2] for m in dec], dtype=float)
    if len(set(bb.tolist())) > 1:
        q, p, r = fit_decode(kv.tolist(), bb.tolist(), td.tolist())
        (q, p, r), zd = _nonneg([np.ones_like(kv), kv, bb], td, (q, p, r))
    else:  # one batch size: the batch term is not identifiable
        coef, *_ = np.linalg.lstsq(np.column_stack([np.ones_like(kv), kv]), td, rcond=None)
        (q, p), zd0 = _nonneg([np.ones_like(kv), kv], td, tuple(float(x) for x in coef))
        r, zd = 0.0, zd0 + [2]
    names_p, names_d = ("prefill_a", "prefill_b", "prefill_c"), ("decode_q", "decode_p", "decode_r")
    out = {
        "prefill_a": a,
        "prefill_b": b,
        "prefill_c": c,
        "decode_q": q,
        "decode_p": p,
        "decode_r": r,
        "clamped": [names_p[i] for i in zp] + [names_d[i] for i in zd],
        "prefill_fit": _quality(a * n * n + b * n + c, tp),
        "decode_fit": _quality(q + p * kv + r * bb, td),
        "n_prefill": len(tp),
        "n_decode": len(td),
    }
    if meas.swap_out and meas.swap_in:
        out["bytes_per_token_state"] = statistics.median(by / t for t, by, _ in meas.swap_out)
        out["swap_out_s_per_token"] = statistics.median(s / t for t, _, s in meas.swap_out)
        out["swap_in_s_per_token"] = statistics.median(s / t for t, _, s in meas.swap_in if s > 0)
    return out


# ----------------------------------------------------------------------------------------- output
def machine_description() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{cpu}, {os.cpu_count()} logical CPUs, host {platform.node()}, "
        f"{platform.system()} {platform.release()}"
    )


def build_profile(engine: Engine, coef: dict, name: str, device: str) -> EngineProfile:
    extra = engine.info.extra
    kvb = int(extra.get("kv_bytes_per_token") or EngineProfile.kv_bytes_per_token)
    fields: dict = {
        k: max(0.0, float(coef[k]))
        for k in ("prefill_a", "prefill_b", "prefill_c", "decode_q", "decode_p", "decode_r")
    }
    model = Path(str(extra["model"])).name if extra.get("model") else engine.info.name
    if extra.get("model_desc"):
        model += f" (llama.cpp: {extra['model_desc']})"
    fields.update(
        name=name,
        model=model,
        device=device,
        kv_bytes_per_token=kvb,
        kv_capacity_tokens=int(engine.memory().capacity),
        context_limit=int(engine.info.context_limit),
    )
    host_cap = getattr(engine, "host_kv_budget", None)
    fields["host_kv_capacity_tokens"] = int(host_cap) if host_cap else HOST_BUDGET_BYTES // kvb
    if coef.get("swap_out_s_per_token", 0) > 0 and coef.get("swap_in_s_per_token", 0) > 0:
        fields["device_to_host_bytes_per_s"] = kvb / coef["swap_out_s_per_token"]
        fields["host_to_device_bytes_per_s"] = kvb / coef["swap_in_s_per_token"]
    if fields["decode_q"] + fields["decode_r"] <= 0:  # a profile's decode step must take time
        fields["decode_q"] = 1e-6
    fields["description"] = (
        f"Fitted by `timely-llm profile` on {time.strftime('%Y-%m-%d')} "
        f"({coef['n_prefill']} prefill and {coef['n_decode']} decode samples); "
        "see the header."
    )
    return EngineProfile(**fields)


def header(args_line: str, engine: Engine, coef: dict, machine: str, load: tuple[float, float]) -> str:
    pf, df = coef["prefill_fit"], coef["decode_fit"]
    extra = engine.info.extra
    lines = [
        f"Engine profile measured with: {args_line}",
        f"Machine: {machine}; load average {load[0]:.2f} at start, {load[1]:.2f} at end.",
        f"Engine: {engine.info.name} {json.dumps({k: v for k, v in extra.items() if k != 'model'})}",
        "Form (TimeBill, paper 002 §4.2, + batch term): prefill(N) = a·N² + b·N + c for N uncached tokens;",
        "decode step = q + p·ΣN_kv + r·B. Least squares (core/profile.py); negative coefficients",
        f"refitted at 0 (here: {', '.join(coef['clamped']) or 'none'}).",
        f"Prefill fit: {coef['n_prefill']} samples, R² {pf['r2']:.4f}, median rel. error "
        f"{pf['median_rel_err'] * 100:.1f}%, max {pf['max_rel_err'] * 100:.1f}%.",
        f"Decode fit: {coef['n_decode']} samples, R² {df['r2']:.4f}, median rel. error "
        f"{df['median_rel_err'] * 100:.1f}%, max {df['max_rel_err'] * 100:.1f}%.",
    ]
    if "swap_out_s_per_token" in coef:
        lines.append(
            f"Swap: host<->device bandwidths from saving/restoring suspended contexts "
            f"(llama_state_seq_get/set_data): {coef['swap_out_s_per_token'] * 1e6:.2f} / "
            f"{coef['swap_in_s_per_token'] * 1e6:.2f} µs per token out/in."
        )
    else:
        lines.append("Swap bandwidths: not measured by this engine (profile defaults).")
    lines.append(
        "kv_capacity_tokens = the profiled engine's KV budget; host_kv_capacity_tokens = the "
        f"engine's host budget or ASSUMED {HOST_BUDGET_BYTES // 1024**3} GiB of host memory."
    )
    lines.append("Timing noise: shared machines give noisy samples; re-run on the target machine.")
    return "".join(f"# {ln}\n" for ln in lines)


def write_profile(path: Path, prof: EngineProfile, head: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(head + yaml.safe_dump(prof.to_dict(), sort_keys=False, allow_unicode=True))
    load_profile(path)  # the written file must load back


# -------------------------------------------------------------------------------------------- CLI
def _ints(text: str) -> tuple[int, ...]:
    try:
        vals = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}") from None
    if not vals or any(v <= 0 for v in vals):
        raise argparse.ArgumentTypeError(f"expected positive integers, got {text!r}")
    return vals


def _param(text: str) -> tuple[str, object]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    k, v = text.split("=", 1)
    return k.strip(), yaml.safe_load(v)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine", required=True, choices=("llamacpp", "vllm", "sim"), help="engine to profile"
    )
    parser.add_argument(
        "--model",
        help="llamacpp: GGUF path (default: the embedded SmolLM2); "
        "vllm: model directory (default: $TIMELY_VLLM_MODEL or the one make vllm built)",
    )
    parser.add_argument("--threads", type=int, help="llamacpp: CPU threads (default: half the CPUs)")
    parser.add_argument("--n-ctx", type=int, default=4096, help="llamacpp: KV cells of the context (4096)")
    parser.add_argument(
        "--param",
        type=_param,
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra engine constructor parameter (YAML value), repeatable",
    )
    parser.add_argument("--name", help="profile name (default: derived from engine and model)")
    parser.add_argument("--device", help="device description for the profile (default: this machine)")
    parser.add_argument("--out", type=Path, help="profile YAML to write (default: ./<name>.yaml)")
    parser.add_argument("--raw", type=Path, help="also write the raw measurements as JSON")
    parser.add_argument("--quick", action="store_true", help="small sweep (smoke test)")
    parser.add_argument("--prefill-sizes", type=_ints, help="comma-separated prompt lengths")
    parser.add_argument("--repeats", type=int, help="prefill repetitions per size")
    parser.add_argument("--batches", type=_ints, help="comma-separated batch sizes")
    parser.add_argument("--kv-sizes", type=_ints, help="comma-separated KV lengths per sequence")
    parser.add_argument("--decode-steps", type=int, help="measured decode steps per (K, B)")


def engine_params(args: argparse.Namespace) -> dict[str, Any]:
    params: dict[str, object] = dict(PROFILE_PARAMS[args.engine])
    if args.engine == "llamacpp":
        params["n_ctx"] = args.n_ctx
        if args.model:
            params["model_path"] = args.model
        if args.threads:
            params["n_threads"] = args.threads
    elif args.engine == "vllm":  # no --model: $TIMELY_VLLM_MODEL or the one `make vllm` built
        if args.model:
            params["model"] = args.model
    params.update(dict(args.param))
    return params


def run(args: argparse.Namespace) -> int:
    from timely_llm_ros.engines.registry import create_engine

    plan = SweepPlan.quick() if args.quick else SweepPlan()
    for attr, name in (
        ("prefill_sizes", "prefill_sizes"),
        ("repeats", "prefill_repeats"),
        ("batches", "batches"),
        ("kv_sizes", "kv_sizes"),
        ("decode_steps", "decode_steps"),
    ):
        if getattr(args, attr):
            setattr(plan, name, getattr(args, attr))
    load0 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    engine = create_engine(args.engine, **engine_params(args))
    try:
        meas = measure(engine, plan, progress=lambda m: print(m, file=sys.stderr, flush=True))
        coef = fit(meas)
        load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        machine = machine_description()
        threads = engine.info.extra.get("n_threads")
        device = args.device or (machine.split(",")[0] + (f", {threads} thread(s)" if threads else ""))
        stem = Path(str(engine.info.extra.get("model") or engine.info.name)).stem.lower()
        name = args.name or f"{stem}-{args.engine}"
        prof = build_profile(engine, coef, name, device)
        out = args.out or Path(f"{name}.yaml")
        cmd = " ".join([Path(sys.argv[0]).name, *sys.argv[1:]])
        write_profile(out, prof, header(cmd, engine, coef, machine, (load0, load1)))
        if args.raw:
            args.raw.write_text(
                json.dumps({"plan": asdict(plan), "measurements": asdict(meas), "fit": coef}, indent=1)
            )
    finally:
        engine.close()
    print(
        f"wrote {out}: prefill a={prof.prefill_a:.3e} b={prof.prefill_b:.3e} c={prof.prefill_c:.3e}; "
        f"decode q={prof.decode_q:.3e} p={prof.decode_p:.3e} r={prof.decode_r:.3e}; "
        f"R² prefill {coef['prefill_fit']['r2']:.3f}, decode {coef['decode_fit']['r2']:.3f}"
    )
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="timely-llm profile", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
