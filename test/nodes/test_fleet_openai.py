"""A fleet planned by two real llama.cpp servers (``engine: openai``), one of them killed mid-run.

``timely-llm fleet`` starts the planner (engine openai over two ``llama-server`` processes that this
test starts on 127.0.0.1 with the shipped SmolLM2 GGUF), two simulated arms and a workload node
(four arm tasks, two at once so both servers get a generation). As soon as the first segment is on
the wire, one server is killed (SIGKILL). Checked: the fleet finishes; every task has a final status,
COMPLETED or FAILED/EXPIRED with a reason — none lost, none silent; the planner noticed the replica
going down and the other server finished the work (no task failed for an engine reason).
Outcomes only, generous bounds: the machine is a shared 2-core CPU.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from planner_testkit import Peer, stop_process, wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "engines"))
from llama_server_kit import LlamaServer  # noqa: E402

DATA = Path(__file__).with_name("data")
ARMS = ("a1", "a2")
OBSERVER = "openai_fleet_observer"
RUN_TIMEOUT = 1500.0


def _config(tmp: Path, urls: list[str]) -> Path:
    cfg = {
        "planner": {"parameters": {
            "engine": "openai", "policy": "timely@b4", "robot_grace_period": 10.0,
            "engine_options": json.dumps({"endpoints": urls, "failover_timeout": 300.0, "retry_max": 5.0}),
            "warmup_skill_sets": ["robot_arm"], "segment_timeout_margin": 300.0}},
        "robot_defaults": {"arm": {"backend": "sim", "exec_mode": "min", "time_scale": 0.5,
                                   "skill_set": "robot_arm"}},
        "robots": [{"agent": a, "type": "arm"} for a in ARMS],
        "timemodel": {"enabled": False},
        "recorder": {"enabled": False},
        "workload": {"enabled": True, "parameters": {
            "workload": str(DATA / "openai_arms.yaml"), "exit_when_done": True, "start_delay": 1.0,
            "discovery_timeout": 900.0, "completion_timeout": 900.0, "wait_for_nodes": [f"/{OBSERVER}"]}},
    }
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.mark.ros
@pytest.mark.slow
def test_fleet_on_two_llama_servers_survives_losing_one(tmp_path: Path):
    a, b = LlamaServer(tmp_path), LlamaServer(tmp_path)
    peer = Peer(name=OBSERVER, watch_agents=ARMS)
    log = tmp_path / "fleet.log"
    proc = None
    try:
        with open(log, "w", encoding="utf-8") as out:
            proc = subprocess.Popen([sys.executable, "-m", "timely_llm_ros.fleet", str(_config(tmp_path, [a.url, b.url]))],
                                    env=dict(os.environ), stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True)
        peer.watch_tasks()
        wait_for(lambda: any(peer.segments.values()), RUN_TIMEOUT / 2, "the first segment", period=0.2,
                 procs=(proc,))
        # requests b served so far, beyond the skill-prompt warm-up of its 2 slots and the planner's
        # one warm-up generation: b held a task's generation when it died
        b_used = b.log.read_text().count("launch_slot_") > 3
        b.kill()
        proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        stop_process(proc, timeout=60)
        pytest.fail(f"the fleet did not finish within {RUN_TIMEOUT:.0f} s:\n{log.read_text()[-8000:]}")
    finally:
        peer.close()
        a.stop()
        b.stop()
    text = log.read_text(encoding="utf-8", errors="replace")
    assert proc.returncode == 0, text[-8000:]
    task_ids = [m.task_id for _, m in peer.tasks]
    assert len(task_ids) == 4, text[-4000:]
    finals = {t: (peer.final_state(t), peer.final(t)) for t in task_ids}
    for t, (state, msg) in finals.items():
        assert state == "COMPLETED" or (state in ("FAILED", "EXPIRED") and msg.reason), (t, state)
    # the other server took over: no task failed because of the engine (a robot may still refuse a bad
    # plan of the 135M model, with its reason — that is the robot's check working, not a lost task)
    reasons = {t: (s, m.reason) for t, (s, m) in finals.items()}
    assert not any(r.startswith("engine error") for _, r in reasons.values()), reasons
    assert any(s == "COMPLETED" for s, _ in reasons.values()), reasons
    # the planner saw b go and moved its generations (b_used), or b's generation had finished already
    assert not b_used or f"replica {b.url} is down" in text, text[-6000:]
