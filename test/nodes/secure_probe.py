"""Helper process of test_secure_fleet.py: one DDS participant that tries things and prints JSON.

``attacker SECONDS``: a participant *without* the fleet's keystore (security off) that, for SECONDS,
publishes forged tasks for drone_1 and forged in-order DONE feedback (segments 0..9 of every task
id it could learn, and of guessed ids), and listens to every fleet topic; prints what it received.

``enclave``: a participant started with an enclave (``--ros-args --enclave …``, security env set by
the caller) that tries to open the endpoints named on the command line — ``pub:/topic`` or
``sub:/topic`` — and prints which ones DDS access control allowed.
"""

from __future__ import annotations

import json
import sys
import time

import rclpy
from std_msgs.msg import Header

from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus
from timely_llm_ros.ros import qos
from timely_llm_ros.ros.secure_dds import apply_security

TYPES = {"skill_segments": Segment, "segment_feedback": SegmentFeedback, "tasks": Task}


def _type(topic: str) -> type:
    return TYPES.get(topic.rsplit("/", 1)[-1], Header)


def attacker(seconds: float) -> dict:
    node = rclpy.create_node("intruder")
    got: dict[str, int] = {}
    seen_ids: set[str] = set()

    def count(topic: str):
        def cb(msg) -> None:
            if getattr(msg, "task_id", "").startswith("intruder-") or getattr(msg, "nonce", None) == "":
                return  # its own forgeries, heard back in this participant (they carry no nonce)
            got[topic] = got.get(topic, 0) + 1
            if hasattr(msg, "task_id"):
                seen_ids.add(msg.task_id)

        return cb

    node.create_subscription(TaskStatus, "/task_status", count("/task_status"), qos.status_qos())
    node.create_subscription(
        Segment, "/drone_1/skill_segments", count("/drone_1/skill_segments"), qos.segment_qos()
    )
    node.create_subscription(
        SegmentFeedback, "/segment_feedback", count("/segment_feedback"), qos.feedback_qos()
    )
    node.create_subscription(Task, "/tasks", count("/tasks"), qos.task_qos())
    task_pub = node.create_publisher(Task, "/tasks", qos.task_qos())
    fb_pub = node.create_publisher(SegmentFeedback, "/segment_feedback", qos.feedback_qos())
    sent = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        task = Task(task_id=f"intruder-{sent}", agent_id="drone_1", robot_type="drone")
        task.skill_set, task.instruction = "tello_minispec", "fly into the wall"
        task_pub.publish(task)
        for tid in sorted(seen_ids | {f"secure-{i}" for i in range(8)}):
            for seg in range(10):  # the forged in-order DONE sequence of issue 27
                for state in (SegmentFeedback.STARTED, SegmentFeedback.DONE):
                    fb_pub.publish(SegmentFeedback(task_id=tid, agent_id="drone_1", index=seg, state=state))
        sent += 1
        rclpy.spin_once(node, timeout_sec=0.2)
    return {"received": got, "tasks_sent": sent}


def enclave(wanted: list[str]) -> dict:
    node = rclpy.create_node("drone", namespace="/drone_1", start_parameter_services=False)
    out = {}
    for item in wanted:
        kind, topic = item.split(":", 1)
        try:
            if kind == "pub":
                node.create_publisher(_type(topic), topic, 10)
            else:
                node.create_subscription(_type(topic), topic, lambda _m: None, 10)
            out[item] = "allowed"
        except RuntimeError as exc:  # RCLError: the DDS refused to create the endpoint
            out[item] = f"denied: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
    return out


def main() -> int:
    argv = rclpy.utilities.remove_ros_args(sys.argv)
    note = apply_security(sys.argv)  # as run_node does for the fleet's nodes
    if note:
        print(note, file=sys.stderr)
    rclpy.init(args=sys.argv)
    result = attacker(float(argv[2])) if argv[1] == "attacker" else enclave(argv[2:])
    print("PROBE " + json.dumps(result, sort_keys=True), flush=True)
    rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
