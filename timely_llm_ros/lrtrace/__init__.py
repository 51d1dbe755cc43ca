"""LRTrace recordings without rclpy: rosbag2 bags of a planner run, and the timeline model and task
records rebuilt from them, for the ``timeline`` / ``report`` commands and the rqt plugin.

What is here: :mod:`.bagio` (writing and reading bags; ``rosbags`` underneath), :mod:`.typestore`
(the message types of a bag, the bag back-end of the message adapter), :mod:`.convert` (messages of
a bag to core values), :mod:`.mcap` (the MCAP storage checks), :mod:`.simbag` (a simulation's
events as a bag), :mod:`.timeline_model` and :mod:`.from_bag` (spans and task records from a bag).

This face lists the public API, grouped by the module that defines each name, and imports a module
only when one of its names is first read (:mod:`timely_llm_ros.core.face`): the timeline model needs
no ``rosbags`` (an optional extra), so it is not loaded with it.
"""

from timely_llm_ros.core.face import lazy_face

_HOMES: dict[str, tuple[str, ...]] = {
    "timely_llm_ros.lrtrace.bagio": ("BagWriter", "BagWriteError"),
    "timely_llm_ros.lrtrace.bagread": ("BagContents", "read_bag"),
    "timely_llm_ros.lrtrace.typestore": ("make_typestore",),
    "timely_llm_ros.lrtrace.simbag": ("write_sim_bag",),
    "timely_llm_ros.lrtrace.timeline_model": ("TimelineModel", "Span", "TaskLane"),
    "timely_llm_ros.lrtrace.from_bag": ("Run", "load_run"),
}
__all__, __getattr__, __dir__ = lazy_face(__name__, _HOMES)
