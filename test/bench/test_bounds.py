"""The capacity bound (bench.bounds, bench.bound_math) against hand-computed small cases."""

import pytest

from timely_llm_ros.bench.bound_math import (
    ChainTask,
    PairingTask,
    chain_lower_bounds,
    clamped_bound,
    srpt_completions,
    tardiness_bound,
)
from timely_llm_ros.bench.bounds import class_bounds, first_segment_work, task_facts
from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF
from timely_llm_ros.sim.simulator import SimConfig, simulate

NAN = float("nan")
# a toy engine: free prefill, 20 ms per decode step whatever the batch; no network latency
TOY = EngineProfile(name="toy", decode_q=0.02, decode_r=0.0, decode_p=0.0)
TOY_CFG = SimConfig(profile=TOY, network_latency=0.0)


def task(i, arrival, tuf=URGENT_TUF, agent=None):
    return TaskSpec(
        task_id=str(i),
        agent_id=str(i if agent is None else agent),
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="x",
        tuf=tuf,
        arrival=arrival,
        reference_plan="mb(100);tc(90);",
        exec_times=[("mb", 2.5), ("tc", 2.3)],
    )


def test_chain_waits_for_the_robots_previous_task():
    tasks = [
        ChainTask(0.0, "r", 0.1, 2.0),  # ends no earlier than 0 + 0.1 + 2.0 = 2.1
        ChainTask(0.5, "r", 0.1, 1.0),  # 2.1 + net 0.008 - 0.5 = 1.608; ends 0.5 + 1.608 + 1.0 = 3.108
        ChainTask(0.6, "s", 0.2, 9.0),  # another robot: alone
        ChainTask(0.7, "r", NAN, 5.0),  # never served: no response, takes no robot time
        ChainTask(1.0, "r", 0.1, 0.0),  # 3.108 + 0.008 - 1.0 = 2.116
    ]
    lb = chain_lower_bounds(tasks, net=0.008)
    assert lb[:3] == pytest.approx([0.1, 1.608, 0.2]) and lb[4] == pytest.approx(2.116)
    assert lb[3] != lb[3]  # nan


def test_srpt_completions_by_hand():
    # job0 runs 0-1 (2 left); at 1 the 1-unit job preempts (done 2), then job0 (4), then the 5 (9)
    assert srpt_completions([(0.0, 3.0), (1.0, 1.0), (1.0, 5.0)]) == pytest.approx([2.0, 4.0, 9.0])
    assert srpt_completions([(5.0, 1.0), (0.0, 1.0)]) == pytest.approx([1.0, 6.0])  # idle gap
    assert srpt_completions([]) == []


def burst_pairing(n=12, g=0.06):
    """n urgent tasks at once on one slot, each 60 ms of work: slots 0.06·k, generation deadline 0.2."""
    tasks = [PairingTask(earliest=g, deadline=0.2, beta=2.0, slope=20 / 3) for _ in range(n)]
    return tasks, [g * (k + 1) for k in range(n)]


def test_pairing_bounds_by_hand():
    tasks, slots = burst_pairing()
    # slots 4..12 are late by 0.06k - 0.2: 0.04 + 0.10 + ... + 0.52 = 2.52 s in all
    assert tardiness_bound(tasks, slots) == pytest.approx(24 - 20 / 3 * 2.52)
    # clamped: slot k is worth 2 - (20/3)(0.06k - 0.2)+ > 0 up to k = 8 (0.48 < 0.5); give up the rest
    assert clamped_bound(tasks, slots) == pytest.approx(16 - 20 / 3 * (0.04 + 0.10 + 0.16 + 0.22 + 0.28))
    # giving a task up frees its slot for another: T1 (deadline 0) cannot be on time, T2 can
    pair = [PairingTask(0.0, 0.0, 1.0, 10.0), PairingTask(0.0, 1.0, 1.0, 10.0)]
    assert tardiness_bound(pair, [1.0, 2.0]) == pytest.approx(-18.0)  # both kept: 1-10 and 1-10
    assert clamped_bound(pair, [1.0, 2.0]) == pytest.approx(1.0)  # T2 alone on slot 1
    # the fallback above exact_up_to: each task at its own earliest time, clamped
    assert clamped_bound(tasks, slots, exact_up_to=1) == pytest.approx(24.0)
    with pytest.raises(ValueError):
        tardiness_bound(tasks, slots[:-1])


def test_first_segment_work_charges_each_pass_per_slot():
    prof = EngineProfile(
        name="p", prefill_a=1e-8, prefill_b=1e-4, prefill_c=0.02, decode_q=0.02, decode_r=0.001, decode_p=1e-7
    )
    facts = task_facts([task(0, 0.0)], SimConfig(profile=prof))[0]
    n, big_p, big_n = facts.first_tokens, facts.prompt, facts.suffix
    assert n == 4 and 0 < big_n < big_p
    prefill = 1e-8 * big_n**2 + 1e-4 * big_n
    decode = 3 * (0.02 / 4 + 0.001) + 1e-7 * (3 * big_p + 6)  # KV = P+1, P+2, P+3
    assert first_segment_work(facts, prof, 4, chunked=False) == pytest.approx(prefill + 0.02 / 4 + decode)
    assert first_segment_work(facts, prof, 4, chunked=True) == pytest.approx(prefill + decode)


def test_burst_on_one_slot_the_bound_is_exact_and_no_policy_beats_it():
    """Twelve urgent requests at once, batch cap 1, the toy engine: each first segment is 4 tokens
    (free prefill + 3 steps = 60 ms), so serving them back to back answers them at 0.06·k — the
    pairing case above — and that schedule exists: the bound is exact here."""
    burst = [task(i, 0.0) for i in range(12)]
    b = class_bounds(burst, TOY_CFG, max_batch=1)["urgent"]
    assert b["alone_pct"] == pytest.approx(100.0) and b["chain_pct"] == pytest.approx(100.0)
    assert b["pct_beta"] == pytest.approx(100 * (24 - 20 / 3 * 2.52) / 24)  # 30.0
    assert b["pct_beta_clamped"] == pytest.approx(100 * (16 - 20 / 3 * 0.8) / 24)  # 44.4
    for policy in ("timely@b1", "edf-seg@b1", "fcfs-seg@b1", "vllm@b1"):
        m = summarize(simulate(burst, SimConfig(policy=policy, profile=TOY, network_latency=0.0)).records)
        assert m["urgent"].pct_beta <= b["pct_beta"] + 1e-9
        assert m["urgent"].pct_beta_clamped <= b["pct_beta_clamped"] + 1e-9


def test_shared_robot_chain_binds():
    """Three urgent tasks of one robot 0.1 s apart: each waits for the previous plan (4.8 s of robot
    time), so only the first can be on time — alone says 100 %, the chain 2 + 2 × (utility ≪ 0)."""
    tasks = [task(i, 0.1 * i, agent="r") for i in range(3)]
    b = class_bounds(tasks, TOY_CFG, max_batch=8)["urgent"]
    w2 = 0.06 + 4.8 - 0.1  # the second starts when the first ends (0.06 + 4.8)
    w3 = 0.06 + 2 * 4.8 - 0.2
    expect = URGENT_TUF(0.06) + URGENT_TUF(w2) + URGENT_TUF(w3)
    assert b["alone_pct"] == pytest.approx(100.0)
    assert b["chain_pct"] == pytest.approx(100 * expect / 6) and b["pct_beta"] == pytest.approx(
        100 * expect / 6
    )
    assert b["pct_beta_clamped"] == pytest.approx(100 * 2 / 6)
    m = summarize(simulate(tasks, SimConfig(policy="timely", profile=TOY, network_latency=0.0)).records)
    assert m["urgent"].pct_beta <= b["pct_beta"] + 1e-9


def test_the_all_row_sums_the_classes_and_bad_cap_is_refused():
    mixed = [task(i, 0.0, URGENT_TUF if i % 2 else NORMAL_TUF) for i in range(6)]
    b = class_bounds(mixed, TOY_CFG, max_batch=2)
    assert b["all"]["sum_utility"] == pytest.approx(b["urgent"]["sum_utility"] + b["normal"]["sum_utility"])
    assert b["all"]["sum_beta"] == pytest.approx(3 * 2.0 + 3 * 1.0)
    with pytest.raises(ValueError):
        class_bounds(mixed, TOY_CFG, max_batch=0)


def test_no_policy_beats_the_bound_on_a_public_trace_with_shared_robots():
    """The first 60 tasks of the public sample 1 squeezed ×0.35 (robots shared, so chains bind) at
    batch cap 2: every policy's utility, unclamped and clamped, stays at or below the bound."""
    from timely_llm_ros.workload import resolve_workload

    tasks = sorted(resolve_workload("sample1:compress=0.35").tasks, key=lambda t: t.arrival)[:60]
    b = class_bounds(tasks, SimConfig(), max_batch=2)
    assert b["urgent"]["chain_pct"] < b["urgent"]["alone_pct"]  # the chains bind here
    for policy in ("timely@b2", "edf-seg@b2", "fcfs-requeue@b2", "vllm-stream@b2"):
        m = summarize(simulate(tasks, SimConfig(policy=policy)).records)
        for cls in ("urgent", "normal", "all"):
            assert m[cls].pct_beta <= b[cls]["pct_beta"] + 1e-9, (policy, cls)
            assert m[cls].pct_beta_clamped <= b[cls]["pct_beta_clamped"] + 1e-9, (policy, cls)


def test_two_engine_replicas_double_the_machine():
    """The one-slot burst on two replicas: 30 ms of work each, slots 0.03·k; slots 7..12 are late by
    0.01, 0.04, ..., 0.16 (0.51 s in all)."""
    burst = [task(i, 0.0) for i in range(12)]
    cfg = SimConfig(profile=TOY, network_latency=0.0, replicas=2)
    b = class_bounds(burst, cfg, max_batch=1)["urgent"]
    assert b["pct_beta"] == pytest.approx(100 * (24 - 20 / 3 * 0.51) / 24)
