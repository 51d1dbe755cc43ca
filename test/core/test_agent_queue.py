"""One task at a time per robot: the per-agent queue alone, then a flood for one robot on the
simulated engine's virtual clock (no interleaving on the robot, response times from arrival)."""

import math

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.sched.agent_queue import ACTIVE, AHEAD, WAITING, AgentQueueFull, AgentQueues
from timely_llm_ros.core.task import TaskRejected
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.workload.tasks import load_catalog


def test_roles_depth_and_promotion():
    q = AgentQueues(depth=3, lookahead=1)
    assert [q.enter("d", t) for t in ("a", "b", "c")] == [ACTIVE, AHEAD, WAITING]
    assert q.enter("other", "x") == ACTIVE  # robots are independent
    with pytest.raises(AgentQueueFull, match=r"robot 'd' already has 3 open tasks \(active 'a', 2 queued"):
        q.enter("d", "e")
    assert q.may_dispatch("d", "a") and not q.may_dispatch("d", "b")
    promo = q.leave("d", "a")
    assert (promo.active, promo.ahead) == ("b", ("c",))
    assert q.role("d", "c") == AHEAD and q.open_tasks("d") == 2
    # a queued task that ends (e.g. failed while generating ahead) promotes no active task
    promo = q.leave("d", "c")
    assert (promo.active, promo.ahead) == ("b", ())
    assert q.leave("d", "nope").ahead == ()
    q.leave("d", "b")
    assert q.agents() == ["other"]  # no memory kept for a robot without open tasks


def test_lookahead_zero_keeps_every_queued_task_unscheduled():
    q = AgentQueues(depth=5, lookahead=0)
    assert [q.enter("d", t) for t in "abc"] == [ACTIVE, WAITING, WAITING]
    assert q.leave("d", "a").active == "b" and q.role("d", "c") == WAITING
    with pytest.raises(ValueError):
        AgentQueues(depth=0)
    with pytest.raises(ValueError):
        AgentQueues(lookahead=-1)


def flood(n: int = 30, agent: str = "d1", gap: float = 0.01, other: int = 4):
    """``n`` drone tasks for one robot within ``n * gap`` s, plus a few for another robot."""
    cat = load_catalog()
    tasks = []
    for i in range(n):
        bench = cat.get(1 + i % 3)  # drone tasks with 2-4 segments
        tasks.append(bench.to_spec(task_id=f"f{i}", agent_id=agent, arrival=i * gap))
    for i in range(other):
        tasks.append(cat.get(4).to_spec(task_id=f"o{i}", agent_id="d2", arrival=0.005 + i * 0.3))
    return tasks


def _per_agent(events, agent, kind):
    return [e for e in events if e.agent_id == agent and e.kind == kind]


@pytest.mark.parametrize("lookahead", [1, 0])
def test_a_flood_for_one_robot_never_interleaves(lookahead):
    tasks = flood()
    res = simulate(tasks, SimConfig(policy="timely", exec_mode="min", lookahead=lookahead))
    recs = {r.task_id: r for r in res.records}
    assert all(r.state == ev.COMPLETED for r in recs.values()), [
        (r.task_id, r.state, r.reason) for r in recs.values()
    ]
    for agent in ("d1", "d2"):
        # robot side: every action of task B starts after the last action of the task before it
        spans = sorted(
            (
                (s.exec_start, s.exec_end, r.task_id)
                for r in recs.values()
                if r.agent_id == agent
                for s in r.segments
            ),
            key=lambda x: x[0],
        )
        order = [tid for _, _, tid in spans]
        blocks = [tid for i, tid in enumerate(order) if i == 0 or order[i - 1] != tid]
        assert len(blocks) == len(set(blocks)), f"{agent}: tasks interleaved on the robot: {blocks}"
        assert all(b[0] >= a[1] - 1e-9 for a, b in zip(spans, spans[1:]))
        # planner side: no DISPATCH of a task before the previous task of that robot was terminal
        dispatch = _per_agent(res.events, agent, ev.DISPATCH)
        ends = {e.task_id: e.t for e in res.events if e.kind in (ev.COMPLETE, ev.FAIL)}
        first_dispatch: dict[str, float] = {}
        for e in dispatch:
            first_dispatch.setdefault(e.task_id, e.t)
        seq = sorted(first_dispatch, key=first_dispatch.get)
        for a, b in zip(seq, seq[1:]):
            assert first_dispatch[b] >= ends[a] - 1e-12, f"{b} dispatched before {a} ended"
    # response time counts from the task's own arrival, not from when its robot became free
    for r in recs.values():
        start = next(
            e for e in res.events if e.task_id == r.task_id and e.kind == ev.EXEC_START and e.seg == 0
        )
        assert r.response_time == pytest.approx(r.segments[0].exec_start - r.arrival)
        assert start.value == pytest.approx(r.response_time)
        assert r.utility == pytest.approx(r.tuf(r.response_time))
    last = recs["f29"]
    assert last.response_time > 10.0  # 29 plans executed before it: its TUF pays for the wait


def test_the_next_task_generates_ahead_and_its_segment_waits_for_the_robot():
    tasks = flood(n=3, other=0)
    res = simulate(tasks, SimConfig(policy="timely", exec_mode="min", lookahead=1))
    ev_of = {tid: [e for e in res.events if e.task_id == tid] for tid in ("f0", "f1", "f2")}
    f0_end = next(e.t for e in ev_of["f0"] if e.kind == ev.COMPLETE)
    ready = next(e.t for e in ev_of["f1"] if e.kind == ev.SEGMENT_READY)
    dispatched = next(e.t for e in ev_of["f1"] if e.kind == ev.DISPATCH)
    assert ready < f0_end and dispatched == pytest.approx(f0_end)  # planned ahead, held, sent at once
    # f2 (waiting, not ahead) did not generate before f0 ended
    assert next(e.t for e in ev_of["f2"] if e.kind == ev.GEN_START) >= f0_end
    # f1 generated only its first segment ahead (its generation was parked, not re-queued)
    stops = [e for e in ev_of["f1"] if e.kind == ev.GEN_STOP and e.t < f0_end]
    assert len(stops) == 1 and stops[0].detail == "segment"


def test_lookahead_zero_generates_nothing_before_the_robot_is_free():
    res = simulate(flood(n=3, other=0), SimConfig(policy="timely", exec_mode="min", lookahead=0))
    f0_end = next(e.t for e in res.events if e.task_id == "f0" and e.kind == ev.COMPLETE)
    assert min(e.t for e in res.events if e.task_id == "f1" and e.kind == ev.GEN_START) >= f0_end


def test_a_full_robot_queue_rejects_with_the_queue_state():
    from timely_llm_ros.core.planner import PlannerCore
    from timely_llm_ros.engines.sim import SimEngine

    p = PlannerCore(SimEngine(), agent_queues=AgentQueues(depth=2))
    tasks = flood(n=3, other=0)
    p.submit(tasks[0])
    p.submit(tasks[1])
    with pytest.raises(TaskRejected, match="robot 'd1' already has 2 open tasks"):
        p.submit(tasks[2])
    assert p.records[-1].state == ev.REJECTED
    # the status of the queued task says what it waits for
    assert p._tasks["f1"].record.state == ev.QUEUED


def test_executing_state_and_terminal_release_of_a_held_task():
    """A held task whose robot's current task FAILS becomes active: its held segment goes out at once."""
    from timely_llm_ros.core.planner import PlannerCore
    from timely_llm_ros.engines.sim import SimEngine

    sent, states = [], []
    p = PlannerCore(SimEngine(), "timely", dispatch=sent.append, on_state=lambda *a: states.append(a[:2]))
    a, b = flood(n=2, other=0)
    p.submit(a)
    p.submit(b)
    while not any(d.task_id == "f1" for d in sent) and p.has_work():
        p.step()
        if not p._tasks["f1"].held:
            continue
        break
    assert p._tasks["f1"].held and all(d.task_id == "f0" for d in sent)
    assert p.feedback("f0", 0, ev.STARTED, p.clock()) is None
    assert ("f0", ev.EXECUTING) in states or p._tasks["f0"].gen_id in p._running
    p.feedback("f0", 0, ev.FEEDBACK_FAILED, p.clock(), "motor stalled")
    assert (
        sent[-1].task_id == "f1"
        and sent[-1].seg == 0
        and not math.isnan(p._tasks["f1"].record.segments[0].dispatch)
    )
