"""Poisson workload composer: determinism, Table-3 presets, agent busy rule, skipped tasks."""

from __future__ import annotations

import dataclasses

import pytest

from timely_llm_ros.workload.composer import (
    ComposerSpec,
    TimeChange,
    compose,
    parse_trace_list,
    reshape_tasks,
)
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.fileformat import resolve_workload
from timely_llm_ros.workload.tasks import load_catalog


def _key(tasks):
    return [
        (t.task_id, t.agent_id, t.arrival, t.trace_id, t.reference_plan, tuple(t.exec_times)) for t in tasks
    ]


def test_same_seed_same_workload_and_other_seed_differs():
    spec = ComposerSpec(rate=0.25, max_tpe=8, traces=list(range(1, 9)), agents=25, duration=260, seed=11)
    a, b = compose(spec), compose(dataclasses.replace(spec))
    assert _key(a.tasks) == _key(b.tasks) and a.skipped == b.skipped
    c = compose(dataclasses.replace(spec, seed=12))
    assert _key(c.tasks) != _key(a.tasks)


@pytest.mark.parametrize(
    "name,rate,max_tpe,traces,agents,duration",
    [
        ("wid1", 0.25, 8, list(range(1, 9)), 25, 260),
        ("wid2", 0.25, 16, list(range(1, 9)), 42, 300),
        ("wid3", 0.1, 8, [9, 10, 11], 40, 900),
    ],
)
def test_presets_match_table3(name, rate, max_tpe, traces, agents, duration):
    wl = resolve_workload(name)
    spec = wl.composition.spec
    assert (spec.rate, spec.max_tpe, spec.traces, spec.agents, spec.duration) == (
        rate,
        max_tpe,
        traces,
        agents,
        duration,
    )
    assert wl.tasks and all(0 <= t.arrival < duration + 1 for t in wl.tasks)
    assert {t.trace_id for t in wl.tasks} == set(traces)
    assert len({t.agent_id for t in wl.tasks}) <= agents
    # Roughly rate * duration events (Poisson): a loose sanity band for one seed.
    assert 0.6 * rate * duration <= wl.composition.events <= 1.4 * rate * duration


@pytest.mark.parametrize("rate,max_tpe", [(0.25, 8), (0.1, 16)])
def test_long_horizon_rate_and_event_sizes(rate, max_tpe):
    spec = ComposerSpec(
        rate=rate, max_tpe=max_tpe, traces=[2], agents=2000, duration=20000, seed=5, guard_s=0
    )
    comp = compose(spec)
    assert abs(comp.events / spec.duration - rate) / rate < 0.05
    assert all(max_tpe // 2 <= n <= max_tpe for n in comp.event_sizes)
    assert set(comp.event_sizes) == set(range(max_tpe // 2, max_tpe + 1))
    assert sum(comp.event_sizes) == len(comp.tasks) + len(comp.skipped)


def test_agent_busy_rule_and_skipped_tasks_are_reported():
    catalog = load_catalog()
    spec = ComposerSpec(rate=0.5, max_tpe=8, traces=[1, 4, 6, 9], agents=6, duration=300, seed=3)
    comp = compose(spec, catalog)
    assert comp.skipped, "this load must overflow 6 agents"
    assert sum(comp.event_sizes) == len(comp.tasks) + len(comp.skipped)  # nothing lost silently
    busy = []
    last: dict[str, tuple[float, float]] = {}
    for t in comp.tasks:
        v = catalog.get(t.trace_id).primary
        end = t.arrival + v.plan_time_s + v.exec_time + spec.guard_s
        if t.agent_id in last:
            assert t.arrival >= last[t.agent_id][1], "an agent got a task while still busy"
        last[t.agent_id] = (t.arrival, end)
        busy.append((t.agent_id, t.arrival, end))
    assert len(last) <= spec.agents
    for s in comp.skipped:  # a task is skipped only when every agent is busy at its arrival
        busy_agents = {a for a, start, end in busy if start <= s.arrival < end}
        assert len(busy_agents) == spec.agents
    # Tasks of one event arrive 1 ms apart.
    assert any(abs((b.arrival - a.arrival) - 0.001) < 1e-9 for a, b in zip(comp.tasks, comp.tasks[1:]))


def test_skill_set_variant_selection():
    spec = ComposerSpec(
        rate=0.1, max_tpe=2, traces=[9], agents=50, duration=100, seed=1, skill_sets={9: "arm_fltrnn"}
    )
    comp = compose(spec)
    assert comp.tasks and {t.skill_set for t in comp.tasks} == {"arm_fltrnn"}


@pytest.mark.parametrize(
    "change,field",
    [
        ({"rate": 0}, "rate"),
        ({"agents": 0}, "agents"),
        ({"traces": [1, 99]}, "traces"),
        ({"traces": []}, "traces"),
        ({"duration": -5}, "duration"),
        ({"max_tpe": 2.5}, "max_tpe"),
        ({"min_tpe": 9}, "min_tpe"),
        ({"skill_sets": {1: "robot_arm"}}, "skill_sets"),
    ],
)
def test_bad_spec_rejected(change, field):
    spec = ComposerSpec(rate=0.25, max_tpe=8, traces=[1, 2], agents=5, duration=10)
    with pytest.raises(WorkloadError) as info:
        compose(dataclasses.replace(spec, **change), source="w.yaml")
    assert info.value.field == field and "w.yaml" in str(info.value)


def test_from_mapping_rejects_unknown_and_missing_keys():
    with pytest.raises(WorkloadError, match="unknown key"):
        ComposerSpec.from_mapping(
            {"rate": 1, "max_tpe": 1, "traces": [1], "agents": 1, "duration": 1, "agent": 3}, "f"
        )
    with pytest.raises(WorkloadError, match="'duration': missing"):
        ComposerSpec.from_mapping({"rate": 1, "max_tpe": 1, "traces": [1], "agents": 1}, "f")


def test_parse_trace_list():
    assert parse_trace_list("1-8") == list(range(1, 9))
    assert parse_trace_list("[9-11]") == [9, 10, 11]
    assert parse_trace_list("1,3-4") == [1, 3, 4]
    with pytest.raises(WorkloadError):
        parse_trace_list("8-1")


# ------------------------------------------------------------------ overload families
def _spec(**kw):
    base = dict(rate=0.5, max_tpe=6, traces=[1, 6], agents=500, duration=400, seed=3)
    base.update(kw)
    return ComposerSpec(**base)


def test_bursty_time_change_hand_computed():
    # rate 1 ev/s, bursts 4x the calm rate, mean burst 1 s / calm 3 s: p = 1/4 of the time in bursts,
    # calm rate 1 / (0.75 + 4·0.25) = 4/7, burst rate 16/7 (mean stays 1). Given sojourns calm 3 s,
    # burst 1 s, calm 3 s: Λ(3) = 12/7, Λ(4) = 12/7 + 16/7 = 4, Λ(7) = 4 + 12/7.
    spec = _spec(rate=1.0, bursty=4, burst_s=1.0, calm_s=3.0)
    warp = TimeChange(spec, sojourns=iter([3.0, 1.0, 3.0, 1.0]), start_burst=False)
    assert (warp.r_calm, warp.r_burst) == pytest.approx((4 / 7, 16 / 7))
    assert warp.real(1.0) == pytest.approx(1.75)  # Λ = 1 inside the first calm state: 1 / (4/7)
    assert warp.real(2.0) == pytest.approx(3.125)  # 3 + (2 − 12/7) / (16/7)
    assert warp.real(4.0) == pytest.approx(4.0)  # the burst ends exactly at Λ = 4
    assert warp.real(5.0) == pytest.approx(5.75)  # calm again: 4 + 1 / (4/7)


def test_bursty_keeps_the_plain_draws_and_the_mean_rate():
    plain, bursty = compose(_spec()), compose(_spec(bursty=10))
    n = min(plain.events, bursty.events)
    # same event sizes and traces (the state process has its own random stream), other times
    assert plain.event_sizes[:n] == bursty.event_sizes[:n]
    assert [t.trace_id for t in plain.tasks[:50]] == [t.trace_id for t in bursty.tasks[:50]]
    assert [t.arrival for t in plain.tasks[:50]] != [t.arrival for t in bursty.tasks[:50]]
    long = compose(_spec(bursty=10, duration=20000, agents=100000))
    assert abs(long.events / 20000 - 0.5) / 0.5 < 0.1  # the long-run mean rate is kept
    # bursts: the busiest 10 % of 10-s windows hold far more than 10 % of the tasks
    counts = [0] * 2000
    for t in long.tasks:
        counts[min(1999, int(t.arrival // 10))] += 1
    counts.sort(reverse=True)
    assert sum(counts[:200]) > 0.3 * sum(counts)
    assert compose(_spec(bursty=True)).spec.bursty == 10.0  # bursty=true: the default factor


def test_compress_scales_event_times_and_unique_agents_skips_nothing():
    plain = compose(_spec(unique_agents=True))
    half = compose(_spec(unique_agents=True, compress=0.5))
    assert half.event_sizes == plain.event_sizes and len(half.tasks) == len(plain.tasks) == sum(
        plain.event_sizes
    )
    assert not plain.skipped and not half.skipped
    assert len({t.agent_id for t in half.tasks}) == len(half.tasks)  # one agent per task
    # an event at time x arrives at 0.5·x (start 0); the tasks of one event stay 1 ms apart
    pairs = list(zip(plain.tasks, half.tasks, strict=True))
    firsts = [(a, b) for (a, b), (p, _) in zip(pairs[1:], pairs) if a.arrival - p.arrival > 0.01]
    assert len(firsts) > 100
    for a, b in firsts:
        assert b.arrival == pytest.approx(0.5 * a.arrival)
    for (a0, b0), (a1, b1) in zip(pairs, pairs[1:]):
        if a1.arrival - a0.arrival < 0.01:
            assert b1.arrival - b0.arrival == pytest.approx(a1.arrival - a0.arrival)
    # with a fixed pool the compressed timeline skips more tasks (agents are still busy), reported
    tight = dict(agents=20, duration=200)
    assert len(compose(_spec(compress=0.5, **tight)).skipped) > len(compose(_spec(**tight)).skipped)


def test_family_overrides_reproduce_from_the_name_and_bad_values_are_errors():
    wl = resolve_workload("wid1:bursty=10,compress=0.5,unique_agents=true")
    spec = wl.composition.spec
    assert (spec.bursty, spec.compress, spec.unique_agents) == (10, 0.5, True)
    assert wl.name == "wid1:bursty=10,compress=0.5,unique_agents=true"
    again = resolve_workload(wl.name)
    assert _key(again.tasks) == _key(wl.tasks)
    for bad, field in (
        ("bursty=0.5", "bursty"),
        ("compress=0", "compress"),
        ("unique_agents=3", "unique_agents"),
        ("burst_s=-1", "burst_s"),
    ):
        with pytest.raises(WorkloadError, match=field):
            resolve_workload(f"wid1:{bad}")


def test_reshape_applies_to_task_lists(tmp_path):
    path = tmp_path / "w.yaml"
    path.write_text(
        "tasks:\n"
        "  - {trace: 1, arrival: 2.0, agent: a}\n"
        "  - {trace: 6, arrival: 4.0, agent: a}\n"
        "  - {trace: 6, arrival: 10.0, agent: b}\n"
    )
    wl = resolve_workload(f"{path}:compress=0.5,unique_agents=true")
    assert [t.arrival for t in wl.tasks] == [2.0, 3.0, 6.0]  # offsets from the first arrival halved
    assert [t.agent_id for t in wl.tasks] == ["u0", "u1", "u2"]
    assert wl.name.endswith(":compress=0.5,unique_agents=true")
    with pytest.raises(WorkloadError, match="only apply to composer"):
        resolve_workload(f"{path}:agents=3")
    with pytest.raises(WorkloadError, match="compress"):
        reshape_tasks(wl.tasks, {"compress": -1}, "x")
