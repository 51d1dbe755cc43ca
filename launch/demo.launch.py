"""The demo fleet: ``ros2 launch timely_llm_ros demo.launch.py``.

Includes fleet.launch.py with config/demo_fleet.yaml (planner with the simulated engine, three
simulated drones, one simulated arm, time model, recorder and a 30 s mixed-TUF workload) and keeps
DDS on loopback unless ``localhost:=false``. fleet.launch.py's other arguments (``engine``,
``model_path``, ``policy``, ``use_sim_time``, ``log_level``, ``params_file``) pass through, e.g.
``ros2 launch timely_llm_ros demo.launch.py engine:=llamacpp``. The same graph as processes:
``timely-llm fleet config/demo_fleet.yaml --localhost``.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription
from launch.launch_description_sources import PythonLaunchDescriptionSource
from launch.substitutions import LaunchConfiguration

from launch import LaunchDescription

PACKAGE = "timely_llm_ros"


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    return LaunchDescription(
        [
            DeclareLaunchArgument(
                "config",
                default_value=os.path.join(share, "config", "demo_fleet.yaml"),
                description="fleet YAML of the demo",
            ),
            DeclareLaunchArgument(
                "localhost",
                default_value="true",
                description="keep all DDS traffic on this machine (loopback only)",
            ),
            IncludeLaunchDescription(
                PythonLaunchDescriptionSource(os.path.join(share, "launch", "fleet.launch.py")),
                launch_arguments={
                    "config": LaunchConfiguration("config"),
                    "localhost": LaunchConfiguration("localhost"),
                }.items(),
            ),
        ]
    )
