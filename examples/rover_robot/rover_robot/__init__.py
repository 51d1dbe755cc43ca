"""A rover robot type for timely_llm_ros, added from outside the package (see README "Add your robot").

``ROVER`` is what the fleet's ``type: rover`` resolves to (entry point ``timely_llm_ros.robot_types``);
``CONFIG_DIR`` adds this package's skill set, execution-time model and workload to the config search
path (entry point ``timely_llm_ros.config``). The rover has no node class of its own: the generic
robot node runs it, and the generic ROS backend turns each skill call into the action or service
call its skill set names (``config/skills/rover_drive.yaml``).
"""

from pathlib import Path

from timely_llm_ros.robots.plugins import RobotType

CONFIG_DIR = str(Path(__file__).resolve().parent / "config")
ROVER = RobotType(
    name="rover",
    default_skill_set="rover_drive",
    backends=("ros",),
    description="a wheeled rover driven through its own ROS 2 action and services",
)
