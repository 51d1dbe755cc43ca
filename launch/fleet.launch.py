"""Launch a timely_llm_ros fleet from one YAML file (config/fleet.yaml documents the format).

    ros2 launch timely_llm_ros fleet.launch.py                       # the installed config/fleet.yaml
    ros2 launch timely_llm_ros fleet.launch.py config:=my_fleet.yaml localhost:=true

The YAML is turned into nodes by ``timely_llm_ros.fleet.fleet_nodes`` — the same function that
``timely-llm fleet CONFIG.yaml`` uses to start the graph as plain processes — so both start the same
nodes, names, namespaces and parameters. ``localhost:=true`` keeps DDS on loopback (tests, demos);
by default the ROS 2 discovery settings of the environment apply. When the workload node exits
(``exit_when_done``), the whole launch shuts down.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, OpaqueFunction, SetEnvironmentVariable, Shutdown
from launch.conditions import IfCondition
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import Node

from launch import LaunchDescription

PACKAGE = "timely_llm_ros"


def _fleet_nodes(context, *args, **kwargs):
    # imported at launch time: the package's Python modules are installed next to its messages
    from timely_llm_ros.fleet import fleet_nodes, load_fleet

    config = LaunchConfiguration("config").perform(context)
    actions = []
    for spec in fleet_nodes(load_fleet(config)):
        actions.append(Node(
            package=PACKAGE,
            executable=spec.executable,
            name=spec.name,
            namespace=spec.namespace or None,
            parameters=[spec.params],
            output="screen",
            emulate_tty=True,
            on_exit=[Shutdown(reason="workload finished")] if spec.role == "workload" else None,
        ))
    return actions


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    localhost = LaunchConfiguration("localhost")
    return LaunchDescription([
        DeclareLaunchArgument("config", default_value=os.path.join(share, "config", "fleet.yaml"),
                              description="fleet YAML: planner, robots, time model, recorder, workload"),
        DeclareLaunchArgument("localhost", default_value="false",
                              description="true: keep all DDS traffic on this machine (loopback only)"),
        SetEnvironmentVariable("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST",
                               condition=IfCondition(localhost)),
        SetEnvironmentVariable("FASTDDS_DEFAULT_PROFILES_FILE",
                               os.path.join(share, "config", "fastdds_localhost.xml"),
                               condition=IfCondition(localhost)),
        OpaqueFunction(function=_fleet_nodes),
    ])
