"""Arm node over real DDS (separate OS process, sim backend): the drone's contract for arm skill sets."""

from __future__ import annotations

import subprocess
import sys

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

AGENT = "arm_3"


def test_arm_executes_reference_plans_and_refuses_impossible_ones(subprocess_env, tmp_path):
    import robot_testkit as kit

    from timely_llm_ros.core.skills import load_skill_set
    from timely_llm_ros.msg import SegmentFeedback
    from timely_llm_ros.workload.tasks import load_catalog

    variant = load_catalog().get(9).variant("arm_fltrnn")
    sset = load_skill_set("arm_fltrnn")
    segs = sset.split(variant.plan)
    assert len(segs) >= 8  # one per call (and the trailing ';')
    peer = kit.Peer()
    proc = kit.start_node(
        "timely_llm_ros.nodes.arm",
        f"/{AGENT}",
        {"skill_set": "arm_fltrnn", "exec_mode": "sampled", "seed": 3, "time_scale": 0.01},
        subprocess_env,
        tmp_path / "node.log",
    )
    try:
        peer.wait_for_robot(AGENT)
        peer.send_task(AGENT, "stack", variant.scene, "arm_fltrnn", "arm")
        for i, text in enumerate(segs):
            peer.send_segment(AGENT, "stack", i, text, final=i == len(segs) - 1)
        peer.wait_finished("stack", len(segs) - 1)
        peer.send_segment(AGENT, "drop-first", 0, "drop('red_box');", final=True)
        peer.send_segment(AGENT, "drone-plan", 0, "mf(50);", final=True)
        bad = peer.wait_finished("drop-first", 0)
        wrong_language = peer.wait_finished("drone-plan", 0)
    finally:
        rc = kit.stop_node(proc)
        peer.close()
    log = (tmp_path / "node.log").read_text()
    assert rc == 0, log
    done = [f.index for f in peer.feedback if f.task_id == "stack" and f.state == SegmentFeedback.DONE]
    assert done == list(range(len(segs))), log
    assert bad.state == SegmentFeedback.FAILED and "holds nothing" in bad.detail
    assert wrong_language.state == SegmentFeedback.FAILED and "unknown skill 'mf'" in wrong_language.detail


def test_arm_node_refuses_a_drone_skill_set_and_the_tello_backend(subprocess_env):
    for args, message in [
        (["-p", "skill_set:=tello_minispec"], "is for 'drone' robots"),
        (["-p", "backend:=tello"], "must be one of sim"),
    ]:
        res = subprocess.run(
            [sys.executable, "-m", "timely_llm_ros.nodes.arm", "--ros-args", "-r", "__ns:=/arm_1", *args],
            env=subprocess_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert res.returncode == 2 and message in res.stderr, res.stderr


def test_interleaved_segments_of_many_tasks_run_one_task_at_a_time(subprocess_env, tmp_path):
    """Seen in a flood before robots ran one task at a time: segments of different tasks interleaved on the arm and 249 of
    250 tasks failed ("cannot pick 'X': the gripper already holds 'Y'"). Here a misbehaving planner
    (this test) publishes eight pick-and-place plans round-robin, segment by segment, straight to
    the arm: every plan must run whole, one after the other, and every segment succeed."""
    import robot_testkit as kit

    from timely_llm_ros.core.skills import load_skill_set
    from timely_llm_ros.msg import SegmentFeedback

    sset = load_skill_set("robot_arm")
    tasks = [f"t{k}" for k in range(8)]
    plans = {
        t: sset.split(f"sc('o{k}'); gt('o{k}'); pi('o{k}'); sc('bin'); gt('bin'); dr();")
        for k, t in enumerate(tasks)
    }
    n = len(plans["t0"])
    assert n >= 6
    peer = kit.Peer()
    proc = kit.start_node(
        "timely_llm_ros.nodes.arm",
        f"/{AGENT}",
        {"skill_set": "robot_arm", "exec_mode": "min", "time_scale": 0.01, "busy_wait": 120.0},
        subprocess_env,
        tmp_path / "node.log",
    )
    try:
        peer.wait_for_robot(AGENT)
        sent = 0
        for i in range(n):
            for t in tasks:
                peer.send_segment(AGENT, t, i, plans[t][i], final=i == n - 1)
                sent += 1
                if sent % 5 == 0:  # stay within the segment QoS depth (keep-last 10) until acked
                    peer.spin_until(lambda: False, timeout=0.2)
        for t in tasks:
            peer.wait_finished(t, n - 1)
    finally:
        rc = kit.stop_node(proc)
        peer.close()
    log = (tmp_path / "node.log").read_text()
    assert rc == 0, log
    fb = [f for f in peer.feedback if f.task_id in plans]
    failed = [(f.task_id, f.index, f.detail) for f in fb if f.state == SegmentFeedback.FAILED]
    assert not failed, failed
    started = [f.task_id for f in fb if f.state == SegmentFeedback.STARTED]
    blocks = [t for k, t in enumerate(started) if k == 0 or started[k - 1] != t]
    assert sorted(blocks) == tasks and len(started) == n * len(tasks)  # each task one contiguous run
    for t in tasks:
        assert [f.index for f in fb if f.task_id == t and f.state == SegmentFeedback.DONE] == list(range(n))
