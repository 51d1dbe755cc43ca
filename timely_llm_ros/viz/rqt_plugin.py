"""rqt plugin "TimelyLLM timeline": the live timeline widget inside rqt.

Registered through the package's top-level ``plugin.xml`` (class ``timely_llm_ros.viz.rqt_plugin.
TimelinePlugin``, base ``rqt_gui_py::Plugin``) and package.xml's
``<export><rqt_gui plugin="${prefix}/plugin.xml"/></export>``. rqt (``rqt_gui_py``) is not
installable from PyPI, so this module imports it at the top and is only imported by rqt itself;
everything it shows lives in :mod:`timely_llm_ros.viz.widget`, which is tested offscreen and also
runs standalone (``timely-llm rqt-timeline``).
"""

from __future__ import annotations

from typing import Any

from rqt_gui_py.plugin import Plugin

from timely_llm_ros.viz import ros_source
from timely_llm_ros.viz.widget import TimelineWidget


class TimelinePlugin(Plugin):
    """Subscribes to /trace_events and /tasks with rqt's node and shows the last N seconds."""

    def __init__(self, context: Any) -> None:
        super().__init__(context)
        self.setObjectName("TimelyLLMTimeline")
        self._node = context.node
        # rqt's node clock: wall time, or the replayed bag's time when rqt runs with use_sim_time
        self._widget = TimelineWidget(window_s=30.0, clock=ros_source.node_clock(self._node))
        title = "TimelyLLM timeline"
        if context.serial_number() > 1:
            title += f" ({context.serial_number()})"
        self._widget.setWindowTitle(title)
        context.add_widget(self._widget)
        self._subs = ros_source.attach(self._node, self._widget)

    def shutdown_plugin(self) -> None:
        self._widget.stop()
        ros_source.detach(self._node, self._subs)
        self._subs = []

    def save_settings(self, plugin_settings: Any, instance_settings: Any) -> None:
        instance_settings.set_value("window_s", self._widget.canvas.window_s)

    def restore_settings(self, plugin_settings: Any, instance_settings: Any) -> None:
        value = instance_settings.value("window_s")
        try:
            seconds = float(value) if value is not None else None
        except (TypeError, ValueError):
            seconds = None
        if seconds and seconds > 0:
            self._widget.window_box.setValue(int(round(seconds)))
