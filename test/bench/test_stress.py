"""The ``--suite stress`` matrix: which workloads and caps it means, new seeds, and its run plan."""

import pytest

from timely_llm_ros.bench import cli, stress
from timely_llm_ros.bench.run_plan import RunPlan
from timely_llm_ros.bench.runner import Job
from timely_llm_ros.workload import resolve_workload


def _plan(*argv: str) -> RunPlan:
    return RunPlan.from_args(cli.build_parser().parse_args(list(argv)))


def test_matrix_is_twenty_bursty_workloads_under_six_caps():
    wls = stress.workloads()
    assert len(wls) == 20 and len({s for _, s in wls}) == 20
    assert all("bursty=10" in s or "max_tpe=32" in s for _, s in wls)
    assert sum("compress=0.35" in s for _, s in wls) == sum("compress=0.5" in s for _, s in wls) == 8
    assert sum("unique_agents=true" in s for _, s in wls) == 12  # the rest share the preset's agent pool
    entries = stress.suite()
    assert len(entries) == 120 and {c for _, _, c in entries} == {2, 4, 6, 8, 12, 16}


def test_new_seeds_draw_other_workloads_of_the_same_families():
    spec = stress.workload_spec(stress.BASES["wid2-bursty"], 0.35, True)
    assert spec == "wid2:bursty=10,duration=150,compress=0.35,unique_agents=true"
    fresh = stress.workload_spec(stress.BASES["wid2-bursty"], 0.35, True, seed=11)
    assert fresh == spec + ",seed=11"
    a, b = resolve_workload(spec).tasks, resolve_workload(fresh).tasks
    assert [t.arrival for t in a] != [t.arrival for t in b]
    assert len(stress.workloads([11, 12])) == 40
    assert stress.parse_seeds("11, 12,11") == [11, 12] and stress.parse_seeds(None) is None
    for bad in ("x", "-1", " , "):
        with pytest.raises(ValueError):
            stress.parse_seeds(bad)
    with pytest.raises(ValueError):
        stress.workload_spec("wid1", 1.5, True)


def test_plan_runs_every_policy_on_every_entry_once():
    plan = _plan("--suite", "stress", "-p", "timely,edf-seg")
    assert plan.stress and not plan.scenarios and not plan.explicit
    assert len(plan.jobs) == 120 * 2
    assert Job("wid1:bursty=10,duration=150,compress=0.5", "edf-seg@b16") in plan.jobs
    seeded = _plan("--suite", "stress", "-p", "timely", "--workload-seeds", "7")
    assert all(j.workload.endswith(",seed=7") for j in seeded.jobs) and len(seeded.jobs) == 120
    with pytest.raises(ValueError, match="--suite stress"):
        _plan("-w", "wid1", "--workload-seeds", "7")
