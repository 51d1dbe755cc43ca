"""ROS 2 adapter helpers shared by the nodes: topic names, QoS profiles, message conversion.

Everything here imports rclpy / generated messages; the core (``timely_llm_ros.core``) never does.
"""
