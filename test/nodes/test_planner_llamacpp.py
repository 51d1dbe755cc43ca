"""The planner node on the real embedded engine (``engine:=llamacpp``), end to end on real DDS.

`timely-llm fleet` starts the planner with llama.cpp + SmolLM2-135M (grammar-constrained to the
Tello skill language, skill prompt prefilled at start-up), two simulated drones and a workload node
as separate OS processes; three drone tasks (one urgent) are planned by the real model, their
segments executed, and every task must end COMPLETED — with at least one real suspension and
resumption of a generation on the way. Outcomes only, with generous timeouts: nothing asserts speed.
"""

from __future__ import annotations

import pytest
from planner_testkit import run_fleet

llama_cpp = pytest.importorskip(
    "llama_cpp", reason="llama-cpp-python is not installed (make test installs it)"
)

RUN_TIMEOUT = 300.0
WORKLOAD = """
name: llm
tasks:
  - {trace: 1, arrival: 0.0, agent: drone_1, max_tokens: 24}
  - {trace: 6, arrival: 0.3, agent: drone_2, max_tokens: 24}
  - {trace: 4, arrival: 6.0, agent: drone_1, max_tokens: 24}
"""


@pytest.mark.ros
@pytest.mark.slow
def test_the_planner_serves_a_real_workload_on_the_embedded_llm(tmp_path):
    (tmp_path / "llm.yaml").write_text(WORKLOAD)
    cfg = {
        "planner": {
            "parameters": {
                "engine": "llamacpp",
                "policy": "timely",
                "robot_grace_period": 20.0,
                "warmup_skill_sets": ["tello_minispec"],
                "segment_timeout_margin": 60.0,
            }
        },
        "robot_defaults": {"drone": {"backend": "sim", "exec_mode": "min", "time_scale": 0.05}},
        "robots": [{"agent": "drone_1", "type": "drone"}, {"agent": "drone_2", "type": "drone"}],
        "timemodel": {"enabled": False},
        "recorder": {"enabled": True, "parameters": {"output": str(tmp_path / "bag")}},
        "workload": {
            "enabled": True,
            "parameters": {
                "workload": str(tmp_path / "llm.yaml"),
                "tuf_scale": 5.0,
                "exit_when_done": True,
                "completion_timeout": 200.0,
                "discovery_timeout": 200.0,
            },
        },
    }
    rc, text, summary = run_fleet(cfg, tmp_path, RUN_TIMEOUT)
    assert rc == 0, text[-6000:]
    assert "warm-up: prefilled the tello_minispec prompt" in text
    assert summary["final"] == {"COMPLETED": 3}, summary

    from timely_llm_ros.lrtrace.bagread import read_bag

    bags = [p.parent for p in (tmp_path / "bag").rglob("metadata.yaml")] or [tmp_path / "bag"]
    events = read_bag(bags[0]).trace_events()
    kinds = {e.kind for e in events}
    assert {"SUSPEND", "RESUME", "DISPATCH", "EXEC_END", "COMPLETE"} <= kinds, kinds
    assert "engine llamacpp" in text
