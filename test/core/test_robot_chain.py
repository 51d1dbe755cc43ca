"""Robot chain (``timely``; ablation ``timely-no-chain``): a task queued behind its robot's active task cannot start
before that plan ends, so the active task's next segment is ranked by the waiting task's first
segment when that deadline is earlier. Planner bookkeeping, the order, and a hand-built run on the
simulated engine's virtual clock."""

from __future__ import annotations

import math

from schedkit import gen
from test_agent_queue import flood

from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.sched.scheduler import Scheduler
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.sim.simulator import SimConfig, simulate


def test_the_planner_tells_the_active_generation_who_waits_behind_it():
    p = PlannerCore(SimEngine(), "timely")
    f0, f1, f2 = flood(n=3, other=0)
    for spec in (f0, f1, f2):
        p.submit(spec)
    g0, g1 = p._tasks["f0"], p._tasks["f1"]
    assert g0.chain == (f1.arrival, g1.ert, g1.alpha, g1.beta)  # f1 waits first for robot d1
    assert g1.chain is None  # not its robot's active task
    # f0 ends: f1 is active, f2 (waiting until now) is next behind it; f1's first segment has not
    # been generated, so its reference time stays its arrival (it was set to -inf before: a
    # deadline of -inf once the queue re-read it)
    assert p.cancel("f0") is None
    assert g1.ref == f1.arrival and math.isfinite(g1.deadline())
    assert g1.chain == (f2.arrival, p._tasks["f2"].ert, p._tasks["f2"].alpha, p._tasks["f2"].beta)


def test_the_active_generation_is_ranked_by_the_task_waiting_behind_it():
    # t = 0.6. a: the robot's active task, its next segment due when its action ends at 2.0
    # (D = 1.992); an urgent task of the same robot arrived at 0.5 (D = 0.692) waits behind it.
    # b: another robot's urgent task, arrived at 0.6 (D = 0.792). timely-no-chain: b first (own
    # deadlines only); timely: a first (it carries the waiting task's deadline).
    for policy, first in (("timely-no-chain", "b"), ("timely", "a")):
        s = Scheduler(policy)
        a, b = gen(arrival=0.0, k=1, ref=2.0), gen(arrival=0.6, tuf=URGENT_TUF)
        a.chain = (0.5, URGENT_TUF.ert, URGENT_TUF.alpha, URGENT_TUF.beta)
        s.push(a)
        s.push(b)
        assert s.order(0.6)[0] is {"a": a, "b": b}[first], policy
    # a later deadline behind it changes nothing: the own one is earlier
    s = Scheduler("timely")
    a, b = gen(arrival=0.0, k=1, ref=0.7), gen(arrival=0.6, tuf=URGENT_TUF)
    a.chain = (5.0, URGENT_TUF.ert, URGENT_TUF.alpha, URGENT_TUF.beta)
    s.push(a)
    s.push(b)
    assert s.order(0.6) == [a, b]


def _spec(tid: str, agent: str, tuf, arrival: float, plan: str, ex: list[tuple[str, float]]) -> TaskSpec:
    return TaskSpec(
        task_id=tid,
        agent_id=agent,
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="x",
        tuf=tuf,
        arrival=arrival,
        reference_plan=plan,
        exec_times=ex,
    )


def chain_workload(n: int = 8) -> list[TaskSpec]:
    """Robot r: a two-segment normal task A, then an urgent task B that arrives while A's first
    action runs; ``n`` normal tasks of other robots arrive meanwhile on a one-slot engine."""
    out = [
        _spec("A", "r", NORMAL_TUF, 0.0, "mb(100);tc(90);", [("mb", 0.3), ("tc", 0.3)]),
        _spec("B", "r", URGENT_TUF, 0.05, "mb(100);", [("mb", 0.3)]),
    ]
    out += [_spec(f"o{i}", f"o{i}", NORMAL_TUF, 0.1 + 0.02 * i, "mb(100);", [("mb", 0.3)]) for i in range(n)]
    return out


def test_an_urgent_task_behind_its_robot_is_not_left_to_the_backlog():
    # timely-no-chain ranks A's second segment by A's own deadline (its first action's end), behind the
    # other robots' first segments, so B — already generated and held — waits for A's plan:
    # measured B response 1.084 s (U -3.89) and all tasks 5.11; with the chain A's second segment
    # goes first: B 0.748 s (U -1.65), all 7.35, the other robots' tasks unchanged (8.00)
    got = {}
    for p in ("timely-no-chain", "timely"):
        recs = {r.task_id: r for r in simulate(chain_workload(), SimConfig(policy=f"{p}@b1")).records}
        assert all(r.state == "COMPLETED" for r in recs.values())
        others = sum(r.utility for k, r in recs.items() if k not in ("A", "B"))
        got[p] = (recs["B"].response_time, sum(r.utility for r in recs.values()), others)
    assert got["timely"][0] < got["timely-no-chain"][0] - 0.2
    assert got["timely"][1] > got["timely-no-chain"][1] + 1.0
    assert got["timely"][2] >= got["timely-no-chain"][2] - 1e-9
