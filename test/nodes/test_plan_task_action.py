"""The planner's PlanTask action and cancel, end to end on real DDS.

One planner process (simulated engine in real time) for the module; robots are played by the test
peer ("done": answers at once, "silent": never answers) or — for a cancel mid-execution — a real
drone node process (simulated backend) whose running motion must stop. The action client lives in
the test process. Nothing is timed: waits poll with generous bounds (2 busy cores).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

import pytest
import yaml
from planner_testkit import (
    PLANS,
    Peer,
    log_text,
    make_task,
    start_node,
    stop_process,
    wait_for,
    write_params,
)

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 120.0
LONG = "[A] Fly far forward and back."  # four segments, the first a long motion (generation suspends)
LONG_PLAN = "mf(500);mb(500);mf(500);tp();"
CLIMB = "[A] Climb, turn and take a picture."  # three segments (test/nodes/data/planner_plans.yaml)


def _plans(tmp: Path) -> str:
    path = tmp / "action_plans.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "action-test-plans",
                "tasks": [
                    {
                        "arrival": 0,
                        "agent": "a",
                        "robot_type": "drone",
                        "skill_set": "tello_minispec",
                        "tuf": [1, 1, 1.5],
                        "instruction": LONG,
                        "plan": LONG_PLAN,
                        "exec_times": [["mf", 5.0], ["mb", 5.0], ["tp", 0.001]],
                    },
                ],
            },
            sort_keys=False,
        )
    )
    return str(path)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("plan_task")
    params = write_params(
        tmp / "planner.yaml",
        {
            "sim_plans": ["catalog", PLANS, _plans(tmp)],
            "robot_grace_period": 10.0,
            "journal": "off",
            "segment_timeout_margin": 120.0,
        },
    )
    planner = start_node("planner", dict(os.environ), tmp / "planner.log", params_file=params)
    drone = start_node(
        "drone",
        dict(os.environ),
        tmp / "drone.log",
        namespace="/pt_drone",
        params={"backend": "sim", "exec_mode": "expected"},
    )
    peer = Peer({"pt_done": "done", "pt_silent": "silent"}, name="plan_task_peer", watch_agents=("pt_drone",))
    peer.watch_tasks()
    client = ActionPeer(peer)
    try:
        peer.wait_planner(procs=(planner,))
        wait_for(
            lambda: client.client.server_is_ready(), WAIT, "the plan_task action server", procs=(planner,)
        )
        wait_for(
            lambda: peer.node.count_subscribers("/pt_drone/skill_segments") >= 2,
            WAIT,
            "the drone node",
            procs=(planner, drone),
        )
        yield peer, client, planner, drone
    finally:
        client.close()
        peer.close()
        rc_drone = stop_process(drone)
        rc = stop_process(planner)
    assert rc == 0, log_text(planner)[-3000:]
    assert rc_drone == 0, log_text(drone)[-3000:]


class ActionPeer:
    """A PlanTask action client (and a cancel_task service client) on the peer's node.

    Feedback is read from the action's feedback topic directly: rclpy's ActionClient drops feedback it
    takes after the goal's terminal status (feedback and status are separate topics, and a busy client
    may read the status first), and these tests check every feedback message the planner sent.
    """

    def __init__(self, peer: Peer) -> None:
        from rclpy.action import ActionClient

        from timely_llm_ros.action import PlanTask
        from timely_llm_ros.srv import CancelTask

        self.peer = peer
        self.client = ActionClient(peer.node, PlanTask, "plan_task")
        self.cancel_client = peer.node.create_client(CancelTask, "cancel_task")
        self.feedback: dict[bytes, list] = {}
        self._fb_sub = peer.node.create_subscription(
            PlanTask.Impl.FeedbackMessage, "plan_task/_action/feedback", self._on_feedback, 1000
        )
        peer.executor.wake()

    def _on_feedback(self, msg) -> None:
        with self.peer.lock:
            self.feedback.setdefault(bytes(msg.goal_id.uuid), []).append(msg.feedback)

    def close(self) -> None:
        self.client.destroy()
        self.peer.node.destroy_client(self.cancel_client)
        self.peer.node.destroy_subscription(self._fb_sub)

    def send(self, task):
        """Send a goal; returns (goal handle, that goal's feedback list, filled as it arrives)."""
        from timely_llm_ros.action import PlanTask

        fut = self.client.send_goal_async(PlanTask.Goal(task=task))
        wait_for(fut.done, WAIT, "the goal to be answered")
        handle = fut.result()
        assert handle.accepted
        with self.peer.lock:
            return handle, self.feedback.setdefault(bytes(handle.goal_id.uuid), [])

    def result(self, handle):
        fut = handle.get_result_async()
        wait_for(fut.done, WAIT, "the action result")
        return fut.result()

    def cancel_service(self, task_id: str, reason: str = ""):
        from timely_llm_ros.srv import CancelTask

        wait_for(self.cancel_client.service_is_ready, WAIT, "the cancel_task service")
        fut = self.cancel_client.call_async(CancelTask.Request(task_id=task_id, reason=reason))
        wait_for(fut.done, WAIT, "the cancel_task answer")
        return fut.result()


def _state(msg) -> str:
    from timely_llm_ros.ros import convert

    return convert.status_name(msg)


def _segments(feedback) -> list:
    from timely_llm_ros.action import PlanTask

    return [f.segment[0] for f in feedback if f.kind == PlanTask.Feedback.SEGMENT]


def _cancel_line(planner, task_id: str) -> str:
    match = re.search(rf"task '{task_id}' cancelled: .*", log_text(planner))
    return match.group(0) if match else ""


def test_goal_feedback_with_segments_and_result(graph):
    from action_msgs.msg import GoalStatus

    from timely_llm_ros.action import PlanTask

    peer, client, planner, _ = graph
    handle, feedback = client.send(make_task("pt-ok", "pt_done", CLIMB))
    res = client.result(handle)
    assert res.status == GoalStatus.STATUS_SUCCEEDED
    assert _state(res.result.status) == "COMPLETED" and res.result.status.task_id == "pt-ok"
    assert res.result.status.has_response and res.result.status.response_time > 0
    # feedback and result travel on different topics: the last feedback may come after the result
    wait_for(lambda: len(_segments(feedback)) >= res.result.segments, WAIT, "every segment's feedback")
    wait_for(lambda: _state(feedback[-1].status) == "COMPLETED", WAIT, "the final status feedback")
    # two kinds, no empty half: a STATUS feedback carries no segment, a SEGMENT feedback one segment
    # the robot executes (never the call-less, text-less closing marker)
    for f in feedback:
        assert len(f.segment) == (1 if f.kind == PlanTask.Feedback.SEGMENT else 0), f
    segs = _segments(feedback)
    assert all(s.text.strip() for s in segs)
    # the result counts what the feedback showed: every segment the robot got to execute
    with peer.lock:
        robot_got = [m for m in peer.segments["pt_done"] if m.task_id == "pt-ok"]
    executed = [m.index for m in robot_got if m.text.strip()]
    assert [s.index for s in segs] == executed == list(range(len(segs)))
    assert res.result.segments == len(segs) >= 2
    assert [c.name for s in segs for c in s.calls] == ["mu", "tc", "tp"]
    assert robot_got[-1].final
    states = [_state(f.status) for f in feedback if f.kind == PlanTask.Feedback.STATUS]
    assert states[0] == "ACCEPTED" and states[-1] == "COMPLETED" and "GENERATING" in states
    # the same statuses went to /task_status (one intake for topic and action), and the goal's task
    # was published once on /tasks (robots take its scene from there, the recorder records it) without
    # the planner taking its own copy for a second task
    wait_for(lambda: peer.final_state("pt-ok") == "COMPLETED", WAIT, "the status on task_status")
    with peer.lock:
        assert [m.task_id for _, m in peer.tasks].count("pt-ok") == 1
        assert not any(tid.startswith("pt-ok#dup") for tid in peer.statuses)
    assert peer.states("pt-ok").count("ACCEPTED") == 1


def test_a_task_the_intake_refuses_ends_rejected_with_the_reason(graph):
    from action_msgs.msg import GoalStatus

    _, client, _, _ = graph
    handle, _ = client.send(make_task("pt-bad", "pt_done", skill_set="no_such_set"))
    res = client.result(handle)
    assert res.status == GoalStatus.STATUS_ABORTED
    assert _state(res.result.status) == "REJECTED" and "no_such_set" in res.result.status.reason


def test_an_empty_task_id_is_assigned_and_reported_in_the_result(graph):
    _, client, _, _ = graph
    handle, _ = client.send(make_task("", "pt_done", CLIMB))
    res = client.result(handle)
    assert _state(res.result.status) == "COMPLETED" and res.result.status.task_id.startswith("pt_done-")


def test_cancel_mid_generation_frees_the_kv_and_sends_nothing_more(graph):
    from action_msgs.msg import GoalStatus

    from timely_llm_ros.msg import TraceEvent

    peer, client, planner, _ = graph
    handle, feedback = client.send(make_task("pt-gen", "pt_silent", LONG))
    wait_for(lambda: _segments(feedback), WAIT, "the first segment", procs=(planner,))
    cancel = handle.cancel_goal_async()
    wait_for(cancel.done, WAIT, "the cancel answer")
    assert len(cancel.result().goals_canceling) == 1
    res = client.result(handle)
    assert res.status == GoalStatus.STATUS_CANCELED
    final = res.result.status
    assert _state(final) == "CANCELLED" and "PlanTask action client" in final.reason
    sent = len(peer.segments["pt_silent"])
    assert 1 <= sent < len(LONG_PLAN.split(";")) - 1  # the plan was still being generated
    # the engine holds nothing of it any more (logged by the planner right after the cancel)
    wait_for(lambda: _cancel_line(planner, "pt-gen"), WAIT, "the cancel log line")
    assert "0 generation(s) running, KV tokens running 0, suspended 0" in _cancel_line(planner, "pt-gen")
    # the robot was told (terminal status), the bag's events end with CANCEL, nothing more is sent
    wait_for(lambda: peer.final_state("pt-gen") == "CANCELLED", WAIT, "CANCELLED on task_status")
    wait_for(
        lambda: any(e.kind == TraceEvent.CANCEL for e in peer.events_of("pt-gen")), WAIT, "the CANCEL event"
    )
    time.sleep(3.0)  # long enough for the rest of the plan, had the generation gone on
    assert len(peer.segments["pt_silent"]) == sent


def test_cancel_mid_execution_stops_the_robot(graph):
    from action_msgs.msg import GoalStatus

    from timely_llm_ros.msg import SegmentFeedback

    peer, client, planner, drone = graph
    handle, feedback = client.send(make_task("pt-exec", "pt_drone", LONG))

    def started() -> bool:
        with peer.lock:
            return any(f.task_id == "pt-exec" and f.state == SegmentFeedback.STARTED for f in peer.feedback)

    wait_for(started, WAIT, "the drone to start the first segment", procs=(planner, drone))
    cancel = handle.cancel_goal_async()
    wait_for(cancel.done, WAIT, "the cancel answer")
    res = client.result(handle)
    assert res.status == GoalStatus.STATUS_CANCELED and _state(res.result.status) == "CANCELLED"
    # the drone stops its running motion on the terminal status (mf(500) would take seconds more)
    wait_for(lambda: "running motion stopped" in log_text(drone), WAIT, "the drone to stop", procs=(drone,))
    with peer.lock:
        done = [f for f in peer.feedback if f.task_id == "pt-exec" and f.state == SegmentFeedback.DONE]
    assert not done
    wait_for(lambda: _cancel_line(planner, "pt-exec"), WAIT, "the cancel log line")
    assert "0 generation(s) running, KV tokens running 0, suspended 0" in _cancel_line(planner, "pt-exec")


def test_cancel_task_service_cancels_a_topic_task(graph):
    peer, client, planner, _ = graph
    peer.task_pub.publish(make_task("pt-topic", "pt_silent", CLIMB))
    wait_for(lambda: "ACCEPTED" in peer.states("pt-topic"), WAIT, "the task to be accepted", procs=(planner,))
    answer = client.cancel_service("pt-topic", "operator abort")
    assert answer.ok and not answer.error
    wait_for(lambda: peer.final_state("pt-topic") == "CANCELLED", WAIT, "CANCELLED")
    assert peer.final("pt-topic").reason == "operator abort"
    again = client.cancel_service("pt-topic")
    assert not again.ok and "no open task" in again.error
