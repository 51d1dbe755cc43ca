"""Message types of the LRTrace bags for ``rosbags`` (no rclpy needed to read or write a bag).

Our interfaces are parsed from the package's own ``.msg`` files — the source tree's ``msg/`` or the
installed ``<prefix>/share/timely_llm_ros/msg/`` — on top of the ROS 2 kilted standard types, so the
RIHS01 type hashes written into a bag are the ones rosidl computes for the same files (checked in
test/viz/test_bagio.py against the installed ``*.json`` type descriptions).

Also here: the uint8 codes of event kinds, task states and feedback states, read from the message
constants (so they cannot drift from ``msg/*.msg``), and float-seconds <-> ``builtin_interfaces/Time``.
"""

from __future__ import annotations

import math
import os
import sys
from pathlib import Path
from typing import Any

from rosbags.typesys import Stores, get_types_from_msg, get_typestore

from timely_llm_ros.core import events as ev

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


def _constants(store: Any, msgtype: str) -> dict[str, int]:
    consts = store.fielddefs[msgtype][0]
    return {name: int(value) for name, _typ, value in consts}


def _codes() -> tuple[dict[str, int], dict[str, int], dict[str, int]]:
    store = shared_typestore()
    kinds = _constants(store, TRACE_EVENT)
    states = _constants(store, STATUS)
    fb = _constants(store, FEEDBACK)
    return (
        {k: kinds[k] for k in ev.EVENT_KINDS},
        {s: states[s] for s in ev.TASK_STATES},
        {ev.STARTED: fb["STARTED"], ev.DONE: fb["DONE"], ev.FEEDBACK_FAILED: fb["FAILED"]},
    )


EVENT_KIND_CODE, TASK_STATE_CODE, FEEDBACK_CODE = _codes()
EVENT_KIND_NAME = {v: k for k, v in EVENT_KIND_CODE.items()}
TASK_STATE_NAME = {v: k for k, v in TASK_STATE_CODE.items()}
FEEDBACK_NAME = {v: k for k, v in FEEDBACK_CODE.items()}


def seconds_to_ns(t: float) -> int:
    """Float seconds -> integer nanoseconds (clamped at 0: bag log times are unsigned)."""
    if not isinstance(t, (int, float)) or not math.isfinite(t) or t <= 0:
        return 0
    return int(round(float(t) * 1e9))


def stamp(store: Any, t: float) -> Any:
    """Float seconds -> ``builtin_interfaces/Time`` (nan or <= 0 -> the zero stamp, as ros/convert.py)."""
    ns = seconds_to_ns(t)
    sec, nanosec = divmod(ns, 1_000_000_000)
    if sec > 2**31 - 1:
        raise ValueError(f"time {t} s does not fit builtin_interfaces/Time")
    return store.types[TIME](sec=sec, nanosec=nanosec)


def from_stamp(msg: Any) -> float:
    return msg.sec + msg.nanosec * 1e-9
