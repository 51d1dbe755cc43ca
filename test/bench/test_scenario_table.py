"""Scenario summary: timely vs the best baseline, ×edf-seg, the alone bound; the bound itself."""

import math

import pytest

from timely_llm_ros.bench import scenario_table as st
from timely_llm_ros.bench.bounds import class_bounds, task_facts
from timely_llm_ros.bench.scenarios import policy_for
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, TUF, URGENT_TUF
from timely_llm_ros.sim.simulator import SimConfig, simulate


def cls(pct, clamped=None, n=10):
    return {"pct_beta": pct, "pct_beta_clamped": pct if clamped is None else clamped, "n": n}


RUNS = {  # (spec, policy) -> per-class metrics
    ("w", "timely@b4"): {"urgent": cls(-20.0, 66.0), "normal": cls(80.0)},
    ("w", "edf-seg@b4"): {"urgent": cls(-300.0, 40.0), "normal": cls(81.5, 82.0)},
    ("w", "fcfs-seg@b4"): {"urgent": cls(-500.0, 20.0), "normal": cls(60.0)},
    ("w", "timely"): {"urgent": cls(97.0)},
    ("w", "edf-seg"): {"urgent": cls(97.5)},
}
BOUNDS = {"w": {"urgent": {"pct_beta": 90.0, "pct_beta_clamped": 100.0}, "normal": {"pct_beta": 100.0}}}


def rows():
    entries = [("overload", "w", 4), ("low", "w", None)]
    return st.summary_rows(
        entries, lambda s, p: RUNS.get((s, p)), lambda s, cap: BOUNDS[s], lambda s: 3, policy_for
    )


def test_summary_rows_hand_computed():
    over_u, over_n, low_u = rows()
    # urgent at cap 4: best baseline edf-seg (-300 > -500); timely leads by 280 unclamped, 26 clamped;
    # ×edf = 66/40 = 1.65 -> goal met
    assert (over_u["best_policy"], over_u["delta"], over_u["delta_clamped"]) == ("edf-seg", 280.0, 26.0)
    assert over_u["ratio_edf"] == pytest.approx(1.65) and over_u["goal"] == "met"
    assert over_u["bound_ratio"] == pytest.approx(2.5) and over_u["skipped"] == 3 and over_u["cap"] == 4
    # the clamped bound is the one compared (100 of which timely gets 66); unclamped shown beside
    assert (over_u["bound"], over_u["bound_clamped"], over_u["of_bound"]) == (90.0, 100.0, 66.0)
    # normal at cap 4: edf-seg 81.5 beats timely by 1.5 points (> 1: a trailing row)
    assert over_n["delta"] == pytest.approx(-1.5) and "goal" not in over_n
    # low load: edf 97.5 leaves a bound/edf of 100/97.5 < 1.3: the goal is impossible, measured
    assert low_u["goal"] == "impossible" and low_u["delta"] == pytest.approx(-0.5)
    assert [r["workload"] for r in st.trailing(rows())] == ["w"] and st.trailing(rows())[0][
        "class"
    ] == "normal"


def test_render_has_the_columns_and_the_verdict():
    text = st.render(rows())
    for head in ("timely", "best policy", "Δ≥0", "×edf", "bound≥0", "%bound", "bound/edf", "goal", "skip"):
        assert head in text
    assert "trails the best baseline by > 1 point: 1 of 3 (unclamped), 1 (clamped)" in text
    assert "w @b4 normal: timely 80.0 vs edf-seg 81.5" in text
    assert "met 1, impossible (bound/edf < 1.3) 1, missed 0 of 2" in text


def task(i, arrival, tuf, plan="mb(100);tc(90);"):
    return TaskSpec(
        task_id=str(i),
        agent_id=str(i),
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="x",
        tuf=tuf,
        arrival=arrival,
        reference_plan=plan,
        exec_times=[("mb", 2.5), ("tc", 2.3)],
    )


def test_alone_bound_is_the_response_of_a_lone_task_and_bounds_every_policy():
    # a lone urgent request on a warm engine: the same response time as the alone bound reports
    lone = simulate([task(0, 0.0, URGENT_TUF), task(1, 100.0, URGENT_TUF)], SimConfig(policy="edf-seg"))
    assert [f.alone for f in task_facts([task(5, 3.0, URGENT_TUF)])] == [
        pytest.approx(lone.records[1].response_time)
    ]
    # a TUF whose ERT no engine can meet (20 ms): the bound is its utility at that response time
    tight = TUF(ert=0.02, alpha=-2.0, beta=1.0)
    w = [f.alone for f in task_facts([task(0, 0.0, tight)])][0]
    b = class_bounds([task(0, 0.0, tight)])
    assert w > 0.02 and b["urgent"]["pct_beta"] == pytest.approx(100.0 * tight(w))
    # sixteen requests at once on two slots: every policy stays at or below the bound
    burst = [task(i, 0.001 * i, URGENT_TUF if i % 2 else NORMAL_TUF) for i in range(16)]
    bound = class_bounds(burst)
    for policy in ("timely@b2", "edf-seg@b2"):
        recs = simulate(burst, SimConfig(policy=policy)).records
        for name in ("urgent", "normal"):
            got = sum(r.utility for r in recs if r.task_class == name)
            assert got <= bound[name]["sum_utility"] + 1e-9
    assert not math.isnan(bound["all"]["pct_beta"])


def test_missed_rows_get_their_reason_from_an_urgent_only_run():
    # Eight urgent and eight normal requests at once on two slots. The urgent ones alone (the normal
    # ones removed) get some share u of their Σβ; a row whose edf-seg got u/2 would be reachable by
    # them alone (×2 ≥ 1.3): the normal work sharing the engine is what is missing (shared-engine);
    # one whose edf-seg got u/1.1 is not reached even alone (within-class).
    from timely_llm_ros.bench.missed import SHARED, WITHIN, pin_reasons, urgent_alone_pct

    burst = [task(i, 0.001 * i, URGENT_TUF if i % 2 else NORMAL_TUF) for i in range(16)]
    u = urgent_alone_pct(burst, SimConfig(policy="timely@b2"))
    assert 0.0 < u <= 100.0
    rows = [
        {"workload": "b", "cap": 2, "class": "urgent", "goal": "missed", "edf_clamped": u / 2.0},
        {"workload": "b", "cap": 2, "class": "urgent", "goal": "missed", "edf_clamped": u / 1.1},
        {"workload": "b", "cap": 2, "class": "urgent", "goal": "met", "edf_clamped": u / 2.0},
    ]
    got = pin_reasons(rows, lambda spec: burst, SimConfig(), policy_for)
    assert [r["missed_reason"] for r in got] == [SHARED, WITHIN] and "missed_reason" not in rows[2]
    assert got[0]["alone_ratio"] == pytest.approx(2.0) and got[1]["urgent_alone"] == pytest.approx(u)
    for r in rows:
        r.update(timely_clamped=50.0, ratio_edf=1.0, bound_ratio=2.0, bound_clamped=100.0)
    text = st.verdict(rows)
    assert (
        "b @b2: ×edf 1.00, reachable 2.00; timely 50.0 of bound 100.0; shared-engine: urgent alone ×edf 2.00"
        in text
    )
    assert "# missed rows by reason: shared-engine 1, within-class 1" in text


def test_rows_carry_the_deferral_ledger_of_timely_s_run():
    stats = {
        ("w", "timely@b4"): {
            "deferral_deferrals": 5,
            "deferral_urgent_deferrals": 3,
            "deferral_urgent_promises_kept": 2,
            "deferral_urgent_promises_broken": 1,
            "deferral_urgent_promises_broken_free": 1,
            "deferral_urgent_broken_cost": 0.25,
            "deferral_urgent_wait_cost": 0.5,
            "deferral_urgent_expected_cost": 0.75,
        }
    }
    got = st.summary_rows(
        [("overload", "w", 4)],
        lambda s, p: RUNS.get((s, p)),
        lambda s, cap: BOUNDS[s],
        lambda s: 0,
        policy_for,
        stats_of=lambda s, p: stats.get((s, p)),
    )
    urgent, normal = got
    assert (urgent["deferrals"], urgent["promises_broken"], urgent["broken_cost"]) == (3, 1, 0.25)
    assert (normal["deferrals"], normal["promises_broken"]) == (0, 0)  # none of that class
    text = st.render(got)
    assert "broken" in text and "cost" in text
    assert "deferrals beside a free slot: 3, promises kept 2, broken 1 costing 0.25 utility" in text
    assert "the waits cost the deferred 0.50 (the trades expected 0.75)" in text
    assert (
        "broken with the batch full 0, beside a free slot behind a refused candidate 1, otherwise 0" in text
    )
    assert "admission deferrals" not in st.render(rows())  # no ledger (baseline-only runs): no line
