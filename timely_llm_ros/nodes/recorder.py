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

**Write errors** (a full disk, an I/O error, :class:`~timely_llm_ros.lrtrace.bagio.BagWriteError`): the
bag is closed at its last complete state (readable, ``metadata.yaml`` matching), one error line says
why, and ``/diagnostics`` (``diagnostic_msgs/DiagnosticArray``, level ERROR, name
``lrtrace_recorder: bag``; OK once a second while recording) tells operators. Then, by
``on_write_error``: ``retry`` — every ``retry_period`` a new bag ``<output>_<n>`` is tried, and
recording goes on there once the disk has room (``retry_min_free_mib`` free: the few KiB a failed
write gives back when the bag rolls back are not room, and a bag opened there would fail again at its
first flush, one more error line each retry) — or ``exit`` (status 1). Messages received while
nothing can be written are counted (``lost``), never silently. An output directory that cannot be
created (read-only, no permission) is one line and exit status 2.

Ghost agents (ids named only in tasks the planner REJECTED) cost nothing: the segment topic
subscribed for a ``/tasks`` message is dropped again when the planner rejects the task and the topic
recorded nothing, has no robot node and was not named in ``agents``, and the graph scan skips such an
agent's topic unless a robot node (a node in namespace ``<fleet>/<agent>``) subscribes to it.

Log times come from the node's clock, so with ``use_sim_time:=true`` a recording follows ``/clock``
(e.g. a replay's bag time). As with ``ros2 bag record --use-sim-time``, nothing is written until the
first ``/clock`` message arrives; such messages are counted and reported (warning, and at close).

Run::

    python -m timely_llm_ros.nodes.recorder --ros-args -p output:=run1_bag -p agents:="['drone_1']"
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections import OrderedDict
from pathlib import Path
from typing import Any

from diagnostic_msgs.msg import DiagnosticArray, DiagnosticStatus, KeyValue
from rclpy.node import Node
from rclpy.qos import QoSProfile
from rclpy.serialization import deserialize_message
from rclpy.timer import Timer

from timely_llm_ros.interfaces import topics
from timely_llm_ros.lrtrace import bagio
from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus, TraceEvent
from timely_llm_ros.nodes.common import (
    Param,
    ParamError,
    declare_params,
    forget_destroyed,
    ros_param_args,
    run_node,
)
from timely_llm_ros.ros import qos

SEGMENT_TYPE = "timely_llm_ros/msg/Segment"
MAX_CONFIRMED = 100_000  # agents remembered as real, or as ghosts (bounded memory)
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
        "on_write_error",
        "retry",
        "what the recorder does when the bag cannot be written (full disk): retry (a new bag every "
        "retry_period) or exit (status 1); either way the bag is closed readable and /diagnostics says so",
        choices=("retry", "exit"),
        read_only=True,
    ),
    Param(
        "retry_period",
        10.0,
        "seconds between attempts to open a new bag after a write error (on_write_error retry)",
        low=0.1,
        high=3600.0,
        read_only=True,
    ),
    Param(
        "retry_min_free_mib",
        8.0,
        "a new bag is tried only once its filesystem has this much free (MiB): the space a failed "
        "write gives back is not room, and a bag opened there fails again at its first flush",
        low=0.0,
        high=1e6,
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
        self.first_path = self.path = path
        self.parts = 0  # bags opened after write errors
        self.lost = 0  # messages received while no bag could be written
        self.error: bagio.BagWriteError | None = None
        self._topics: dict[str, tuple[str, list]] = {}  # topic -> (bag type, offered QoS): for new bags
        try:
            self.writer = self._open_bag(path)
        except OSError as exc:
            raise ParamError(
                f"parameter 'output': cannot create the bag {path}: {exc.strerror or exc}"
            ) from None
        self.counts: dict[str, int] = {}
        self.before_clock = 0  # messages received under use_sim_time before the first /clock
        self._sim_time = bool(self.get_parameter("use_sim_time").value)
        self._subscribed: set[str] = set()
        self._subs: dict[str, Any] = {}  # topic -> subscription
        self._confirmed: set[str] = set()  # agents with a task the planner did not reject
        self._ghosts: OrderedDict[str, None] = OrderedDict()  # agents seen only in rejected tasks
        self._status_topic = self.resolve_topic_name(topics.TASK_STATUS)
        self._tasks_topic = self.resolve_topic_name(topics.TASKS)
        for topic, (msg_type, bag_type, profile) in FIXED.items():
            self._record(topic, msg_type, bag_type, profile(), [bagio.qos_from_profile(profile())])
        for agent in self.p["agents"]:
            self._record_segments(topics.segment_topic(agent))
        if self.p["discover"]:
            self.create_timer(self.p["discovery_period"], self._discover)
            self._discover()
        self._diag_pub = self.create_publisher(DiagnosticArray, "/diagnostics", 10)
        self.create_timer(1.0, self._diagnose)
        self._retry_timer: Timer | None = None
        self.get_logger().info(f"recording to {path}")

    # ------------------------------------------------------------------ bag, write errors
    def _open_bag(self, path: Path) -> bagio.BagWriter:
        writer = bagio.BagWriter(
            path,
            flush_every_s=self.p["flush_period"],
            distro=self.p["bag_distro"] or None,
            compression=self.p["compression"],
            custom_data={
                "recorder": "timely_llm_ros.nodes.recorder",
                **({"policy": self.p["policy"]} if self.p["policy"] else {}),
            },
            on_error=self._write_failed,
        )
        for topic, (bag_type, offered) in self._topics.items():
            writer.add_topic(topic, bag_type, offered)
        return writer

    def _write_failed(self, err: bagio.BagWriteError) -> None:
        """Any thread (the writer's flush thread included): one line, /diagnostics, retry or exit."""
        if self.error is not None:
            return
        self.error = err
        written = sum(self.writer.counts.values())
        then = (
            f"retrying every {self.p['retry_period']:g} s into a new bag once "
            f"{self.p['retry_min_free_mib']:g} MiB are free"
            if self.p["on_write_error"] == "retry"
            else "exiting (on_write_error exit)"
        )
        self.get_logger().error(
            f"recording stopped: {err}; the bag is closed and readable up to its {written} messages; {then}"
        )
        self._diagnose()
        if self.p["on_write_error"] == "exit":
            self.exit_status = 1
            stop = getattr(self, "stop_requested", None)
            if stop is not None:
                stop.set()
        elif self._retry_timer is None:
            self._retry_timer = self.create_timer(self.p["retry_period"], self._retry)

    def _retry(self) -> None:
        need = self.p["retry_min_free_mib"] * 2**20
        try:
            free = shutil.disk_usage(self.first_path.parent).free
        except OSError as exc:  # the directory is gone or unreadable: opening will say why
            self.get_logger().debug(f"free space of {self.first_path.parent} unknown: {exc}")
        else:
            if free < need:
                self.get_logger().debug(f"new bag not tried yet: {free} bytes free, {need:.0f} wanted")
                return
        self.parts += 1
        path = self.first_path.with_name(f"{self.first_path.name}_{self.parts}")
        try:
            writer = self._open_bag(path)
        except (OSError, bagio.BagWriteError) as exc:
            shutil.rmtree(path, ignore_errors=True)  # nothing half-made stays behind
            self.parts -= 1
            self.get_logger().debug(f"new bag {path} not possible yet: {exc}")
            return
        self.writer, self.path, self.error = writer, path, None
        if self._retry_timer is not None:  # the timer that called this
            self._retry_timer.cancel()
            self.destroy_timer(self._retry_timer)
        self._retry_timer = None
        self.get_logger().warning(f"recording again, into {path} ({self.lost} messages were lost meanwhile)")
        self._diagnose()

    def _diagnose(self) -> None:
        """``/diagnostics``: where operators (rqt_robot_monitor, aggregators) look for a node's health."""
        forget_destroyed(self)  # ghosts' subscriptions dropped earlier (nodes.common.forget_destroyed)
        status = DiagnosticStatus(name="lrtrace_recorder: bag", hardware_id=self.get_fully_qualified_name())
        if self.error is None:
            status.level, status.message = DiagnosticStatus.OK, f"recording to {self.path}"
        else:
            status.level, status.message = DiagnosticStatus.ERROR, f"not recording: {self.error}"
        status.values = [
            KeyValue(key="bag", value=str(self.path)),
            KeyValue(key="recorded", value=str(sum(self.counts.values()))),
            KeyValue(key="lost", value=str(self.lost)),
            KeyValue(key="error", value=str(self.error or "")),
        ]
        msg = DiagnosticArray(status=[status])
        msg.header.stamp = self.get_clock().now().to_msg()
        self._diag_pub.publish(msg)

    def _record(self, topic: str, msg_type: type, bag_type: str, profile: QoSProfile, offered: list) -> None:
        topic = self.resolve_topic_name(topic)  # the bag names topics absolutely (<fleet namespace>/...)
        if topic in self._subscribed:
            return
        self._topics[topic] = (bag_type, offered)
        if self.error is None:
            try:
                self.writer.add_topic(topic, bag_type, offered)
            except bagio.BagWriteError:
                pass  # _write_failed has said so
        self.counts[topic] = 0
        self._subscribed.add(topic)
        self._subs[topic] = self.create_subscription(
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
        """New segment topics in the graph, except those of ghost agents (the planner creates a
        topic for a task's agent before it knows whether a robot exists) unless a robot node
        subscribes to it after all."""
        for name, types in self.get_topic_names_and_types():
            if name in self._subscribed or SEGMENT_TYPE not in types:
                continue
            agent = topics.agent_of_segment_topic(name, self.get_namespace())
            if agent and (agent not in self._ghosts or self._has_robot(agent, name)):
                self._record_segments(name)

    def _has_robot(self, agent: str, topic: str) -> bool:
        """A robot node (a node in namespace ``<fleet>/<agent>``) subscribes to ``topic``."""
        robot_ns = topics.join(self.get_namespace(), agent)
        return any(i.node_namespace == robot_ns for i in self.get_subscriptions_info_by_topic(topic))

    def _write(self, topic: str, data: bytes) -> None:
        t_ns = self.get_clock().now().nanoseconds
        if self._sim_time and t_ns == 0:
            self.before_clock += 1
            self.get_logger().warning(
                "use_sim_time is set and no /clock has arrived yet: messages are not recorded until it does",
                throttle_duration_sec=5.0,
            )
            return
        if self.error is not None:  # nothing can be written now: counted, said once (_write_failed)
            self.lost += 1
        else:
            try:
                self.writer.write(topic, t_ns, data)
                self.counts[topic] += 1
            except bagio.BagWriteError:
                self.lost += 1  # _write_failed has said so, once
            except (ValueError, KeyError) as exc:  # a bad sample: say so (rate-limited), go on
                self.get_logger().error(
                    f"cannot record a message of {topic}: {exc}", throttle_duration_sec=10.0
                )
        if topic == self._tasks_topic and self.p["discover"]:
            self._watch_agent_of(data)
        elif topic == self._status_topic and self.p["discover"]:
            self._status_of(data)

    def _watch_agent_of(self, data: bytes) -> None:
        """A task names the agent whose segment topic will carry its plan: subscribe now, while the
        planner is still generating, rather than at the next graph scan (which can come too late
        for the first segments of a new agent's first task). Dropped again for a ghost
        (:meth:`_status_of`)."""
        try:
            agent = deserialize_message(data, Task).agent_id
        except Exception:  # noqa: BLE001 - a malformed task is the planner's to reject; it is recorded as received
            return
        if topics.valid_agent_id(agent):
            self._record_segments(topics.segment_topic(agent))

    def _status_of(self, data: bytes) -> None:
        """The planner answered a task: its agent is real unless the task was REJECTED; a rejected
        agent's segment topic that recorded nothing and has no robot node is unsubscribed."""
        try:
            msg = deserialize_message(data, TaskStatus)
        except Exception:  # noqa: BLE001 - recorded as received; nothing to learn from it
            return
        agent = msg.agent_id
        if agent in self._confirmed or not topics.valid_agent_id(agent):
            return
        if msg.state != TaskStatus.REJECTED:
            self._ghosts.pop(agent, None)
            if len(self._confirmed) < MAX_CONFIRMED:
                self._confirmed.add(agent)
            return
        if agent in self.p["agents"]:
            return
        self._ghosts[agent] = None
        while len(self._ghosts) > MAX_CONFIRMED:
            self._ghosts.popitem(last=False)
        topic = self.resolve_topic_name(topics.segment_topic(agent))
        sub = self._subs.get(topic)
        if sub is None or self.counts.get(topic) or self._has_robot(agent, topic):
            return
        self.destroy_subscription(sub)
        del self._subs[topic]
        self._subscribed.discard(topic)
        self.counts.pop(topic, None)
        self.get_logger().info(
            f"not recording {topic}: agent {agent!r} has no robot (its task was rejected)",
            throttle_duration_sec=10.0,
        )

    def close(self) -> None:
        self.writer.close()
        note = (
            f"; {self.before_clock} received before the first /clock, not recorded"
            if self.before_clock
            else ""
        )
        if self.lost:
            note += f"; {self.lost} received while the bag could not be written, not recorded"
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
