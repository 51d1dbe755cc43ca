"""LRTrace recorder node: every task, segment, feedback, status and trace event into a rosbag2 bag.

Records ``/tasks``, ``/segment_feedback``, ``/task_status``, ``/trace_events`` and the per-agent
``/<agent>/skill_segments`` topics: those named in the ``agents`` parameter from the start and, with
``discover`` on, every ``Segment`` topic of that form that appears in the graph (checked every
``discovery_period``) plus the segment topic of each agent named in a recorded ``/tasks`` message,
at once (the planner is still generating that task's first segment). Subscriptions are *raw*: the
CDR bytes are written as received, with the receive time as log time (what ``ros2 bag record``
does); nothing is re-encoded (tasks are decoded once, only to learn their agent).

The bag (:class:`timely_llm_ros.lrtrace.bagio.BagWriter`): a rosbag2 directory with
``metadata.yaml`` in the format of ``bag_distro``'s rosbag2 (version 5 for humble, 9 for jazzy and
newer; default the distro running) and one MCAP file (chunks zstd-compressed with
``compression:=zstd``) holding the message definitions and RIHS01 type hashes; each topic's offered QoS (the publishers' profiles as seen in the graph when the topic is
added; our own profiles from :mod:`timely_llm_ros.ros.qos` for the fixed topics) is stored so a
replay can offer the same. The writer flushes at least every ``flush_period`` seconds, leaving a
complete, readable bag each time: a recorder killed with SIGKILL loses at most that much.
``ros2 bag info`` / ``ros2 bag play`` and ``rosbags`` open the result.

Log times come from the node's clock, so with ``use_sim_time:=true`` a recording follows ``/clock``
(e.g. a replay's bag time). As with ``ros2 bag record --use-sim-time``, nothing is written until the
first ``/clock`` message arrives; such messages are counted and reported (warning, and at close).

Run::

    python -m timely_llm_ros.nodes.recorder --ros-args -p output:=run1_bag -p agents:="['drone_1']"
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.serialization import deserialize_message

from timely_llm_ros.lrtrace import bagio
from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus, TraceEvent
from timely_llm_ros.nodes.common import Param, ParamError, declare_params, ros_param_args, run_node
from timely_llm_ros.ros import qos, topics

SEGMENT_TYPE = "timely_llm_ros/msg/Segment"
FIXED = {  # topic -> (message class, bag type name, QoS profile the graph's publishers offer)
    topics.TASKS: (Task, "timely_llm_ros/msg/Task", qos.task_qos),
    topics.SEGMENT_FEEDBACK: (SegmentFeedback, "timely_llm_ros/msg/SegmentFeedback", qos.feedback_qos),
    topics.TASK_STATUS: (TaskStatus, "timely_llm_ros/msg/TaskStatus", qos.status_qos),
    topics.TRACE_EVENTS: (TraceEvent, "timely_llm_ros/msg/TraceEvent", qos.event_qos),
}


def _agents_check(value: list[str]) -> str | None:
    bad = [a for a in value if not topics.valid_agent_id(a)]
    return f"not valid agent ids (ROS name tokens): {bad}" if bad else None


PARAMS = (
    Param(
        "output",
        "",
        "bag directory to create (must not exist); empty = lrtrace_<date>_<time> in the working directory",
        read_only=True,
    ),
    Param(
        "agents",
        [],
        "agents whose /<agent>/skill_segments are recorded from the start",
        read_only=True,
        check=_agents_check,
    ),
    Param(
        "discover",
        True,
        "also record every /<agent>/skill_segments topic that appears in the graph",
        read_only=True,
    ),
    Param(
        "discovery_period",
        1.0,
        "how often the graph is searched for new segment topics (s)",
        low=0.05,
        high=3600.0,
        read_only=True,
    ),
    Param(
        "flush_period",
        1.0,
        "write everything received to disk at least this often (s); a killed "
        "recorder loses at most this much",
        low=0.05,
        high=3600.0,
        read_only=True,
    ),
    Param(
        "policy",
        "",
        "scheduling policy of the recorded planner, stored in the bag's metadata so reports can name "
        "it (timely-llm fleet fills it in from the planner's parameters)",
        read_only=True,
    ),
    Param(
        "bag_distro",
        "",
        "ROS 2 distro whose rosbag2 must read the bag (humble, iron, jazzy, kilted, ...): sets the "
        "metadata.yaml version (humble 5, iron 7, newer 9); empty = the distro running here",
        read_only=True,
    ),
    Param(
        "compression",
        "",
        "MCAP chunk compression: '' (none) or zstd (the codec of rosbag2's zstd_fast preset)",
        choices=("", "zstd"),
        read_only=True,
    ),
)


class RecorderNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("lrtrace_recorder", **kwargs)
        self.p = declare_params(self, PARAMS)
        out = self.p["output"] or time.strftime("lrtrace_%Y%m%d_%H%M%S")
        path = Path(out).expanduser().resolve()
        if path.exists():
            raise ParamError(f"parameter 'output': {path} exists already; a bag is never overwritten")
        self.writer = bagio.BagWriter(
            path,
            flush_every_s=self.p["flush_period"],
            distro=self.p["bag_distro"] or None,
            compression=self.p["compression"],
            custom_data={
                "recorder": "timely_llm_ros.nodes.recorder",
                **({"policy": self.p["policy"]} if self.p["policy"] else {}),
            },
        )
        self.path = path
        self.counts: dict[str, int] = {}
        self.before_clock = 0  # messages received under use_sim_time before the first /clock
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        self._subscribed: set[str] = set()
        self._tasks_topic = self.resolve_topic_name(topics.TASKS)
        for topic, (msg_type, bag_type, profile) in FIXED.items():
            self._record(topic, msg_type, bag_type, profile(), [bagio.qos_from_profile(profile())])
        for agent in self.p["agents"]:
            self._record_segments(topics.segment_topic(agent))
        if self.p["discover"]:
            self.create_timer(self.p["discovery_period"], self._discover)
            self._discover()
        self.get_logger().info(f"recording to {path}")

    def _record(self, topic: str, msg_type: type, bag_type: str, profile: QoSProfile, offered: list) -> None:
        topic = self.resolve_topic_name(topic)  # the bag names topics absolutely (<fleet namespace>/...)
        if topic in self._subscribed:
            return
        self.writer.add_topic(topic, bag_type, offered)
        self.counts[topic] = 0
        self._subscribed.add(topic)
        self.create_subscription(
            msg_type, topic, lambda data, t=topic: self._write(t, data), profile, raw=True
        )

    def _record_segments(self, topic: str) -> None:
        topic = self.resolve_topic_name(topic)
        if topic in self._subscribed:
            return
        infos = self.get_publishers_info_by_topic(topic)
        offered = [bagio.qos_from_profile(i.qos_profile) for i in infos] or [
            bagio.qos_from_profile(qos.segment_qos())
        ]
        self._record(topic, Segment, SEGMENT_TYPE, qos.segment_qos(), offered)
        self.get_logger().info(f"recording {topic}")

    def _discover(self) -> None:
        for name, types in self.get_topic_names_and_types():
            if (
                name not in self._subscribed
                and topics.agent_of_segment_topic(name, self.get_namespace())
                and SEGMENT_TYPE in types
            ):
                self._record_segments(name)

    def _write(self, topic: str, data: bytes) -> None:
        t_ns = self.get_clock().now().nanoseconds
        if self._sim_time and t_ns == 0:
            self.before_clock += 1
            self.get_logger().warning(
                "use_sim_time is set and no /clock has arrived yet: messages are not recorded until it does",
                throttle_duration_sec=5.0,
            )
            return
        try:
            self.writer.write(topic, t_ns, data)
            self.counts[topic] += 1
        except (ValueError, RuntimeError, OSError) as exc:  # a bad sample or a full disk: say so, go on
            self.get_logger().error(f"cannot record a message of {topic}: {exc}")
        if topic == self._tasks_topic and self.p["discover"]:
            self._watch_agent_of(data)

    def _watch_agent_of(self, data: bytes) -> None:
        """A task names the agent whose segment topic will carry its plan: subscribe now, while the
        planner is still generating, rather than at the next graph scan (which can come too late
        for the first segments of a new agent's first task)."""
        try:
            agent = deserialize_message(data, Task).agent_id
        except Exception:  # a malformed task is the planner's to reject; it is recorded as received
            return
        if topics.valid_agent_id(agent):
            self._record_segments(topics.segment_topic(agent))

    def close(self) -> None:
        self.writer.close()
        note = (
            f"; {self.before_clock} received before the first /clock, not recorded"
            if self.before_clock
            else ""
        )
        self.get_logger().info(
            f"bag {self.path} closed: {sum(self.counts.values())} messages {self.counts}{note}"
        )


def main(argv: list[str] | None = None) -> int:
    return run_node(RecorderNode, argv, description="LRTrace recorder (see timely_llm_ros.nodes.recorder)")


# ``timely-llm record`` (timely_llm_ros/cli.py): the same node with plain options
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "output", nargs="?", default="", help="bag directory to create (default: lrtrace_<time>)"
    )
    parser.add_argument(
        "--agents", nargs="*", default=[], help="agents whose segment topics to record from the start"
    )
    parser.add_argument(
        "--no-discover", action="store_true", help="record only the named agents' segment topics"
    )
    parser.add_argument("--flush-period", type=float, default=1.0, help="seconds between flushes (default 1)")
    parser.add_argument(
        "--bag-distro",
        default="",
        help="distro whose rosbag2 must read the bag: humble writes metadata version 5 (default: this one)",
    )
    parser.add_argument(
        "--compression",
        choices=("none", "zstd"),
        default="none",
        help="MCAP chunk compression (default none)",
    )


def run(args: argparse.Namespace) -> int:
    params = {
        "output": args.output,
        "flush_period": float(args.flush_period),
        "discover": not args.no_discover,
    }
    if args.agents:
        params["agents"] = list(args.agents)
    if args.bag_distro:
        params["bag_distro"] = args.bag_distro
    if args.compression != "none":
        params["compression"] = args.compression
    ros = ros_param_args(params)
    return main(["timely-llm record", "--ros-args", *ros])


if __name__ == "__main__":
    raise SystemExit(main())
