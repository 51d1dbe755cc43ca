"""Message types of the LRTrace bags for ``rosbags`` (no rclpy needed to read or write a bag).

Our interfaces are parsed from the package's own ``.msg`` files — the source tree's ``msg/`` or the
installed ``<prefix>/share/timely_llm_ros/msg/`` — on top of the ROS 2 kilted standard types, so the
RIHS01 type hashes written into a bag are the ones rosidl computes for the same files (checked in
test/lrtrace/test_bagio.py against the installed ``*.json`` type descriptions).

Also here: :class:`BagTypes`, the bag back-end of the one message adapter
(:mod:`timely_llm_ros.interfaces.mapping`; :func:`adapter`), and through it the uint8 codes of event
kinds, task states and feedback states and float-seconds <-> ``builtin_interfaces/Time``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from timely_llm_ros.interfaces.mapping import MessageAdapter

PACKAGE = "timely_llm_ros"
# Order matters only for readability; rosbags resolves nested types after registering all of them.
MSG_NAMES = ("Tuf", "SkillCall", "Task", "Segment", "SegmentFeedback", "TaskStatus", "TraceEvent")
TASK = f"{PACKAGE}/msg/Task"
SEGMENT = f"{PACKAGE}/msg/Segment"
SKILL_CALL = f"{PACKAGE}/msg/SkillCall"
FEEDBACK = f"{PACKAGE}/msg/SegmentFeedback"
STATUS = f"{PACKAGE}/msg/TaskStatus"
TRACE_EVENT = f"{PACKAGE}/msg/TraceEvent"
TUF_MSG = f"{PACKAGE}/msg/Tuf"
TIME = "builtin_interfaces/msg/Time"
HEADER = "std_msgs/msg/Header"


def msg_dir() -> Path:
    """Directory holding our ``.msg`` files (``TIMELY_LLM_MSG_DIR`` overrides, like config_dir)."""
    override = os.environ.get("TIMELY_LLM_MSG_DIR")
    if override:
        return Path(override)
    candidates = [Path(__file__).resolve().parents[2] / "msg"]
    for prefix in [sys.prefix, *os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)]:
        if prefix:
            candidates.append(Path(prefix) / "share" / PACKAGE / "msg")
    for candidate in candidates:
        if (candidate / "TraceEvent.msg").is_file():
            return candidate
    raise FileNotFoundError(
        "timely_llm_ros .msg files not found; looked in "
        + ", ".join(str(c) for c in candidates)
        + " (set TIMELY_LLM_MSG_DIR to override)"
    )


DISTRO = "kilted"  # the distro of the standard message definitions below


def base_typestore() -> Any:
    """A fresh rosbags typestore with the ROS 2 kilted types only (for definitions read from a bag)."""
    return get_typestore(Stores.ROS2_KILTED)


def make_typestore(directory: Path | None = None) -> Any:
    """A fresh rosbags typestore: ROS 2 kilted types plus ours (callers may register more types)."""
    folder = directory or msg_dir()
    store = get_typestore(Stores.ROS2_KILTED)
    types: dict = {}
    for name in MSG_NAMES:
        path = folder / f"{name}.msg"
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as exc:
            raise FileNotFoundError(f"cannot read message definition {path}: {exc}") from exc
        types.update(get_types_from_msg(text, f"{PACKAGE}/msg/{name}"))
    store.register(types)
    return store


_SHARED: list[Any] = []


def shared_typestore() -> Any:
    """One typestore per process for serialising our own types (never register foreign types in it)."""
    if not _SHARED:
        _SHARED.append(make_typestore())
    return _SHARED[0]


class BagTypes:
    """The message back-end of the bag writer and reader: the classes of a rosbags typestore."""

    NAMES = {name: f"{PACKAGE}/msg/{name}" for name in MSG_NAMES} | {"Time": TIME, "Header": HEADER}

    def __init__(self, store: Any) -> None:
        self.store = store

    def new(self, msgtype: str, /, **fields: Any) -> Any:
        return self.store.types[self.NAMES[msgtype]](**fields)

    def constant(self, name: str, const: str) -> int:
        consts = self.store.fielddefs[self.NAMES[name]][0]
        return next(int(value) for key, _typ, value in consts if key == const)


_ADAPTERS: dict[int, tuple[Any, MessageAdapter]] = {}


def adapter(store: Any = None) -> MessageAdapter:
    """The message adapter on ``store``'s classes (default: the :func:`shared_typestore`), one per store."""
    store = shared_typestore() if store is None else store
    entry = _ADAPTERS.get(id(store))
    if entry is None or entry[0] is not store:
        entry = _ADAPTERS[id(store)] = (store, MessageAdapter(BagTypes(store)))
    return entry[1]


def stamp(store: Any, t: float) -> Any:
    """Float seconds -> ``builtin_interfaces/Time`` (nan or <= 0 -> the zero stamp, as ros/convert.py)."""
    return adapter(store).to_stamp(t)


# name <-> uint8 code tables, read from the message constants (so they cannot drift from msg/*.msg)
EVENT_KIND_CODE, EVENT_KIND_NAME = adapter().event_kind_code, adapter().event_kind_name
TASK_STATE_CODE, TASK_STATE_NAME = adapter().task_state_code, adapter().task_state_name
FEEDBACK_CODE, FEEDBACK_NAME = adapter().feedback_code, adapter().feedback_name
