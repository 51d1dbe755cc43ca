"""Read LRTrace rosbag2 bags without ``ros2 bag`` (pure Python, no rclpy needed).

:func:`read_bag` gives per topic the decoded messages with their log times, the expected topics that
are missing or empty, and a list of problems (unfinished or truncated storage file, undecodable
messages, metadata that disagrees with the storage) instead of exceptions wherever the data can still
be used. Bags written by other tools (``ros2 bag record``, sqlite3 storage, zstd chunks) are read
through ``rosbags``; an MCAP file that ``rosbags`` refuses (the last chunk of a killed recorder) is
scanned record by record up to the damage (:mod:`.mcap`). A message whose type hash differs from the
installed interfaces is decoded with the definition embedded in the bag.

Why a module of its own: writing (:mod:`.bagio`) and reading share only the topic names and the
type store; a reader (the ``timeline`` / ``report`` commands, the tests) needs none of the writer's
metadata, QoS and flushing machinery.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from timely_llm_ros.interfaces.topics import (
    SEGMENTS_SUFFIX,
    TOPIC_FEEDBACK,
    TOPIC_STATUS,
    TOPIC_TASKS,
    TOPIC_TRACE,
)
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.mcap import scan_records

# What a complete LRTrace bag holds; "*/skill_segments" stands for at least one agent's segment topic.
EXPECTED_TOPICS = (TOPIC_TASKS, TOPIC_TRACE, TOPIC_STATUS, TOPIC_FEEDBACK, "*" + SEGMENTS_SUFFIX)


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
        doc = YAML(typ="safe").load((bagdir / "metadata.yaml").read_text(encoding="utf-8"))
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
