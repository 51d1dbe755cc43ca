"""Replay mode on vLLM (marker ``vllm``: `make test-vllm` on this CPU, or any vLLM machine with
``TIMELY_VLLM_MODEL``; ``TIMELY_VLLM_LOAD_FORMAT=dummy`` gives random weights — replay must still
write every reference plan exactly, which is its point).

The literal goes to ``StructuredOutputsParams(grammar=...)``; a resumption is a new request whose
constraint is the rest of the literal after the text already streamed. Checked on the engine alone
(suspended at every segment boundary, a literal whose rest is empty) and through realbench's engine
loop on a WID2 slice.
"""

from __future__ import annotations

import json
import os

import pytest

from timely_llm_ros.bench import realbench
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.skills import load_skill_set

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
SSET = load_skill_set("tello_minispec")
DEADLINE_STEPS = 5000  # a generation loop must end (never a speed assertion)


@pytest.fixture(scope="module")
def engine():
    from timely_llm_ros.engines.vllm import VllmEngine

    opts = {
        "max_model_len": 2048,
        "enforce_eager": True,
        "gpu_memory_utilization": 0.5,
        "load_format": os.environ.get("TIMELY_VLLM_LOAD_FORMAT", "auto"),
    }
    opts.update(json.loads(os.environ.get("TIMELY_VLLM_OPTIONS") or "{}"))
    eng = VllmEngine(**opts)
    yield eng
    eng.close()


def _replay_segmented(eng, gid: int, plan: str) -> tuple[str, list[str], str]:
    """Admit ``gid`` with ``plan`` and step it to its end, suspending and resuming it at every segment
    boundary; returns its text, its segments and how it ended."""
    pre = eng.tokenize(SSET.prompt)
    ids = pre + eng.tokenize(SSET.format_request("[A] Take a picture of the door.")[len(SSET.prompt) :])
    eng.admit(gid, ids, max_tokens=120, prefix_key=SSET.name, prefix_len=len(pre), plan=plan)
    chk = SSET.new_checker()
    text, segments = "", []
    for _ in range(DEADLINE_STEPS):
        for out in eng.step():
            assert out.gen_id == gid and out.reason != "error", out
            text += out.text
            if out.finished:
                return text, segments, out.reason
            if chk.feed(out.text):
                segments.append(chk.cut())
                ctx = eng.suspend(gid)
                eng.resume(gid, ctx, max_tokens=120)
    pytest.fail(f"generation {gid} did not end: {text!r}")


def test_a_replayed_request_is_resubmitted_with_the_rest_of_its_literal(engine):
    engine.reset()
    plan = "?iv('cat')==True{g('cat');l('mi\\'au \"ü\"')};tp();d(3);"
    text, segments, reason = _replay_segmented(engine, 1, plan)
    assert text == plan and reason == "eos"
    assert len(segments) >= 4 and plan.startswith("".join(segments))
    assert engine.stats["resubmits"] >= len(segments)
    text, segments, reason = _replay_segmented(engine, 2, "tp();d(3)")  # the last rest is empty
    assert (text, "".join(segments), reason) == ("tp();d(3)", "tp();d(3)", "eos")
    engine.reset()


def test_a_replayed_request_resumes_mid_segment_at_every_token(engine):
    """Preemption (core.sched.preemption) suspends a generation mid-statement: a replayed one goes on
    under the rest of its literal, so the engine says it may; one under the skill grammar would get the
    continuation grammar ("what may follow a complete statement"), so the engine says it may not."""
    engine.reset()
    plan = "tp();d(3);"
    pre = engine.tokenize(SSET.prompt)
    ids = pre + engine.tokenize(SSET.format_request("[A] Take off.")[len(SSET.prompt) :])
    engine.admit(3, ids, max_tokens=60, prefix_key=SSET.name, prefix_len=len(pre), plan=plan)
    assert engine.resumes_mid_segment(3)
    text, ended = "", False
    for _ in range(DEADLINE_STEPS):
        outs = engine.step()
        for out in outs:
            assert out.gen_id == 3 and out.reason != "error", out
            text += out.text
            ended = out.finished
        if ended:
            break
        if outs:  # a token arrived: suspend mid-statement and resume at once
            engine.resume(3, engine.suspend(3), max_tokens=60)
    assert ended and text == plan
    engine.admit(4, ids, max_tokens=60, prefix_key=SSET.name, prefix_len=len(pre))
    assert engine.resumes_mid_segment(4) is (engine._grammars.get(SSET.name, True) is None)
    assert not engine.resumes_mid_segment(99)  # unknown generation
    engine.reset()


def test_realbench_replays_every_plan_of_a_wid2_slice_on_vllm(engine):
    engine.reset()
    tasks = realbench.load_tasks("wid2", 10, 120.0)  # vLLM-CPU's TUF scale (README)
    run = realbench.drive(
        engine, tasks, "timely", realtime=True, options=PlannerOptions(plan_source="reference")
    )
    assert {r.state for r in run.records} == {"COMPLETED"}, [(r.task_id, r.reason) for r in run.records]
    for t in tasks:
        assert run.plans[t.task_id] == t.reference_plan, t.task_id
        assert run.tokens[t.task_id] >= 1 and run.own_tokens[t.task_id] >= 1
    engine.reset()
