"""The README's example task, as written, completes on the default fleet (config/fleet.yaml).

The ``ros2 topic pub`` command is read from README.md — topic, type, ``-w N`` and the YAML message —
and replayed by an in-process publisher the way ros2cli does it: wait until ``N`` subscriptions of
``/tasks`` have matched, publish once. The fleet runs as OS processes (``timely-llm fleet
config/fleet.yaml --localhost``, the simulated engine). Checked: ``N`` is exactly the number of
``/tasks`` subscribers of that fleet (so ``-w N`` cannot let the planner miss the task), and the task
ends COMPLETED although its instruction is not a reference plan of the simulated engine.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest
import yaml
from planner_testkit import Peer, stop_process, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 120.0
COMPLETED = 5


def readme_pub_command(readme: str) -> tuple[int, str, str, dict]:
    """(-w count, topic, type, message fields) of the README's ``ros2 topic pub`` example."""
    m = re.search(r'ros2 topic pub --once -w (\d+) (\S+) (\S+) "(.*?)"', readme, re.DOTALL)
    assert m, 'README.md has no `ros2 topic pub --once -w N TOPIC TYPE "{...}"` example'
    return int(m.group(1)), m.group(2), m.group(3), yaml.safe_load(m.group(4))


def _fill(msg, fields: dict) -> None:
    for key, value in fields.items():
        if isinstance(value, dict):
            _fill(getattr(msg, key), value)
        else:
            setattr(msg, key, float(value) if isinstance(getattr(msg, key), float) else value)


def test_the_readme_task_completes_on_the_default_fleet(repo_root, tmp_path):
    from timely_llm_ros.msg import Task

    count, topic, msgtype, fields = readme_pub_command((repo_root / "README.md").read_text(encoding="utf-8"))
    assert (topic, msgtype) == ("/tasks", "timely_llm_ros/msg/Task")
    fleet = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "timely_llm_ros.fleet",
            str(repo_root / "config" / "fleet.yaml"),
            "--localhost",
        ],
        cwd=tmp_path,
        env=dict(os.environ),
        stdout=(tmp_path / "fleet.log").open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    fleet.log_path = tmp_path / "fleet.log"
    peer = Peer(name="readme_user")
    try:
        pub = peer.task_pub
        wait_for(
            lambda: pub.get_subscription_count() >= count,
            WAIT,
            f"{count} subscribers of /tasks",
            procs=(fleet,),
        )
        # ... and no more: a larger fleet would need a larger -w (settle long enough to see one)
        settle = time.monotonic() + 3.0
        while time.monotonic() < settle:
            assert pub.get_subscription_count() == count, (
                "README's -w count is below the fleet's /tasks subscribers"
            )
            time.sleep(0.1)
        msg = Task()
        _fill(msg, fields)
        pub.publish(msg)
        agent = fields["agent_id"]

        def final():
            with peer.lock:
                mine = [s for sts in peer.statuses.values() for s in sts if s.agent_id == agent]
            return [s for s in mine if s.state in (1, 5, 6, 7)]

        wait_for(lambda: final(), WAIT, "a final status of the README task", procs=(fleet,))
        assert [s.state for s in final()] == [COMPLETED], [(s.state, s.reason) for s in final()]
    finally:
        peer.close()
        stop_process(fleet, timeout=60)
