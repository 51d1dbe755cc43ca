"""A secure fleet on a DDS with DDS-Security (issue 27 item 2), when one is available.

Needs a Fast DDS built with security: ``TIMELY_SECURE_FASTDDS=<prefix>`` of
``tools/build_secure_fastdds.py`` (the PyPI wheels' Fast DDS has none; skipped otherwise, with that
reason). ``timely-llm security init`` makes the keystore (openssl), ``timely-llm fleet`` starts
planner, drone_1 and recorder and a workload node, each in its enclave, with
``ROS_SECURITY_ENABLE=true``, ``ROS_SECURITY_STRATEGY=Enforce`` and the loopback DDS profile. Checked:

* the workload's tasks all complete, and the recorder (its own enclave) recorded them;
* an intruder without the keystore, publishing forged tasks and the forged in-order DONE sequence
  all along, receives nothing from the fleet and none of its tasks reaches the fleet (the bag has
  none of them) — what the planner's own checks cannot give: it can read nothing, so it cannot copy
  a nonce;
* drone_1's enclave may publish feedback but may not send segments to drone_2 nor read drone_2's
  segments or the shared feedback topic (other robots' nonces): DDS refuses those endpoints.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from timely_llm_ros.ros.secure_dds import ENV, has_security, preload_env, secure_library

REPO = Path(__file__).resolve().parents[2]
PROBE = Path(__file__).with_name("secure_probe.py")
pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _secure_prefix() -> str:
    prefix = os.environ.get(ENV, "")
    if not prefix:
        pytest.skip(
            f"no Fast DDS with DDS-Security: set {ENV} to a prefix built by tools/build_secure_fastdds.py "
            "(the PyPI wheels' libfastdds.so.3.2 is built without it)"
        )
    lib = secure_library(prefix)
    if not lib.is_file() or not has_security(lib):
        pytest.skip(f"{ENV}={prefix}: {lib} is missing or built without DDS-Security")
    if shutil.which("openssl") is None:
        pytest.skip("the openssl command is not installed (timely-llm security init needs it without sros2)")
    return prefix


def _fleet(tmp: Path) -> Path:
    workload = {
        "name": "secure",
        "tasks": [{"trace": t, "arrival": 0.5 * i, "agent": "r1"} for i, t in enumerate((3, 4, 1))],
    }
    (tmp / "workload.yaml").write_text(yaml.safe_dump(workload))
    cfg = {
        "planner": {
            "parameters": {"engine": "sim", "robot_grace_period": 20.0, "segment_timeout_margin": 60.0}
        },
        "robot_defaults": {"drone": {"backend": "sim", "exec_mode": "min", "time_scale": 0.3}},
        "robots": [{"agent": "drone_1", "type": "drone"}],
        "timemodel": {"enabled": False},
        "recorder": {"enabled": True, "parameters": {"output": str(tmp / "bag")}},
        "workload": {
            "enabled": True,
            "parameters": {
                "workload": str(tmp / "workload.yaml"),
                "exit_when_done": True,
                "start_delay": 3.0,
                "completion_timeout": 120.0,
                "discovery_timeout": 180.0,
            },
        },
        "security": {"enabled": True, "keystore": str(tmp / "keys"), "strategy": "Enforce"},
    }
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _probe_result(out: str) -> dict:
    lines = [ln for ln in out.splitlines() if ln.startswith("PROBE ")]
    assert lines, out[-4000:]
    return json.loads(lines[-1].split(" ", 1)[1])


def test_a_secure_fleet_completes_tasks_and_shuts_out_intruders(tmp_path, subprocess_env):
    prefix = _secure_prefix()
    fleet = _fleet(tmp_path)
    env = dict(subprocess_env, **{ENV: prefix})
    init = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.cli", "security", "init", str(fleet)],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert init.returncode == 0, init.stderr
    intruder = subprocess.Popen(  # no keystore, security off: an unauthenticated participant
        [sys.executable, str(PROBE), "attacker", "60"],
        env=subprocess_env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    run = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.fleet", str(fleet)],
        capture_output=True, text=True, env=env, timeout=400,
    )  # fmt: skip
    log = run.stdout + run.stderr
    assert run.returncode == 0, log[-6000:]
    summary = json.loads(
        [ln for ln in log.splitlines() if ln.startswith("WORKLOAD_SUMMARY ")][-1].split(" ", 1)[1]
    )
    assert summary["final"] == {"COMPLETED": 3} and summary["open"] == 0, summary
    attack = _probe_result(intruder.communicate(timeout=180)[0])
    assert attack["tasks_sent"] > 0 and attack["received"] == {}, attack

    from rosbags.highlevel import AnyReader

    from timely_llm_ros.lrtrace.typestore import make_typestore

    bag = next(p.parent for p in (tmp_path / "bag").rglob("metadata.yaml"))
    with AnyReader([bag], default_typestore=make_typestore()) as reader:
        tasks = [
            reader.deserialize(raw, c.msgtype).task_id
            for c, _, raw in reader.messages()
            if c.topic == "/tasks"
        ]
    assert len(tasks) == 3 and not [t for t in tasks if t.startswith("intruder")], tasks

    robot = preload_env(dict(env, ROS_SECURITY_KEYSTORE=str(tmp_path / "keys")))
    robot.update(ROS_SECURITY_ENABLE="true", ROS_SECURITY_STRATEGY="Enforce")
    wanted = ["pub:/segment_feedback", "pub:/drone_2/skill_segments", "sub:/drone_2/skill_segments"]
    wanted += ["sub:/segment_feedback", "sub:/drone_1/skill_segments"]
    probe = subprocess.run(
        [sys.executable, str(PROBE), "enclave", *wanted, "--ros-args", "--enclave", "/timely_llm_ros/robots/drone_1"],
        capture_output=True, text=True, env=robot, timeout=180,
    )  # fmt: skip
    access = _probe_result(probe.stdout + probe.stderr)
    assert access["pub:/segment_feedback"] == "allowed" and access["sub:/drone_1/skill_segments"] == "allowed"
    for denied in ("pub:/drone_2/skill_segments", "sub:/drone_2/skill_segments", "sub:/segment_feedback"):
        assert access[denied].startswith("denied"), access
