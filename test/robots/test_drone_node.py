"""Drone node over real DDS (separate OS process, sim backend): order, feedback, failures, shutdown."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]

AGENT = "drone_7"


@pytest.fixture
def kit():
    import robot_testkit

    return robot_testkit


@pytest.fixture
def peer(kit):
    p = kit.Peer()
    yield p
    p.close()


def _states(peer, task_id):
    from timely_llm_ros.msg import SegmentFeedback

    names = {SegmentFeedback.STARTED: "S", SegmentFeedback.DONE: "D", SegmentFeedback.FAILED: "F"}
    return [(f.index, names[f.state]) for f in peer.feedback if f.task_id == task_id and f.state in names]


def test_segments_run_in_order_with_feedback_and_answers_from_the_task_scene(
    kit, peer, subprocess_env, tmp_path
):
    from timely_llm_ros.core.skills import load_skill_set
    from timely_llm_ros.msg import SegmentFeedback, TaskStatus

    proc = kit.start_node(
        "timely_llm_ros.nodes.drone",
        f"/{AGENT}",
        {"exec_mode": "min", "time_scale": 0.02},
        subprocess_env,
        tmp_path / "node.log",
    )
    try:
        peer.wait_for_robot(AGENT)
        sset = load_skill_set("tello_minispec")
        scan = sset.split("?s('cat')==True{g('cat');_1=ox('cat');l(_1)}->False")
        moves = sset.split("mf(50);tc(90);mu(30)")
        peer.send_task(AGENT, "scan", scene="[cat x:0.48 y:0.55 width:0.2 height:0.4]")
        # interleave the two tasks' segments: they run one task after the other, each by index
        for i in range(max(len(scan), len(moves))):
            if i < len(scan):
                peer.send_segment(AGENT, "scan", i, scan[i], final=i == len(scan) - 1)
            if i < len(moves):
                peer.send_segment(AGENT, "moves", i, moves[i], final=i == len(moves) - 1)
        last_scan = peer.wait_finished("scan", len(scan) - 1)
        peer.wait_finished("moves", len(moves) - 1)
        # bad input, each answered with FAILED and a reason (bursts stay within the QoS depth of 10:
        # a reliable keep-last writer drops samples beyond it that are not yet acknowledged)
        peer.send_segment(AGENT, "bad", 0, "mf(800)", final=True)
        peer.send_segment(AGENT, "foreign", 0, "tp", final=True, agent_field="drone_9")
        peer.send_segment(AGENT, "bad", 1, "tp", final=True)
        peer.send_segment(AGENT, "gone", 0, "mf(20);")
        peer.wait_finished("gone", 0)
        peer.send_status(AGENT, "gone", TaskStatus.EXPIRED, "utility below zero")
        peer.spin_until(lambda: False, timeout=0.5)  # let the status reach the node before the next segment
        peer.send_segment(AGENT, "gone", 1, "mf(20)", final=True)
        failures = {
            (t, i): peer.wait_finished(t, i) for t, i in [("bad", 0), ("foreign", 0), ("bad", 1), ("gone", 1)]
        }
    finally:
        rc = kit.stop_node(proc)
    log = (tmp_path / "node.log").read_text()
    assert rc == 0, log
    for task, segs in (("scan", scan), ("moves", moves)):
        assert _states(peer, task) == [(i, s) for i in range(len(segs)) for s in "SD"], log
    feedback = [f for f in peer.feedback if not f.task_id.startswith("probe-")]  # late probe answers
    started = [f.task_id for f in feedback if f.state == SegmentFeedback.STARTED]
    assert started[: len(scan) + len(moves)] == ["scan"] * len(scan) + ["moves"] * len(moves)
    # one robot executes one segment at a time: every STARTED follows the previous DONE/FAILED
    running: set[tuple[str, int]] = set()
    for f in feedback:  # (rejections come without STARTED: they never ran)
        if f.state == SegmentFeedback.PROGRESS:
            assert (f.task_id, f.index) in running
        elif f.state == SegmentFeedback.STARTED:
            running.add((f.task_id, f.index))
        else:
            running.discard((f.task_id, f.index))
        assert len(running) <= 1
    detail = " | ".join(f.detail for f in peer.feedback if f.task_id == "scan")
    assert "s('cat')=True" in detail and "log: 0.48" in detail and last_scan.detail == "->False"
    assert all(f.duration >= 0 and f.agent_id == AGENT for f in peer.feedback)
    assert "above the maximum 500" in peer.finished("bad", 0).detail
    assert "arrived at robot 'drone_7'" in peer.finished("foreign", 0).detail
    assert "task 'bad' is over on this robot" in peer.finished("bad", 1).detail
    assert "above the maximum 500" in peer.finished("bad", 1).detail
    assert "planner marked the task EXPIRED: utility below zero" in peer.finished("gone", 1).detail
    assert all(f.state == SegmentFeedback.FAILED for f in failures.values())


def test_sigterm_interrupts_the_running_segment_and_reports_the_queued_ones(
    kit, peer, subprocess_env, tmp_path
):
    from timely_llm_ros.msg import SegmentFeedback

    proc = kit.start_node(
        "timely_llm_ros.nodes.drone",
        f"/{AGENT}",
        {"exec_mode": "min", "time_scale": 1.0},
        subprocess_env,
        tmp_path / "node.log",
    )
    try:
        peer.wait_for_robot(AGENT)
        peer.send_segment(AGENT, "long", 0, "mf(500);")  # 5.4 s modelled
        peer.send_segment(AGENT, "long", 1, "mf(500)", final=True)
        assert peer.spin_until(
            lambda: any(f.task_id == "long" and f.state == SegmentFeedback.STARTED for f in peer.feedback)
        )
    finally:
        rc = kit.stop_node(proc, signal.SIGTERM)
    peer.spin_until(lambda: peer.finished("long", 1) is not None, timeout=10)
    log = (tmp_path / "node.log").read_text()
    assert rc == 0, log
    assert "shutting down" in peer.finished("long", 0).detail
    assert "shut down before executing" in peer.finished("long", 1).detail


@pytest.mark.parametrize(
    "args, message",
    [
        ([], "must run in its agent's namespace"),
        (["-r", "__ns:=/drone_1", "-p", "skill_set:=robot_arm"], "is for 'arm' robots"),
        (["-r", "__ns:=/drone_1", "-p", "agent_id:=drone_2"], "they must agree"),
        (["-r", "__ns:=/drone_1", "-p", "scene:='[apple:0.4]'"], "does not start with an object name"),
    ],
)
def test_bad_start_up_configuration_exits_2_with_the_reason(subprocess_env, args, message):
    res = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.nodes.drone", "--ros-args", *args],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_tello_backend_node_flies_the_segments_and_lands_on_sigterm(netns_pair, subprocess_env, tmp_path):
    """The whole drone node with backend tello, against the emulator, inside the namespace pair."""
    pytest.importorskip("djitellopy", reason="backend tello needs djitellopy==2.5.0")
    import json
    import os
    import select
    from pathlib import Path

    here = Path(__file__).resolve().parent
    emu_log = tmp_path / "emu.jsonl"
    emu = netns_pair.popen(
        netns_pair.drone_ns,
        [
            sys.executable,
            "-m",
            "timely_llm_ros.robots.tello_emulator",
            "--host",
            "192.168.10.1",
            "--time-scale",
            "0.05",
            "--log",
            str(emu_log),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    ready, _, _ = select.select([emu.stdout], [], [], 30)
    assert ready and emu.stdout.readline().strip() == "READY"
    node_log = (tmp_path / "node.log").open("w")
    node = netns_pair.popen(
        netns_pair.host_ns,
        [
            sys.executable,
            "-m",
            "timely_llm_ros.nodes.drone",
            "--ros-args",
            "-r",
            f"__ns:=/{AGENT}",
            "-p",
            "backend:=tello",
            "-p",
            "keepalive_period:=1.0",
        ],
        env=subprocess_env,
        stdout=node_log,
        stderr=subprocess.STDOUT,
    )
    spec = {
        "agent": AGENT,
        "segments": [
            ["t", 0, "mf(60);", False],
            ["t", 1, "tc(45);", False],
            ["t", 2, "?iv('cat')==True{", True],
        ],
    }
    peer = netns_pair.popen(
        netns_pair.host_ns,
        [sys.executable, str(here / "ros_feedback_peer.py"), json.dumps(spec)],
        env=subprocess_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = peer.communicate(timeout=120)
    os.killpg(node.pid, signal.SIGTERM)
    rc = node.wait(timeout=60)
    log = (tmp_path / "node.log").read_text()
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"peer output:\n{out}\nnode log:\n{log}"
    final = {
        (t, i): (state, detail)
        for t, i, state, detail in json.loads(lines[-1][7:])["feedback"]
        if state != "STARTED"
    }
    assert final[("t", 0)][0] == "DONE" and final[("t", 1)][0] == "DONE", final
    assert final[("t", 2)][0] == "FAILED" and "perception" in final[("t", 2)][1]
    assert rc == 0, log
    cmds = [json.loads(ln)["cmd"] for ln in emu_log.read_text().splitlines() if '"rx"' in ln]
    assert [c for c in cmds if c != "battery?"] == ["command", "takeoff", "forward 60", "cw 45", "land"], cmds


def test_heartbeats_busy_refusal_and_a_planner_timeout_that_stops_the_motion(
    kit, peer, subprocess_env, tmp_path
):
    """Liveness and one task at a time on the drone: PROGRESS while a long segment runs; a segment
    of another task held past busy_wait fails "robot busy"; the planner's FAILED status (its segment
    timeout) interrupts the running motion and fails the task's queued segment; then the drone is free."""
    from timely_llm_ros.msg import SegmentFeedback, TaskStatus

    proc = kit.start_node(
        "timely_llm_ros.nodes.drone",
        f"/{AGENT}",
        {"exec_mode": "min", "time_scale": 1.0, "busy_wait": 2.0, "heartbeat_period": 0.3},
        subprocess_env,
        tmp_path / "node.log",
    )

    def fb(task, state):
        return [f for f in peer.feedback if f.task_id == task and f.state == state]

    try:
        peer.wait_for_robot(AGENT)
        peer.send_segment(AGENT, "long", 0, "d(10);")  # hovers 10 s
        peer.send_segment(AGENT, "long", 1, "tp", final=True)
        assert peer.spin_until(lambda: len(fb("long", SegmentFeedback.PROGRESS)) >= 2)
        peer.send_segment(AGENT, "other", 0, "tp", final=True)
        busy = peer.wait_finished("other", 0)
        peer.send_status(AGENT, "long", TaskStatus.FAILED, "segment 0 timed out")
        stopped = peer.wait_finished("long", 0)
        queued = peer.wait_finished("long", 1)
        peer.send_segment(AGENT, "after", 0, "tp", final=True)
        after = peer.wait_finished("after", 0)
    finally:
        rc = kit.stop_node(proc)
    log = (tmp_path / "node.log").read_text()
    assert rc == 0, log
    beats = fb("long", SegmentFeedback.PROGRESS)
    assert all(b.index == 0 for b in beats) and [b.duration for b in beats] == sorted(
        b.duration for b in beats
    )
    assert busy.state == SegmentFeedback.FAILED and "robot busy with task 'long'" in busy.detail
    assert not fb("other", SegmentFeedback.STARTED)  # never ran
    assert peer.feedback.index(busy) < peer.feedback.index(stopped)  # refused while 'long' still ran
    assert stopped.state == SegmentFeedback.FAILED
    assert "interrupted: the planner marked the task FAILED: segment 0 timed out" in stopped.detail
    assert queued.state == SegmentFeedback.FAILED and "is over on this robot" in queued.detail
    assert not fb("long", SegmentFeedback.DONE)
    assert after.state == SegmentFeedback.DONE
    # the heartbeats stop with the segment
    last = max(peer.feedback.index(b) for b in beats)
    assert last < peer.feedback.index(stopped)
