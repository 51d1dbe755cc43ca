"""PlannerCore: validation with reasons, segmentation/dispatch, parse failures, feedback, completion."""

import math

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, TUF
from timely_llm_ros.engines.sim import SimEngine

PROFILE = EngineProfile(name="t", prefill_b=0.0001, prefill_c=0.01, decode_q=0.02, decode_r=0.0)


def spec(task_id="a", plan="mu(40);tp;", **kw):
    base = dict(
        task_id=task_id,
        agent_id="ag",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] look around",
        tuf=NORMAL_TUF,
        reference_plan=plan,
    )
    return TaskSpec(**{**base, **kw})


def make(policy="timely", **kw):
    sent, trace, states = [], [], []
    p = PlannerCore(
        SimEngine(PROFILE),
        policy,
        dispatch=sent.append,
        sink=trace.append,
        on_state=lambda *a: states.append(a),
        **kw,
    )
    return p, sent, trace, states


def run(p):
    while p.has_work():
        p.step()


def bad_tuf(**vals):
    t = TUF(1.0, -2.0, 1.0)
    for k, v in vals.items():  # a TUF built around its own validation (e.g. unpickled, mutated)
        object.__setattr__(t, k, v)
    return t


@pytest.mark.parametrize(
    "kw,word",
    [
        ({"instruction": "   "}, "instruction is empty"),
        ({"skill_set": "no_such_set"}, "unknown skill set"),
        ({"tuf": bad_tuf(ert=math.nan)}, "ert must be finite"),
        ({"tuf": bad_tuf(ert=-1.0)}, "ERT must be >= 0"),
        ({"tuf": bad_tuf(alpha=0.5)}, "alpha must be <= 0"),
        ({"tuf": bad_tuf(beta=0.0)}, "beta must be > 0"),
        ({"reference_plan": None}, "reference_plan"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"arrival": math.inf}, "arrival"),
        ({"instruction": "go " * 9000}, "does not fit the engine context"),
    ],
)
def test_bad_input_rejected_with_reason_and_others_unaffected(kw, word):
    p, sent, trace, states = make()
    good1 = p.submit(spec("g1"))
    with pytest.raises(TaskRejected, match=word):
        p.submit(spec("bad", **kw))
    good2 = p.submit(spec("g2", agent_id="ag2"))
    bad = [r for r in p.records if r.task_id == "bad"][0]
    assert bad.state == ev.REJECTED and word.split()[0] in bad.reason
    assert [e.kind for e in trace if e.task_id == "bad"] == [ev.ARRIVAL, ev.REJECT]
    run(p)
    segs = [d.task_id for d in sent if not d.closing_marker]
    assert segs.count("g1") == segs.count("g2") == 2
    assert len(good1.segments) == len(good2.segments) == 2 and good2.segments[-1].final


def test_duplicate_and_non_taskspec_rejected():
    p, *_ = make()
    p.submit(spec("x"))
    with pytest.raises(TaskRejected, match="duplicate"):
        p.submit(spec("x"))
    with pytest.raises(TaskRejected, match="TaskSpec"):
        p.submit({"task_id": "y"})  # type: ignore[arg-type]


def test_segments_dispatched_in_order_with_suspension():
    p, sent, trace, _ = make("timely")
    rec = p.submit(spec(plan="mu(40);?iv('book')==True{tp;->True}->False"))
    run(p)
    assert [d.text for d in sent] == ["mu(40)", ";?iv('book')==True{", "tp;", "->True}->False"]
    assert [d.seg for d in sent] == [0, 1, 2, 3]
    # the call-less tail returns and closes the block: a real final segment, not the closing marker
    assert [d.final for d in sent] == [False, False, False, True] and not sent[-1].closing_marker
    assert rec.n_suspensions == 3  # after every segment: "->True}->False" was still to come
    kinds = [e.kind for e in trace]
    assert kinds.count(ev.SUSPEND) == 3 and kinds.count(ev.RESUME) == 3
    assert rec.segments[-1].final and rec.gen_end == rec.segments[-1].gen_end  # the tail ends the generation
    s0 = rec.segments[0]
    assert s0.min_exec == pytest.approx(8e-7 * 40**3 - 3e-4 * 40**2 + 0.0388 * 40 + 1.3195, rel=1e-6)
    assert rec.state == ev.EXECUTING  # plan fully generated and sent; waiting for robot feedback


def test_segment_that_does_not_parse_is_never_dispatched():
    p, sent, trace, _ = make()
    rec = p.submit(spec(plan="mf(100);mf(9999);tp;"))  # 9999 cm is outside 20..500
    run(p)
    assert [d.text for d in sent] == ["mf(100)"]
    assert rec.state == ev.FAILED and "segment 1 does not parse" in rec.reason
    assert trace[-1].kind in (ev.FAIL, ev.GEN_STOP) and any(e.kind == ev.FAIL for e in trace)
    assert not p.has_work()


def test_plan_without_skills_fails():
    p, sent, _, _ = make()
    rec = p.submit(spec(plan="->False"))
    run(p)
    assert sent == [] and rec.state == ev.FAILED and "no executable skill" in rec.reason


def test_a_statement_cut_by_the_token_limit_is_dropped_and_the_task_completes():
    """The demo's 135M model rambled until max_tokens; the complete segments it had already sent
    stand, the unfinished statement is never sent, and the GEN_STOP event says why."""
    p, sent, trace, _ = make("fcfs-seg")
    n = len(SimEngine(PROFILE).tokenize("mu(40);tp;mf(1"))
    rec = p.submit(spec(plan="mu(40);tp;mf(100);", max_tokens=n))
    run(p)
    assert [d.text for d in sent] == ["mu(40)", ";tp;", ""] and sent[-1].closing_marker
    assert not any(e.kind in (ev.DROP, ev.FAIL) for e in trace)
    (stop,) = [e for e in trace if e.kind == ev.GEN_STOP and e.detail.startswith("length")]
    assert f"plan truncated at max_tokens ({n} tokens)" in stop.detail and "mf(1" in stop.detail
    for i in range(2):
        p.on_feedback("a", i, ev.STARTED, 5.0 + i)
        p.on_feedback("a", i, ev.DONE, 5.5 + i)
    assert rec.state == ev.COMPLETED and rec.segments[-1].final
    assert rec.reason.startswith(f"plan truncated at max_tokens ({n} tokens)") and "'mf(1" in rec.reason


def test_a_plan_cut_before_any_segment_fails_with_the_reason():
    p, sent, trace, states = make()
    rec = p.submit(spec(plan="mf(100);", max_tokens=2))
    run(p)
    assert sent == [] and rec.state == ev.FAILED
    assert rec.reason.startswith("plan truncated at max_tokens (2 tokens)"), rec.reason
    assert states[-1] == ("a", ev.FAILED, rec.reason)
    (stop,) = [e for e in trace if e.kind == ev.GEN_STOP]
    assert stop.detail.startswith("length: plan truncated at max_tokens")


@pytest.mark.parametrize("policy", ["timely", "fcfs-seg", "edf-seg", "vllm", "vllm-stream"])
def test_a_truncated_plan_never_sends_the_partial_statement_under_any_policy(policy):
    """Whatever the policy (segmented or whole-plan), a statement cut by max_tokens is not sent and
    the task's end names the truncation."""
    p, sent, _, states = make(policy)
    n = len(SimEngine(PROFILE).tokenize("mu(40);tp;mf(1"))
    rec = p.submit(spec(plan="mu(40);tp;mf(100);", max_tokens=n))
    run(p)
    assert all("mf(1" not in d.text for d in sent), sent
    for i, d in enumerate([d for d in sent if not d.closing_marker]):
        p.on_feedback("a", d.seg, ev.STARTED, 5.0 + i)
        p.on_feedback("a", d.seg, ev.DONE, 5.5 + i)
    assert rec.state in (ev.COMPLETED, ev.FAILED)
    assert rec.reason.startswith(f"plan truncated at max_tokens ({n} tokens)"), (
        policy,
        rec.state,
        rec.reason,
    )
    assert states[-1] == ("a", rec.state, rec.reason)


def test_warm_up_prefills_the_skill_prompt_once():
    p, sent, _, _ = make()
    took = p.warm_up(["tello_minispec"])
    assert set(took) == {"tello_minispec"} and took["tello_minispec"] > 0
    assert p.engine.memory().prefix > 0 and p.engine.running() == 0 and sent == []
    before = p.engine.now()
    p.submit(spec())
    p.step()  # the first task's prefill now covers only its own suffix
    assert p.engine.now() - before < took["tello_minispec"]
    with pytest.raises(KeyError):
        p.warm_up(["no_such_set"])


def test_feedback_moves_the_reference_point_and_completes():
    p, sent, trace, _ = make("fcfs-seg")
    rec = p.submit(spec(plan="mu(40);tp;"))
    gen = p._tasks["a"]
    while not sent:
        p.step()
    d0 = sent[0]
    # est_end(0) = dispatch + net + min_exec (not started yet)
    assert gen.ref == pytest.approx(d0.t + 0.008 + d0.min_exec)
    assert p.on_feedback("a", 0, ev.STARTED, d0.t + 0.05)
    assert gen.ref == pytest.approx(d0.t + 0.05 + d0.min_exec)
    run(p)  # generates the last segment "tp" and stops
    assert [d.text for d in sent] == ["mu(40)", ";tp;", ""] and rec.segments[1].final
    p.on_feedback("a", 0, ev.DONE, 3.0)
    assert rec.state != ev.COMPLETED
    p.on_feedback("a", 1, ev.STARTED, 3.0)
    p.on_feedback("a", 1, ev.DONE, 3.001)
    assert rec.state == ev.COMPLETED and trace[-1].kind == ev.COMPLETE
    assert rec.response_time == pytest.approx(d0.t + 0.05)
    assert rec.waiting_times() == pytest.approx([d0.t + 0.05, 0.0])
    assert rec.completion_time == pytest.approx(3.001)


def test_done_feedback_sets_the_suspended_generations_reference_in_the_queue():
    p, sent, trace, _ = make("timely")
    p.submit(spec(plan="mu(40);mu(40);tp;"))
    gen = p._tasks["a"]
    while not sent:
        p.step()
    assert gen in p.scheduler  # suspended and queued for its next segment
    t0 = sent[0].t
    p.on_feedback("a", 0, ev.STARTED, t0 + 0.01)
    p.on_feedback("a", 0, ev.DONE, t0 + 0.02)
    assert gen.ref == t0 + 0.02
    assert p.scheduler._prio.index.entries[gen.slot].ref == gen.ref  # the queue re-indexed it
    stop = [e for e in trace if e.kind == ev.GEN_STOP][0]
    assert (stop.seg, stop.detail, stop.value) == (0, "segment", 4)  # mu ( 40 ) then ");" cut at ")"
    start = [e for e in trace if e.kind == ev.EXEC_START][0]
    assert start.value == pytest.approx(t0 + 0.01)  # response time W(s_0); arrival 0


def test_robot_failure_and_unknown_feedback():
    p, sent, _, _ = make()
    rec = p.submit(spec(plan="mu(40);tp;"))
    while not sent:
        p.step()
    assert not p.on_feedback("nope", 0, ev.DONE, 1.0)
    assert not p.on_feedback("a", 5, ev.DONE, 1.0)
    assert p.feedback("a", 0, "EXPLODED", 1.0) == "unknown feedback state 'EXPLODED'"
    p.on_feedback("a", 0, ev.FEEDBACK_FAILED, 1.0, reason="motor stalled")
    assert rec.state == ev.FAILED and rec.reason == "motor stalled"
    assert not p.has_work() and p.engine.memory().suspended_device == 0


def test_vllm_dispatches_the_whole_plan_once():
    p, sent, _, _ = make("vllm")
    rec = p.submit(spec(plan="mu(40);?iv('book')==True{tp;->True}->False"))
    run(p)
    assert len(sent) == 1 and sent[0].text == "mu(40);?iv('book')==True{tp;->True}->False"
    assert [c.name for c in sent[0].calls] == ["mu", "iv", "tp"]
    assert rec.segments[0].final and rec.n_suspensions == 0


def test_vllm_stream_dispatches_without_suspending():
    p, sent, trace, _ = make("vllm-stream")
    rec = p.submit(spec(plan="mu(40);?iv('book')==True{tp;->True}->False"))
    run(p)
    assert len(sent) == 4 and sent[-1].text == "->True}->False" and not sent[-1].closing_marker
    assert rec.n_suspensions == 0
    assert not any(e.kind == ev.SUSPEND for e in trace)


def test_engine_out_of_memory_fails_one_task_not_the_planner():
    import dataclasses

    # KV capacity for the prompt (~1150 tokens) but not for a 200-token plan: the generation
    # outgrows the memory mid-plan -> that task fails with the reason, the planner keeps running
    tight = dataclasses.replace(PROFILE, kv_capacity_tokens=1200)
    sent = []
    p = PlannerCore(SimEngine(tight), "vllm", dispatch=sent.append)
    p.submit(spec("a", plan="mu(40);" * 30, max_tokens=200))
    run(p)
    rec = p.records[0]
    assert rec.state == ev.FAILED and "KV memory exhausted" in rec.reason
    assert not p.has_work()


def test_bad_network_latency():
    with pytest.raises(ValueError, match="network_latency"):
        PlannerCore(SimEngine(PROFILE), network_latency=-1)


def test_an_engine_error_token_fails_that_task_and_the_others_complete():
    """TokenOut reason "error" (e.g. vLLM ends a request on a KV load failure): that task FAILS with a
    reason at once instead of waiting forever or completing with a partial plan."""
    from timely_llm_ros.engines.base import TokenOut

    p, sent, trace, states = make()
    bad, good = p.submit(spec("bad")), p.submit(spec("good"))
    real = p.engine.step
    bad_gen = p._tasks["bad"].gen_id
    seen = {"n": 0}

    def step():
        outs = real()
        seen["n"] += 1
        if seen["n"] == 2:  # the engine drops "bad" mid-generation
            outs = [o for o in outs if o.gen_id != bad_gen]
            outs.append(TokenOut(bad_gen, -1, "", p.clock(), True, "error"))
        return outs

    p.engine.step = step
    while p.has_work() or sent:
        p.step()
        while sent:
            d = sent.pop(0)
            p.on_feedback(d.task_id, d.seg, ev.STARTED, p.clock())
            p.on_feedback(d.task_id, d.seg, ev.DONE, p.clock())
    assert bad.state == ev.FAILED and "engine error" in bad.reason
    assert good.state == ev.COMPLETED
    assert p.engine.running() == 0


def test_the_reason_of_a_long_truncated_plan_shows_where_it_was_cut():
    """Whole-plan policy (vllm): the unsent text is the whole plan; the reason shows its end."""
    plan = "mu(40);" * 20 + "tp;mf(100);"
    p, sent, _, states = make("vllm")
    n = len(SimEngine(PROFILE).tokenize(plan[: plan.index("mf(1") + 4]))
    rec = p.submit(spec(plan=plan, max_tokens=n))
    run(p)
    assert sent == [] and rec.state == ev.FAILED and "nothing of the plan was sent" in rec.reason
    assert "'…" in rec.reason and "tp;mf(1" in rec.reason, rec.reason
