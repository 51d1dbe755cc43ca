"""The "Use your inference server" example (config/openai_fleet.yaml) is sized to its robots: with
the fleet's own agent mapping (the workload node's ``plan_tasks``), no task waits for its robot to
finish an earlier plan — simulated on the virtual clock with the tasks' recorded execution times,
so the example's response times measure the planner and the servers. (It once sent about six tasks
per drone in 20 s with ~20 s plans: most tasks waited for their drone and ended with utility <= 0.)
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

pytestmark = pytest.mark.ros  # the workload node's mapping (nodes/workload.py) imports rclpy

REPO = Path(__file__).resolve().parents[2]


def _fleet_tasks(config: str):
    from timely_llm_ros.fleet import fleet_nodes, load_fleet
    from timely_llm_ros.nodes.workload import parse_agents, plan_tasks
    from timely_llm_ros.workload import resolve_workload

    (node,) = [n for n in fleet_nodes(load_fleet(REPO / "config" / config)) if n.role == "workload"]
    params = node.params
    workload = resolve_workload(params["workload"])
    planned, skipped = plan_tasks(
        workload.tasks,
        name=workload.name,
        agents=parse_agents(params["agents"]),
        agent_prefix="agent_",
        skip_unmapped=False,
        id_prefix="",
        time_scale=1.0,
        max_tasks=0,
        tuf_scale=float(params.get("tuf_scale", 1.0)),
    )
    assert not skipped
    by_id = {t.task_id: t for t in workload.tasks}
    return [
        dataclasses.replace(by_id[p.msg.task_id], agent_id=p.msg.agent_id, arrival=p.offset) for p in planned
    ]


def test_the_inference_server_example_never_makes_a_task_wait_for_its_robot():
    from timely_llm_ros.lrtrace.timeline_model import TimelineModel, robot_waits
    from timely_llm_ros.sim.simulator import SimConfig, simulate

    tasks = _fleet_tasks("openai_fleet.yaml")
    assert len({t.agent_id for t in tasks}) == 3 and len(tasks) >= 6
    res = simulate(tasks, SimConfig(policy="timely", exec_mode="recorded"))
    model = TimelineModel()
    model.extend(sorted(res.events, key=lambda e: e.t))
    assert robot_waits(model) == {}
    assert all(r.state == "COMPLETED" for r in res.records)
