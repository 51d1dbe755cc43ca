"""Benchmarks of the vLLM engine, the counterpart of :mod:`.engine_bench` (llama.cpp).

``python -m timely_llm_ros.bench.vllm_bench [--model DIR] [--repeats R] [--out FILE] [--quick]``
(in the vLLM environment: ``make vllm``; on a GPU with ``pip install vllm``).

1. **Decode throughput at batch 1, 4, 8**: B tello_minispec requests (shared skill prompt, each
   task's own text), no grammar, EOS ignored; tokens/s = B / median duration of the pure decoding
   steps.
2. **Suspend/resume** of a ~``--prompt-tokens`` context after 8 generated tokens: vLLM has no pause,
   so suspend = abort and resume = re-submit prompt + generated ids (:mod:`..engines.vllm`). Reported:
   the abort call, the resume step (prefix-cache hit: ``num_cached_tokens``, only the last partial
   block recomputed) next to an ordinary decode step of the same context and a *re-prefill* step of
   a same-length prompt that cannot hit the cache (what resuming would cost without the cache).
3. **Segmentation overhead** (paper §7.5.1, Table 4: ≤ 6 %): the same requests generated greedily
   under the skill grammar, unsegmented (step until EOS) and segmented (suspend + resume at every
   executable segment, as the planner does); overhead = (T_seg − T_plain) / T_seg, medians of
   interleaved runs; the generated tokens must be identical in both modes (checked and reported).

Prints a table and writes all numbers as JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

from timely_llm_ros.bench.engine_loops import (
    DecodeStep,
    decode_throughput,
    generate,
    interleaved_runs,
    run_benchmarks,
)
from timely_llm_ros.core.skills import load_skill_set
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


def segmentation_overhead(eng: VllmEngine, tasks: list[str], repeats: int) -> dict:
    sset = load_skill_set("tello_minispec")
    generate(eng, sset, 29_999, tasks[0], False)  # warm-up: skill prompt cached, grammar compiled
    rows = []
    gid = 30_000
    for task in tasks:
        runs = interleaved_runs(eng, task, repeats, gid)
        gid += 2 * repeats
        ref = runs[False][0]["toks"]
        same = all(x["toks"] == ref for x in runs[False] + runs[True])
        plain = statistics.median(x["wall"] for x in runs[False])
        seg = statistics.median(x["wall"] for x in runs[True])
        # per generated token: a resumed request restarts the grammar with the continuation grammar
        # (a superset), so greedy outputs may differ in length between the modes
        per_plain = statistics.median(x["wall"] / len(x["toks"]) for x in runs[False])
        per_seg = statistics.median(x["wall"] / len(x["toks"]) for x in runs[True])
        rows.append(
            {
                "task": task,
                "tokens": len(ref),
                "tokens_segmented": len(runs[True][0]["toks"]),
                "segments": runs[True][0]["suspensions"] + 1,
                "identical_tokens": same,
                "unsegmented_ms": plain * 1e3,
                "segmented_ms": seg * 1e3,
                "overhead_pct": 100 * (seg - plain) / seg,
                "per_token_overhead_pct": 100 * (per_seg - per_plain) / per_seg,
                "seg_work_ms": statistics.median(x["seg_work"] for x in runs[True]) * 1e3,
            }
        )
    plain = sum(r["unsegmented_ms"] for r in rows)
    seg = sum(r["segmented_ms"] for r in rows)
    return {
        "per_task": rows,
        "repeats": repeats,
        "total_unsegmented_ms": plain,
        "total_segmented_ms": seg,
        "overhead_pct": 100 * (seg - plain) / seg,
        "per_token_overhead_pct": statistics.fmean(r["per_token_overhead_pct"] for r in rows),
        "identical_tokens": all(r["identical_tokens"] for r in rows),
    }


def summary(res: dict) -> str:
    lines = [
        f"vLLM {res['engine']['vllm_version']} on {res['engine']['device']} ({res['machine']})",
        "decode throughput:  "
        + "; ".join(
            f"batch {b}: {v['tokens_per_s']:.1f} tok/s ({v['step_ms']:.0f} ms/step)"
            for b, v in res["throughput"].items()
        ),
    ]
    sr = res["suspend_resume"]
    lines.append(
        f"suspend/resume of a {sr['n_prompt']}-token context: abort {sr['abort_ms']:.2f} ms, resume "
        f"step {sr['resume_ms']:.0f} ms (cached {sr['cached_tokens']:.0f} of "
        f"{sr['resubmitted_tokens']:.0f} tokens) vs decode step {sr['decode_ms']:.0f} ms and "
        f"re-prefill {sr['reprefill_ms']:.0f} ms"
    )
    sg = res["segmentation"]
    lines.append(
        f"segmentation overhead (Table 4): {sg['overhead_pct']:.1f}% of wall time, "
        f"{sg['per_token_overhead_pct']:.1f}% per generated token ({sg['total_segmented_ms']:.0f} vs "
        f"{sg['total_unsegmented_ms']:.0f} ms; identical tokens: {sg['identical_tokens']})"
    )
    for r in sg["per_task"]:
        lines.append(
            f"  {r['task'][:50]:50s} {r['tokens']:3d}/{r['tokens_segmented']:3d} tok {r['segments']} seg "
            f"{r['unsegmented_ms']:7.0f} -> {r['segmented_ms']:7.0f} ms ({r['overhead_pct']:+.1f}%, "
            f"per token {r['per_token_overhead_pct']:+.1f}%)"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="vllm_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--model", help="model directory (default: TIMELY_VLLM_MODEL or make vllm's)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=12, help="decode steps per batch size")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=4, help="requests in the segmentation benchmark")
    parser.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=JSON",
        help="extra VllmEngine parameter, e.g. enforce_eager=false",
    )
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps, args.prompt_tokens, args.tasks = 1, 4, 200, 1
    opts = {"max_model_len": 2048, "enforce_eager": True}
    opts.update({k: json.loads(v) for k, v in (p.split("=", 1) for p in args.param)})
    load0 = os.getloadavg()[0]
    eng = VllmEngine(args.model, **opts)
    try:
        res: dict = {
            "machine": f"{platform.node()} {os.cpu_count()} CPUs",
            "options": opts,
            "engine": {k: v for k, v in eng.info.extra.items() if k != "model"},
        }
        res |= run_benchmarks(
            eng,
            args.steps,
            args.prompt_tokens,
            args.tasks,
            args.repeats,
            throughput,
            suspend_resume,
            segmentation_overhead,
        )
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
