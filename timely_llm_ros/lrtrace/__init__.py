"""LRTrace recordings: rosbag2 bags of a planner run (bagio), and the timeline model and task records
rebuilt from them (timeline_model, from_bag) for the ``timeline`` / ``report`` commands and the rqt
plugin. Nothing here imports rclpy: bags are read and written with ``rosbags``.
"""
