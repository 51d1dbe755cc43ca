"""An out-of-tree robot end to end: the example package ``examples/rover_robot`` is pip-installed
(into a scratch folder, not the venv) and adds the robot type ``rover`` and its skill set without any
change to timely_llm_ros; a fleet of one rover runs a task through the package's rclpy action and
service servers and the task ends COMPLETED. Malformed plugins and mappings stop the fleet at
start-up with the file, the field and the reason, before any node starts.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = [pytest.mark.ros, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "rover_robot"


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory) -> dict[str, str]:
    """The environment of a user who installed the example plugin (a real pip install)."""
    site = tmp_path_factory.mktemp("site")
    src = tmp_path_factory.mktemp("src") / "rover_robot"
    shutil.copytree(EXAMPLE, src, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--no-build-isolation",
            "--no-index",
            "--quiet",
            "--target",
            str(site),
            str(src),
        ],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stdout + out.stderr
    assert (site / "rover_robot-0.1.0.dist-info" / "entry_points.txt").is_file()
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), env.get("PYTHONPATH", "")])
    return env


def _fleet(tmp: Path, robots: list, **extra) -> Path:
    cfg = {
        "planner": {
            "parameters": {
                "engine": "sim",
                "sim_plans": ["rover_demo"],
                "robot_grace_period": 20.0,
                "segment_timeout_margin": 30.0,
            }
        },
        "robots": robots,
        "recorder": {"enabled": False},
        **extra,
    }
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def _stop(proc: subprocess.Popen) -> None:
    """SIGINT to the process group, SIGKILL if it does not exit within 30 s."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=30)
    except ProcessLookupError:
        pass
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_a_plugin_robot_runs_a_task_through_its_action_server(plugin_env, tmp_path):
    driver_log = tmp_path / "driver.log"
    with open(driver_log, "w") as out:
        driver = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "rover_robot.driver",
                "--ros-args",
                "-r",
                "__ns:=/rover_1",
                "-p",
                "step_period:=0.1",
            ],
            env=plugin_env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    config = _fleet(
        tmp_path,
        [{"agent": "rover_1", "type": "rover"}],
        workload={
            "enabled": True,
            "parameters": {
                "workload": "rover_demo",
                "exit_when_done": True,
                "start_delay": 2.0,
                "completion_timeout": 120.0,
                "discovery_timeout": 120.0,
            },
        },
    )
    try:
        fleet = subprocess.run(
            [sys.executable, "-m", "timely_llm_ros.fleet", str(config)],
            env=plugin_env,
            capture_output=True,
            text=True,
            timeout=300,
        )
    finally:
        _stop(driver)
    log = fleet.stdout + fleet.stderr
    assert fleet.returncode == 0, log[-6000:]
    summary = json.loads(re.search(r"WORKLOAD_SUMMARY (\{.*\})", log).group(1))
    assert summary["final"] == {"COMPLETED": 1}, log[-6000:]
    assert "backend ros, skill set rover_drive" in log
    driver_text = driver_log.read_text()
    # the plan light(True); drive(3); light(False); reached the rover's own servers, in order
    assert re.search(r"light on.*drove 3 step\(s\).*light off", driver_text, re.S), driver_text


@pytest.mark.parametrize(
    "robot,fragment",
    [
        ({"agent": "r1", "type": "hovercraft"}, "robots[0].type must be a robot type (arm, drone, rover"),
        (
            {"agent": "r1", "type": "no_such_module:ROBOT"},
            "robots[0].type: robot type 'no_such_module:ROBOT': cannot load 'no_such_module:ROBOT': "
            "ModuleNotFoundError",
        ),
        (
            {"agent": "r1", "type": "rover_robot:CONFIG_DIR"},
            "is a str, expected a timely_llm_ros.robots.plugins.RobotType",
        ),
        (
            {"agent": "r1", "type": "rover", "parameters": {"backend": "sim"}},
            "backend 'sim' is not one of robot type 'rover''s backends (ros)",
        ),
        (
            {"agent": "r1", "type": "drone", "parameters": {"backend": "ros"}},
            "tello_minispec.yaml: skill set 'tello_minispec' has no 'backends: ros:' section",
        ),
        ({"agent": "r1", "type": "rover", "parameters": {"skill_set": "robot_arm"}}, "skill set 'robot_arm'"),
    ],
)
def test_bad_plugins_and_mappings_stop_the_fleet_before_it_starts(plugin_env, tmp_path, robot, fragment):
    out = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.fleet", str(_fleet(tmp_path, [robot]))],
        env=plugin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and fragment in out.stderr, out.stderr
    assert "[fleet] started" not in out.stdout


def test_an_overlay_skill_set_with_a_broken_mapping_is_named_at_start_up(plugin_env, tmp_path):
    """A user overrides the plugin's skill set from their own config directory (fleet config_path)."""
    mine = tmp_path / "my_config" / "skills"
    mine.mkdir(parents=True)
    doc = yaml.safe_load((EXAMPLE / "rover_robot/config/skills/rover_drive.yaml").read_text())
    doc["backends"]["ros"]["skills"]["drive"]["goal"] = {"order": "$speed"}
    (mine / "rover_drive.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    config = _fleet(tmp_path, [{"agent": "rover_1", "type": "rover"}], config_path=["my_config"])
    out = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.fleet", str(config)],
        env=plugin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, out.stderr
    assert (
        f"{mine / 'rover_drive.yaml'}: backends.ros.skills.drive.goal.order: 'speed' is not an "
        "argument of skill 'drive' (arguments: steps)"
    ) in out.stderr
    dry = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.fleet", str(config), "--dry-run"],
        env=plugin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert dry.returncode == 2  # the dry run checks as much as a real start


def test_the_generic_node_refuses_an_unknown_type_with_the_known_ones(plugin_env):
    out = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.nodes.robot", "submarine", "--ros-args", "-r", "__ns:=/s1"],
        env=plugin_env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2 and "unknown robot type 'submarine'; known: arm, drone, rover" in out.stderr
