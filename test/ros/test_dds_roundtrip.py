"""Every timely_llm_ros interface crosses real DDS between two separate OS processes intact.

One process publishes every message type and serves EstimateExecTime, the other subscribes and
calls the service (ros_dds_peer.py). The timeouts only bound a hung run; correctness never
depends on them (discovery is polled, QoS is reliable + transient-local).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

PEER = Path(__file__).with_name("ros_dds_peer.py")
TIMEOUT_S = 90.0


def _start(role: str, env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, str(PEER), role, "--timeout", str(TIMEOUT_S)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        encoding="utf-8",
        start_new_session=True,
    )


def _finish(proc: subprocess.Popen, timeout: float) -> tuple[int, str]:
    """Wait for ``proc``; on a hang kill its whole process group and report what it printed."""
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        return -9, out
    return proc.returncode, out


def _result(output: str) -> dict:
    lines = [line for line in output.splitlines() if line.startswith("RESULT ")]
    assert lines, f"peer printed no RESULT line; output was:\n{output}"
    return json.loads(lines[-1][len("RESULT ") :])


def test_every_interface_crosses_dds_between_two_processes(subprocess_env):
    pub = _start("pub", subprocess_env)
    try:
        sub = _start("sub", subprocess_env)
        sub_rc, sub_out = _finish(sub, TIMEOUT_S + 30)
    finally:
        if pub.poll() is None:
            os.killpg(pub.pid, signal.SIGINT)
        pub_rc, pub_out = _finish(pub, 30)
    sub_result = _result(sub_out)
    assert sub_rc == 0 and sub_result["ok"], f"subscriber side failed:\n{sub_out}\npublisher said:\n{pub_out}"
    pub_result = _result(pub_out)
    assert pub_rc == 0 and pub_result["ok"], f"publisher side failed:\n{pub_out}"
    assert pub_result["served"] == sub_result["service_calls"] == 2
    assert sub_result["received"] == {
        "tuf": 3,
        "skill_call": 3,
        "task": 2,
        "segment": 2,
        "segment_feedback": 2,
        "task_status": 2,
        "trace_event": 2,
    }
