"""ROS 2 nodes of timely_llm_ros (thin rclpy adapters over the core), one module per executable.

Each module runs as ``python -m timely_llm_ros.nodes.<name> --ros-args ...`` and is installed as
``lib/timely_llm_ros/<name>`` for ``ros2 run`` / launch: planner, timemodel, workload, drone, arm,
recorder, replay. Shared plumbing (declared parameters, ``main()``) is in :mod:`.common`.
"""
