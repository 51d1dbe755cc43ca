"""Execution-time model node as an OS process: EstimateExecTime for every robot type (answers and
errors), per-skill statistics from SegmentFeedback, and the refitted model file written at shutdown
(loadable by the core's model loader, measured skills refitted, the rest unchanged).
"""

from __future__ import annotations

import os
import time

import pytest
import yaml
from planner_testkit import Peer, log_text, start_node, stop_process, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow]
WAIT = 60.0


def test_fit_line_needs_two_distinct_arguments():
    from timely_llm_ros.core.exectime_fit import fit_line

    assert fit_line([100, 300], [2.0, 3.0]) == pytest.approx((0.005, 1.5))
    assert fit_line([100, 100], [2.0, 3.0]) is None


@pytest.fixture
def timemodel(tmp_path):
    refit = tmp_path / "refit"
    proc = start_node(
        "timemodel",
        dict(os.environ),
        tmp_path / "timemodel.log",
        params={"refit_output": str(refit), "min_samples": 2, "discovery_period": 0.2, "refit_interval": 0.3},
    )
    peer = Peer(name="tm_peer")
    try:
        yield peer, proc, refit
    finally:
        peer.close()
        stop_process(proc)


def _call(peer, client, robot_type, text, skill_set=""):
    from timely_llm_ros.srv import EstimateExecTime

    fut = client.call_async(
        EstimateExecTime.Request(robot_type=robot_type, skill_set=skill_set, segment_text=text)
    )
    wait_for(fut.done, WAIT, f"EstimateExecTime({robot_type!r}, {text!r})")
    return fut.result()


def test_estimates_for_every_robot_type_and_clear_errors(timemodel):
    from timely_llm_ros.core.exectime import load_exec_time_model
    from timely_llm_ros.core.skills import load_skill_set
    from timely_llm_ros.srv import EstimateExecTime

    peer, proc, _ = timemodel
    client = peer.node.create_client(EstimateExecTime, "/estimate_exec_time")
    wait_for(client.service_is_ready, WAIT, "the time-model service", procs=(proc,))
    model = load_exec_time_model()
    cases = [
        ("drone", "tello_minispec", "mf(100);tc(90);"),
        ("drone", "", "s('cat')"),
        ("arm", "arm_fltrnn", "take('pencil');"),
        ("arm", "robot_arm", "sc('box');gt('box');"),
        ("chatbot", "chatbot_sentence", "Hello there, how are you today?"),
    ]
    for rtype, sset, text in cases:
        res = _call(peer, client, rtype, text, sset)
        assert res.ok, (rtype, text, res.error)
        est = model.estimate(rtype, load_skill_set(sset or "tello_minispec").parse(text))
        got = (res.minimum, res.expected, res.maximum)
        assert got == pytest.approx((est.minimum, est.expected, est.maximum))
        assert res.minimum <= res.expected <= res.maximum
    errors = [
        ("boat", "", "mf(100);", "no execution-time model for robot type 'boat'"),
        ("drone", "", "mf(800);", "does not parse"),
        ("drone", "arm_fltrnn", "take('x');", "is for 'arm' robots"),
        ("drone", "no_set", "mf(100);", "no_set"),
        ("drone", "", "   ", "segment_text is empty"),
    ]
    for rtype, sset, text, needle in errors:
        res = _call(peer, client, rtype, text, sset)
        assert not res.ok and needle in res.error, (rtype, text, res.error)
    assert proc.poll() is None, log_text(proc)


def test_measured_feedback_is_refitted_into_a_loadable_model(timemodel):
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.core.exectime import load_exec_time_file
    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.msg import Segment, SkillCall, Task
    from timely_llm_ros.ros import convert, qos

    peer, proc, refit = timemodel
    seg_pub = peer.node.create_publisher(Segment, topics.segment_topic("tm_drone"), qos.segment_qos(None))
    wait_for(
        lambda: (
            seg_pub.get_subscription_count() > 0
            and peer.task_pub.get_subscription_count() > 0
            and peer.fb_pub.get_subscription_count() > 0
        ),
        WAIT,
        "the time model to subscribe",
        procs=(proc,),
    )
    peer.task_pub.publish(
        Task(
            task_id="tm-1",
            agent_id="tm_drone",
            robot_type="drone",
            skill_set="tello_minispec",
            instruction="x",
        )
    )
    measured = [
        ([("mf", ["100"])], 2.5),
        ([("mf", ["300"])], 3.5),
        ([("mf", ["100"])], 2.5),
        ([("tp", [])], 0.01),
        ([("tp", [])], 0.03),
        ([("tc", ["90"])], 2.0),
        ([("mf", ["50"]), ("tp", [])], 2.0),
    ]
    # feedback first: DDS does not order messages across topics, the node must wait for the rest
    for i, (_, duration) in enumerate(measured):
        peer.fb_pub.publish(convert.feedback_to_msg("tm-1", "tm_drone", i, ev.DONE, time.time(), duration))
    for i, (calls, _) in enumerate(measured):
        msg = Segment(
            task_id="tm-1",
            agent_id="tm_drone",
            index=i,
            text="",
            calls=[SkillCall(name=n, args=a, source=f"{n}({','.join(a)})") for n, a in calls],
        )
        msg.exec_time_expected = 2.0
        seg_pub.publish(msg)
    peer.task_pub.publish(
        Task(
            task_id="tm-1",
            agent_id="tm_drone",
            robot_type="drone",
            skill_set="tello_minispec",
            instruction="x",
        )
    )
    path = refit / "drone.yaml"

    def all_measured() -> bool:  # the node rewrites the file every refit_interval
        try:
            ratio = yaml.safe_load(path.read_text())["refit"]["segment_ratio_measured_over_expected"]
        except (OSError, KeyError, TypeError):
            return False
        return bool(ratio) and ratio["n"] == len(measured)

    wait_for(all_measured, WAIT, "all seven measurements in the refitted model", procs=(proc,))
    assert stop_process(proc) == 0, log_text(proc)
    path = refit / "drone.yaml"
    assert path.is_file(), log_text(proc)
    robot_type, skills = load_exec_time_file(path)  # the core can load what the node wrote
    assert robot_type == "drone"
    data = yaml.safe_load(path.read_text())
    mf = data["skills"]["mf"]
    # mf measured at 100 cm (2.5 s, twice) and 300 cm (3.5 s): least-squares line 0.005 v + 2.0
    assert mf["model"] == "poly" and mf["coef"] == pytest.approx([0.005, 2.0])
    assert mf["arg_range"] == [20, 500]
    assert data["skills"]["tp"] == {"model": "samples", "samples": [0.01, 0.03]}
    # tc: one sample only (min_samples 2), the configured model stays
    assert data["skills"]["tc"]["model"] == "poly" and data["skills"]["tc"]["coef"] == [0.0165, 0.784]
    assert data["skills"]["s"]["model"] == "iterations"  # never measured: configured model kept
    assert data["refit"]["measured"]["mf"]["n"] == 3
    assert data["refit"]["segment_ratio_measured_over_expected"]["n"] == len(measured)
    assert set(skills) >= {"mf", "tp", "tc", "s"}


def test_segment_topics_of_rejected_agents_leave_no_subscription_behind(tmp_path):
    """A task for an agent without a robot makes the planner create /<agent>/skill_segments, then
    remove it; the time model subscribed to it must let go too (else every bad agent id stays in the
    graph, held by the time model), while a robot's topic stays watched without a publisher."""
    from timely_llm_ros.msg import Segment
    from timely_llm_ros.ros import qos

    proc = start_node(
        "timemodel",
        dict(os.environ),
        tmp_path / "timemodel.log",
        params={"discovery_period": 0.2, "unwatch_after": 0.5},
    )
    peer = Peer({"tm_robot": "silent"}, name="tm_unwatch_peer")
    node = peer.node
    try:
        ghost = node.create_publisher(Segment, "/tm_ghost/skill_segments", qos.segment_qos())
        robot = node.create_publisher(Segment, "/tm_robot/skill_segments", qos.segment_qos())
        wait_for(
            lambda: ghost.get_subscription_count() == 1,
            WAIT,
            "the time model on the ghost topic",
            procs=(proc,),
        )
        wait_for(lambda: robot.get_subscription_count() == 2, WAIT, "robot + time model on the robot topic")
        node.destroy_publisher(ghost)  # the planner dropped its idle publisher
        node.destroy_publisher(robot)

        def ghost_gone() -> bool:
            return "/tm_ghost/skill_segments" not in dict(node.get_topic_names_and_types())

        wait_for(ghost_gone, WAIT, "the time model to unsubscribe the ghost topic", procs=(proc,))
        time.sleep(1.0)  # twice unwatch_after: the robot's topic must still be watched
        assert node.count_subscribers("/tm_robot/skill_segments") == 2
    finally:
        peer.close()
        rc = stop_process(proc)
    assert rc == 0, log_text(proc)[-3000:]
