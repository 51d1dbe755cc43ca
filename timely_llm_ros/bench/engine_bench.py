"""Benchmarks of the embedded llama.cpp engine.

``python -m timely_llm_ros.bench.engine_bench [--threads N] [--repeats R] [--out FILE] [--quick]``

1. **Decode throughput at batch 1, 4, 8.** B generations of tello_minispec requests (the ~1.2k-token
   skill prompt shared through the prefix sequence + each task's own text), no grammar, EOS
   ignored; tokens/s = B / median duration of the pure decoding steps (prefill steps excluded).
2. **Suspend/resume of a ~1k-token context** (one generation with a 1000-token private prompt, 8
   tokens generated, then suspended):
   *keep* — resume with the KV still in the context: the resume step submits 1 token;
   *spill* — save the context to host memory (``llama_state_seq_get_data`` + remove) and restore it
   on resume (``set_data``): spill time, restore time, resume step;
   *re-prefill* — drop the KV and resume: the step re-evaluates prompt + generated ids.
   Each is compared with an ordinary decode step of the same context.
3. **Segmentation overhead** (paper §7.5.1, Table 4: ≤ 6 %): the same requests generated greedily
   under the skill grammar, (a) unsegmented — step until EOS — and (b) segmented — the stop checker
   reads every token and at each executable segment the generation is suspended and resumed
   (KV kept), as the planner does. Greedy decoding gives identical tokens in both modes (checked);
   overhead = (T_segmented − T_unsegmented) / T_segmented with T the wall time from admission to
   EOS, median (and minimum) over ``repeats`` interleaved runs per request. Because that
   difference is small next to the noise of a shared CPU, process CPU time, the tokens submitted
   to llama_decode in both modes and the time spent in the segmentation work itself (checker,
   suspend and resume calls) are reported too.

Prints a summary and writes all numbers as JSON.
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
from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.engines.llamacpp import LlamaCppEngine


def _decode_step(eng: LlamaCppEngine) -> DecodeStep:
    """One step as the engine reports it (:attr:`LlamaCppEngine.last_step`); prefill, restore or
    eviction in it make it no decode-speed sample."""
    eng.step()
    st = eng.last_step
    return DecodeStep(st.n_seqs if st.pure_decode else -1, st.duration, st.kv_tokens)


def throughput(eng: LlamaCppEngine, batches: tuple[int, ...], steps: int) -> dict:
    """Aggregate and per-sequence decode tokens/s at each batch size (module docstring, 1)."""
    return decode_throughput(eng, batches, steps, _decode_step)


def suspend_resume(eng: LlamaCppEngine, n_prompt: int, repeats: int) -> dict:
    """Keep vs spill vs re-prefill for one ~n_prompt-token context (module docstring, 2)."""
    sset = load_skill_set("tello_minispec")
    base = eng.tokenize(sset.prompt)
    ids = (base * (n_prompt // len(base) + 1))[:n_prompt]
    keys = (
        "decode_ms",
        "keep_resume_ms",
        "spill_ms",
        "restore_ms",
        "spill_resume_ms",
        "reprefill_resume_ms",
        "spill_bytes",
        "reprefill_tokens",
    )
    out: dict[str, list[float]] = {k: [] for k in keys}
    eng.ignore_eos = True
    try:
        for r in range(repeats):
            g = 20_000 + r
            eng.admit(g, ids, max_tokens=64)
            eng.step()
            for _ in range(8):
                eng.step()
            out["decode_ms"].append(eng.last_step.duration * 1e3)
            for mode in ("keep", "spill", "reprefill"):
                ctx = eng.suspend(g)
                if mode == "spill":
                    t0 = time.perf_counter()
                    out["spill_bytes"].append(eng.spill(g))
                    out["spill_ms"].append((time.perf_counter() - t0) * 1e3)
                elif mode == "reprefill":
                    eng.discard(g)
                eng.resume(g, ctx, max_tokens=64)
                eng.step()
                st = eng.last_step
                if mode != "reprefill" and st.tokens_by_gen[g] != 1:
                    raise RuntimeError(f"{mode} resume submitted {st.tokens_by_gen[g]} tokens, expected 1")
                out[f"{mode}_resume_ms"].append(st.duration * 1e3)
                if mode == "spill":
                    out["restore_ms"].append(st.restore_s * 1e3)
                if mode == "reprefill":
                    out["reprefill_tokens"].append(st.tokens_by_gen[g])
                eng.step()  # an ordinary step between the modes
            eng.release(g)
    finally:
        eng.ignore_eos = False
    return {k: statistics.median(v) for k, v in out.items() if v} | {"n_prompt": n_prompt}


def _pct(seg: float, plain: float) -> float:
    return 100 * (seg - plain) / seg


def segmentation_overhead(eng: LlamaCppEngine, tasks: list[str], repeats: int) -> dict:
    """Unsegmented vs segmented generation of the same requests (module docstring, 3).

    Reported per request and in total: wall time (what the paper measured; on a shared CPU its
    run-to-run noise is larger than the effect), process CPU time (llama.cpp computes in this
    process's thread(s), so other processes disturb it much less), both as medians of interleaved
    runs, the tokens submitted to llama_decode (segmentation must add none) and the time spent in
    the segmentation work itself.
    """
    sset = load_skill_set("tello_minispec")
    submitted = lambda: eng.stats["tokens_submitted"]  # noqa: E731 - the engine's own counter
    generate(eng, sset, 29_999, tasks[0], False, submitted)  # warm-up: prefills the shared skill prompt
    rows = []
    gid = 30_000
    for task in tasks:
        runs = interleaved_runs(eng, task, repeats, gid, submitted)
        gid += 2 * repeats
        ref = runs[False][0]["toks"]
        if any(x["toks"] != ref for x in runs[False] + runs[True]):
            raise RuntimeError(f"greedy outputs differ between runs for {task!r}")

        def med(seg: bool, key: str) -> float:
            return statistics.median(x[key] for x in runs[seg])  # noqa: B023 - used right here

        row = {
            "task": task,
            "plan": eng.detokenize(ref),
            "tokens": len(ref),
            "segments": runs[True][0]["suspensions"] + 1,
            "extra_tokens_submitted": runs[True][0]["submitted"] - runs[False][0]["submitted"],
        }
        for key in ("wall", "cpu"):
            row[f"{key}_unsegmented_ms"] = med(False, key) * 1e3
            row[f"{key}_segmented_ms"] = med(True, key) * 1e3
            row[f"{key}_overhead_pct"] = _pct(med(True, key), med(False, key))
        row["seg_work_ms"] = med(True, "seg_work") * 1e3
        row["seg_work_pct"] = 100 * med(True, "seg_work") / med(True, "wall")
        rows.append(row)
    out: dict = {"per_task": rows, "repeats": repeats}
    for key in ("wall", "cpu"):
        plain = sum(r[f"{key}_unsegmented_ms"] for r in rows)
        seg = sum(r[f"{key}_segmented_ms"] for r in rows)
        out[f"{key}_total_unsegmented_ms"] = plain
        out[f"{key}_total_segmented_ms"] = seg
        out[f"{key}_overhead_pct"] = _pct(seg, plain)
    out["seg_work_pct"] = 100 * sum(r["seg_work_ms"] for r in rows) / out["wall_total_segmented_ms"]
    out["extra_tokens_submitted"] = sum(r["extra_tokens_submitted"] for r in rows)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="engine_bench", description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, help="llama.cpp threads (default: half the CPUs)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--steps", type=int, default=16, help="decode steps per batch size")
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--tasks", type=int, default=4, help="requests in the segmentation benchmark")
    parser.add_argument("--quick", action="store_true", help="tiny run (smoke test)")
    parser.add_argument("--out", type=Path, help="write the results as JSON")
    args = parser.parse_args(argv)
    if args.quick:
        args.repeats, args.steps, args.prompt_tokens, args.tasks = 1, 4, 200, 1
    load0 = os.getloadavg()[0]
    with LlamaCppEngine(n_ctx=4096, n_threads=args.threads) as eng:
        results: dict = {
            "machine": f"{platform.node()} {os.cpu_count()} CPUs",
            "engine": {k: v for k, v in eng.info.extra.items() if k != "model"},
        }
        results |= run_benchmarks(
            eng,
            args.steps,
            args.prompt_tokens,
            args.tasks,
            args.repeats,
            throughput,
            suspend_resume,
            segmentation_overhead,
        )
    results["load_average"] = [load0, os.getloadavg()[0]]
    print(json.dumps(results, indent=1))
    if args.out:
        args.out.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
