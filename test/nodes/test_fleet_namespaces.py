"""Two fleets on one ROS domain: every name is relative, ``timely-llm fleet
--namespace`` puts a fleet's planner in ``/<ns>`` and its robots in ``/<ns>/<agent>``. Both fleets
here have a robot with the SAME agent id; a task sent to one fleet is planned and executed there
and the other fleet never hears of it.

Two ``timely-llm fleet`` processes (planner with the simulated engine + one simulated drone each);
the test peer publishes tasks and watches both fleets' statuses. Nothing is timed.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from planner_testkit import PLANS, make_task, stop_process, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 120.0
FLEETS = ("fleet_a", "fleet_b")


def _fleet(tmp, ns: str) -> subprocess.Popen:
    cfg = {
        "planner": {"parameters": {"engine": "sim", "sim_plans": ["catalog", PLANS], "journal": "off"}},
        "robots": [
            {"agent": "drone_1", "type": "drone", "parameters": {"backend": "sim", "time_scale": 0.05}}
        ],
    }
    path = tmp / f"{ns}.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    log = open(tmp / f"{ns}.log", "w", encoding="utf-8")  # noqa: SIM115 - kept open for the child
    proc = subprocess.Popen(
        [sys.executable, "-m", "timely_llm_ros.fleet", str(path), "--namespace", ns],
        env=dict(os.environ),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    proc.log_path = tmp / f"{ns}.log"  # type: ignore[attr-defined]
    log.close()
    return proc


def test_two_namespaced_fleets_on_one_domain_do_not_see_each_others_tasks(tmp_path):
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.msg import Task, TaskStatus
    from timely_llm_ros.ros import convert, qos

    procs = [_fleet(tmp_path, ns) for ns in FLEETS]
    ctx = rclpy.Context()
    rclpy.init(context=ctx, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("ns_peer", context=ctx)
    lock = threading.Lock()
    seen: dict[str, list] = {ns: [] for ns in FLEETS}
    pubs = {}
    for ns in FLEETS:

        def on_status(msg, ns=ns) -> None:
            with lock:
                seen[ns].append((msg.task_id, convert.status_name(msg)))

        node.create_subscription(
            TaskStatus, topics.join(f"/{ns}", topics.TASK_STATUS), on_status, qos.status_qos()
        )
        pubs[ns] = node.create_publisher(Task, topics.join(f"/{ns}", topics.TASKS), qos.task_qos())
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    stop = threading.Event()
    spinner = threading.Thread(
        target=lambda: [executor.spin_once(timeout_sec=0.05) for _ in iter(stop.is_set, True)], daemon=True
    )
    spinner.start()
    try:
        # each fleet's planner listens on its own /<ns>/tasks and its drone on /<ns>/drone_1/skill_segments
        wait_for(
            lambda: (
                all(pubs[ns].get_subscription_count() >= 2 for ns in FLEETS)
                and all(node.count_subscribers(f"/{ns}/drone_1/skill_segments") >= 1 for ns in FLEETS)
                and all(node.count_publishers(f"/{ns}/task_status") >= 1 for ns in FLEETS)
            ),
            WAIT,
            "both fleets to be discovered",
            procs=tuple(procs),
        )
        assert node.count_subscribers("/tasks") == 0  # nothing of either fleet at the root
        for ns in FLEETS:
            pubs[ns].publish(make_task(f"{ns}-t1", "drone_1", "[A] Climb, turn and take a picture."))

        def final(ns: str, task_id: str):
            with lock:
                return next(
                    (s for t, s in seen[ns] if t == task_id and s in ("COMPLETED", "FAILED", "REJECTED")),
                    None,
                )

        wait_for(
            lambda: all(final(ns, f"{ns}-t1") for ns in FLEETS), WAIT, "both tasks to end", procs=tuple(procs)
        )
        for ns in FLEETS:
            assert final(ns, f"{ns}-t1") == "COMPLETED", seen[ns]
            other = FLEETS[1 - FLEETS.index(ns)]
            with lock:
                assert all(t.startswith(ns) for t, _ in seen[ns]), seen[ns]  # never the other fleet's task
            assert final(ns, f"{other}-t1") is None
    finally:
        stop.set()
        spinner.join(timeout=10)
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=ctx)
        codes = [stop_process(p, timeout=60) for p in procs]
    assert codes == [0, 0], [Path(p.log_path).read_text()[-3000:] for p in procs]
    for ns, p in zip(FLEETS, procs):  # the fleet drove its managed planner through the transitions
        text = Path(p.log_path).read_text()
        assert (
            f"[lifecycle] /{ns}/planner: configure done" in text and f"/{ns}/planner: activate done" in text
        )


def test_fleet_namespace_in_the_graph():
    from timely_llm_ros.fleet import FleetError, fleet_nodes

    cfg = {
        "robots": [{"agent": "drone_1", "type": "drone"}],
        "workload": {"parameters": {"workload": "wid1"}},
        "recorder": {"enabled": True},
    }
    nodes = {n.role + ":" + n.name: n for n in fleet_nodes(cfg, "fleet_a")}
    assert nodes["planner:planner"].namespace == "fleet_a"
    assert nodes["robot:drone"].namespace == "fleet_a/drone_1"
    assert nodes["planner:planner"].params["agent_types"] == ["drone_1:drone"]
    assert nodes["recorder:recorder"].params["agents"] == ["drone_1"]
    assert nodes["workload:workload"].params["planner_node"] == "/fleet_a/planner"
    assert nodes["workload:workload"].params["wait_for_nodes"] == ["/fleet_a/recorder"]
    assert "__ns:=/fleet_a/drone_1" in nodes["robot:drone"].command(__import__("pathlib").Path("p.yaml"))
    root = {n.role: n for n in fleet_nodes(cfg)}
    assert root["planner"].namespace == "" and root["robot"].namespace == "drone_1"
    with pytest.raises(FleetError, match="namespace"):
        fleet_nodes(cfg, "9bad")
