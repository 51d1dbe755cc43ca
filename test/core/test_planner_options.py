"""Planner options through PlannerCore on the virtual clock: overrun kill / skip-next (EXPIRED with the
reason, the robot's queue slot released), TUFs derived from the instruction (lexical and the LLM probe),
G(·) from the length predictor. Hand-computed horizons; no wall-clock timing."""

import math

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.options.overrun import gen_horizon, horizon
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.options.urgency import load_urgency_config
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.sched.agent_queue import AgentQueues
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, TUF
from timely_llm_ros.engines.sim import SimEngine

PROFILE = EngineProfile(name="t", prefill_b=0.0001, prefill_c=0.01, decode_q=0.02, decode_r=0.0)
NET = 0.008
# horizon of a first segment: arrival + ERT − net + β/|α| = 0 + 0.01 − 0.008 + 0.01 = 0.012 s, shorter
# than the prompt's prefill (0.01 s + 0.1 ms per token): the first step cannot end before it.
DOOMED = TUF(0.01, -1.0, 0.01)
HORIZON = 0.01 - NET + 0.01


def spec(task_id, agent="ag", plan="mu(40);tp;", **kw):
    base = dict(
        task_id=task_id,
        agent_id=agent,
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] look around",
        tuf=NORMAL_TUF,
        reference_plan=plan,
    )
    return TaskSpec(**{**base, **kw})


def make(agent_queues=None, **options):
    sent, trace, states = [], [], []
    p = PlannerCore(
        SimEngine(PROFILE),
        "timely",
        dispatch=sent.append,
        sink=trace.append,
        on_state=lambda *a: states.append(a),
        network_latency=NET,
        options=PlannerOptions(**options),
        agent_queues=agent_queues,
    )
    return p, sent, trace, states


def run(p, limit=10_000):
    for _ in range(limit):
        if not p.has_work():
            return
        p.step()
    raise AssertionError("planner did not go idle")


def segs(sent, tid):
    """Indices of the segments with calls dispatched for ``tid`` (closing markers left out)."""
    return [d.seg for d in sent if d.task_id == tid and not d.closing_marker]


# ------------------------------------------------------------------------------------ overrun
def test_kill_expires_at_the_horizon_with_the_reason_and_frees_the_robot():
    p, sent, trace, states = make(overrun="kill")
    a = p.submit(spec("a", tuf=DOOMED))
    b = p.submit(spec("b"))  # same robot: waits until a is terminal
    run(p)
    assert a.state == ev.EXPIRED
    assert a.reason.startswith(
        "overrun (kill): its first segment could no longer start with positive utility"
    )
    exp = [e for e in trace if e.kind == ev.EXPIRE]
    assert [e.task_id for e in exp] == ["a"]
    # expired at the first scheduling point at or after the horizon (the first step: prefill + 1 token)
    first_step_end = PROFILE.prefill_c + PROFILE.prefill_b * 1  # lower bound: at least one prompt token
    assert exp[0].t >= HORIZON and exp[0].t >= first_step_end
    assert a.terminal_time == exp[0].t
    assert ("a", ev.EXPIRED, a.reason) in states
    assert not [d for d in sent if d.task_id == "a"]  # nothing of it reached the robot
    # the robot's queue slot went to b: its plan was dispatched
    assert segs(sent, "b") == [0, 1]
    assert b.state not in ev.TERMINAL_STATES and p.agents.active("ag") == "b"
    assert p.extras.overrun.expired == 1


def test_horizon_hand_computed_and_none_while_the_robot_executes():
    """H = ref + ERT_k − net + β/|α|; a later segment has none until its robot reported the previous
    one DONE (the robot is not waiting before), a flat TUF never has one."""
    assert horizon(2.0, 0.0, -10.0, 1.0, NET) == pytest.approx(2.0 - NET + 0.1)
    assert horizon(0.0, 1.0, 0.0, 1.0, NET) == math.inf
    p, sent, _, _ = make(overrun="kill")
    p.submit(spec("a", tuf=TUF(5.0, -10.0, 1.0)))
    gen = p._tasks["a"]
    assert gen_horizon(gen) == pytest.approx(0.0 + 5.0 - NET + 0.1)
    while not sent:
        p.step()
    assert gen.k == 1 and gen_horizon(gen) == math.inf  # segment 0 not DONE: no horizon
    t = p.clock()
    p.on_feedback("a", 0, ev.STARTED, t)
    assert gen_horizon(gen) == math.inf
    p.engine.advance_to(t + 3.0)
    p.on_feedback("a", 0, ev.DONE, t + 3.0)
    # TUF_1: ERT 0 from the action's end
    assert gen_horizon(gen) == pytest.approx(t + 3.0 - NET + 0.1)


def test_skip_next_expires_the_robots_queued_and_new_tasks_while_it_overruns():
    p, sent, trace, _ = make(overrun="skip-next")
    a = p.submit(spec("a", tuf=DOOMED))
    b = p.submit(spec("b"))
    other = p.submit(spec("o", agent="ag2"))
    while not p.extras.overrun.overrunning:
        p.step()
    assert b.state == ev.EXPIRED and "skip-next" in b.reason and "'a'" in b.reason
    assert a.state not in ev.TERMINAL_STATES  # the late task itself keeps going
    c = p.submit(spec("c"))  # arrives while a still overruns: skipped at once
    assert c.state == ev.EXPIRED and "skip-next" in c.reason
    run(p)
    assert segs(sent, "a") == [0, 1]  # a finished its plan
    assert other.state != ev.EXPIRED and segs(sent, "o") == [0, 1]
    assert p.extras.overrun.skipped == 2


def test_continue_is_the_paper_behaviour():
    p, sent, trace, _ = make()
    a = p.submit(spec("a", tuf=DOOMED))
    run(p)
    assert a.state != ev.EXPIRED and segs(sent, "a") == [0, 1]
    assert not [e for e in trace if e.kind == ev.EXPIRE]


def test_per_task_strategy_overrides_the_default_and_bad_ones_are_rejected():
    p, sent, _, _ = make()
    a = p.submit(spec("a", tuf=DOOMED, overrun="kill"))
    run(p)
    assert a.state == ev.EXPIRED
    with pytest.raises(TaskRejected, match="overrun must be one of"):
        p.submit(spec("x", overrun="later"))


# ------------------------------------------------------------------------------------ urgency
def _class_tuf(name):
    return load_urgency_config().classes[name]


def test_lexical_urgency_derives_the_tuf_and_the_class():
    p, sent, _, _ = make()
    urgent = p.submit(spec("u", tuf=None, instruction="A dog is attacking me, get away now!"))
    normal = p.submit(
        spec("n", agent="ag2", tuf=None, instruction="Could you find the cat? If so, go to it.")
    )
    assert urgent.tuf == _class_tuf("urgent") and urgent.task_class == "urgent"
    assert normal.tuf == _class_tuf("normal") and normal.task_class == "normal"
    run(p)
    assert p.extras.classified == {"lexical": 2}


def test_urgency_off_rejects_a_task_without_tuf():
    p, _, _, _ = make(urgency="off")
    with pytest.raises(TaskRejected, match="tuf is missing"):
        p.submit(spec("u", tuf=None))


@pytest.mark.parametrize("lookahead", [0, 1])
def test_llm_probe_classifies_before_the_task_is_queued_and_respects_the_robots_queue(lookahead):
    p, sent, trace, states = make(AgentQueues(16, lookahead), urgency="llm")
    first = p.submit(spec("a"))  # robot busy with a
    second = p.submit(spec("b", tuf=None, instruction="A dog is attacking me, get away now!"))
    assert ("b", ev.QUEUED, "deriving its urgency from the instruction") in states
    while "b" in p.extras.waiting:
        p.step()
    why = [s for s in states if s[0] == "b" and s[1] == ev.QUEUED][-1][2]
    assert why.startswith("urgency urgent (llm, ")
    # lookahead 0: b waits unscheduled; lookahead 1: it generates ahead, its segments held
    assert ("waiting for robot 'ag' to end task 'a'" in why) == (lookahead == 0)
    assert second.tuf == _class_tuf("urgent")
    run(p)
    assert not segs(sent, "b")  # its robot still executes a
    assert (second.n_tokens > 0) == (lookahead == 1)
    # a ends (the robot fails it): b becomes active and its plan goes out
    assert p.on_feedback("a", 0, ev.FEEDBACK_FAILED, p.clock(), "blocked")
    run(p)
    assert first.state == ev.FAILED and segs(sent, "b") == [0, 1]
    assert p.extras.classified == {"llm": 1}


# ------------------------------------------------------------------------------ length predictor
def test_length_predictor_replaces_g_after_it_has_seen_plans():
    p, _, _, _ = make(length_predictor=True)
    for i in range(3):  # min_obs = 3 first segments of this class
        p.submit(spec(f"a{i}", agent=f"r{i}", plan="mu(40);"))
        gen = p._tasks[f"a{i}"]
        assert gen.g == gen.skill_set.segment_gen_estimate_s  # nothing learned yet: the prior
    run(p)
    n = [r.segments[0].n_tokens for r in p.records]
    p.submit(spec("b", agent="rb", plan="mu(40);"))
    gen = p._tasks["b"]
    # N̂ = mean tokens of the first segments (k = 1), at the engine's measured decode speed, plus the
    # prefill of the task's own prompt tokens
    pre = PROFILE.prefill_time(len(gen.prompt_ids) - gen.prefix_len)
    assert gen.g == pytest.approx(pre + (sum(n) / 3) / p.engine.speed())
    assert p.extras.predictor.error.n == 0  # scored only once it predicts
