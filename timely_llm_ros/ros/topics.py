"""Topic and service names and the agent-id rule: :mod:`timely_llm_ros.interfaces.topics` (re-exported).

Their one home is the ROS-free ``interfaces`` layer, so the bag writer and reader (``lrtrace``, no
rclpy) and the nodes share them; this module keeps the import path the nodes and users have.
"""

from __future__ import annotations

from timely_llm_ros.interfaces.topics import *  # noqa: F403 (the public names, see __all__ there)
from timely_llm_ros.interfaces.topics import __all__  # noqa: F401
