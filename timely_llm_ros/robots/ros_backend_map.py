"""The ``backends: ros:`` section of a skill set: which ROS 2 interface each skill drives, checked.

A skill set that robots run through the generic ROS backend (:mod:`.ros_backend`) maps every skill to
an action goal, a service call or a topic message of the robot's existing stack::

    backends:
      ros:
        wait_for_servers: 10.0            # s the node waits at start-up for every server (0: don't)
        skills:
          go:                             # skill abbreviation
            action: nav2_msgs/action/NavigateToPose
            name: navigate_to_pose        # relative: resolved in the robot's namespace
            goal:                         # field path -> value
              pose.header.frame_id: map
              pose.pose.position.x: {arg: x, scale: 0.01}   # cm in the plan, m on the robot
              pose.pose.position.y: $y                       # the argument as it is
            timeout: 120.0                # s from sending the goal to its result; then cancelled
            cancel_on_task_cancel: true   # cancel the goal when the planner ends the task
          grip:
            service: std_srvs/srv/SetBool
            name: gripper/set
            request: {data: $closed}
            success: success              # a boolean field that must be true (or {field, equals})
            error: message                # text field quoted when the call fails
            returns: success              # value the skill returns to the plan
          say:
            topic: std_msgs/msg/String
            name: speech
            message: {data: $text}

:func:`parse_mapping` checks everything that can be checked without a running graph — the interface
type imports, every field path exists in it and is a scalar, each ``$arg`` names an argument of the
skill with a compatible type, every skill of the set is mapped — and raises :class:`MappingError`
with the file, the field path in the YAML and the reason. The structure itself (keys, types) is
checked earlier by the skill-set JSON Schema.

Importing interface modules needs their Python packages (e.g. ``pip install ros-std-srvs``), not rclpy
itself.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass, field
from typing import Any

KINDS = {"action": "action", "service": "srv", "topic": "msg"}
_FIELDS_OF = {"action": ("goal", "Goal"), "service": ("request", "Request"), "topic": ("message", None)}
_READ_FROM = {"action": "Result", "service": "Response"}
_TYPE_RE = re.compile(r"^([A-Za-z][A-Za-z0-9_]*)/(action|srv|msg)/([A-Z][A-Za-z0-9]*)$")
_PATH_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]*(\[-?\d+\])?(\.[A-Za-z][A-Za-z0-9_]*(\[-?\d+\])?)*$")
_INT = {"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "byte", "octet", "char"}
_FLOAT = {"float", "double", "long double"}
_STRING = {"string", "wstring"}
DEFAULT_TIMEOUT = 60.0
DEFAULT_SERVER_WAIT = 10.0


class MappingError(ValueError):
    """A ``backends.ros`` section that cannot drive the robot (file, field path, reason)."""


@dataclass(frozen=True)
class Source:
    """Where one field's value comes from: a skill argument (scaled) or a constant."""

    arg: str | None = None
    value: Any = None
    scale: float = 1.0
    offset: float = 0.0

    @property
    def scaled(self) -> bool:
        return self.scale != 1.0 or self.offset != 0.0

    def resolve(self, args: dict[str, Any]) -> Any:
        if self.arg is None:
            return self.value
        v = args[self.arg]
        return v * self.scale + self.offset if self.scaled else v


@dataclass(frozen=True)
class Binding:
    """One skill's ROS interface and how to fill it and read it."""

    skill: str
    kind: str  # action | service | topic
    type_name: str
    name: str
    interface: Any  # the imported class (Fibonacci, SetBool, String)
    fields: dict[str, Source] = field(default_factory=dict)
    field_types: dict[str, str] = field(default_factory=dict)
    success: tuple[str, Any] | None = None  # (path, required value)
    error: str | None = None
    returns: str | None = None
    timeout: float = DEFAULT_TIMEOUT
    cancel_on_task_cancel: bool = True

    @property
    def request_class(self) -> Any:
        member = _FIELDS_OF[self.kind][1]
        return getattr(self.interface, member) if member else self.interface

    @property
    def label(self) -> str:
        return f"{self.kind} {self.name!r} ({self.type_name})"


@dataclass(frozen=True)
class RosMapping:
    """The checked ``backends.ros`` section of one skill set."""

    bindings: dict[str, Binding]
    wait_for_servers: float = DEFAULT_SERVER_WAIT


def import_interface(type_name: str, kind: str) -> Any:
    """``pkg/action/Name`` → the generated class; MappingError when it is not there."""
    m = _TYPE_RE.match(type_name) if isinstance(type_name, str) else None
    if m is None:
        raise MappingError(f"{type_name!r} is not an interface type 'package/{KINDS[kind]}/Name'")
    pkg, sub, cls = m.groups()
    if sub != KINDS[kind]:
        raise MappingError(f"{type_name!r} is a {sub} type; a {kind} needs 'package/{KINDS[kind]}/Name'")
    try:
        module = importlib.import_module(f"{pkg}.{sub}")
    except ImportError as exc:
        raise MappingError(
            f"interface package {pkg!r} is not installed ({exc}); install its Python "
            f"package (from the PyPI ROS wheels: pip install ros-{pkg.replace('_', '-')})"
        ) from None
    if not hasattr(module, cls):
        raise MappingError(f"{pkg}.{sub} has no {cls!r}")
    return getattr(module, cls)


def _msg_class(type_str: str) -> Any:
    pkg, _, name = type_str.partition("/")
    return getattr(importlib.import_module(f"{pkg}.msg"), name)


def field_type(cls: Any, path: str) -> str:
    """The ROS type string of ``path`` in message class ``cls`` (``a.b[2].c``); MappingError if none."""
    if not _PATH_RE.match(path):
        raise MappingError(f"{path!r} is not a field path (name.name[index]...)")
    current: Any = cls
    type_str = ""
    for part in path.split("."):
        name, _, index = part.partition("[")
        fields = current.get_fields_and_field_types()
        if name not in fields:
            raise MappingError(
                f"{cls.__module__.split('.')[0]}/{cls.__name__} has no field {path!r} "
                f"({name!r} is not one of {', '.join(fields)})"
            )
        type_str = fields[name]
        if index:
            inner = re.match(r"^(?:sequence<([^,>]+)(?:, ?\d+)?>|([^\[]+)\[\d*\])$", type_str)
            if inner is None:
                raise MappingError(f"field {name!r} in {path!r} is a {type_str}, not a sequence")
            type_str = inner.group(1) or inner.group(2)
        if "/" in type_str:
            current = _msg_class(type_str)
    return type_str


def _scalar_kind(type_str: str) -> str | None:
    if type_str in _INT:
        return "int"
    if type_str in _FLOAT:
        return "float"
    if type_str == "boolean":
        return "bool"
    if type_str in _STRING or type_str.startswith(("string<", "wstring<")):
        return "str"
    return None


def _value_kind(v: Any) -> str:
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "str" if isinstance(v, str) else type(v).__name__


_COMPATIBLE = {"int": {"int"}, "float": {"int", "float"}, "bool": {"bool"}, "str": {"str"}}


def _source(raw: Any, skill: Any, where: str) -> Source:
    args = {a.name: a for a in skill.args}
    if isinstance(raw, str) and raw.startswith("$") and not raw.startswith("$$"):
        raw = {"arg": raw[1:]}
    if isinstance(raw, str) and raw.startswith("$$"):
        return Source(value=raw[1:])
    if isinstance(raw, dict) and "value" in raw:
        return Source(value=raw["value"])
    if isinstance(raw, dict):
        name = raw.get("arg")
        if name not in args:
            known = ", ".join(args) or "none"
            raise MappingError(
                f"{where}: {name!r} is not an argument of skill {skill.abbr!r} (arguments: {known})"
            )
        scale, offset = float(raw.get("scale", 1.0)), float(raw.get("offset", 0.0))
        if (scale != 1.0 or offset != 0.0) and args[name].type not in ("int", "float"):
            raise MappingError(
                f"{where}: scale/offset need a numeric argument, {name!r} is {args[name].type}"
            )
        return Source(arg=name, scale=scale, offset=offset)
    return Source(value=raw)


def _check_fill(cls: Any, path: str, src: Source, skill: Any, where: str) -> str:
    ftype = field_type(cls, path)
    want = _scalar_kind(ftype)
    if want is None:
        raise MappingError(f"{where}: field {path!r} is a {ftype}; map its scalar sub-fields instead")
    if src.arg is not None:
        have = next(a for a in skill.args if a.name == src.arg).type
        if src.scaled and want == "int":
            have = "int"  # a scaled number is rounded to the nearest integer (see fill)
    else:
        have = _value_kind(src.value)
    if have not in _COMPATIBLE[want]:
        what = f"argument {src.arg!r} ({have})" if src.arg is not None else f"constant {src.value!r}"
        raise MappingError(f"{where}: {what} does not fit field {path!r} of type {ftype}")
    return ftype


def _read_check(cls: Any, path: str, where: str) -> str:
    ftype = field_type(cls, path)
    if _scalar_kind(ftype) is None:
        raise MappingError(
            f"{where}: field {path!r} is a {ftype}; it must be a scalar (index a sequence: name[0], name[-1])"
        )
    return ftype


def parse_binding(skill: Any, raw: dict[str, Any], where: str) -> Binding:
    """One skill's entry (structure already checked by the schema)."""
    kinds = [k for k in KINDS if k in raw]
    if len(kinds) != 1:
        raise MappingError(f"{where}: give exactly one of action, service, topic (got {kinds or 'none'})")
    kind = kinds[0]
    type_name = raw[kind]
    try:
        interface = import_interface(type_name, kind)
    except MappingError as exc:
        raise MappingError(f"{where}.{kind}: {exc}") from None
    fkey, member = _FIELDS_OF[kind]
    fill_cls = getattr(interface, member) if member else interface
    for other in {"goal", "request", "message"} - {fkey}:
        if other in raw:
            raise MappingError(f"{where}.{other}: a {kind} is filled through '{fkey}', not '{other}'")
    fields: dict[str, Source] = {}
    types: dict[str, str] = {}
    for path, value in (raw.get(fkey) or {}).items():
        src = _source(value, skill, f"{where}.{fkey}.{path}")
        try:
            types[path] = _check_fill(fill_cls, path, src, skill, f"{where}.{fkey}.{path}")
        except MappingError as exc:
            raise MappingError(str(exc) if str(exc).startswith(where) else f"{where}.{fkey}: {exc}") from None
        fields[path] = src
    read_cls = getattr(interface, _READ_FROM[kind]) if kind in _READ_FROM else None
    success = error = returns = None
    for key in ("success", "error", "returns"):
        if key not in raw:
            continue
        if read_cls is None:
            raise MappingError(f"{where}.{key}: a topic message has no reply to read {key!r} from")
        spec = raw[key]
        path = spec["field"] if isinstance(spec, dict) else spec
        try:
            ftype = _read_check(read_cls, path, f"{where}.{key}")
        except MappingError as exc:
            raise MappingError(str(exc) if str(exc).startswith(where) else f"{where}.{key}: {exc}") from None
        if key == "success":
            if isinstance(spec, dict) and "equals" in spec:
                success = (path, spec["equals"])
            elif _scalar_kind(ftype) != "bool":
                raise MappingError(
                    f"{where}.success: field {path!r} is a {ftype}; give "
                    "{field: ..., equals: <value>} for a non-boolean field"
                )
            else:
                success = (path, True)
        elif key == "error":
            error = path
        else:
            returns = path
    if skill.returns != "none" and returns is None:
        raise MappingError(
            f"{where}: skill {skill.abbr!r} returns {skill.returns}; say which field of the "
            f"{'result' if kind == 'action' else 'response'} it returns ('returns: <field>')"
        )
    timeout = float(raw.get("timeout", DEFAULT_TIMEOUT))
    cancel = bool(raw.get("cancel_on_task_cancel", True))
    return Binding(
        skill.abbr,
        kind,
        type_name,
        raw["name"],
        interface,
        fields,
        types,
        success,
        error,
        returns,
        timeout,
        cancel,
    )


def parse_mapping(skill_set: Any) -> RosMapping:
    """The checked ``backends.ros`` section of ``skill_set`` (see the module docstring)."""
    src = skill_set.source_path or skill_set.name
    section = (getattr(skill_set, "backends", None) or {}).get("ros")
    if section is None:
        raise MappingError(
            f"{src}: skill set {skill_set.name!r} has no 'backends: ros:' section mapping its "
            "skills to ROS 2 interfaces, so the ros backend cannot run it"
        )
    raw_skills = section.get("skills") or {}
    bindings: dict[str, Binding] = {}
    for abbr, raw in raw_skills.items():
        where = f"backends.ros.skills.{abbr}"
        skill = skill_set.skills.get(abbr)
        if skill is None:
            raise MappingError(
                f"{src}: {where}: {abbr!r} is not a skill of this set ({', '.join(skill_set.skills)})"
            )
        try:
            bindings[abbr] = parse_binding(skill, raw, where)
        except MappingError as exc:
            raise MappingError(f"{src}: {exc}") from None
    missing = [s for s in skill_set.skills if s not in bindings]
    if missing:
        raise MappingError(
            f"{src}: backends.ros.skills: no mapping for skill(s) {', '.join(missing)}; a plan "
            "may use every skill of the set, so each needs one"
        )
    return RosMapping(bindings, float(section.get("wait_for_servers", DEFAULT_SERVER_WAIT)))


def check_skill_set(skill_set: Any) -> None:
    """Start-up check used by the plugin registry (raises MappingError); the ``ros`` backend's
    factory is :func:`timely_llm_ros.robots.plugins.ros_backend` (not here: this module is imported
    by :mod:`.ros_backend`, so a factory here importing it back would close an import cycle)."""
    parse_mapping(skill_set)


# ------------------------------------------------------------------------- filling and reading
def _walk(msg: Any, path: str) -> tuple[Any, str, int | None]:
    parts = path.split(".")
    obj = msg
    for part in parts[:-1]:
        obj = _step(obj, part)
    name, _, index = parts[-1].partition("[")
    return obj, name, int(index[:-1]) if index else None


def _step(obj: Any, part: str) -> Any:
    name, _, index = part.partition("[")
    value = getattr(obj, name)
    return value[int(index[:-1])] if index else value


def fill(binding: Binding, args: dict[str, Any]) -> Any:
    """A new request/goal/message of the binding, its fields set from the call's arguments."""
    msg = binding.request_class()
    for path, src in binding.fields.items():
        value = src.resolve(args)
        kind = _scalar_kind(binding.field_types[path])
        if kind == "float":
            value = float(value)
        elif kind == "int" and isinstance(value, float):
            value = int(round(value))  # only a scaled argument gets here (checked at start-up)
        obj, name, index = _walk(msg, path)
        if index is None:
            setattr(obj, name, value)
        else:
            getattr(obj, name)[index] = value
    return msg


def read(msg: Any, path: str) -> Any:
    """A scalar field of a result/response as a plain Python value."""
    obj, name, index = _walk(msg, path)
    value = getattr(obj, name)
    if index is not None:
        value = value[index]
    if hasattr(value, "item"):  # numpy scalars of array fields
        value = value.item()
    return value
