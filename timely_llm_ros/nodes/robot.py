"""Any robot type by name: ``python -m timely_llm_ros.nodes.robot TYPE --ros-args -r __ns:=/<agent> ...``.

``TYPE`` is a robot type registered by this package (``drone``, ``arm``) or by an installed plugin
(entry-point group ``timely_llm_ros.robot_types``), or ``module:attr`` of a
:class:`~timely_llm_ros.robots.plugins.RobotType`. The type's own node class runs when it names one
(the drone's adds the Tello parameters); otherwise :class:`GenericRobotNode` — the common robot
parameters (``skill_set``, ``backend``, ...) with the type's default skill set and backends. The node
contract (segments in, feedback out) is in :mod:`timely_llm_ros.nodes.robot_base`.

``timely-llm fleet`` starts every robot this way; ``ros2 run timely_llm_ros robot rover --ros-args
-r __ns:=/rover_1`` does the same by hand.
"""

from __future__ import annotations

import sys
from typing import Any

from timely_llm_ros.nodes.common import run_node
from timely_llm_ros.nodes.robot_base import RobotNode, common_params
from timely_llm_ros.robots.plugins import PluginError, RobotType, load_target, robot_type


class GenericRobotNode(RobotNode):
    """A robot node for a type without a node class of its own (set up by :func:`node_class`)."""

    rtype: RobotType

    def __init__(self, **kwargs: Any) -> None:
        t = self.rtype
        super().__init__(common_params(t.name, t.default_skill_set, t.backends), **kwargs)


def node_class(rtype: RobotType) -> type[RobotNode]:
    """The node class that runs robots of ``rtype``."""
    if not rtype.node:
        return type(
            f"{rtype.name.title()}Node",
            (GenericRobotNode,),
            {"rtype": rtype, "robot_type": rtype.name, "node_name": rtype.name},
        )
    cls = load_target(rtype.node, f"node class of robot type {rtype.name!r}")
    if not (isinstance(cls, type) and issubclass(cls, RobotNode)):
        raise PluginError(f"robot type {rtype.name!r}: node {rtype.node!r} is not a RobotNode subclass")
    if cls.robot_type != rtype.name:
        raise PluginError(
            f"robot type {rtype.name!r}: node class {rtype.node!r} serves robot type {cls.robot_type!r}"
        )
    return cls


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv if argv is None else argv)
    ros_at = args.index("--ros-args") if "--ros-args" in args else len(args)
    own = args[1:ros_at]
    if len(own) != 1 or own[0].startswith("-"):
        print(
            "usage: python -m timely_llm_ros.nodes.robot TYPE --ros-args -r __ns:=/<agent> [-p name:=value]"
            "\n  TYPE: a registered robot type or module:attr of a RobotType",
            file=sys.stderr,
        )
        return 0 if own and own[0] in ("-h", "--help") else 2
    try:
        cls = node_class(robot_type(own[0]))
    except PluginError as exc:
        print(f"robot: error: {exc}", file=sys.stderr)
        return 2
    return run_node(
        cls, [args[0], *args[ros_at:]], description=f"{own[0]} robot node (see timely_llm_ros.nodes.robot)"
    )


if __name__ == "__main__":
    raise SystemExit(main())
