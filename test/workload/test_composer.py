"""Poisson workload composer: determinism, Table-3 presets, agent busy rule, skipped tasks."""

from __future__ import annotations

import dataclasses

import pytest

from timely_llm_ros.workload.composer import ComposerSpec, compose, parse_trace_list
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
