"""Replay a recorded bag: republish its topics with the original timing (``ros2 bag play`` stand-in).

For machines without ``ros2 bag``. Messages are published as the raw CDR bytes stored in the bag,
in log-time order, each at ``start + (t - t_first) / rate`` (``rate`` 2 = twice as fast). Message
classes are imported from the type names in the bag (``timely_llm_ros/msg/Task`` →
``timely_llm_ros.msg.Task``). QoS: reliable, keep-last with the depth of our profiles
(:mod:`timely_llm_ros.ros.qos`) for the LRTrace topics, keep-last 100 otherwise — and without the
segments' original lifespan, which would discard replayed segments that are old by construction.

**Clock.** Like ``ros2 bag play --clock``, the node publishes ``/clock`` (``rosgraph_msgs/Clock``,
keep-last 1, best effort as ROS time sources subscribe) at ``clock_frequency`` Hz with the *bag
time* being replayed: the log time of the first message while waiting for subscribers, then
advancing at ``rate`` with the messages, held at the last message's time when done (and jumping
back at each ``loop``). Nodes started with ``use_sim_time:=true`` — the rqt timeline, the recorder,
``timely-llm rqt-timeline --use-sim-time`` — then live in the recording's time, so a replayed run
shows in the timeline as it was recorded. ``clock_frequency:=0`` turns this off; a ``/clock`` topic
recorded in the bag is not replayed while the node publishes its own. The node itself is the clock
source and runs on the wall clock (``use_sim_time:=true`` on it is refused).

Bags are read with ``rosbags``; a storage file it refuses (e.g. cut short by a crash) is scanned
record by record up to the damage (:func:`timely_llm_ros.lrtrace.mcap.scan_records`) and what was
readable is replayed, with a warning. With ``exit_when_done`` the node exits (status 0) after the
last message (after ``loop`` repetitions, if set).

Run::

    python -m timely_llm_ros.nodes.replay --ros-args -p bag:=run1_bag -p rate:=2.0
"""

from __future__ import annotations

import argparse
import importlib
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rclpy.duration import Duration
from rclpy.node import Node
from rclpy.publisher import Publisher
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rosgraph_msgs.msg import Clock

from timely_llm_ros.interfaces import topics
from timely_llm_ros.nodes.common import (
    Param,
    ParamError,
    StopRequested,
    declare_params,
    ros_param_args,
    run_node,
)
from timely_llm_ros.ros import qos

DEPTHS = {  # by the bag's (absolute) topic names of a fleet in namespace /
    topics.join("/", topics.TASKS): qos.EVENT_DEPTH,
    topics.join("/", topics.TASK_STATUS): qos.EVENT_DEPTH,
    topics.join("/", topics.TRACE_EVENTS): qos.EVENT_DEPTH,
    topics.join("/", topics.SEGMENT_FEEDBACK): qos.FEEDBACK_DEPTH,
}
CLOCK_TOPIC = "/clock"
# what ROS time sources subscribe with (rclcpp::ClockQoS, rclpy's TimeSource): keep-last 1, best effort
CLOCK_QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=1,
    reliability=ReliabilityPolicy.BEST_EFFORT,
    durability=DurabilityPolicy.VOLATILE,
)


def _path_check(value: str) -> str | None:
    if not value.strip():
        return "must name a bag directory (or an .mcap file)"
    if not Path(value).expanduser().exists():
        return f"no bag at {value}"
    return None


PARAMS = (
    Param(
        "bag",
        "",
        "bag directory (with metadata.yaml) or .mcap file to replay",
        read_only=True,
        check=_path_check,
    ),
    Param("rate", 1.0, "replay speed factor (2 = twice as fast)", low=0.001, high=1000.0),
    Param("topics", [], "topics to replay (empty = all in the bag)", read_only=True),
    Param(
        "wait_for_subscribers",
        0.0,
        "before starting, wait up to this long for every replayed topic to "
        "have a subscriber (s; 0 = start at once)",
        low=0.0,
        high=3600.0,
        read_only=True,
    ),
    Param(
        "min_subscribers",
        1,
        "with wait_for_subscribers: how many subscribers every replayed topic "
        "needs before the replay starts (e.g. a recorder and a viewer)",
        low=1,
        high=1000,
        read_only=True,
    ),
    Param(
        "clock_subscribers",
        0,
        "with wait_for_subscribers and clock_frequency > 0: also wait for this many "
        "/clock subscribers (nodes with use_sim_time, e.g. a recorder)",
        low=0,
        high=1000,
        read_only=True,
    ),
    Param(
        "delay",
        0.0,
        "wait this long before the first message (s), after the subscribers (and at least "
        "5 /clock periods when publishing /clock)",
        low=0.0,
        high=3600.0,
        read_only=True,
    ),
    Param("loop", 1, "how many times to play the bag", low=1, high=1_000_000, read_only=True),
    Param("exit_when_done", True, "exit after the last message", read_only=True),
    Param(
        "clock_frequency",
        40.0,
        "publish /clock with the bag time this often (Hz; 0 = no /clock), "
        "for nodes running with use_sim_time",
        low=0.0,
        high=1000.0,
        read_only=True,
    ),
)


@dataclass(frozen=True)
class Record:
    t_ns: int
    topic: str
    data: bytes


def read_raw(path: Path) -> tuple[dict[str, str], list[Record], str]:
    """(topic → type, records in log-time order, problem text or '') without deserialising."""
    from rosbags.rosbag2 import Reader

    types: dict[str, str] = {}
    records: list[Record] = []
    try:
        with Reader(path) as reader:
            for conn in reader.connections:
                types[conn.topic] = conn.msgtype
            for conn, t_ns, raw in reader.messages():
                records.append(Record(t_ns, conn.topic, bytes(raw)))
        problem = ""
    except Exception as exc:  # noqa: BLE001 - rosbags refuses it: scan the MCAP records that are intact
        from timely_llm_ros.lrtrace.mcap import scan_records

        files = [path] if path.is_file() else sorted(path.glob("*.mcap"))
        if not files:
            raise ParamError(
                f"parameter 'bag': {path} is not readable ({exc}) and holds no .mcap file"
            ) from None
        types.clear()
        records.clear()
        problem = f"rosbags could not read {path} ({type(exc).__name__}: {exc}); replaying the intact records"
        for f in files:
            scan = scan_records(f)
            if scan.problem:
                problem += f"; {f.name}: {scan.problem}"
            for ch in scan.channels.values():
                types[ch.topic] = ch.schema_name
            records += [
                Record(t, scan.channels[cid].topic, data)
                for cid, t, data in scan.messages
                if cid in scan.channels
            ]
    records.sort(key=lambda r: r.t_ns)
    return types, records, problem


def message_class(msgtype: str) -> type:
    """``pkg/msg/Type`` → the generated Python class (ValueError with the reason if missing)."""
    parts = msgtype.split("/")
    if len(parts) == 2:
        parts = [parts[0], "msg", parts[1]]
    if len(parts) != 3:
        raise ValueError(f"cannot interpret message type {msgtype!r}")
    try:
        return getattr(importlib.import_module(f"{parts[0]}.{parts[1]}"), parts[2])
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"message type {msgtype} is not installed here: {exc}") from None


class BagClock:
    """The bag time being replayed: anchored at (monotonic time, bag time), advancing at ``rate``,
    never past ``cap_ns`` (the log time of the next message to publish, or the last one when done)."""

    def __init__(self, start_ns: int) -> None:
        self._lock = threading.Lock()
        self._mono: float | None = None  # None: stopped at bag_ns
        self._bag_ns = start_ns
        self._cap_ns = start_ns
        self._rate = 1.0

    def run(self, mono: float, bag_ns: int, cap_ns: int, rate: float) -> None:
        with self._lock:
            self._mono, self._bag_ns, self._cap_ns, self._rate = mono, bag_ns, cap_ns, rate

    def hold(self, bag_ns: int) -> None:
        with self._lock:
            self._mono, self._bag_ns, self._cap_ns = None, bag_ns, bag_ns

    def now_ns(self, mono: float) -> int:
        with self._lock:
            if self._mono is None:
                return self._bag_ns
            ns = self._bag_ns + int((mono - self._mono) * self._rate * 1e9)
            return min(max(ns, self._bag_ns), self._cap_ns)


class ReplayNode(Node):
    def __init__(self, **kwargs: Any) -> None:
        super().__init__("lrtrace_replay", **kwargs)
        self.p = declare_params(self, PARAMS, on_change=self._param_changed)
        if self.p["clock_frequency"] > 0 and self.get_parameter("use_sim_time").value:
            raise ParamError(
                "use_sim_time:=true on the replay node: it publishes /clock itself and runs on "
                "the wall clock (set clock_frequency:=0 to follow another clock source)"
            )
        self.rate = self.p["rate"]
        path = Path(self.p["bag"]).expanduser()
        types, records, problem = read_raw(path)
        if problem:
            self.get_logger().warning(problem)
        wanted = set(self.p["topics"]) or set(types)
        unknown = sorted(wanted - set(types))
        if unknown:
            raise ParamError(f"parameter 'topics': {unknown} are not in the bag (it has {sorted(types)})")
        if self.p["clock_frequency"] > 0 and CLOCK_TOPIC in wanted:
            wanted.discard(CLOCK_TOPIC)
            self.get_logger().info("the bag's own /clock is not replayed: this node publishes /clock")
        self.records = [r for r in records if r.topic in wanted]
        self.clock = BagClock(self.records[0].t_ns if self.records else 0)
        self._clock_pub: Publisher | None = None
        if self.p["clock_frequency"] > 0:
            self._clock_pub = self.create_publisher(Clock, CLOCK_TOPIC, CLOCK_QOS)
            self.create_timer(1.0 / self.p["clock_frequency"], self._publish_clock)
        self.pubs: dict[str, Publisher] = {}
        for topic in sorted(wanted):
            profile = QoSProfile(
                history=HistoryPolicy.KEEP_LAST,
                depth=DEPTHS.get(topic, 100),
                reliability=ReliabilityPolicy.RELIABLE,
                # statuses and trace events are transient local everywhere (ros/qos.py): a late rqt
                # catches up, and a transient-local reader never matches a volatile writer
                durability=(
                    DurabilityPolicy.TRANSIENT_LOCAL
                    if qos.is_latched_topic(topic)
                    else DurabilityPolicy.VOLATILE
                ),
            )
            self.pubs[topic] = self.create_publisher(message_class(types[topic]), topic, profile)
        self.published = 0
        self.done = threading.Event()
        self.create_timer(0.1, self._check_done)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._play, name="replay", daemon=True)
        self._thread.start()
        self.get_logger().info(
            f"replaying {len(self.records)} messages on {len(self.pubs)} topics from {path} "
            f"at rate {self.rate:g}"
        )

    def _param_changed(self, name: str, value: Any) -> None:
        if name == "rate":
            self.rate = float(value)

    def _ready(self) -> bool:
        """Every replayed topic has ``min_subscribers``, /clock has ``clock_subscribers``."""
        clock_ok = self._clock_pub is None or (
            self._clock_pub.get_subscription_count() >= self.p["clock_subscribers"]
        )
        return clock_ok and all(
            p.get_subscription_count() >= self.p["min_subscribers"] for p in self.pubs.values()
        )

    def _play(self) -> None:
        deadline = time.monotonic() + self.p["wait_for_subscribers"]
        while not self._stop.is_set() and time.monotonic() < deadline and not self._ready():
            self._stop.wait(0.05)
        # the start time goes out on /clock a few times before the first message, so a sim-time
        # subscriber (a recorder: nothing is recorded before the first /clock) has it by then
        preroll = 5.0 / self.p["clock_frequency"] if self._clock_pub is not None else 0.0
        if self._stop.wait(max(self.p["delay"], preroll)):
            return
        for _ in range(self.p["loop"]):
            if not self.records:
                break
            t0_bag = self.records[0].t_ns
            t0 = time.monotonic()
            last_bag = t0_bag
            for rec in self.records:
                # re-anchor on every message so a rate change applies from here on
                rate = self.rate
                self.clock.run(t0, last_bag, rec.t_ns, rate)
                t0 += (rec.t_ns - last_bag) / 1e9 / rate
                last_bag = rec.t_ns
                if self._stop.wait(max(t0 - time.monotonic(), 0.0)):
                    return
                self.clock.hold(rec.t_ns)
                self.pubs[rec.topic].publish(rec.data)
                self.published += 1
        for pub in self.pubs.values():  # reliable delivery of the tail before we may exit
            pub.wait_for_all_acked(Duration(seconds=5))
        self.get_logger().info(f"replay finished: {self.published} messages published")
        self.done.set()

    def _publish_clock(self) -> None:
        ns = self.clock.now_ns(time.monotonic())
        msg = Clock()
        msg.clock.sec, msg.clock.nanosec = divmod(ns, 1_000_000_000)
        assert self._clock_pub is not None  # the clock timer runs only with a clock publisher
        self._clock_pub.publish(msg)

    def _check_done(self) -> None:
        if self.done.is_set() and self.p["exit_when_done"]:
            raise StopRequested()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def main(argv: list[str] | None = None) -> int:
    return run_node(ReplayNode, argv, description="bag replay (see timely_llm_ros.nodes.replay)")


# ``timely-llm replay`` (timely_llm_ros/cli.py): the same node with plain options
def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("bag", help="bag directory (or .mcap file)")
    parser.add_argument("--rate", type=float, default=1.0, help="replay speed factor (default 1)")
    parser.add_argument("--topics", nargs="*", default=[], help="topics to replay (default: all)")
    parser.add_argument("--loop", type=int, default=1, help="how many times to play the bag")
    parser.add_argument(
        "--clock",
        type=float,
        default=40.0,
        metavar="HZ",
        help="publish /clock with the bag time at HZ for use_sim_time nodes (0 = off; default 40)",
    )
    parser.add_argument(
        "--clock-subscribers",
        type=int,
        default=0,
        metavar="N",
        help="with --wait-for-subscribers: also wait for N /clock subscribers (sim-time nodes)",
    )
    parser.add_argument(
        "--wait-for-subscribers",
        type=float,
        default=0.0,
        metavar="S",
        help="wait up to S seconds for subscribers before starting",
    )


def run(args: argparse.Namespace) -> int:
    params = {
        "bag": args.bag,
        "rate": float(args.rate),
        "loop": args.loop,
        "wait_for_subscribers": float(args.wait_for_subscribers),
        "clock_frequency": float(args.clock),
        "clock_subscribers": args.clock_subscribers,
    }
    if args.topics:
        params["topics"] = list(args.topics)
    ros = ros_param_args(params)
    return main(["timely-llm replay", "--ros-args", *ros])


if __name__ == "__main__":
    raise SystemExit(main())
