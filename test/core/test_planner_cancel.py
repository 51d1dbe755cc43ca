"""PlannerCore.cancel: wherever a task is, its generation stops, slot and KV are freed, it ends CANCELLED.

On the simulated engine's virtual clock (no ROS): queued, generating (mid-segment), suspended after a
segment, executing (plan finished, robot busy), parked behind its robot's previous task; a terminal or
unknown task is refused with a reason; a cancelled task's robot gets its next task.
"""

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF
from timely_llm_ros.engines.sim import SimEngine

PROFILE = EngineProfile(name="t", prefill_b=0.0001, prefill_c=0.01, decode_q=0.02, decode_r=0.0)
PLAN = "mu(40);tp;mf(20);tp;"  # several segments: suspensions happen


def spec(task_id, agent="ag", plan=PLAN):
    return TaskSpec(
        task_id=task_id,
        agent_id=agent,
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] look around",
        tuf=NORMAL_TUF,
        reference_plan=plan,
    )


def make():
    sent, trace, states = [], [], []
    engine = SimEngine(PROFILE)
    p = PlannerCore(
        engine, "timely", dispatch=sent.append, sink=trace.append, on_state=lambda *a: states.append(a)
    )
    return p, engine, sent, trace, states


def assert_freed(p, engine):
    """Nothing of the cancelled generation is left in the engine or the scheduler."""
    mem = engine.memory()
    assert engine.running() == 0
    assert (mem.running, mem.suspended_device, mem.suspended_host) == (0, 0, 0)
    assert not p.has_work()


def assert_cancelled(p, trace, states, task_id, reason="by test"):
    rec = next(r for r in p.records if r.task_id == task_id)
    assert rec.state == ev.CANCELLED and rec.reason == reason
    assert (task_id, ev.CANCELLED, reason) in states
    ends = [e for e in trace if e.task_id == task_id and e.kind in (ev.CANCEL, ev.FAIL, ev.COMPLETE)]
    assert [(e.kind, e.detail) for e in ends] == [(ev.CANCEL, reason)]


def test_cancel_a_queued_task():
    p, engine, sent, trace, states = make()
    p.submit(spec("a"))
    assert p.cancel("a", "by test") is None
    assert_cancelled(p, trace, states, "a")
    assert_freed(p, engine)
    assert not sent


def test_cancel_mid_generation_releases_the_running_generation():
    p, engine, sent, trace, states = make()
    p.submit(spec("a"))
    for _ in range(3):  # admitted and a few tokens in, no segment cut yet
        p.step()
    assert engine.running() == 1 and engine.memory().running > 0 and not sent
    assert p.cancel("a", "by test") is None
    assert_cancelled(p, trace, states, "a")
    assert_freed(p, engine)
    assert not sent  # nothing of it ever reaches the robot


def test_cancel_a_suspended_generation_releases_its_kv():
    p, engine, sent, trace, states = make()
    p.submit(spec("a"))
    while not sent:
        p.step()
    assert engine.running() == 0 and engine.memory().suspended_device > 0  # suspended after segment 0
    assert p.cancel("a", "by test") is None
    assert_cancelled(p, trace, states, "a")
    assert_freed(p, engine)
    for _ in range(20):
        p.step()
    assert len(sent) == 1  # the rest of the plan is never generated nor sent


def test_cancel_while_executing_after_the_plan_is_complete():
    p, engine, sent, trace, states = make()
    p.submit(spec("a"))
    while p.has_work():
        p.step()
    rec = p.records[0]
    assert rec.state == ev.EXECUTING or rec.state == ev.SUSPENDED  # robot has not reported yet
    assert p.cancel("a", "by test") is None
    assert_cancelled(p, trace, states, "a")
    assert_freed(p, engine)
    # late feedback of the cancelled task changes nothing
    assert p.feedback("a", 0, ev.DONE, engine.now()) == "the task is already CANCELLED"


def test_cancel_frees_the_robot_for_its_next_task():
    p, engine, sent, trace, states = make()
    p.submit(spec("a"))
    p.submit(spec("b"))  # same robot: waits for a
    while not any(d.task_id == "a" for d in sent):
        p.step()
    assert p.cancel("a", "by test") is None
    while p.has_work():
        p.step()
    assert any(d.task_id == "b" and not d.closing_marker for d in sent)
    assert next(r for r in p.records if r.task_id == "b").state != ev.CANCELLED


def test_cancel_a_parked_task_leaves_the_active_one_alone():
    p, engine, sent, trace, states = make()
    p.submit(spec("a"))
    p.submit(spec("b"))
    p.step()
    assert p.cancel("b", "by test") is None
    assert_cancelled(p, trace, states, "b")
    while p.has_work():
        p.step()
    assert {d.task_id for d in sent} == {"a"}


@pytest.mark.parametrize("task_id,why", [("nope", "unknown task"), ("done", "already COMPLETED")])
def test_cancel_refused_for_unknown_or_terminal_tasks(task_id, why):
    p, engine, sent, trace, states = make()
    p.submit(spec("done", plan="tp;"))
    while p.has_work():
        p.step()
    d = sent[0]
    p.feedback("done", d.seg, ev.STARTED, engine.now())
    p.feedback("done", d.seg, ev.DONE, engine.now())
    assert p.records[0].state == ev.COMPLETED
    assert why in p.cancel(task_id, "by test")
