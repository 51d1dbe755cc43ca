"""The Python face of the timely_llm_ros interfaces (``msg/``, ``srv/``, ``action/``), free of ROS.

:mod:`.topics`: topic names and the agent-id rule. :mod:`.mapping`: core values <-> message fields,
written once and parameterised by a message-class back-end (the rclpy classes of the interface build
in :mod:`timely_llm_ros.ros.convert`, the rosbags typestore classes in
:mod:`timely_llm_ros.lrtrace.typestore`). Nothing here imports rclpy or the generated messages, so
bag tools work on machines without ROS.
"""
