"""The simulated engine spreads prompt work over steps exactly as the real llama.cpp engine does
(shared rule, same prompt lengths through the chat template), and the per-phase account reads a
real engine's steps: what each step fed, counted, never timed."""

from __future__ import annotations

import pytest
from llamacpp_guard import require_llamacpp

from timely_llm_ros.bench import realbench
from timely_llm_ros.bench.phase_account import PhaseTap
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.engines.sim import SimEngine

require_llamacpp()

from timely_llm_ros.engines.llamacpp import LlamaCppEngine  # noqa: E402

pytestmark = pytest.mark.slow
SSET = load_skill_set("tello_minispec")
TASKS = ["[A] Could you find the cat? If so, go to it.", "[A] Take a picture of the door."]


def prompt(eng, task):
    pre = eng.tokenize(SSET.prompt)
    return pre + eng.tokenize(SSET.format_request(task)[len(SSET.prompt) :]), len(pre)


def test_simulated_engine_feeds_prompts_step_by_step_like_llamacpp():
    real = LlamaCppEngine(n_ctx=2048, n_seq_max=8, n_threads=1, prefill_chunk=16, prefill_fast_batch=64)
    try:
        sim = SimEngine(
            "smollm2-135m-q4_1-cpu",
            tokenizer=realbench.ModelPieces(real),
            prompt_rule=realbench.engine_rule(real),
            template_tokens=realbench.template_tokens(real),
        )
        assert realbench.template_tokens(real)[1] > 0  # ChatML: the private part grows too
        for eng in (real, sim):
            PlannerCore(eng, "timely").warm_up([SSET.name])
        tap = PhaseTap(real.now)
        tap.attach(real)
        seen: dict[str, list[tuple[int, int]]] = {"real": [], "sim": []}
        for side, eng in (("real", real), ("sim", sim)):
            for gid, (task, prio) in enumerate(zip(TASKS, (2.0, 1.0), strict=True), start=1):
                ids, plen = prompt(real, task) if side == "real" else prompt(sim, task)
                script = {"script": sim.tokenize("mf(100);tp;mf(50);tp;")} if side == "sim" else {}
                eng.admit(gid, ids, max_tokens=8, prefix_key=SSET.name, prefix_len=plen, **script)
                eng.set_priority(gid, prio)
            first: set[int] = set()
            while len(first) < 2:
                fed = eng.stats["prefill_tokens"]
                outs = eng.step()
                rows = tap.steps[-1].prompt_rows if side == "real" else eng.stats["prefill_tokens"] - fed
                seen[side].append((rows, len(outs)))
                first |= {o.gen_id for o in outs}
            for gid in (1, 2):
                eng.release(gid)
        tap.detach(real)
        assert seen["real"] == seen["sim"]
        assert all(rows in (0, 16, 64) or rows < 16 for rows, _ in seen["real"])
        # the more urgent prompt (gen 2) went first; each chunk's cached front is the shared prefix
        assert all(c[2] >= len(prompt(real, TASKS[0])[0]) - 40 for s in tap.steps for c in s.chunks)
    finally:
        real.close()
