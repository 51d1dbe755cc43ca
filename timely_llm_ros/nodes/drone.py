"""Drone node: one per drone, in the drone's namespace; executes MiniSpec segments (``tello_minispec``).

Backends: ``sim`` (execution-time models in wall time, perception answered from the task's scene;
:mod:`timely_llm_ros.robots.sim`) and ``tello`` (a real Ryze Tello through djitellopy 2.5.0;
:mod:`timely_llm_ros.robots.tello` documents the command mapping, splitting, keep-alive and retries).
The node contract is in :mod:`timely_llm_ros.nodes.robot_base`.

Run::

    python -m timely_llm_ros.nodes.drone --ros-args -r __ns:=/drone_1 -p backend:=sim -p exec_mode:=min
    python -m timely_llm_ros.nodes.drone --ros-args -r __ns:=/drone_1 -p backend:=tello

One tello-backend node per process and network: djitellopy binds UDP 8889/8890 on all interfaces and
every Tello answers at 192.168.10.1 in its own Wi-Fi, so a second drone needs a second machine or
network namespace.
"""

from __future__ import annotations

from typing import Any

from timely_llm_ros.nodes.common import Param, run_node
from timely_llm_ros.nodes.robot_base import RobotNode, common_params
from timely_llm_ros.robots.plugins import DRONE

TELLO_PARAMS = [
    Param("tello_host", "192.168.10.1", "tello: the drone's address (Tello SDK default)", read_only=True),
    Param(
        "response_timeout",
        7.0,
        "tello: seconds to wait for a command's reply (djitellopy's 7 s)",
        low=1.0,
        high=60.0,
        read_only=True,
    ),
    Param(
        "retry_count",
        3,
        "tello: sends of a command the drone answers with 'error' (all tries)",
        low=1,
        high=10,
        read_only=True,
    ),
    Param(
        "keepalive_period",
        5.0,
        "tello: send a keep-alive after this long without a command (s); the drone lands after 15 s",
        low=0.2,
        high=12.0,
        read_only=True,
    ),
    Param(
        "late_reply_timeout",
        5.0,
        "tello: after a reply timeout, wait this much longer for a late reply "
        "before judging from the state stream (s)",
        low=0.0,
        high=60.0,
        read_only=True,
    ),
    Param(
        "max_command_time",
        5.0,
        "tello: split motions so each SDK command is modelled to take at most "
        "this long (s), well inside the reply timeout",
        low=1.0,
        high=30.0,
        read_only=True,
    ),
]


class DroneNode(RobotNode):
    robot_type = "drone"
    node_name = "drone"

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(
            common_params("drone", DRONE.default_skill_set, DRONE.backends) + TELLO_PARAMS, **kwargs
        )


def main(argv: list[str] | None = None) -> int:
    return run_node(DroneNode, argv, description="drone robot node (see timely_llm_ros.nodes.drone)")


if __name__ == "__main__":
    raise SystemExit(main())
