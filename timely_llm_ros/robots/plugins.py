"""Robot types and robot backends found by name, so a separate package can add a robot.

Two registries, both filled from Python entry points of installed packages (and from this package's
built-ins, which are registered the same way and need no special case anywhere):

* **Robot types** — group ``timely_llm_ros.robot_types``: ``name = "module:attr"`` where ``attr`` is
  a :class:`RobotType` (what a fleet's ``type:`` names: default skill set, accepted backends and,
  optionally, a node class). ``drone`` and ``arm`` are built in.
* **Backends** — group ``timely_llm_ros.robot_backends``: ``name = "module:attr"`` where ``attr``
  is a factory ``(node) -> RobotBackend`` (a :class:`~.base.RobotBackend` subclass taking the node
  works too). ``sim``, ``tello`` and ``ros`` (the generic ROS 2 backend, :mod:`.ros_backend`) are
  built in. A factory may carry ``check_skill_set(skill_set)`` (a function or static method raising
  ``ValueError`` with file/field/reason): it runs at fleet start-up and when the node starts, so a
  malformed mapping stops the robot before it accepts work, never mid-run.

Wherever a name is accepted, ``module:attr`` is accepted too (a type or backend that is importable
but not registered, e.g. ``type: my_robots.rover:ROVER`` in a fleet file).

A plugin package registers itself in its ``setup.py``/``pyproject.toml``::

    entry_points={
        "timely_llm_ros.robot_types": ["rover = rover_robot:ROVER"],
        "timely_llm_ros.config": ["rover_robot = rover_robot:CONFIG_DIR"],   # its skill sets etc.
    }

This module imports no ROS code: a fleet file can be checked on a machine without rclpy (only the
node class and the backends import it, when a robot node starts).
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from importlib import metadata
from typing import Any

from timely_llm_ros.robots.ros_backend_map import check_skill_set as check_ros_skill_set

TYPE_GROUP = "timely_llm_ros.robot_types"
BACKEND_GROUP = "timely_llm_ros.robot_backends"
_TARGET_RE = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")


class PluginError(ValueError):
    """A robot type or backend that cannot be found or is malformed (says which and why)."""


@dataclass(frozen=True)
class RobotType:
    """What a robot type is to the fleet and to its node.

    ``name`` is the robot type the skill sets and execution-time models name (``robot_type:``);
    ``default_skill_set`` is used when a robot gives none; ``backends`` are the backend names this
    type accepts, the first being the default; ``node`` is ``module:Class`` of a
    :class:`~timely_llm_ros.nodes.robot_base.RobotNode` subclass with extra parameters, or ``""``
    for the generic node (:mod:`timely_llm_ros.nodes.robot`), which is all a robot driven through
    :mod:`.ros_backend` needs.
    """

    name: str
    default_skill_set: str
    backends: tuple[str, ...] = ("ros",)
    node: str = ""
    description: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", self.name):
            raise PluginError(f"robot type name {self.name!r} is not an identifier")
        if not isinstance(self.default_skill_set, str) or not self.default_skill_set:
            raise PluginError(f"robot type {self.name!r}: default_skill_set must be a skill set name")
        if (
            not isinstance(self.backends, tuple)
            or not self.backends
            or not all(isinstance(b, str) and b for b in self.backends)
        ):
            raise PluginError(f"robot type {self.name!r}: backends must be a non-empty tuple of names")
        if self.node and not _TARGET_RE.match(self.node):
            raise PluginError(f"robot type {self.name!r}: node {self.node!r} is not 'module:Class'")


# Built-ins, declared exactly like a plugin's entry points (setup.py lists the same names).
DRONE = RobotType(
    "drone",
    "tello_minispec",
    ("sim", "tello", "ros"),
    "timely_llm_ros.nodes.drone:DroneNode",
    "a drone executing MiniSpec plans (simulated, or a real Ryze Tello)",
)
ARM = RobotType(
    "arm",
    "robot_arm",
    ("sim", "ros"),
    "timely_llm_ros.nodes.arm:ArmNode",
    "a robot arm executing call-language plans (simulated)",
)
BUILTIN_TYPES = {"drone": "timely_llm_ros.robots.plugins:DRONE", "arm": "timely_llm_ros.robots.plugins:ARM"}
BUILTIN_BACKENDS = {
    "sim": "timely_llm_ros.robots.plugins:sim_backend",
    "tello": "timely_llm_ros.robots.plugins:tello_backend",
    "ros": "timely_llm_ros.robots.plugins:ros_backend",
}


def load_target(target: str, what: str) -> Any:
    """Import ``module:attr`` (attr may be dotted); a failure names ``what`` and the reason."""
    if not _TARGET_RE.match(target):
        raise PluginError(f"{what}: {target!r} is not 'module:attr'")
    module, attr = target.split(":", 1)
    try:
        obj: Any = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
    except Exception as exc:  # noqa: BLE001 - ImportError, AttributeError, or the plugin's own import-time error
        raise PluginError(f"{what}: cannot load {target!r}: {type(exc).__name__}: {exc}") from None
    return obj


@cache
def _entry_points(group: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for ep in metadata.entry_points(group=group):
        out.setdefault(ep.name, ep.value.replace(" ", ""))
    return out


def registered_types() -> dict[str, str]:
    """``{name: module:attr}`` of every robot type (built-ins, then installed plugins)."""
    return {**_entry_points(TYPE_GROUP), **BUILTIN_TYPES}


def registered_backends() -> dict[str, str]:
    """``{name: module:attr}`` of every backend (built-ins, then installed plugins)."""
    return {**_entry_points(BACKEND_GROUP), **BUILTIN_BACKENDS}


def _lookup(name: Any, table: dict[str, str], kind: str, group: str) -> tuple[str, str]:
    if not isinstance(name, str) or not name:
        raise PluginError(f"{kind} must be a name, got {name!r}")
    if name in table:
        return name, table[name]
    if ":" in name:
        return name, name
    raise PluginError(
        f"unknown {kind} {name!r}; known: {', '.join(sorted(table))} (a package adds one "
        f"with an entry point in group {group!r}, or give 'module:attr')"
    )


def robot_type(name: str) -> RobotType:
    """The robot type registered as ``name`` (or importable as ``module:attr``)."""
    key, target = _lookup(name, registered_types(), "robot type", TYPE_GROUP)
    obj = load_target(target, f"robot type {key!r}")
    if not isinstance(obj, RobotType):
        raise PluginError(
            f"robot type {key!r}: {target!r} is a {type(obj).__name__}, expected a "
            "timely_llm_ros.robots.plugins.RobotType"
        )
    return obj


def backend_factory(name: str) -> Callable[..., Any]:
    """The factory of backend ``name`` (or of ``module:attr``)."""
    key, target = _lookup(name, registered_backends(), "robot backend", BACKEND_GROUP)
    obj = load_target(target, f"robot backend {key!r}")
    if not callable(obj):
        raise PluginError(f"robot backend {key!r}: {target!r} is not callable")
    return obj


def check_backend(name: str, skill_set: Any) -> None:
    """Run the backend's start-up check of a skill set (no ROS graph needed); raises ValueError."""
    check = getattr(backend_factory(name), "check_skill_set", None)
    if callable(check):
        check(skill_set)


def create_backend(name: str, node: Any) -> Any:
    """Build backend ``name`` for a robot node (``node.skill_set``, ``node.p`` are set)."""
    factory = backend_factory(name)
    check_backend(name, node.skill_set)
    return factory(node)


def check_robot(
    type_name: str, backend: str | None, skill_set_name: str | None
) -> tuple[RobotType, str, str]:
    """Everything a robot of a fleet needs before it starts: type, backend, skill set, mapping.

    Returns (type, backend, skill set name); raises :class:`PluginError` or the loaders' errors.
    """
    from timely_llm_ros.core.skills.loader import load_skill_set

    rtype = robot_type(type_name)
    backend = backend or rtype.backends[0]
    if backend not in rtype.backends:
        raise PluginError(
            f"backend {backend!r} is not one of robot type {rtype.name!r}'s backends "
            f"({', '.join(rtype.backends)})"
        )
    sset_name = skill_set_name or rtype.default_skill_set
    sset = load_skill_set(sset_name)
    if sset.robot_type != rtype.name:
        raise PluginError(
            f"skill set {sset_name!r} ({sset.source_path}) is for {sset.robot_type!r} robots, "
            f"not {rtype.name!r}"
        )
    from timely_llm_ros.core.exectime import load_exec_time_model

    model = load_exec_time_model()
    try:
        known = model.skills(rtype.name)
    except (KeyError, ValueError):  # no model file for this robot type at all
        known = set()
    missing = sorted(sset.skill_names() - known)
    if missing:  # the planner estimates every segment's execution time (PUD priority, timeouts)
        raise PluginError(
            f"no execution-time model for skill(s) {', '.join(missing)} of robot type "
            f"{rtype.name!r}: add exec_time/{rtype.name}.yaml to a config directory "
            "(see timely_llm_ros.core.paths)"
        )
    check_backend(backend, sset)
    return rtype, backend, sset_name


def sim_backend(node: Any) -> Any:
    """The simulated backend (execution-time models in wall time), from the node's parameters."""
    from timely_llm_ros.robots.sim import SimBackend

    return SimBackend(
        node.skill_set, exec_mode=node.p["exec_mode"], seed=node.p["seed"], time_scale=node.p["time_scale"]
    )


def tello_backend(node: Any) -> Any:
    """A real Ryze Tello (djitellopy), from the drone node's ``tello_*`` parameters."""
    from timely_llm_ros.robots.tello import TelloBackend

    p = node.p
    return TelloBackend(
        node.skill_set,
        host=p["tello_host"],
        response_timeout_s=p["response_timeout"],
        retry_count=p["retry_count"],
        keepalive_s=p["keepalive_period"],
        late_reply_s=p["late_reply_timeout"],
        max_command_s=p["max_command_time"],
    )


def ros_backend(node: Any) -> Any:
    """The generic ROS 2 backend (:mod:`.ros_backend`): rclpy is imported only here, so a fleet file
    or a skill set's ``backends: ros:`` mapping can be checked (``check_skill_set``) without it."""
    from timely_llm_ros.robots.ros_backend import RosBackend

    return RosBackend(node)


# the mapping check needs only the interface packages, not rclpy (robots/ros_backend_map.py)
ros_backend.check_skill_set = check_ros_skill_set  # type: ignore[attr-defined]  # attached to the factory for the fleet check (a function attribute)
