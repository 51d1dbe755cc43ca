"""Feedback that follows the robot's own sequence, and dead robots, over real DDS (planner + real
drone nodes as processes).

Before: a forged DONE for segment 0, then 1, then 2 with the right robot id completed an in-flight
3-segment task at once, and the robot aborted its running motion; after kill -9 of a robot its
queued tasks failed one by one, each after its own segment timeout (+17 s, +30 s).
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from planner_testkit import PLANS, Peer, log_text, make_task, start_node, stop_process, wait_for, write_params

pytestmark = [pytest.mark.ros, pytest.mark.slow]
WAIT = 120.0
CLIMB = "[A] Climb, turn and take a picture."  # mu(50); tc(90); tp(); three segments


def _drone(tmp, agent: str, n: int = 0, time_scale: float = 1.0):
    return start_node(
        "drone",
        dict(os.environ),
        tmp / f"{agent}_{n}.log",
        namespace=f"/{agent}",
        params={"backend": "sim", "exec_mode": "min", "time_scale": time_scale, "heartbeat_period": 0.3},
    )


@pytest.fixture()
def planner(tmp_path):
    params = write_params(
        tmp_path / "planner.yaml",
        {
            "sim_plans": ["catalog", PLANS],
            "robot_grace_period": 10.0,
            "segment_timeout_margin": 60.0,
            # DONE no earlier than 2 x the model's minimum after STARTED, with the forger's robot
            # running 3 x slower than the minimum: its own DONEs stay valid, and the replayed early
            # DONE stays early even when a loaded machine delays the forger by seconds.
            "feedback_min_exec_fraction": 2.0,
            "robot_down_timeout": 3.0,
            "agent_queue_depth": 4,
            "journal": "off",
            "warn_period": 0.0,  # every ignored feedback is logged (the assertions read them)
        },
    )
    proc = start_node("planner", dict(os.environ), tmp_path / "planner.log", params_file=params)
    yield proc
    assert stop_process(proc) == 0, log_text(proc)


def test_a_forged_in_order_done_sequence_does_not_complete_a_task(tmp_path, planner):
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.interfaces.mapping import from_stamp
    from timely_llm_ros.ros import convert

    agent = "fg_drone"
    robot = _drone(tmp_path, agent, time_scale=3.0)
    peer = Peer(name="forger", watch_agents=(agent,))  # a participant that reads the fleet's topics
    try:
        peer.wait_planner(procs=(planner,))
        wait_for(
            lambda: peer.feedback_sub.get_publisher_count() >= 2, WAIT, "feedback writers", procs=(robot,)
        )
        peer.task_pub.publish(make_task("fg-1", agent, CLIMB))

        def robot_said(state: str, index: int):
            with peer.lock:
                mine = [f for f in peer.feedback if f.task_id == "fg-1" and f.agent_id == agent]
            return [f for f in mine if f.index == index and convert.FEEDBACK_NAME[f.state] == state]

        wait_for(
            lambda: robot_said(ev.STARTED, 0), WAIT, "the robot starts segment 0", procs=(planner, robot)
        )
        forged_at = time.time()
        for i in range(3):  # 1. blind: no nonce, and a guessed one; in order, right robot id
            peer._send(convert.feedback_to_msg("fg-1", agent, i, ev.DONE, time.time(), 1.0))
            for state in (ev.STARTED, ev.DONE):
                msg = convert.feedback_to_msg("fg-1", agent, i, state, time.time(), 1.0, nonce="0" * 16)
                peer._send(msg)
        # 2. a reader of the topics replays the robot's own nonce of segment 0 with an early DONE
        (started,) = robot_said(ev.STARTED, 0)
        early = convert.feedback_to_msg("fg-1", agent, 0, ev.DONE, time.time(), 5.0, nonce=started.nonce)
        peer._send(early)
        time.sleep(1.0)
        assert peer.final_state("fg-1") is None, (peer.states("fg-1"), log_text(planner))
        wait_for(lambda: peer.final_state("fg-1"), WAIT, "fg-1 final", procs=(planner, robot))
        assert peer.final_state("fg-1") == "COMPLETED", peer.final("fg-1").reason
        for i in range(3):  # completed by the robot's own sequence, every segment executed
            assert robot_said(ev.DONE, i), i
        assert from_stamp(peer.final("fg-1").stamp) > forged_at + 1.0
        text = log_text(planner)
        assert "no nonce" in text and "wrong nonce" in text and "no robot executes it in less than" in text
        assert "running motion stopped" not in log_text(robot)
    finally:
        peer.close()
        stop_process(robot)


def test_a_dead_robot_ends_all_its_tasks_at_once_and_is_used_again_when_back(tmp_path, planner):
    agent = "dd_drone"
    robot = _drone(tmp_path, agent)
    peer = Peer(name="dead_peer")
    try:
        peer.wait_planner(procs=(planner,))
        ids = [f"dd-{i}" for i in range(3)]
        for task_id in ids:
            peer.task_pub.publish(make_task(task_id, agent, CLIMB))
        wait_for(lambda: "EXECUTING" in peer.states("dd-0"), WAIT, "dd-0 executing", procs=(planner, robot))
        assert all(peer.final_state(t) is None for t in ids)
        os.killpg(robot.pid, signal.SIGKILL)
        robot.wait(timeout=30)
        wait_for(lambda: all(peer.final_state(t) for t in ids), WAIT, "final states", procs=(planner,))
        for task_id in ids:  # at once: every task with the robot's down reason, none by a timeout
            assert peer.final_state(task_id) == "FAILED"
            assert f"robot '{agent}' is down: no heartbeat for" in peer.final(task_id).reason
        peer.task_pub.publish(make_task("dd-while-down", agent))
        wait_for(lambda: peer.final_state("dd-while-down"), WAIT, "answer while down", procs=(planner,))
        assert peer.final_state("dd-while-down") == "REJECTED"
        assert "is down" in peer.final("dd-while-down").reason
        robot = _drone(tmp_path, agent, 1)  # the robot comes back: used again
        wait_for(
            lambda: f"robot '{agent}' is back" in log_text(planner), WAIT, "robot back", procs=(planner,)
        )
        peer.task_pub.publish(make_task("dd-back", agent))
        wait_for(lambda: peer.final_state("dd-back"), WAIT, "dd-back final", procs=(planner, robot))
        assert peer.final_state("dd-back") == "COMPLETED", peer.final("dd-back").reason
    finally:
        peer.close()
        stop_process(robot)
