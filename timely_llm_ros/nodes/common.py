"""Shared plumbing of the timely_llm_ros nodes: declared parameters and a clean ``main()``.

**Parameters.** Each node lists its parameters as :class:`Param` entries; :func:`declare_params`
declares them with a ``ParameterDescriptor`` (description, type, integer/float range, read_only,
allowed values in ``additional_constraints``) and registers one on-set callback that re-validates
every change (range, choices, a per-parameter check function) so a bad ``ros2 param set`` or YAML
value is refused with a reason instead of surfacing later as a crash. YAML files follow the usual
form (``/**: ros__parameters: {...}`` or keyed by node name) and are passed with ``--params-file``.
Two conveniences for hand-written YAML: an integer given for a float parameter is accepted, and an
empty list ``[]`` for a string-array parameter (whose type YAML cannot tell) means "empty".

**main().** :func:`run_node` initialises rclpy with the process's ``--ros-args``, builds the node,
spins it until SIGINT/SIGTERM, then calls the node's ``close()`` (if any), destroys it and shuts
rclpy down, returning an exit status: 0 after a signal or a node-requested stop, 2 for bad
parameters or arguments (one clear line on stderr), 1 for an unexpected error. Signals are handled
by us (rclpy's own handlers off) so that shutdown always runs the node's cleanup, in order. A node
started by fleet.launch.py or ``timely-llm fleet`` also gets SIGTERM when that launcher dies, however
it died (:mod:`timely_llm_ros.ros.parent_watch`: ``ros2 launch`` orphans its nodes on SIGTERM).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import rclpy
from rcl_interfaces.msg import (
    FloatingPointRange,
    IntegerRange,
    ParameterDescriptor,
    SetParametersResult,
)
from rclpy.executors import ExternalShutdownException, SingleThreadedExecutor
from rclpy.node import Node
from rclpy.parameter import Parameter
from rclpy.signals import SignalHandlerOptions
from rclpy.utilities import remove_ros_args

from timely_llm_ros.ros.parent_watch import ENV as PARENT_ENV
from timely_llm_ros.ros.parent_watch import watch_parent
from timely_llm_ros.ros.secure_dds import apply_security
from timely_llm_ros.ros.secure_dds import explain as explain_security

_TYPES: dict[type, Parameter.Type] = {
    bool: Parameter.Type.BOOL,
    int: Parameter.Type.INTEGER,
    float: Parameter.Type.DOUBLE,
    str: Parameter.Type.STRING,
    list: Parameter.Type.STRING_ARRAY,  # the only array type our nodes use
}


class ParamError(ValueError):
    """A parameter value that the node cannot use (message names the parameter and the reason)."""


@dataclass(frozen=True)
class Param:
    """One declared parameter.

    ``check(value)`` returns an error text or None; ``choices`` restricts a string; ``low``/``high``
    bound a number (inclusive). ``read_only`` parameters can only be given at start-up.
    ``configure_time`` parameters are read by a lifecycle node's configure transition: they are not
    read-only for ROS, the node itself refuses a change while it is configured (see the planner).
    """

    name: str
    default: Any
    description: str
    low: float | None = None
    high: float | None = None
    choices: tuple[str, ...] = ()
    read_only: bool = False
    check: Callable[[Any], str | None] | None = None
    configure_time: bool = False

    @property
    def kind(self) -> type:
        return type(self.default)

    def descriptor(self) -> ParameterDescriptor:
        d = ParameterDescriptor(
            name=self.name,
            type=_TYPES[self.kind].value,
            description=self.description,
            read_only=self.read_only,
        )
        if self.kind is list:
            # rclpy types an empty list as BYTE_ARRAY (and `[]` in YAML as unset), so a string array
            # that may be empty is declared dynamically typed; validate() enforces "list of strings"
            d.dynamic_typing = True
            d.type = Parameter.Type.NOT_SET.value
        if self.kind is int and (self.low is not None or self.high is not None):
            d.integer_range = [
                IntegerRange(
                    from_value=int(self.low if self.low is not None else -(2**63)),
                    to_value=int(self.high if self.high is not None else 2**63 - 1),
                    step=0,
                )
            ]
        elif self.kind is float and (self.low is not None or self.high is not None):
            d.floating_point_range = [
                FloatingPointRange(
                    from_value=float(self.low if self.low is not None else -math.inf),
                    to_value=float(self.high if self.high is not None else math.inf),
                    step=0.0,
                )
            ]
        notes = ["one of: " + ", ".join(self.choices)] if self.choices else []
        if self.configure_time:
            notes.append("set only while the node is unconfigured (cleanup, set, configure)")
        d.additional_constraints = "; ".join(notes)
        return d

    def normalize(self, value: Any) -> Any:
        """The value as the node uses it: a list for string arrays, a float for float parameters."""
        if self.kind is list:
            return list(value or [])
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value

    def validate(self, value: Any) -> str | None:
        """Error text for ``value`` or None (the descriptor's range is re-checked here on purpose:
        rclpy skips range checks for values equal to infinity and we want one message style)."""
        if self.kind is float and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        if self.kind is list:
            if value is None or (isinstance(value, (bytes, list, tuple)) and len(value) == 0):
                value = []
            if not isinstance(value, (list, tuple)) or not all(isinstance(v, str) for v in value):
                return f"parameter {self.name!r} must be a list of strings, got {value!r}"
        elif not isinstance(value, self.kind) or (self.kind is int and isinstance(value, bool)):
            return f"parameter {self.name!r} must be {self.kind.__name__}, got {value!r}"
        if self.kind is float and not math.isfinite(value):
            return f"parameter {self.name!r} must be finite, got {value!r}"
        if self.low is not None and value < self.low:
            return f"parameter {self.name!r} must be >= {self.low}, got {value!r}"
        if self.high is not None and value > self.high:
            return f"parameter {self.name!r} must be <= {self.high}, got {value!r}"
        if self.choices and value not in self.choices:
            return f"parameter {self.name!r} must be one of {', '.join(self.choices)}, got {value!r}"
        if self.check is not None:
            problem = self.check(list(value) if self.kind is list else value)
            if problem:
                return f"parameter {self.name!r}: {problem}"
        return None


def _coerce_overrides(node: Node, params: Sequence[Param]) -> None:
    """Accept ints for float parameters and untyped empty lists for string arrays (see module doc).

    The overrides dict is rclpy's own record of ``-p``/``--params-file`` values; fixing the type
    there, before declaration, is what lets ``timeout: 5`` in YAML mean 5.0.
    """
    overrides = node._parameter_overrides  # no public API to inspect overrides
    for p in params:
        given = overrides.get(p.name)
        if given is None:
            continue
        v = given.value
        if p.kind is float and isinstance(v, int) and not isinstance(v, bool):
            overrides[p.name] = Parameter(p.name, Parameter.Type.DOUBLE, float(v))
        elif p.kind is list and (v is None or (isinstance(v, (list, tuple)) and len(v) == 0)):
            overrides[p.name] = Parameter(p.name, Parameter.Type.STRING_ARRAY, [])


def declare_params(
    node: Node, params: Sequence[Param], on_change: Callable[[str, Any], None] | None = None
) -> dict[str, Any]:
    """Declare ``params`` on ``node``; return their start-up values; raise :class:`ParamError`.

    ``on_change(name, value)`` is called after a validated run-time change (``ros2 param set``).
    """
    table = {p.name: p for p in params}
    _coerce_overrides(node, params)

    def on_set(changes: list[Parameter]) -> SetParametersResult:
        for change in changes:
            spec = table.get(change.name)
            if spec is None:
                continue
            problem = spec.validate(change.value)
            if problem:
                return SetParametersResult(successful=False, reason=problem)
        return SetParametersResult(successful=True)

    node.add_on_set_parameters_callback(on_set)
    values: dict[str, Any] = {}
    for p in params:
        try:
            declared = node.declare_parameter(p.name, p.default, p.descriptor())
        except Exception as exc:  # noqa: BLE001 - rclpy raises several types; all mean "this value is unusable"
            problem = (
                p.validate(node._parameter_overrides[p.name].value)
                if (p.name in node._parameter_overrides)
                else None
            )
            raise ParamError(problem or f"parameter {p.name!r}: {exc}") from None
        values[p.name] = p.normalize(declared.value)
        problem = p.validate(values[p.name])
        if problem:
            raise ParamError(problem)
    if on_change is not None:

        def post_set(changes: list[Parameter]) -> None:
            for change in changes:
                if change.name in table:
                    on_change(change.name, table[change.name].normalize(change.value))

        node.add_post_set_parameters_callback(post_set)
    return values


def ros_param_args(params: dict[str, Any]) -> list[str]:
    """``-p name:=value`` pairs for a node's ``--ros-args`` (the CLI wrappers of recorder and replay).

    Booleans are written as ``true``/``false``, lists as YAML string arrays, everything else as is.
    """
    out: list[str] = []
    for name, value in params.items():
        if isinstance(value, bool):
            text = "true" if value else "false"
        elif isinstance(value, (list, tuple)):
            text = "[" + ",".join(f"'{v}'" for v in value) + "]"
        else:
            text = str(value)
        out += ["-p", f"{name}:={text}"]
    return out


def nonempty(value: str) -> str | None:
    return None if value.strip() else "must not be empty"


# --------------------------------------------------------------------------------------- main()
class StopRequested(Exception):
    """Raised inside a callback to end the node's spin loop normally (exit status 0)."""


def params_help(params: Sequence[Param]) -> str:
    """Parameter list for ``--help``: name, default, read-only mark, description."""
    lines = ["parameters (--ros-args -p name:=value, or --params-file FILE with /**: ros__parameters:):"]
    for p in params:
        ro = ", read-only" if p.read_only else (", set while unconfigured" if p.configure_time else "")
        lines.append(f"  {p.name} (default {p.default!r}{ro}): {p.description}")
    return "\n".join(lines)


def _ros_args_error(prog: str, exc: Exception) -> str:
    """One line instead of rcl's traceback for ``--ros-args`` it cannot parse."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    text = text.split(", at /")[0]  # rcl appends C source locations
    return (
        f"{prog}: error: the ROS arguments cannot be parsed ({text}); a -p value is read as YAML: quote "
        "a string that looks like a mapping or list, e.g. -p \"name:='{a: 1}'\""
    )


def forget_destroyed(node: Node) -> int:
    """Drop the dead weak references a destroyed entity leaves in the node's default callback group.

    Why: rclpy (kilted, ``CallbackGroup.add_entity``) records a weak reference to every publisher,
    subscription and event handler it creates, and ``Node.destroy_*`` never removes it: a node that
    opens and closes an entity per agent (the planner's segment publishers, the recorder's and time
    model's per-robot subscriptions) grows by two references per agent forever (issue 27: ghost
    agents; ``tools/ghost_memory.py``). Returns how many were dropped."""
    group = node.default_callback_group
    entities = getattr(group, "entities", None)
    if not isinstance(entities, set):  # another rclpy: nothing known to prune
        return 0
    dead = {ref for ref in entities if ref() is None}
    entities.difference_update(dead)
    return len(dead)


def run_node(
    factory: Callable[[], Node],
    argv: Sequence[str] | None = None,
    description: str = "",
    spin_period: float = 0.1,
    executor_factory: Callable[[], Any] = SingleThreadedExecutor,
    params: Sequence[Param] = (),
) -> int:
    """Run one node until SIGINT/SIGTERM or until it calls ``request_stop()``; return an exit status.

    The node may define ``close()`` (called before destruction) and read ``stop_requested`` — a
    ``threading.Event`` set here on a signal, which worker threads should watch.
    """
    args = list(sys.argv if argv is None else argv)
    prog = Path(args[0]).stem if args else "node"  # "planner" for python -m timely_llm_ros.nodes.planner
    try:
        non_ros = remove_ros_args(args=args)[1:]
    except Exception as exc:  # noqa: BLE001 - rcl refused the --ros-args (e.g. a -p value it cannot parse as YAML)
        print(_ros_args_error(prog, exc), file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(
        prog=prog,
        description=description,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=params_help(params)
        if params
        else "Node parameters: --ros-args -p name:=value or --params-file FILE",
    )
    parser.parse_args(non_ros)  # --help, or a clear error for stray arguments
    try:  # security on and a Fast DDS with it preloaded: through a profile (ros/secure_dds.py)
        note = apply_security(args)
    except ValueError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 2
    if note:
        print(f"{parser.prog}: {note}", file=sys.stderr)
    stop = threading.Event()
    try:
        rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)
    except Exception as exc:  # noqa: BLE001 - rcl refuses the arguments with several exception types
        print(_ros_args_error(parser.prog, exc), file=sys.stderr)
        return 2
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    node = None
    status = 0
    try:
        try:  # launched by fleet.launch.py / timely-llm fleet: stop when the launcher dies (parent_watch)
            gone = watch_parent()
        except ValueError as exc:
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
        except OSError as exc:
            print(
                f"{parser.prog}: warning: will not stop with its launcher ({PARENT_ENV}): {exc}",
                file=sys.stderr,
            )
            gone = None
        if gone is not None:
            print(
                f"{parser.prog}: the process that launched it (pid {gone}) is gone: not starting",
                file=sys.stderr,
            )
            return 0
        try:
            node = factory()
        except (ParamError, ValueError, KeyError) as exc:
            print(f"{parser.prog}: error: {exc}", file=sys.stderr)
            return 2
        node.stop_requested = stop  # type: ignore[attr-defined]  # node classes read it; rclpy Node has no such attribute
        executor = executor_factory()
        executor.add_node(node)
        while not stop.is_set():
            try:
                executor.spin_once(timeout_sec=spin_period)
            except StopRequested:
                break
            except (KeyboardInterrupt, ExternalShutdownException):
                break
        stop.set()
    except Exception as exc:  # noqa: BLE001 - last resort: say what broke instead of a bare traceback-less exit
        node_name = node.get_name() if node is not None else parser.prog
        why = explain_security(exc)
        if why is not None:  # security on, DDS without it: one line, not a traceback
            print(f"{node_name}: error: {why}", file=sys.stderr)
            return 2
        print(f"{node_name}: fatal error: {type(exc).__name__}: {exc}", file=sys.stderr)
        import traceback

        traceback.print_exc()
        status = 1
    finally:
        stop.set()
        if node is not None:
            close = getattr(node, "close", None)
            if callable(close):
                try:
                    close()
                except Exception as exc:  # noqa: BLE001 - cleanup must not hide the exit status
                    print(f"{node.get_name()}: error during shutdown: {exc}", file=sys.stderr)
                    status = status or 1
            node.destroy_node()
        rclpy.try_shutdown()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    exit_status = getattr(node, "exit_status", None)  # a node may set one (the workload node does)
    if node is not None and exit_status:
        return int(exit_status)
    return status
