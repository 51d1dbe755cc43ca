"""Replay mode over the ROS graph: the planner node on the real embedded engine (``engine:=llamacpp``,
``plan_source:=reference``) writes every task's reference plan exactly.

`timely-llm fleet` starts the planner, four simulated drones, the recorder and a workload node
publishing the first 20 tasks of WID2 as separate OS processes on real DDS. The planner looks each
task's plan up in its ``sim_plans`` (the fleet fills in ``catalog`` + the workload, as for the
simulated engine) and constrains llama.cpp to that literal. Every task must end COMPLETED and the
segments its robot received (read back from the bag) must spell the reference plan: the whole plan,
or all of it but a final tail of statement separators, which executes nothing and is not sent.
Outcomes only, generous timeouts.
"""

from __future__ import annotations

from collections import defaultdict

import pytest
from planner_testkit import run_fleet

from timely_llm_ros.bench.realbench import load_tasks
from timely_llm_ros.fleet import fleet_nodes, load_fleet

N_TASKS = 20
RUN_TIMEOUT = 420.0


def test_the_replay_fleet_gets_its_reference_plans_from_the_catalog_and_its_workload(repo_root):
    """config/replay_fleet.yaml (README): a real engine in replay mode, with sim_plans filled in by
    the fleet as for the simulated engine (without them only the catalog's instructions would match)."""
    nodes = fleet_nodes(load_fleet(repo_root / "config" / "replay_fleet.yaml"))
    planner = next(n for n in nodes if n.role == "planner")
    workload = next(n for n in nodes if n.role == "workload")
    assert planner.params["engine"] == "llamacpp" and planner.params["plan_source"] == "reference"
    assert planner.params["sim_plans"] == ["catalog", workload.params["workload"]]


@pytest.mark.ros
@pytest.mark.slow
def test_the_planner_replays_the_reference_plans_of_a_wid2_slice(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed (make test installs it)")
    drones = [f"drone_{i}" for i in range(1, 5)]
    cfg = {
        "planner": {
            "parameters": {
                "engine": "llamacpp",
                "plan_source": "reference",
                "policy": "timely",
                "robot_grace_period": 20.0,
                "warmup_skill_sets": ["tello_minispec"],
                "segment_timeout_margin": 60.0,
            }
        },
        "robot_defaults": {"drone": {"backend": "sim", "exec_mode": "min", "time_scale": 0.05}},
        "robots": [{"agent": a, "type": "drone"} for a in drones],
        "timemodel": {"enabled": False},
        "recorder": {"enabled": True, "parameters": {"output": str(tmp_path / "bag")}},
        "workload": {
            "enabled": True,
            "parameters": {
                "workload": "wid2",
                "max_tasks": N_TASKS,
                "tuf_scale": 8.0,
                "exit_when_done": True,
                "completion_timeout": 300.0,
                "discovery_timeout": 200.0,
            },
        },
    }
    rc, text, summary = run_fleet(cfg, tmp_path, RUN_TIMEOUT)
    assert rc == 0, text[-6000:]
    assert "replaying reference plans" in text and "engine llamacpp" in text
    assert summary["final"] == {"COMPLETED": N_TASKS}, summary

    from timely_llm_ros.lrtrace.bagread import read_bag

    bags = [p.parent for p in (tmp_path / "bag").rglob("metadata.yaml")] or [tmp_path / "bag"]
    segments: dict[str, list] = defaultdict(list)
    for _topic, _t, msg in read_bag(bags[0]).by_type("timely_llm_ros/msg/Segment"):
        segments[msg.task_id].append(msg)
    tasks = load_tasks("wid2", N_TASKS, 1.0)
    from timely_llm_ros.workload import resolve_workload
    from timely_llm_ros.workload.ids import published_ids

    ids = published_ids("wid2", [t.task_id for t in resolve_workload("wid2").tasks])  # wid2-007
    references = {ids[t.task_id]: t.reference_plan for t in tasks}
    assert set(segments) == set(references)
    for task_id, ref in references.items():
        sent = "".join(m.text for m in sorted(segments[task_id], key=lambda m: m.index))
        assert ref.startswith(sent) and not ref[len(sent) :].replace(";", "").strip(), (task_id, sent, ref)
        assert sum(m.tokens for m in segments[task_id]) >= 1
