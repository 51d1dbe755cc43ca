"""Issue 18, finding 1, with real robot nodes: a flood of 250 arm tasks for five arm nodes (separate
processes, the sim backend with its gripper state) never interleaves two plans on one arm, so no
task FAILS with "the gripper already holds ..." (before: 249 of 250 failed).

Checked from an observer in this process: every task gets a final state, none FAILED; on every arm
the feedback of one task is contiguous (the next task's first STARTED comes after the previous task's
last DONE); every segment is executed once, in order. Nothing is timed (generous bounds).
"""

from __future__ import annotations

import os
import time

import pytest
from planner_testkit import Peer, is_closing_marker, start_node, stop_process, wait_for, write_params

pytestmark = [pytest.mark.ros, pytest.mark.slow]

ARMS = [f"fl_arm{i}" for i in range(5)]
PER_ARM = 50


def test_a_flood_of_250_arm_tasks_never_interleaves_on_a_robot(tmp_path):
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.ros import convert
    from timely_llm_ros.workload.tasks import load_catalog

    env = dict(os.environ)
    planner = start_node(
        "planner",
        env,
        tmp_path / "planner.log",
        params_file=write_params(
            tmp_path / "planner.yaml",
            {
                "robot_grace_period": 60.0,
                "agent_queue_depth": PER_ARM + 5,
                "segment_timeout_margin": 120.0,
                "journal": str(tmp_path / "j.journal"),
            },
        ),
    )
    arms = [
        start_node(
            "arm",
            env,
            tmp_path / f"{a}.log",
            name="arm",
            namespace=f"/{a}",
            params={"skill_set": "arm_fltrnn", "exec_mode": "min", "time_scale": 0.01},
        )
        for a in ARMS
    ]
    procs = (planner, *arms)
    peer = Peer(name="flood_observer", watch_agents=tuple(ARMS))
    try:
        peer.wait_planner(procs=procs)
        wait_for(
            lambda: all(peer.node.count_subscribers(f"/{a}/skill_segments") >= 2 for a in ARMS),
            120.0,
            "arm nodes discovered",
            procs=procs,
        )
        variants = [load_catalog().get(i).variant("arm_fltrnn") for i in (9, 10, 11)]
        ids = []
        for i in range(PER_ARM * len(ARMS)):
            v = variants[i % len(variants)]
            from timely_llm_ros.msg import Task, Tuf

            msg = Task(
                task_id=f"fl-{i:03d}",
                agent_id=ARMS[i % len(ARMS)],
                robot_type="arm",
                skill_set="arm_fltrnn",
                instruction=v.instruction,
                scene=v.scene or "",
            )
            msg.tuf = Tuf(ert=1.0, alpha=-2.0, beta=1.0)
            peer.task_pub.publish(msg)
            ids.append(msg.task_id)
            time.sleep(0.004)  # 250 tasks in about one second
        wait_for(
            lambda: all(peer.final_state(t) for t in ids),
            1200.0,
            "a final state for every task",
            period=1.0,
            procs=procs,
        )
        failed = {t: peer.final(t).reason for t in ids if peer.final_state(t) != "COMPLETED"}
        assert not failed, failed
        with peer.lock:
            feedback = [
                (f.agent_id, f.task_id, f.index, convert.FEEDBACK_NAME[f.state]) for f in peer.feedback
            ]
            segments = {
                a: [(s.task_id, s.index) for s in peer.segments[a] if not is_closing_marker(s)] for a in ARMS
            }
        for arm in ARMS:
            mine = [(t, i, s) for a, t, i, s in feedback if a == arm and s in (ev.STARTED, ev.DONE)]
            order = [t for t, _, _ in mine]
            blocks = [t for k, t in enumerate(order) if k == 0 or order[k - 1] != t]
            assert len(blocks) == len(set(blocks)) == PER_ARM, f"{arm}: plans interleaved: {blocks[:20]}"
            # each executable segment executed once, in order (a robot that still answers the text-less
            # closing marker is not this test's concern: the planner ignores that feedback)
            sent = set(segments[arm])
            for t in set(order):
                idx = [i for tt, i, s in mine if tt == t and s == ev.DONE and (t, i) in sent]
                assert idx == list(range(len(idx))) and len(idx) == sum(1 for tt, _ in sent if tt == t)
    finally:
        peer.close()
        for p in reversed(procs):
            stop_process(p)
