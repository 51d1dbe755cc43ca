"""Issue-8 scenario definitions, the load-sweep figure and the ablation summary (fast: tiny runs)."""

import json

import pytest

from timely_llm_ros.bench import ablation, loadsweep
from timely_llm_ros.bench import scenarios as sc
from timely_llm_ros.core.sched.policies import parse_policy
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF


def test_suffix_and_specs():
    assert sc.with_suffix("timely", "@b4") == "timely@b4"
    assert sc.with_suffix("edf-seg@b6", "@b4") == "edf-seg@b6"  # the policy's own cap wins
    assert sc.with_suffix("vllm", "") == "vllm"
    # axes that add load — more agents come with more robots per event, and the rate axis
    # gives every task its own agent (nothing skipped)
    assert sc.agents_spec(1) == "wid2" and sc.agents_spec(2) == "wid2:agents=84,max_tpe=32"
    assert sc.agents_spec(3) == "wid2:agents=126,max_tpe=48"
    assert sc.rate_spec(0.25) == "wid2:rate=0.25,unique_agents=true"
    assert sc.rate_spec(1.0) == "wid2:rate=1,unique_agents=true"
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError):
            sc.agents_spec(bad)
    for bad in (0, -0.1, float("nan"), "0.5"):
        with pytest.raises(ValueError):
            sc.rate_spec(bad)
    with pytest.raises(ValueError):
        sc.from_spec("wid1", cap=0)
    with pytest.raises(ValueError):
        sc.scenarios(["nope"])


def test_groups_resolve_to_task_lists():
    burst = sc.bursts()
    assert [s.name for s in burst] == list(sc.BURSTS)
    assert sum(1 for _, spec, _ in sc.SUITE if "bursty=10" in spec) >= 4
    name, tasks, suffix = burst[0]  # a scenario unpacks as (name, tasks, suffix)
    assert tasks and all(isinstance(t, TaskSpec) for t in tasks) and suffix == ""
    caps = sc.batch_caps((2, 4), spec="wid1")
    assert [(s.name, s.suffix) for s in caps] == [("wid1@b2", "@b2"), ("wid1@b4", "@b4")]
    assert caps[0].tasks == caps[1].tasks
    assert set(sc.GROUPS) == {"low", "agents", "rate", "batch", "burst", "compress", "urgent", "overload"}
    assert {cap for g, _, cap in sc.SUITE if g == "batch"} == {2, 4, 6, 8, 12, 16}
    assert {cap for g, _, cap in sc.SUITE if g == "overload"} >= {4, 6, 8}
    for s in caps:
        parse_policy(sc.with_suffix("timely", s.suffix))


def tiny():
    mk = dict(robot_type="drone", skill_set="tello_minispec", instruction="x")
    return [
        TaskSpec(
            task_id="n",
            agent_id="n",
            tuf=NORMAL_TUF,
            arrival=0.0,
            reference_plan="mu(50);",
            exec_times=[("mu", 1.0)],
            **mk,
        ),
        TaskSpec(
            task_id="u",
            agent_id="u",
            tuf=URGENT_TUF,
            arrival=0.01,
            reference_plan="mb(100);",
            exec_times=[("mb", 1.0)],
            **mk,
        ),
    ]


def test_run_applies_the_suffix_and_returns_class_metrics():
    # one slot: the urgent request waits for the normal one's whole first segment (no mid-segment
    # preemption: timely would suspend it, the urgent request being late by then); two slots: it
    # runs beside it and answers sooner
    one = sc.run(sc.Scenario("tiny", tiny(), "@b1"), "timely-no-preempt")
    out = sc.run(sc.Scenario("tiny", tiny(), "@b2"), "timely-no-preempt")
    assert set(out) == {"normal", "urgent", "all"}
    assert out["urgent"]["n"] == 1 and one["urgent"]["n"] == 1
    assert out["urgent"]["response_max"] < one["urgent"]["response_max"]
    for key in (
        "utility_mean",
        "utility_mean_clamped",
        "pct_beta",
        "n_nonpositive",
        "response_p50",
        "response_p99",
        "response_max",
        "waiting_mean",
    ):
        assert key in out["normal"]


def test_loadsweep_plot_and_ablation_summary(tmp_path):
    rows = []
    for rate, vals in ((0.1, (100.0, 99.0)), (0.5, (80.0, 60.0))):
        for pol in ("timely", "edf-seg"):
            rows.append(
                {
                    "rate": rate,
                    "cap": None,
                    "policy": pol,
                    "scenario": f"r{rate}",
                    "classes": {
                        "urgent": {"pct_beta_clamped": vals[0], "pct_beta": vals[0] - 50},
                        "normal": {"pct_beta_clamped": vals[1], "pct_beta": vals[1] - 50},
                    },
                }
            )
    png = loadsweep.plot(rows, tmp_path / "sweep.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = ablation.summary(rows)
    assert "100.0/99.0" in text and "80.0/60.0" in text
    assert "50.0/49.0" in ablation.summary(rows, "pct_beta")
    assert "50.0" in loadsweep._text(rows, "pct_beta") and "100.0" in loadsweep._text(rows, "pct_beta")


def test_loadsweep_cli_on_one_light_rate(tmp_path):
    assert (
        loadsweep.main(["--out", str(tmp_path), "--rates", "0.05", "--policies", "timely,edf-seg", "--quiet"])
        == 0
    )
    data = json.loads((tmp_path / "loadsweep.json").read_text())
    assert [r["policy"] for r in data["rows"]] == ["timely", "edf-seg"]
    assert (tmp_path / "loadsweep.png").stat().st_size > 0
    with pytest.raises(SystemExit):
        loadsweep.main(["--out", str(tmp_path), "--policies", "sjf"])
    with pytest.raises(SystemExit):
        loadsweep.main(["--out", str(tmp_path), "--rates", "0,x"])
