"""``timely-llm rqt-timeline``: the rqt plugin's widget in its own window, without rqt.

Live (default): an rclpy node subscribes to ``/trace_events`` and ``/tasks`` exactly as the plugin
does (viz/ros_source.py); the executor spins in a background thread, Qt owns the main thread.
``--use-sim-time`` runs that node with ``use_sim_time:=true``: the window follows ``/clock``, e.g.
the bag time published by ``timely-llm replay`` (so a replayed run shows as it was recorded).
Replay (``--bag``): the bag's events are fed on a virtual clock at ``--rate`` times real speed,
each task announced when it arrives. ``--screenshot PNG`` saves the window after ``--duration``
seconds and quits (documentation, headless checks with ``QT_QPA_PLATFORM=offscreen``).
"""

from __future__ import annotations

import argparse
import math
import sys
import threading
import time
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bag", type=Path, help="replay this bag instead of subscribing to a live graph")
    parser.add_argument("--rate", type=float, default=1.0, help="replay speed (bag mode; default 1.0)")
    parser.add_argument("--window", type=float, default=30.0, help="seconds of history shown (default 30)")
    parser.add_argument("--trace-topic", default=None, help="trace event topic (default /trace_events)")
    parser.add_argument(
        "--use-sim-time",
        action="store_true",
        help="live mode: follow /clock (use_sim_time), e.g. the time of a replayed bag",
    )
    parser.add_argument("--screenshot", type=Path, help="save the window to this PNG and quit")
    parser.add_argument(
        "--duration",
        type=float,
        default=None,
        help="quit after this many wall seconds (default: run until closed; with --screenshot: 3 s)",
    )


class Replayer:
    """Feeds a run's events into a widget on a virtual clock (``rate`` x wall time)."""

    def __init__(self, run_: Any, widget: Any, rate: float) -> None:
        self.events = run_.events
        self.tasks = run_.tasks
        self.widget = widget
        self.rate = rate
        self.i = 0
        self.t_first = self.events[0].t if self.events else 0.0
        self.started = time.monotonic()
        self.now = self.t_first

    def clock(self) -> float:
        return self.now

    def tick(self) -> None:
        self.now = self.t_first + (time.monotonic() - self.started) * self.rate
        while self.i < len(self.events) and self.events[self.i].t <= self.now:
            e = self.events[self.i]
            if e.kind == "ARRIVAL" and e.task_id in self.tasks:
                info = self.tasks[e.task_id]
                self.widget.submit_task(info.task_id, info.agent_id, info.tuf, info.task_class)
            self.widget.submit(e)
            self.i += 1

    @property
    def finished(self) -> bool:
        return self.i >= len(self.events)


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.rate) and args.rate > 0):
        print("timely-llm rqt-timeline: error: --rate must be > 0", file=sys.stderr)
        return 2
    if not (math.isfinite(args.window) and args.window > 0):
        print("timely-llm rqt-timeline: error: --window must be > 0", file=sys.stderr)
        return 2
    try:
        from python_qt_binding.QtCore import QTimer
        from python_qt_binding.QtWidgets import QApplication
    except ImportError as exc:
        print(
            f"timely-llm rqt-timeline: error: Qt is not available ({exc}); "
            "pip install PyQt5 python_qt_binding",
            file=sys.stderr,
        )
        return 2
    from timely_llm_ros.viz.widget import TimelineWidget, wall_clock

    replay = None
    run_ = None
    if args.bag is not None:
        from timely_llm_ros.lrtrace.from_bag import load_run

        try:
            run_ = load_run(args.bag)
        except (FileNotFoundError, ValueError) as exc:
            print(f"timely-llm rqt-timeline: error: {exc}", file=sys.stderr)
            return 2
        for note in run_.notes:
            print(f"timely-llm rqt-timeline: note: {note}", file=sys.stderr)
    app = QApplication.instance() or QApplication(sys.argv[:1])
    widget = TimelineWidget(window_s=args.window)
    widget.resize(1300, 720)
    ros: dict[str, Any] = {}
    timers = []
    if run_ is not None:
        replay = Replayer(run_, widget, args.rate)
        widget.clock = replay.clock
        widget.setWindowTitle(f"TimelyLLM timeline — replay of {args.bag} at {args.rate:g}x")
        feed = QTimer(widget)
        feed.timeout.connect(replay.tick)
        feed.start(20)
        timers.append(feed)
    else:
        try:
            ros = _start_ros(widget, args.trace_topic, use_sim_time=args.use_sim_time)
        except Exception as exc:  # rclpy missing or the interfaces not built
            print(
                f"timely-llm rqt-timeline: error: cannot subscribe to ROS ({type(exc).__name__}: {exc}); "
                "use --bag to replay a recording",
                file=sys.stderr,
            )
            return 2
        widget.clock = ros.get("clock", wall_clock)
        widget.setWindowTitle(
            "TimelyLLM timeline — " + ("sim time (/clock)" if args.use_sim_time else "live")
        )
    duration = args.duration if args.duration is not None else (3.0 if args.screenshot else None)
    if duration is not None:

        def finish() -> None:
            if replay is not None:
                replay.tick()
            widget.process_pending()
            if args.screenshot is not None:
                widget.grab().save(str(args.screenshot))
                print(args.screenshot)
            app.quit()

        QTimer.singleShot(int(duration * 1000), finish)
    widget.show()
    try:
        app.exec_()
    finally:
        widget.stop()
        _stop_ros(ros)
    return 0


def _start_ros(widget: Any, trace_topic: str | None, use_sim_time: bool = False) -> dict[str, Any]:
    import rclpy
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from timely_llm_ros.viz import ros_source

    rclpy.init()
    node = rclpy.create_node(
        "timely_llm_timeline_viewer", parameter_overrides=[Parameter("use_sim_time", value=use_sim_time)]
    )
    subs = ros_source.attach(node, widget, trace_topic=trace_topic)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, name="timeline-ros", daemon=True)
    thread.start()
    return {
        "node": node,
        "subs": subs,
        "executor": executor,
        "thread": thread,
        "clock": ros_source.node_clock(node),
    }


def _stop_ros(ros: dict[str, Any]) -> None:
    if not ros:
        return
    import rclpy

    ros["executor"].shutdown()
    # the spin thread must have left rclpy before the node and the context go away: a thread still
    # inside the executor at interpreter exit aborts the process ("terminate called ...")
    ros["thread"].join(timeout=10)
    ros["node"].destroy_node()
    if rclpy.ok():
        rclpy.shutdown()
