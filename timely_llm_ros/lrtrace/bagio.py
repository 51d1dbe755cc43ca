"""Write LRTrace rosbag2 bags without ``ros2 bag`` (pure Python, no rclpy needed).

Writing (:class:`BagWriter`): a real rosbag2 directory — ``metadata.yaml`` and one MCAP storage
file with every message definition embedded (``ros2msg`` schemas), RIHS01 type hashes and the
offered QoS profiles in both places, and at close rosbag2's own ``rosbag2`` metadata record in the
MCAP file (``serialized_metadata``, ``ROS_DISTRO``, as rosbag2_storage_mcap writes it) — that
``ros2 bag info/play`` and ``rosbags`` open. The metadata format follows the target distro
(``distro``, default the one running): rosbag2 on Humble reads metadata up to version 5 with the
QoS profiles as a YAML *string* of integer policies (its ``metadata_io.cpp`` decodes
``offered_qos_profiles`` with ``as<std::string>()``, so a version 9 file, whose profiles are a YAML
list, fails there); Iron writes version 7 (same string form, plus type hashes); Jazzy and newer write
and read version 9 and still read the older forms. Chunks can be zstd-compressed (``compression``).
It is *kill-safe*: every flush (at most ``flush_every_s`` apart, also from a background timer
while no messages arrive) leaves a finished, indexed MCAP file (:mod:`.mcap`) and then an updated
``metadata.yaml``, so a SIGKILLed recorder loses at most the last ``flush_every_s`` of messages.
(``rosbags``' own writer keeps messages in memory and writes footer and metadata only in
``close()``; its reader refuses a file without footer.)

Reading is :mod:`.bagread` (:func:`~.bagread.read_bag`).

Topics of an LRTrace bag (interfaces/topics.py): ``/tasks`` (Task), ``/<agent>/skill_segments`` (Segment),
``/segment_feedback`` (SegmentFeedback), ``/task_status`` (TaskStatus), ``/trace_events`` (TraceEvent).
"""

from __future__ import annotations

import io
import math
import os
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2.metadata import dump_qos_v8, dump_qos_v9
from ruamel.yaml import YAML

from timely_llm_ros.interfaces.topics import (
    TOPIC_FEEDBACK,
    TOPIC_STATUS,
    TOPIC_TASKS,
    TOPIC_TRACE,
)
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.mcap import McapFile

DEFAULT_TOPICS: dict[str, str] = {
    TOPIC_TASKS: ts.TASK,
    TOPIC_FEEDBACK: ts.FEEDBACK,
    TOPIC_STATUS: ts.STATUS,
    TOPIC_TRACE: ts.TRACE_EVENT,
}

_INFINITE = QosTime(sec=9223372036, nsec=854775807)  # RMW_DURATION_INFINITE as rosbag2 writes it
DEFAULT_QOS = Qos(
    history=QosHistory.UNKNOWN,
    depth=0,
    reliability=QosReliability.RELIABLE,
    durability=QosDurability.VOLATILE,
    deadline=_INFINITE,
    lifespan=_INFINITE,
    liveliness=QosLiveliness.AUTOMATIC,
    liveliness_lease_duration=_INFINITE,
    avoid_ros_namespace_conventions=False,
)


def qos_from_profile(profile: Any) -> Qos:
    """An rclpy ``QoSProfile`` (e.g. from ``node.get_publishers_info_by_topic(t)[i].qos_profile``)
    as the rosbags ``Qos`` the bag records; matched by enum names, so rclpy is not imported here.
    A zero duration (rclpy's "default") is written as rosbag2 writes an infinite one."""

    def dur(d: Any) -> QosTime:
        ns = int(getattr(d, "nanoseconds", 0) or 0)
        return (
            _INFINITE
            if ns <= 0 or ns >= 2**63 - 1
            else QosTime(sec=ns // 1_000_000_000, nsec=ns % 1_000_000_000)
        )

    def enum(cls: Any, value: Any) -> Any:
        name = getattr(value, "name", str(value)).upper()
        return cls[name] if name in cls.__members__ else cls.UNKNOWN

    return Qos(
        history=enum(QosHistory, profile.history),
        depth=int(profile.depth),
        reliability=enum(QosReliability, profile.reliability),
        durability=enum(QosDurability, profile.durability),
        deadline=dur(profile.deadline),
        lifespan=dur(profile.lifespan),
        liveliness=enum(QosLiveliness, profile.liveliness),
        liveliness_lease_duration=dur(profile.liveliness_lease_duration),
        avoid_ros_namespace_conventions=bool(profile.avoid_ros_namespace_conventions),
    )


def normalize_msgtype(msgtype: str) -> str:
    """``pkg/Type`` or ``pkg/msg/Type`` -> ``pkg/msg/Type`` (the form bags and rosbags use)."""
    parts = msgtype.strip("/").split("/")
    if len(parts) == 2:
        return f"{parts[0]}/msg/{parts[1]}"
    if len(parts) == 3 and all(parts):
        return "/".join(parts)
    raise ValueError(f"message type {msgtype!r} is not of the form pkg/msg/Type")


def _yaml() -> YAML:
    y = YAML(typ="safe")
    y.default_flow_style = False
    return y


# rclpy major version -> ROS 2 distro (rclpy's release series per distro, index.ros.org): the PyPI
# wheels set no ROS_DISTRO, their rclpy wheel's version says which distro they were built from.
_RCLPY_DISTROS = {3: "humble", 4: "iron", 7: "jazzy", 9: "kilted"}


def ros_distro() -> str:
    """The ROS 2 distro a bag is written under (metadata ``ros_distro``, as ``ros2 bag`` records it).

    ``$ROS_DISTRO`` (a sourced distro), else the distro of the installed rclpy wheel, else the distro
    of the message definitions the typestore uses (:mod:`.typestore`; a bag written without ROS).
    """
    env = os.environ.get("ROS_DISTRO", "").strip()
    if env:
        return env
    from importlib import metadata

    try:
        major = int(metadata.version("ros-rclpy").split(".")[0])
    except (metadata.PackageNotFoundError, ValueError):
        major = -1
    return _RCLPY_DISTROS.get(major, ts.DISTRO)


# rosbag2's metadata version per distro (rosbag2_storage/bag_metadata.hpp on each branch of
# ros2/rosbag2: humble 5, iron 7, jazzy and rolling 9); unknown (newer) distros write the newest.
METADATA_VERSIONS = {"humble": 5, "iron": 7}
NEWEST_METADATA = 9


def metadata_version(distro: str) -> int:
    """The ``metadata.yaml`` version rosbag2 of ``distro`` writes (and reads at most, for Humble)."""
    return METADATA_VERSIONS.get(distro.strip().lower(), NEWEST_METADATA)


def _yaml_text(data: Any) -> str:
    out = io.StringIO()
    _yaml().dump(data, out)
    return out.getvalue()


# ============================================================================== writing
@dataclass
class _Topic:
    name: str
    msgtype: str
    channel: int
    qos: list[Qos]
    digest: str
    count: int = 0


class BagWriteError(RuntimeError):
    """The bag could not be written (a full disk, an I/O error): it was closed at its last complete
    state and takes no more messages. ``cause`` is the OS error."""

    def __init__(self, path: Path, cause: OSError) -> None:
        self.cause = cause
        super().__init__(f"cannot write bag {path}: {cause.strerror or cause}")


class BagWriter:
    """Kill-safe rosbag2 (MCAP) writer; see the module docstring.

    ``topics`` maps topic -> message type (``pkg/msg/Type``); more topics can be added later with
    :meth:`add_topic`. ``qos`` optionally maps a topic to its offered QoS profiles (rosbags ``Qos``).
    ``flush_every_s=None`` disables periodic flushing (one flush at :meth:`close`, for batch jobs).
    Thread-safe: a recorder may write from several callback threads.
    """

    def __init__(
        self,
        path: str | Path,
        topics: Mapping[str, str] | None = None,
        storage: str = "mcap",
        flush_every_s: float | None = 1.0,
        *,
        qos: Mapping[str, Sequence[Qos]] | None = None,
        typestore: Any = None,
        custom_data: Mapping[str, str] | None = None,
        max_pending_bytes: int = 4 << 20,
        distro: str | None = None,
        compression: str = "",
        on_error: Callable[[BagWriteError], None] | None = None,
    ) -> None:
        """``on_error`` is called once, from the thread that hit it, when a write fails (the bag is
        then closed and readable up to its last flush; see :class:`BagWriteError`)."""
        if storage != "mcap":
            raise ValueError(
                f"storage {storage!r} is not supported: BagWriter writes MCAP (rosbag2's default "
                "since Iron); use storage='mcap'"
            )
        if flush_every_s is not None and not (math.isfinite(flush_every_s) and flush_every_s > 0):
            raise ValueError(
                f"flush_every_s must be a positive number of seconds or None, got {flush_every_s!r}"
            )
        self.path = Path(path)
        if self.path.exists():
            raise FileExistsError(
                f"{self.path} exists already; a bag is never overwritten (choose a new name)"
            )
        self.store = typestore or ts.shared_typestore()
        self.flush_every_s = flush_every_s
        self.max_pending_bytes = int(max_pending_bytes)
        self.custom_data = {str(k): str(v) for k, v in (custom_data or {}).items()}
        self.distro = (distro or "").strip() or ros_distro()
        self.version = metadata_version(self.distro)
        self._qos = {k: list(v) for k, v in (qos or {}).items()}
        self._topics: dict[str, _Topic] = {}
        self._schemas: dict[str, int] = {}
        self._lock = threading.RLock()
        self.path.mkdir(parents=True)
        self.storage_file = self.path / f"{self.path.name}_0.mcap"
        self._mcap = McapFile(
            self.storage_file, library="timely_llm_ros.lrtrace.bagio", compression=compression
        )
        self._last_flush = time.monotonic()
        self._dirty = False
        self.closed = False
        self.failed: BagWriteError | None = None
        self.on_error = on_error
        for topic, msgtype in (topics or {}).items():
            self.add_topic(topic, msgtype)
        self._stop = threading.Event()
        self._flush_locked(force_metadata=True)
        self._timer: threading.Thread | None = None
        if flush_every_s is not None:
            self._timer = threading.Thread(target=self._flush_loop, name="bag-flush", daemon=True)
            self._timer.start()

    # -- topics ---------------------------------------------------------------------------------
    @property
    def topics(self) -> dict[str, str]:
        return {t.name: t.msgtype for t in self._topics.values()}

    @property
    def counts(self) -> dict[str, int]:
        return {t.name: t.count for t in self._topics.values()}

    def add_topic(self, topic: str, msgtype: str, qos: Sequence[Qos] | None = None) -> None:
        """Register a topic (idempotent for the same type; ValueError for a different type)."""
        if not isinstance(topic, str) or not topic.startswith("/") or topic.endswith("/") and topic != "/":
            raise ValueError(f"topic must be an absolute ROS name like '/tasks', got {topic!r}")
        msgtype = normalize_msgtype(msgtype)
        with self._lock:
            self._check_open()
            known = self._topics.get(topic)
            if known is not None:
                if known.msgtype != msgtype:
                    raise ValueError(
                        f"topic {topic} is recorded as {known.msgtype}, cannot add it as {msgtype}"
                    )
                return
            if msgtype not in self.store.fielddefs:
                raise ValueError(
                    f"message type {msgtype} is unknown to the typestore (ROS 2 kilted standard "
                    "types and timely_llm_ros); register it before recording it"
                )
            digest = self.store.hash_rihs01(msgtype)
            if msgtype not in self._schemas:
                msgdef, _ = self.store.generate_msgdef(msgtype, ros_version=2)
                self._schemas[msgtype] = self._mcap.add_schema(msgtype, "ros2msg", msgdef)
            profiles = list(qos) if qos is not None else self._qos.get(topic, [DEFAULT_QOS])
            qos_text = self._qos_text(profiles)
            cid = self._mcap.add_channel(
                self._schemas[msgtype],
                topic,
                "cdr",
                {"offered_qos_profiles": qos_text, "topic_type_hash": digest},
            )
            self._topics[topic] = _Topic(topic, msgtype, cid, profiles, digest)
            self._dirty = True

    # -- messages -------------------------------------------------------------------------------
    def write(self, topic: str, t_ns: int, cdr_bytes: bytes | memoryview) -> None:
        """Record one serialized message (CDR with its 4-byte encapsulation header, as rclpy's raw
        subscriptions deliver it) with log time ``t_ns`` (integer nanoseconds)."""
        if isinstance(t_ns, bool) or not isinstance(t_ns, int) or t_ns < 0:
            raise ValueError(f"t_ns must be a non-negative integer nanosecond time, got {t_ns!r}")
        data = bytes(cdr_bytes)
        if len(data) < 4:
            raise ValueError(f"message for {topic} has {len(data)} bytes: not CDR (needs a 4-byte header)")
        with self._lock:
            self._check_open()
            entry = self._topics.get(topic)
            if entry is None:
                raise KeyError(
                    f"topic {topic} was not added to the bag (add_topic first); known: {sorted(self._topics)}"
                )
            self._mcap.add_message(entry.channel, t_ns, data)
            entry.count += 1
            self._dirty = True
            if self._mcap.pending_bytes >= self.max_pending_bytes or (
                self.flush_every_s is not None and time.monotonic() - self._last_flush >= self.flush_every_s
            ):
                self._flush_locked()

    def write_msg(self, topic: str, t_ns: int, msg: Any) -> None:
        """Serialize a rosbags message object with the topic's type and record it."""
        entry = self._topics.get(topic)
        if entry is None:
            raise KeyError(f"topic {topic} was not added to the bag (add_topic first)")
        self.write(topic, t_ns, bytes(self.store.serialize_cdr(msg, entry.msgtype)))

    # -- persistence ----------------------------------------------------------------------------
    def flush(self) -> None:
        with self._lock:
            if not self.closed:
                self._flush_locked()

    def _flush_locked(self, force_metadata: bool = False) -> None:
        if self._dirty or force_metadata:
            try:
                self._mcap.flush()
                self._write_metadata()
            except OSError as exc:
                raise self._fail(exc) from None
            self._dirty = False
        self._last_flush = time.monotonic()

    def _fail(self, exc: OSError) -> BagWriteError:
        """Stop writing: the storage file is back at its last complete state (McapFile rolls back),
        metadata.yaml describes exactly that, the bag is closed; ``on_error`` hears of it once."""
        err = BagWriteError(self.path, exc)
        self.failed = err
        if not self._mcap.closed:
            self._mcap._rollback()  # the metadata failed after a good flush
        counts = self._mcap.channel_counts
        for t in self._topics.values():
            t.count = counts.get(t.channel, 0)
        try:
            self._write_metadata()
        except OSError:  # no room even for that: the previous metadata.yaml stays (it is complete)
            (self.path / "metadata.yaml.tmp").unlink(missing_ok=True)
        self.closed = True
        self._stop.set()
        if self.on_error is not None:
            self.on_error(err)
        return err

    def _flush_loop(self) -> None:
        assert self.flush_every_s is not None
        while not self._stop.wait(self.flush_every_s):
            with self._lock:
                if self.closed:
                    return
                if self._dirty and time.monotonic() - self._last_flush >= self.flush_every_s * 0.5:
                    try:
                        self._flush_locked()
                    except BagWriteError:  # on_error has been told; the bag is closed
                        return

    def _qos_text(self, profiles: list[Qos]) -> str:
        """Offered QoS profiles as the target distro's rosbag2 stores them in a text field."""
        return dump_qos_v8(profiles) if self.version < 9 else _yaml_text(dump_qos_v9(profiles)).strip()

    def _write_metadata(self) -> None:
        text = _yaml_text({"rosbag2_bagfile_information": self._metadata()})
        tmp = self.path / "metadata.yaml.tmp"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, self.path / "metadata.yaml")

    def _metadata(self) -> dict[str, Any]:
        """The bag's metadata in the target distro's format (module docstring)."""
        m = self._mcap
        count = m.message_count
        start = m.start_time if count else 0
        duration = (m.end_time - m.start_time) if count else 0
        topics: list[dict[str, Any]] = [
            {
                "topic_metadata": {
                    "name": t.name,
                    "type": t.msgtype,
                    "serialization_format": "cdr",
                    "offered_qos_profiles": dump_qos_v9(t.qos)
                    if self.version >= 9
                    else self._qos_text(t.qos),
                    "type_description_hash": t.digest,
                },
                "message_count": t.count,
            }
            for t in self._topics.values()
        ]
        info = {
            "version": self.version,
            "storage_identifier": "mcap",
            "duration": {"nanoseconds": duration},
            "starting_time": {"nanoseconds_since_epoch": start},
            "message_count": count,
            "topics_with_message_count": topics,
            "compression_format": "",
            "compression_mode": "",
            "relative_file_paths": [self.storage_file.name],
            "files": [
                {
                    "path": self.storage_file.name,
                    "starting_time": {"nanoseconds_since_epoch": start},
                    "duration": {"nanoseconds": duration},
                    "message_count": count,
                }
            ],
            "custom_data": dict(self.custom_data),  # rosbag2 writes {} when there is none
            "ros_distro": self.distro,
        }
        if self.version < 7:  # Humble: no type hashes (extra keys are ignored there, kept out anyway)
            for entry in topics:
                del entry["topic_metadata"]["type_description_hash"]
        return info

    def _check_open(self) -> None:
        if self.failed is not None:
            raise self.failed
        if self.closed:
            raise RuntimeError(f"bag {self.path} is closed")

    def close(self) -> None:
        """Flush everything and finish the bag (idempotent)."""
        with self._lock:
            if self.closed:
                return
            try:
                # rosbag2's own record of the metadata, as rosbag2_storage_mcap writes it when a bag is
                # closed (read back by `ros2 bag reindex` and storage-level readers)
                self._mcap.add_metadata(
                    "rosbag2",
                    {"serialized_metadata": _yaml_text(self._metadata()), "ROS_DISTRO": self.distro},
                )
                self._flush_locked(force_metadata=True)
                self._mcap.close()
            except BagWriteError:
                pass  # closed at its last complete state; on_error was told
            except OSError as exc:
                self._fail(exc)
            self.closed = True
        self._stop.set()
        if self._timer is not None and self._timer is not threading.current_thread():
            self._timer.join(timeout=5)

    def __enter__(self) -> BagWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
