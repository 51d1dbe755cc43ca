"""A plan cut by ``max_tokens`` in the middle of a statement, end to end on real DDS.

Any engine may stop a generation at its token budget in the middle of a statement (a real model
on a GPU did: ``…;tc``). Over ROS: `timely-llm fleet` with the simulated engine (its plans are the
workload's own, so where the budget cuts is known) and one drone; two tasks whose budgets end inside
a statement — one after a complete first statement, one before any. The partial statement is never
sent to the robot, and both tasks end with a TaskStatus reason that names the truncation: the first
COMPLETED after its complete segment ran, the second FAILED. Outcomes only, generous timeouts.
"""

from __future__ import annotations

import pytest
import yaml
from planner_testkit import run_fleet

from timely_llm_ros.engines.sim import SimEngine

RUN_TIMEOUT = 240.0
PLAN = "mu(50);tc(90);tp;"


def _budget(prefix: str) -> int:
    """Tokens of ``prefix`` on the simulated engine: a max_tokens that ends the plan right there."""
    return len(SimEngine("llama3-8b-fp16-rtx4090").tokenize(prefix))


@pytest.mark.ros
def test_a_plan_truncated_mid_statement_is_never_sent_and_its_task_ends_with_the_reason(tmp_path):
    cut_after_one = _budget("mu(50);tc(9")
    workload = {
        "name": "truncated",
        "tasks": [
            {
                "task_id": "cut_late",
                "arrival": 0.0,
                "agent": "drone_1",
                "robot_type": "drone",
                "skill_set": "tello_minispec",
                "tuf": [5, 1, 10],
                "instruction": "[A] Climb, turn and take a picture.",
                "plan": PLAN,
                "max_tokens": cut_after_one,
                "exec_times": [["mu", 0.2], ["tc", 0.2], ["tp", 0.01]],
            },
            {
                "task_id": "cut_early",
                "arrival": 0.5,
                "agent": "drone_1",
                "robot_type": "drone",
                "skill_set": "tello_minispec",
                "tuf": [5, 1, 10],
                "instruction": "[A] Climb, turn and take a picture.",
                "plan": PLAN,
                "max_tokens": 2,
                "exec_times": [["mu", 0.2], ["tc", 0.2], ["tp", 0.01]],
            },
        ],
    }
    wl = tmp_path / "truncated.yaml"
    wl.write_text(yaml.safe_dump(workload, sort_keys=False))
    cfg = {
        "planner": {
            "parameters": {
                "engine": "sim",
                "policy": "timely",
                "sim_plans": [str(wl)],
                "robot_grace_period": 10.0,
                "segment_timeout_margin": 30.0,
            }
        },
        "robot_defaults": {"drone": {"backend": "sim", "exec_mode": "min", "time_scale": 0.2}},
        "robots": [{"agent": "drone_1", "type": "drone"}],
        "timemodel": {"enabled": False},
        "recorder": {"enabled": False},
        "workload": {
            "enabled": True,
            "parameters": {
                "workload": str(wl),
                "exit_when_done": True,
                "completion_timeout": 120.0,
                "discovery_timeout": 180.0,
            },
        },
    }
    rc, text, summary = run_fleet(cfg, tmp_path, RUN_TIMEOUT)
    assert rc == 0, text[-6000:]
    assert summary["final"] == {"COMPLETED": 1, "FAILED": 1}, summary
    reasons = {k.removeprefix("truncated-"): v for k, v in summary["reasons"].items()}
    assert reasons["cut_late"].startswith(f"plan truncated at max_tokens ({cut_after_one} tokens)"), reasons
    assert "tc(9" in reasons["cut_late"] and "tc(90)" not in reasons["cut_late"], reasons
    assert reasons["cut_early"].startswith("plan truncated at max_tokens (2 tokens)"), reasons
    assert "nothing of the plan was sent" in reasons["cut_early"], reasons
    # the planner sent one segment (mu(50)) and the closing marker; nothing of the cut statements
    assert '"segments": 1,' in text, text[-3000:]
