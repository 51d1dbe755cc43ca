"""Arm node: one per robot arm, in its namespace; executes ``robot_arm`` or ``arm_fltrnn`` segments.

Backend ``sim`` only: the arm execution-time models (``config/exec_time/arm.yaml``: TimelyLLM's
uniform ranges for sc/gt/pi/dr, the public FLTRNN samples for move_to/take/drop) waited in wall time,
and a gripper state that refuses impossible plans (:mod:`timely_llm_ros.robots.arm_world`). There is
no public interface data for a real arm driver here (the Indy7's gRPC API, PyPI ``neuromeka``, has no
motion-time data), so none is pretended. The node contract is in :mod:`timely_llm_ros.nodes.robot_base`.

Run::

    python -m timely_llm_ros.nodes.arm --ros-args -r __ns:=/arm_1 -p skill_set:=arm_fltrnn
"""

from __future__ import annotations

from typing import Any

from timely_llm_ros.nodes.common import run_node
from timely_llm_ros.nodes.robot_base import RobotNode, common_params
from timely_llm_ros.robots.plugins import ARM


class ArmNode(RobotNode):
    robot_type = "arm"
    node_name = "arm"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(common_params("arm", ARM.default_skill_set, ARM.backends), **kwargs)


def main(argv: list[str] | None = None) -> int:
    return run_node(ArmNode, argv, description="robot-arm node (see timely_llm_ros.nodes.arm)")


if __name__ == "__main__":
    raise SystemExit(main())
