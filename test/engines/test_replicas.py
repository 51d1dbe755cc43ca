"""Replica sets on the simulated engine (virtual clock: deterministic, no wall time).

Placement (new generations where they finish soonest, resumptions back to the replica that holds
their KV), the conservative virtual clock, and the planner + simulator over N replicas."""

from __future__ import annotations

import pytest

from timely_llm_ros.bench import scenarios as sc
from timely_llm_ros.core import events as ev
from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.engines.base import EngineError
from timely_llm_ros.engines.replicas import ReplicaSetEngine, simulated_replicas
from timely_llm_ros.sim.simulator import SimConfig, simulate


def _set(n: int = 2) -> ReplicaSetEngine:
    eng = simulated_replicas("llama3-8b-fp16-rtx4090", n)
    assert isinstance(eng, ReplicaSetEngine) and eng.virtual
    return eng


def _admit(eng: ReplicaSetEngine, gen_id: int, n_prompt: int = 300, key: str = "k") -> None:
    ids = eng.tokenize(" ".join(f"w{i}" for i in range(n_prompt)))
    eng.admit(
        gen_id,
        ids,
        max_tokens=20,
        prefix_key=key,
        prefix_len=len(ids) - 5,
        script=eng.tokenize("a b c d e f g h"),
    )


def test_new_generations_go_to_the_replica_where_they_finish_soonest():
    eng = _set(2)
    _admit(eng, 1, key="a")
    _admit(eng, 2, key="b")  # replica 0 is busy and holds no "b" prompt: the idle one is faster
    where = {p.gen_id: p.replica for p in eng.placements}
    assert where[1] != where[2]
    assert eng.running() == 2


def test_placement_prefers_the_replica_that_already_holds_the_skill_prompt():
    eng = _set(2)
    _admit(eng, 1, n_prompt=3000, key="c")
    while eng.running():
        eng.step()
    holder = eng.placements[-1].replica
    eng.release(1)
    _admit(eng, 2, n_prompt=3000, key="c")  # both idle: the one with the prompt cached is sooner
    assert eng.placements[-1].replica == holder


def test_a_resumed_generation_goes_back_to_the_replica_holding_its_kv():
    eng = _set(3)
    for g in (1, 2, 3):
        _admit(eng, g)
    for _ in range(3):
        eng.step()
    holder = next(p.replica for p in eng.placements if p.gen_id == 2)
    ctx = eng.suspend(2)
    eng.resume(2, ctx, max_tokens=20)
    assert eng.placements[-1].kind == "resume" and eng.placements[-1].replica == holder
    assert [r.name for r in eng.replicas if r.engine.running() and 2 in r.engine._active] == [holder]


def test_virtual_clock_never_goes_back_and_steps_the_earliest_replica():
    eng = _set(2)
    _admit(eng, 1, n_prompt=2000)  # a long prefill: replica clock jumps ahead
    _admit(eng, 2, n_prompt=50)
    seen = []
    for _ in range(30):
        if not eng.running():
            break
        eng.step()
        seen.append(eng.now())
    assert seen == sorted(seen)


def test_release_and_unknown_generations():
    eng = _set(2)
    _admit(eng, 1)
    eng.release(1)
    eng.release(99)  # unknown: ignored
    assert eng.running() == 0
    with pytest.raises(EngineError):
        eng.resume(1, None, max_tokens=5)  # type: ignore[arg-type]
    with pytest.raises(EngineError):
        simulated_replicas("llama3-8b-fp16-rtx4090", 0)


def test_planner_over_replicas_completes_every_task_and_more_replicas_help_under_overload():
    scen = sc.from_spec(sc.rate_spec(1.0))  # 4x WID 2's event rate
    tasks = scen.tasks[:400]
    res = {}
    for n in (1, 2):
        out = simulate(tasks, SimConfig(policy=f"timely@b{8 * n}", replicas=n))
        assert all(r.state in ev.TERMINAL_STATES for r in out.records)
        assert out.stats["completed"] + out.stats["failed"] + out.stats["rejected"] == len(tasks)
        res[n] = summarize(out.records)
    assert res[2]["all"].pct_beta_clamped > res[1]["all"].pct_beta_clamped
    assert res[2]["urgent"].response_mean < res[1]["urgent"].response_mean


def test_one_replica_set_is_deterministic():
    tasks = sc.from_spec(sc.rate_spec(0.5)).tasks[:150]
    a = simulate(tasks, SimConfig(policy="timely@b16", replicas=2))
    b = simulate(tasks, SimConfig(policy="timely@b16", replicas=2))
    assert [(r.task_id, r.state, r.response_time) for r in a.records] == [
        (r.task_id, r.state, r.response_time) for r in b.records
    ]
