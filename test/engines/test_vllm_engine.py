"""vLLM engine: import safety and the continuation grammar everywhere; the engine itself only where
vLLM imports and a GPU plus a local model are available (``TIMELY_VLLM_MODEL``: a model directory;
``TIMELY_VLLM_LOAD_FORMAT=dummy`` for random weights from its config)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.grammar import Gbnf, build_gbnf
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.engines.base import EngineError
from timely_llm_ros.engines.registry import BackendMissing
from timely_llm_ros.engines.vllm import continuation_gbnf

ROBOT_SETS = ["tello_minispec", "robot_arm", "arm_fltrnn"]


def test_importing_the_engine_module_does_not_import_vllm(repo_root):
    code = ("import sys; import timely_llm_ros.engines.vllm, timely_llm_ros.engines.registry; "
            "bad = [m for m in ('vllm', 'torch', 'llama_cpp') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    res = subprocess.run([sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_construction_says_what_to_install():
    from timely_llm_ros.engines.vllm import VllmEngine

    with pytest.raises(BackendMissing, match="pip install vllm"):
        VllmEngine("some-model")


@pytest.mark.parametrize("name", ROBOT_SETS)
def test_every_continuation_after_a_segment_boundary_is_in_the_continuation_grammar(name):
    sset = load_skill_set(name)
    full = Gbnf(build_gbnf(sset))
    cont = Gbnf(continuation_gbnf(build_gbnf(sset)))
    checked = 0
    for ex in sset.examples:
        plan = ex["plan"]
        assert full.matches(plan) and cont.matches(plan)  # a whole plan is also a continuation
        segs = sset.split(plan)
        for k in range(1, len(segs)):
            rest = "".join(segs[k:])
            assert cont.matches(rest), (plan, segs, rest)
            checked += 1
    assert checked > 0


def test_continuation_grammar_still_rejects_text_outside_the_language():
    sset = load_skill_set("tello_minispec")
    cont = Gbnf(continuation_gbnf(build_gbnf(sset)))
    assert cont.matches("}->False") and cont.matches(";tp")
    assert not cont.matches("fly to the cat") and not cont.matches("zz(3)")
    with pytest.raises(EngineError, match="root"):
        continuation_gbnf("body ::= \"x\"\n")


# ---------------------------------------------------------------- on a GPU machine with vLLM
def _gpu_reason() -> str | None:
    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed (CUDA-only wheels; run on a GPU machine)"
    if not os.environ.get("TIMELY_VLLM_MODEL"):
        return "set TIMELY_VLLM_MODEL to a local model directory to run the vLLM engine tests"
    return None


gpu = pytest.mark.skipif(_gpu_reason() is not None, reason=_gpu_reason() or "")


@pytest.fixture(scope="module")
def vengine():
    from timely_llm_ros.engines.vllm import VllmEngine

    eng = VllmEngine(os.environ["TIMELY_VLLM_MODEL"],
                     load_format=os.environ.get("TIMELY_VLLM_LOAD_FORMAT", "auto"),
                     max_model_len=4096, gpu_memory_utilization=0.5, enforce_eager=True)
    return eng


@gpu
def test_vllm_batches_suspends_and_resumes_from_the_prefix_cache(vengine):
    sset = load_skill_set("tello_minispec")
    pre = vengine.tokenize(sset.prompt)
    tasks = ["[A] Could you find the cat? If so, go to it.", "[A] Take a picture of the door.",
             "[A] Fly up 50 cm and turn around."]
    for i, task in enumerate(tasks):
        ids = pre + vengine.tokenize(sset.format_request(task)[len(sset.prompt):])
        vengine.admit(i, ids, max_tokens=48, prefix_key=sset.name, prefix_len=len(pre))
    checkers = {i: sset.new_checker() for i in range(len(tasks))}
    segments: dict[int, list[str]] = {i: [] for i in range(len(tasks))}
    suspended: dict[int, object] = {}
    for _ in range(400):
        if not vengine.running() and not suspended:
            break
        for gid, ctx in list(suspended.items()):  # resume right away: the KV blocks are still cached
            vengine.resume(gid, ctx, max_tokens=48)
            del suspended[gid]
        for o in vengine.step():
            chk = checkers[o.gen_id]
            if o.text and chk.feed(o.text):
                segments[o.gen_id].append(chk.cut())
                if not o.finished:
                    suspended[o.gen_id] = vengine.suspend(o.gen_id)
            if o.finished:
                tail = chk.finish()
                if tail.strip():
                    segments[o.gen_id].append(tail)
                vengine.release(o.gen_id)
    assert vengine.resume_log, "no generation was suspended"
    for rec in vengine.resume_log:  # re-submitted prompt + generated ids hit the prefix cache
        assert rec.cached_tokens is not None
        assert rec.cached_tokens >= rec.prompt_tokens - 2 * vengine.block_size
    for segs in segments.values():
        assert segs
        sset.parse_segments(segs)


@gpu
def test_vllm_serves_the_planner(vengine):
    from timely_llm_ros.core.planner import PlannerCore
    from timely_llm_ros.core.task import TaskSpec
    from timely_llm_ros.core.tuf import NORMAL_TUF

    sent = []
    planner = PlannerCore(vengine, "timely", dispatch=sent.append, network_latency=0.0)
    recs = [planner.submit(TaskSpec(task_id=f"v{i}", agent_id="d", robot_type="drone",
                                    skill_set="tello_minispec", instruction=t, tuf=NORMAL_TUF, max_tokens=48))
            for i, t in enumerate(["[A] Take a picture of the door.", "[A] Find the cat."])]
    for _ in range(2000):
        if not planner.has_work() and not sent:
            break
        planner.step()
        while sent:
            d = sent.pop(0)
            planner.on_feedback(d.task_id, d.seg, ev.STARTED, planner.clock())
            planner.on_feedback(d.task_id, d.seg, ev.DONE, planner.clock())
    assert [r.state for r in recs] == [ev.COMPLETED] * 2, [(r.state, r.reason) for r in recs]
