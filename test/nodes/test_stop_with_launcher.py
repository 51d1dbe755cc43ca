"""Nodes stop when their launcher dies, however it died (timely_llm_ros.ros.parent_watch).

Before: ``ros2 launch`` given SIGTERM exited and left every node of the fleet running (launch stops
its nodes on SIGINT only), and a ``timely-llm fleet`` killed with SIGKILL did the same: the planner
kept planning and the robots kept their segments after the operator had stopped the fleet.
Here a launcher is killed with SIGKILL, the harshest case: its nodes must shut down cleanly (the
recorder closes its bag: "bag ... closed"). Timeouts are generous; nothing asserts speed.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from planner_testkit import wait_for

from timely_llm_ros.ros.parent_watch import ENV, watch_parent

WAIT = 90.0


def _gone(pid: int) -> bool:
    """Exited: no such process, or a zombie nobody reaps (an orphan's new parent may not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return True
    return state == "Z"


def _kill_all(pids: list[int]) -> None:
    for pid in pids:  # a node is its own group leader under timely-llm fleet, not under the launcher here
        for kill in (os.killpg, os.kill):
            try:
                kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass


def test_no_variable_means_nothing_to_follow_and_a_bad_one_is_refused():
    assert watch_parent({}) is None
    assert watch_parent({ENV: "  "}) is None
    for bad in ("abc", "-4", "0", "12.5"):
        with pytest.raises(ValueError, match=ENV):
            watch_parent({ENV: bad})


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_launcher_that_is_already_gone_is_reported_and_one_alive_is_not(subprocess_env):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    code = textwrap.dedent(
        f"""
        import os
        from timely_llm_ros.ros.parent_watch import ENV, watch_parent
        print(watch_parent({{ENV: "{dead.pid}"}}), watch_parent({{ENV: str(os.getppid())}}),
              watch_parent({{ENV: str(os.getpid())}}))
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=subprocess_env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(dead.pid), "None", "None"]


@pytest.mark.ros
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_node_whose_launcher_is_killed_shuts_down_cleanly(subprocess_env, tmp_path):
    log = tmp_path / "recorder.log"
    bag = tmp_path / "bag"
    # the launcher: starts the node with its own pid in the variable (as fleet.launch.py does), says
    # the node's pid, then waits to be killed
    launcher_code = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        env = dict(os.environ, {ENV}=str(os.getpid()))
        cmd = [sys.executable, "-m", "timely_llm_ros.nodes.recorder", "--ros-args",
               "-p", "output:={bag}", "-p", "discover:=false"]
        node = subprocess.Popen(cmd, env=env, stdout=open({str(log)!r}, "w"), stderr=subprocess.STDOUT)
        print(node.pid, flush=True)
        time.sleep(3600)
        """
    )
    launcher = subprocess.Popen(
        [sys.executable, "-c", launcher_code], env=subprocess_env, stdout=subprocess.PIPE, text=True
    )
    launcher.log_path = log  # type: ignore[attr-defined]  # wait_for shows it if the launcher dies
    node_pid = int(launcher.stdout.readline())
    try:
        wait_for(lambda: "recording to" in log.read_text(), WAIT, "the recorder to start", procs=(launcher,))
        launcher.kill()
        launcher.wait()
        wait_for(lambda: _gone(node_pid), WAIT, f"the recorder to stop with its launcher (log: {log})")
    finally:
        launcher.kill()
        _kill_all([node_pid])
    text = log.read_text()
    assert f"bag {bag} closed" in text, text
    assert "Traceback" not in text


@pytest.mark.ros
def test_a_node_whose_launcher_died_before_it_started_does_not_start(subprocess_env, tmp_path):
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    env = dict(subprocess_env, **{ENV: str(dead.pid)})
    cmd = [
        sys.executable,
        "-m",
        "timely_llm_ros.nodes.recorder",
        "--ros-args",
        "-p",
        f"output:={tmp_path / 'b'}",
    ]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert f"(pid {dead.pid}) is gone: not starting" in out.stderr
    assert not (tmp_path / "b").exists()
    out = subprocess.run(
        cmd, env=dict(subprocess_env, **{ENV: "abc"}), capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 2 and f"error: {ENV}='abc' is not a process id" in out.stderr, out.stderr


@pytest.mark.ros
@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux only")
def test_a_fleet_killed_outright_takes_every_node_with_it(subprocess_env, tmp_path):
    bag = tmp_path / "bag"
    cfg = {
        "planner": {"parameters": {"engine": "sim", "policy": "timely"}},
        "robot_defaults": {"drone": {"backend": "sim"}},
        "robots": [{"agent": "drone_1", "type": "drone"}],
        "timemodel": {"enabled": True},
        "recorder": {"enabled": True, "parameters": {"output": str(bag), "flush_period": 0.2}},
    }
    path = tmp_path / "fleet.yaml"
    path.write_text(yaml.safe_dump(cfg))
    log = tmp_path / "fleet.log"
    fleet = subprocess.Popen(
        [sys.executable, "-m", "timely_llm_ros.cli", "fleet", str(path)],
        env=subprocess_env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        cwd=tmp_path,
    )
    fleet.log_path = log  # type: ignore[attr-defined]
    pids: list[int] = []
    try:
        started = lambda: re.findall(r"\[fleet\] started .* \(pid (\d+)\)", log.read_text())  # noqa: E731
        wait_for(lambda: len(started()) == 4, WAIT, "four nodes started", procs=(fleet,))
        pids = [int(p) for p in started()]
        wait_for(
            lambda: "planner ready" in log.read_text(), WAIT, "the planner to become active", procs=(fleet,)
        )
        fleet.kill()
        fleet.wait()
        wait_for(lambda: all(_gone(p) for p in pids), WAIT, f"every node to stop with the fleet (log: {log})")
    finally:
        fleet.kill()
        _kill_all(pids)
    text = log.read_text()
    assert f"bag {bag} closed" in text, text
    assert "Traceback" not in text
