"""Replay mode on the embedded llama.cpp engine (SmolLM2-135M on the CPU, real decoding).

The reference plan is the generation's GBNF literal: whatever the model would write, the engine
writes exactly that text, across suspensions (the grammar sampler keeps its place) — and through
``timely-llm realbench --plans reference`` for every task of a WID2 slice.
"""

from __future__ import annotations

import dataclasses
import json
import os

import pytest
from llamacpp_guard import require_llamacpp

from timely_llm_ros.bench import realbench
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.sched.policies import make_policy
from timely_llm_ros.core.sched.preemption import Preemption
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF

require_llamacpp()

from timely_llm_ros.engines.llamacpp import LlamaCppEngine  # noqa: E402

pytestmark = pytest.mark.slow
THREADS = int(os.environ.get("TIMELY_LLM_TEST_THREADS", "1"))
SSET = load_skill_set("tello_minispec")
# quotes, a backslash, a block and a unicode string: what the GBNF escaping must carry through
PLAN = "?iv('cat')==True{g('cat');l('mi\\'au \"ü\"')};tp();d(3);"


@pytest.fixture(scope="module")
def engine():
    eng = LlamaCppEngine(n_ctx=2048, n_seq_max=8, n_threads=THREADS)
    yield eng
    eng.close()


def admit(eng: LlamaCppEngine, gid: int, task: str, **kw) -> None:
    pre = eng.tokenize(SSET.prompt)
    ids = pre + eng.tokenize(SSET.format_request(task)[len(SSET.prompt) :])
    eng.admit(gid, ids, max_tokens=120, prefix_key=SSET.name, prefix_len=len(pre), **kw)


def run_to_end(eng: LlamaCppEngine, gid: int, suspend_at_segments: bool) -> tuple[str, list[str], str]:
    """Step ``gid`` to its end, suspending and resuming it at every segment boundary while another
    generation decodes alone; returns its text, the segments and how it ended."""
    chk = SSET.new_checker()
    text, segments = "", []
    while True:
        (out,) = [o for o in eng.step() if o.gen_id == gid]
        text += out.text
        if out.finished:
            return text, segments, out.reason
        if chk.feed(out.text):
            segments.append(chk.cut())
            if suspend_at_segments:
                ctx = eng.suspend(gid)
                for o in eng.step():  # the other generation runs meanwhile (it finishes or not)
                    assert o.gen_id != gid
                eng.resume(gid, ctx, max_tokens=120)


def test_a_replayed_generation_writes_its_literal_across_suspensions(engine):
    admit(engine, 1, "[A] Could you find the cat? If so, go to it.", plan=PLAN)
    admit(engine, 2, "[A] Take a picture of the door.")  # the model's own plan, skill grammar
    text, segments, reason = run_to_end(engine, 1, suspend_at_segments=True)
    assert text == PLAN and reason == "eos"
    # cut by the segmenter as always (a statement's ';' goes with the next segment or the tail)
    assert len(segments) >= 4 and PLAN.startswith("".join(segments))
    engine.release(1)
    engine.release(2)


def test_a_replayed_generation_preempted_at_every_token_writes_its_literal(engine):
    # preemption suspends inside a segment: the literal's grammar keeps its place at any token
    admit(engine, 4, "[A] Could you find the cat? If so, go to it.", plan=PLAN)
    admit(engine, 5, "[A] Take a picture of the door.")
    text = ""
    while True:
        (out,) = [o for o in engine.step() if o.gen_id == 4]
        text += out.text
        if out.finished:
            break
        ctx = engine.suspend(4)
        for o in engine.step():  # the other generation runs meanwhile (it finishes or not)
            assert o.gen_id != 4
        engine.resume(4, ctx, max_tokens=120)
    assert (text, out.reason) == (PLAN, "eos")
    engine.release(4)
    engine.release(5)


def test_a_literal_that_ends_at_a_segment_boundary_resumes_into_its_end(engine):
    plan = "tp();d(3)"  # the last segment ends with the literal: the resumed rest is empty
    admit(engine, 3, "[A] Take a picture of the door.", plan=plan)
    text, segments, reason = run_to_end(engine, 3, suspend_at_segments=True)
    assert (text, "".join(segments), reason) == (plan, plan, "eos")
    engine.release(3)


def test_realbench_replays_every_plan_of_a_wid2_slice(tmp_path, capsys):
    args = ["--engine", "llamacpp", "--plans", "reference", "--workload", "wid2", "--tasks", "20"]
    args += ["--policies", "timely", "--tuf-scale", "8", "--out", str(tmp_path)]
    assert realbench.main(args) == 0
    out = json.loads((tmp_path / "realbench.json").read_text())
    assert out["plans"] == "reference"
    (res,) = out["results"]
    assert res["tasks"] == 20
    for t in res["per_task"]:
        assert t["reference"] and t["plan"] == t["reference"], t["task"]
        assert t["replayed_exactly"] and t["tokens"] >= 1 and t["own_tokens"] >= 1
    rp = res["replay"]
    assert rp["tasks_with_reference"] == rp["replayed_exactly"] == 20 and rp["not_exact"] == []
    assert rp["replayed_tokens"] == sum(t["tokens"] for t in res["per_task"])
    assert "replay timely: 20/20 plans equal their reference" in capsys.readouterr().out
    # the per-phase account of the same run: every task's response phases add up to its response
    ph = res["phases"]
    assert len(ph["per_task"]) == 20 and res["speed_check"] > 0
    for t in res["per_task"]:
        real = ph["per_task"][t["task"]]["real"]
        parts = [real[k] for k in ("pickup", "queued", "prefill", "decode", "to_robot")]
        assert sum(parts) == pytest.approx(t["real_s"], abs=1e-6)
    run = ph["run"]["real"]
    assert run["steps"] > 0 and run["prompt_rows"] > 0 and run["forward_s"] <= run["step_s"]
    assert set(out["ordering"]) == {"response_mean", "pct_beta"}


class _EveryStep(Preemption):
    """Preempts at every decision that finds the batch full (the real rule hinges on measured step
    times, which a shared CPU makes unpredictable): the first queued candidate takes the slot of
    the first running generation that has generated a token of its segment and was not preempted
    in it yet. What is tested is the mechanism on the real engine, not the rule."""

    def choose(self, t, order, running, fresh, mem_free):
        pool = [
            r for r in running if r not in fresh and r.preempted < self.max_per_segment and r.seg_tokens > 0
        ]
        cand = next(order, None)
        if cand is None or not pool:
            return []
        self.count += 1
        return [(pool[0], cand)]


def test_the_planner_preempts_mid_segment_and_every_plan_equals_its_reference(engine):
    # PlannerCore on llama.cpp, 2 slots, 3 replayed tasks: running segments are suspended inside a
    # segment and resumed later (core/sched/preemption.py via Scheduler.decide); every plan is its
    # reference text, the segmenter cut it as in an unpreempted run, and every task completes
    plans = {
        "n1": "?s('cat')==True{g('cat')}->False",
        "n2": "mu(40);?iv('book')==True{tp;->True}->False",
        "u": "mr(50);mf(50)",
    }
    base = make_policy("timely", 2)
    policy = dataclasses.replace(base, preemption=_EveryStep(base.admission.model))
    segments: dict[str, list[str]] = {k: [] for k in plans}
    sent = []  # the robots end each segment right after the step that dispatched it
    events = []
    planner = PlannerCore(
        engine,
        policy,
        dispatch=sent.append,
        sink=events.append,
        options=PlannerOptions(plan_source="reference"),
    )
    for tid, plan in plans.items():
        planner.submit(
            TaskSpec(
                task_id=tid,
                agent_id=tid,
                robot_type=SSET.robot_type,
                skill_set=SSET.name,
                instruction="[A] Could you find the cat? If so, go to it.",
                tuf=URGENT_TUF if tid == "u" else NORMAL_TUF,
                arrival=engine.now(),
                reference_plan=plan,
            )
        )
    for _ in range(400):
        if not planner.has_work():
            break
        planner.step()
        for d in sent:
            if not d.closing_marker:
                segments[d.task_id].append(d.text)
                planner.on_feedback(d.task_id, d.seg, "DONE", engine.now())
        sent.clear()
    recs = {r.task_id: r for r in planner.records}
    pre = [e for e in events if e.kind == "SUSPEND" and e.detail.startswith("preempted")]
    assert pre and any(e.kind == "RESUME" and e.detail == "mid-segment" for e in events)
    for tid, plan in plans.items():
        assert "".join(s.text for s in recs[tid].segments) == plan, tid
        assert segments[tid] == [s.text for s in recs[tid].segments]
        assert recs[tid].state == "COMPLETED", (tid, recs[tid].reason)
