"""The measuring loops shared by the engine benchmarks (:mod:`.engine_bench` for llama.cpp,
:mod:`.vllm_bench` for vLLM).

Why one module: both benchmarks measure the same things the same way — decode throughput of a batch
of tello_minispec requests sharing the skill prompt, and one request generated unsegmented and
segmented (suspend + resume at every executable segment, as the planner does) — so that their
numbers compare. Written once, the two cannot drift apart; each engine passes only how it reads
one step (llama.cpp reports its own step, vLLM's step is timed from outside). Nothing here imports
an engine, so either benchmark runs where only its own inference library is installed.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, NamedTuple

from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.core.skills.skillset import SkillSet

TASKS = [
    "[A] Could you find the cat? If so, go to it.",
    "[A] Take a picture of the door.",
    "[A] Fly up 50 cm and turn around.",
    "[Q] Find a person and tell me how far away they are.",
    "[A] Look for a red ball and take a picture of it.",
    "[A] Go forward 2 meters then land.",
    "[Q] Is there a bottle on the table?",
    "[A] Turn left 90 degrees and move forward 1 meter.",
]
SKILL_SET = "tello_minispec"


class DecodeStep(NamedTuple):
    """One measured step: generations that got a token (-1: not a pure decoding step), seconds, and
    the KV tokens it read (None where the engine does not say)."""

    n_seqs: int
    duration: float
    kv_tokens: int | None = None


def prompt_ids(eng: Engine, sset: SkillSet, task: str) -> tuple[list[int], int]:
    """The ids of ``task``'s request and how many leading ones are the shared skill prompt."""
    pre = eng.tokenize(sset.prompt)
    return pre + eng.tokenize(sset.format_request(task)[len(sset.prompt) :]), len(pre)


def admit_batch(eng: Engine, sset: SkillSet, b: int, first_gid: int, max_tokens: int) -> list[int]:
    """Admit ``b`` of :data:`TASKS` without grammar (shared skill prompt) for a throughput run."""
    for i in range(b):
        ids, plen = prompt_ids(eng, sset, TASKS[i % len(TASKS)])
        eng.admit(first_gid + i, ids, max_tokens=max_tokens, prefix_key="bench-no-grammar", prefix_len=plen)
    return list(range(first_gid, first_gid + b))


def rates(b: int, durations: list[float]) -> dict:
    """Tokens/s of a batch of ``b`` from its decode-step durations (median)."""
    med = statistics.median(durations)
    return {
        "step_ms": med * 1e3,
        "tokens_per_s": b / med,
        "per_seq_tokens_per_s": 1 / med,
        "steps": len(durations),
    }


def decode_throughput(
    eng: Any, batches: tuple[int, ...], steps: int, measure: Callable[[Any], DecodeStep]
) -> dict:
    """Aggregate and per-sequence decode tokens/s at each batch size: ``b`` requests admitted (EOS
    ignored), one step for their prompts, then ``steps`` steps of which those that decoded all ``b``
    count. ``measure(eng)`` runs one step and says what it did. ``eng`` must have ``ignore_eos``."""
    sset = load_skill_set(SKILL_SET)
    eng.ignore_eos = True
    res = {}
    gid = 10_000
    try:
        for b in batches:
            gens = admit_batch(eng, sset, b, gid, steps + 2)
            gid += b
            eng.step()
            durs = []
            kv: int | None = None
            for _ in range(steps):
                st = measure(eng)
                if st.n_seqs == b:
                    durs.append(st.duration)
                    kv = st.kv_tokens
            for g in gens:
                eng.release(g)
            res[b] = rates(b, durs) | ({"kv_tokens_per_seq": kv // b} if kv is not None else {})
    finally:
        eng.ignore_eos = False
    return res


def run_benchmarks(
    eng: Any,
    steps: int,
    prompt_tokens: int,
    tasks: int,
    repeats: int,
    throughput: Callable[..., dict],
    suspend_resume: Callable[..., dict],
    segmentation_overhead: Callable[..., dict],
) -> dict:
    """The three measurements of an engine benchmark in order, with progress on stderr: decode
    throughput at batch 1, 4, 8, suspend/resume of a ``prompt_tokens`` context, segmentation
    overhead on the first ``tasks`` of :data:`TASKS`."""
    print("decode throughput ...", file=sys.stderr, flush=True)
    out = {"throughput": throughput(eng, (1, 4, 8), steps)}
    print("suspend/resume ...", file=sys.stderr, flush=True)
    out["suspend_resume"] = suspend_resume(eng, prompt_tokens, repeats)
    print("segmentation overhead ...", file=sys.stderr, flush=True)
    out["segmentation"] = segmentation_overhead(eng, TASKS[:tasks], repeats)
    return out


def generate(
    eng: Engine,
    sset: SkillSet,
    gid: int,
    task: str,
    segmented: bool,
    submitted: Callable[[], float] | None = None,
    max_tokens: int = 48,
) -> dict:
    """One request from admission to EOS or ``max_tokens`` (greedy, under the skill grammar),
    unsegmented or segmented: wall and CPU time, tokens, the time of the segmentation work,
    suspensions and (``submitted``: the engine's counter of tokens fed to the model) the tokens
    submitted."""
    ids, plen = prompt_ids(eng, sset, task)
    chk = sset.new_checker() if segmented else None
    toks: list[int] = []
    seg_work = 0.0
    n_susp = 0
    sub0 = submitted() if submitted else 0
    c0 = time.process_time()
    t0 = time.perf_counter()
    eng.admit(gid, ids, max_tokens=max_tokens, prefix_key=sset.name, prefix_len=plen)
    done = False
    while not done:
        for o in eng.step():
            toks.append(o.token_id)
            done = o.finished
            if chk is not None and not done:
                ts = time.perf_counter()
                if chk.feed(o.text):
                    chk.cut()
                    ctx = eng.suspend(gid)
                    eng.resume(gid, ctx, max_tokens=max_tokens)
                    n_susp += 1
                seg_work += time.perf_counter() - ts
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    eng.release(gid)
    out = {"wall": wall, "cpu": cpu, "toks": toks, "seg_work": seg_work, "suspensions": n_susp}
    if submitted:
        out["submitted"] = submitted() - sub0
    return out


def interleaved_runs(
    eng: Engine,
    task: str,
    repeats: int,
    first_gid: int,
    submitted: Callable[[], float] | None = None,
    max_tokens: int = 48,
) -> dict[bool, list[dict]]:
    """``repeats`` unsegmented and segmented generations of ``task`` (key: segmented), alternating
    which mode goes first so that a drift of the machine's speed hits both alike."""
    sset = load_skill_set(SKILL_SET)
    runs: dict[bool, list[dict]] = {False: [], True: []}
    gid = first_gid
    for r in range(repeats):
        for segmented in (False, True) if r % 2 == 0 else (True, False):
            runs[segmented].append(generate(eng, sset, gid, task, segmented, submitted, max_tokens))
            gid += 1
    return runs
