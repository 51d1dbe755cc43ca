"""The demo fleet: ``ros2 launch timely_llm_ros demo.launch.py``.

Includes fleet.launch.py with config/demo_fleet.yaml (planner with the **simulated engine** — the
paper's GPU timing, profile llama3-8b-fp16-rtx4090 — three simulated drones, one simulated arm, time
model, recorder and a 30 s mixed-TUF slice of WID 1) and keeps DDS on loopback unless
``localhost:=false``. This is *not* what ``make demo`` runs: ``make demo`` (``timely-llm demo``) runs
the embedded LLM (llama.cpp, SmolLM2-135M on the CPU) on config/workloads/demo.yaml with every ERT
scaled by 8 for the CPU; the launch says which engine it runs when it starts. fleet.launch.py's
other arguments (``engine``, ``model_path``, ``policy``, ``use_sim_time``, ``log_level``,
``params_file``) pass through, e.g. ``engine:=llamacpp`` (the real model, but on this file's unscaled
GPU-time TUFs: expect late tasks on a CPU). The same graph as processes:
``timely-llm fleet config/demo_fleet.yaml --localhost``.
"""

import os

from ament_index_python.packages import get_package_share_directory
from launch.actions import DeclareLaunchArgument, IncludeLaunchDescription, LogInfo
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
            DeclareLaunchArgument(
                "engine",
                default_value="sim",
                description="planner engine: sim (default here; the paper's GPU timing), llamacpp, vllm",
            ),
            LogInfo(
                msg=[
                    "demo.launch.py: planner engine '",
                    LaunchConfiguration("engine"),
                    "' on config/demo_fleet.yaml's workload (make demo / timely-llm demo runs the "
                    "embedded llama.cpp model with ERTs scaled x8 instead)",
                ]
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
