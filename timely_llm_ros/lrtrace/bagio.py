"""Write and read LRTrace rosbag2 bags without ``ros2 bag`` (pure Python, no rclpy needed).

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

Reading (:func:`read_bag`): per topic the decoded messages with their log times, the expected
topics that are missing or empty, and a list of problems (unfinished or truncated storage file,
undecodable messages, metadata that disagrees with the storage) instead of exceptions wherever the
data can still be used. Bags written by other tools (``ros2 bag record``, sqlite3 storage, zstd
chunks) are read through ``rosbags``; an MCAP file that ``rosbags`` refuses is scanned record by
record up to the damage.

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
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rosbags.interfaces import Qos, QosDurability, QosHistory, QosLiveliness, QosReliability, QosTime
from rosbags.rosbag2.metadata import dump_qos_v8, dump_qos_v9
from ruamel.yaml import YAML

from timely_llm_ros.interfaces.topics import (
    SEGMENTS_SUFFIX,
    TOPIC_FEEDBACK,
    TOPIC_STATUS,
    TOPIC_TASKS,
    TOPIC_TRACE,
)
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.mcap import McapFile, scan_records

DEFAULT_TOPICS: dict[str, str] = {
    TOPIC_TASKS: ts.TASK,
    TOPIC_FEEDBACK: ts.FEEDBACK,
    TOPIC_STATUS: ts.STATUS,
    TOPIC_TRACE: ts.TRACE_EVENT,
}
# What a complete LRTrace bag holds; "*/skill_segments" stands for at least one agent's segment topic.
EXPECTED_TOPICS = (TOPIC_TASKS, TOPIC_TRACE, TOPIC_STATUS, TOPIC_FEEDBACK, "*" + SEGMENTS_SUFFIX)

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


# ============================================================================== reading
@dataclass
class TopicData:
    topic: str
    msgtype: str
    messages: list[tuple[int, Any]] = field(default_factory=list)  # (log time ns, decoded message)
    declared: int | None = None  # message count metadata.yaml claims (None: no metadata)


@dataclass
class BagContents:
    """Everything :func:`read_bag` could decode, plus what is missing and what went wrong."""

    path: Path
    topics: dict[str, TopicData] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)
    custom_data: dict[str, str] = field(default_factory=dict)
    recovered: bool = False  # the storage file was scanned past a missing footer / damage

    def messages(self, topic: str) -> list[tuple[int, Any]]:
        data = self.topics.get(topic)
        return list(data.messages) if data else []

    def by_type(self, msgtype: str) -> list[tuple[str, int, Any]]:
        """(topic, t_ns, msg) of every topic of ``msgtype``, in log-time order."""
        out = [(t.topic, ns, m) for t in self.topics.values() if t.msgtype == msgtype for ns, m in t.messages]
        out.sort(key=lambda x: x[1])
        return out

    def trace_events(self) -> list:
        """``/trace_events`` as core :class:`~timely_llm_ros.core.events.TraceEvent` (log-time order)."""
        from timely_llm_ros.lrtrace.convert import events_of

        return events_of(self)

    def task_infos(self) -> dict:
        """task_id -> :class:`~timely_llm_ros.lrtrace.convert.TaskInfo` from ``/tasks``."""
        from timely_llm_ros.lrtrace.convert import task_infos_of

        return task_infos_of(self)

    def describe(self) -> str:
        """Human-readable summary: topics with counts, then what is missing and the problems."""
        lines = [f"bag {self.path}"]
        for t in sorted(self.topics.values(), key=lambda x: x.topic):
            lines.append(f"  {t.topic:<34} {t.msgtype:<36} {len(t.messages):>7} messages")
        for m in self.missing:
            lines.append(f"  MISSING: {m}")
        for p in self.problems:
            lines.append(f"  PROBLEM: {p}")
        return "\n".join(lines)


class _Decoder:
    """Decodes one connection's CDR: with our types when the bag's hash matches, else with the
    definition embedded in the bag (a bag from an older or newer interface version)."""

    def __init__(self, problems: list[str]) -> None:
        self.ours = ts.shared_typestore()
        self.problems = problems
        self._cache: dict[tuple[str, str, str], tuple[Any, str]] = {}

    def store_for(self, msgtype: str, digest: str, msgdef: str) -> Any:
        key = (msgtype, digest, msgdef[:64])
        if key in self._cache:
            return self._cache[key][0]
        store = None
        if msgtype in self.ours.fielddefs and (not digest or digest == self.ours.hash_rihs01(msgtype)):
            store = self.ours
        elif msgdef:
            from rosbags.typesys import get_types_from_msg

            try:
                # A store without our current types: the bag's (older or newer) definitions of them
                # would clash with the installed ones under the same names.
                store = ts.base_typestore()
                store.register(get_types_from_msg(msgdef, msgtype))
                if msgtype in self.ours.fielddefs:
                    self.problems.append(
                        f"{msgtype} in the bag differs from the installed definition "
                        "(type hash); decoded with the definition embedded in the bag"
                    )
            except Exception as exc:  # noqa: BLE001 - a foreign definition rosbags cannot parse
                self.problems.append(f"cannot use the embedded definition of {msgtype}: {exc}")
                store = None
        elif msgtype in self.ours.fielddefs:
            store = self.ours
        self._cache[key] = (store, "")
        return store


def _resolve(path: Path) -> tuple[Path | None, list[Path]]:
    """(bag directory with metadata.yaml or None, storage files)."""
    if path.is_file():
        return None, [path]
    meta = path / "metadata.yaml"
    files = sorted(path.glob("*.mcap")) + sorted(path.glob("*.db3"))
    return (path if meta.is_file() else None), files


def read_bag(path: str | Path, expected: Sequence[str] = EXPECTED_TOPICS) -> BagContents:
    """Read a bag directory (or a bare ``.mcap`` file); see the module docstring.

    Raises ``FileNotFoundError`` only when there is nothing to read at all (no such path, no
    storage file); everything else ends up in :attr:`BagContents.problems`.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no bag at {path}")
    out = BagContents(path=path)
    bagdir, files = _resolve(path)
    if not files:
        raise FileNotFoundError(f"{path} holds no bag storage file (*.mcap or *.db3)")
    decoder = _Decoder(out.problems)
    declared: dict[str, int] = {}
    if bagdir is not None:
        declared = _read_metadata(bagdir, out)
    read_ok = False
    if bagdir is not None or path.suffix == ".db3":
        read_ok = _read_with_rosbags(path, out, decoder)
    if not read_ok:
        mcaps = [f for f in files if f.suffix == ".mcap"]
        if not mcaps:
            out.problems.append(f"no readable storage file in {path}")
        for f in mcaps:
            _read_scanned(f, out, decoder)
    for topic, n in declared.items():
        data = out.topics.get(topic)
        if data is not None:
            data.declared = n
            if n > len(data.messages):
                out.problems.append(
                    f"{topic}: metadata.yaml lists {n} messages, only {len(data.messages)} could be read"
                )
    for data in out.topics.values():
        data.messages.sort(key=lambda x: x[0])
    out.missing = _missing(out, expected)
    return out


def _read_metadata(bagdir: Path, out: BagContents) -> dict[str, int]:
    try:
        doc = _yaml().load((bagdir / "metadata.yaml").read_text(encoding="utf-8"))
        info = doc["rosbag2_bagfile_information"]
        out.custom_data = {str(k): str(v) for k, v in (info.get("custom_data") or {}).items()}
        return {
            t["topic_metadata"]["name"]: int(t["message_count"])
            for t in info.get("topics_with_message_count") or []
        }
    except Exception as exc:  # noqa: BLE001 - unreadable metadata must not hide the messages in the storage file
        out.problems.append(f"metadata.yaml is unreadable ({exc}); reading the storage file directly")
        return {}


def _read_with_rosbags(path: Path, out: BagContents, decoder: _Decoder) -> bool:
    from rosbags.rosbag2 import Reader

    try:
        with Reader(path) as reader:
            conns = list(reader.connections)
            for c in conns:
                out.topics.setdefault(c.topic, TopicData(c.topic, c.msgtype))
            failures: dict[str, list] = {}
            for conn, t_ns, raw in reader.messages():
                _decode_into(
                    out, decoder, conn.topic, conn.msgtype, conn.digest, conn.msgdef.data, t_ns, raw, failures
                )
            _report_failures(out, failures)
        return True
    except Exception as exc:  # noqa: BLE001 - rosbags refuses the file: fall back to scanning it
        out.topics.clear()
        out.problems.append(
            f"rosbags could not read the bag ({type(exc).__name__}: {exc}); "
            "scanning the storage file record by record"
        )
        return False


def _read_scanned(f: Path, out: BagContents, decoder: _Decoder) -> None:
    scan = scan_records(f)
    if scan.problem:
        out.recovered = True
        out.problems.append(f"{f.name}: {scan.problem}; using the {len(scan.messages)} messages before it")
    failures: dict[str, list] = {}
    for ch in scan.channels.values():
        out.topics.setdefault(ch.topic, TopicData(ch.topic, ch.schema_name))
    for cid, t_ns, raw in scan.messages:
        known = scan.channels.get(cid)
        if known is None:
            failures.setdefault(f"channel {cid}", []).append("message before its channel definition")
            continue
        digest = known.metadata.get("topic_type_hash", "")
        _decode_into(
            out, decoder, known.topic, known.schema_name, digest, known.schema_data, t_ns, raw, failures
        )
    _report_failures(out, failures)


def _decode_into(
    out: BagContents,
    decoder: _Decoder,
    topic: str,
    msgtype: str,
    digest: str,
    msgdef: str,
    t_ns: int,
    raw: bytes,
    failures: dict[str, list],
) -> None:
    store = decoder.store_for(msgtype, digest, msgdef)
    if store is None:
        failures.setdefault(topic, []).append(f"no definition for {msgtype}")
        return
    try:
        msg = store.deserialize_cdr(raw, msgtype)
    except Exception as exc:  # noqa: BLE001 - a message rosbags cannot decode is reported with its topic, the rest is read
        failures.setdefault(topic, []).append(f"{type(exc).__name__}: {exc}")
        return
    out.topics.setdefault(topic, TopicData(topic, msgtype)).messages.append((t_ns, msg))


def _report_failures(out: BagContents, failures: dict[str, list]) -> None:
    for topic, errs in failures.items():
        out.problems.append(f"{topic}: {len(errs)} message(s) could not be decoded (first: {errs[0]})")


def _missing(out: BagContents, expected: Sequence[str]) -> list[str]:
    missing = []
    for name in expected:
        if name.startswith("*"):
            suffix = name[1:]
            hits = [t for t in out.topics.values() if t.topic.endswith(suffix)]
            if not hits:
                missing.append(f"/<agent>{suffix} (no segment topic recorded)")
            elif not any(t.messages for t in hits):
                missing.append(f"/<agent>{suffix} (topics recorded, but no messages)")
            continue
        data = out.topics.get(name)
        if data is None:
            missing.append(f"{name} (not recorded)")
        elif not data.messages:
            missing.append(f"{name} (recorded, but no messages)")
    return missing
