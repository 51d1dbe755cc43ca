"""``timely-llm rqt-timeline``: the rqt plugin's widget in its own window, without rqt.

Live (default): an rclpy node subscribes to ``/trace_events`` and ``/tasks`` exactly as the plugin
does (viz/ros_source.py); the executor spins in a background thread, Qt owns the main thread.
``--use-sim-time`` runs that node with ``use_sim_time:=true``: the window follows ``/clock``, e.g.
the bag time published by ``timely-llm replay`` (so a replayed run shows as it was recorded).
Replay (``--bag``): the bag's events are fed on a virtual clock at ``--rate`` times real speed,
each task announced when it arrives; the view shows the whole bag (unless ``--window``), stops at
the bag's last event and stays there, and a slider under it scrubs through the run (keys: Space
pause/play, Left/Right ±1 s, PgUp/PgDn ±10 s, Home/End). ``--screenshot PNG`` saves the window after
``--duration`` seconds and quits (documentation, headless checks with ``QT_QPA_PLATFORM=offscreen``).

Before Qt starts, :func:`timely_llm_ros.viz.qt_platform.problem` checks that its platform plugin can
load (Qt would abort the process otherwise) and the command says which packages to install. Ctrl-C
(SIGINT) or SIGTERM close the window like its close button: Python signal handlers run only while
Python code runs, so a timer gives them a turn, and the handler asks Qt to quit instead of raising
KeyboardInterrupt inside a Qt slot (which PyQt turns into an abort and a core dump).
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bag", type=Path, help="replay this bag instead of subscribing to a live graph")
    parser.add_argument("--rate", type=float, default=1.0, help="replay speed (bag mode; default 1.0)")
    parser.add_argument(
        "--window",
        type=float,
        default=None,
        help="seconds of history shown (default 30 live; the whole bag with --bag)",
    )
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
    """Feeds a run's events into a widget on a virtual clock (``rate`` x wall time).

    The clock stops at the last event (the view freezes at the bag's end instead of scrolling its
    bars out of view); :meth:`seek` moves it anywhere in the run, backwards by rebuilding the widget's
    model from the first event (a bag's few thousand events take milliseconds)."""

    def __init__(self, run_: Any, widget: Any, rate: float) -> None:
        self.events = run_.events
        self.tasks = run_.tasks
        self.widget = widget
        self.rate = rate
        self.i = 0
        self.t_first = self.events[0].t if self.events else 0.0
        self.t_last = self.events[-1].t if self.events else 0.0
        self.now = self.t_first
        self.paused = False
        self._anchor = (time.monotonic(), self.t_first)  # (wall, bag time) the clock runs from

    def clock(self) -> float:
        return self.now

    @property
    def span(self) -> float:
        return self.t_last - self.t_first

    def tick(self) -> None:
        if not self.paused and self.now < self.t_last:
            wall0, bag0 = self._anchor
            self.now = min(bag0 + (time.monotonic() - wall0) * self.rate, self.t_last)
        self._feed()

    def _feed(self) -> None:
        while self.i < len(self.events) and self.events[self.i].t <= self.now:
            e = self.events[self.i]
            if e.kind == "ARRIVAL" and e.task_id in self.tasks:
                info = self.tasks[e.task_id]
                self.widget.submit_task(info.task_id, info.agent_id, info.tuf, info.task_class)
            self.widget.submit(e)
            self.i += 1

    def seek(self, t: float) -> None:
        """Show the run as it was at bag time ``t`` (clamped to the bag); playing goes on from there."""
        t = min(max(t, self.t_first), self.t_last)
        if t < self.now:
            self.widget.reset()
            self.i = 0
        self.now = t
        self._anchor = (time.monotonic(), t)
        self._feed()
        self.widget.process_pending()

    def toggle_pause(self) -> None:
        self.paused = not self.paused
        if self.now >= self.t_last and not self.paused:
            self.seek(self.t_first)  # play again from the start
        self._anchor = (time.monotonic(), self.now)

    @property
    def finished(self) -> bool:
        return self.i >= len(self.events)


SLIDER_STEPS_PER_S = 100  # the slider's integer unit: 10 ms of bag time


def replay_controls(replay: Replayer, widget: Any) -> Any:
    """Play/pause button, scrub slider and time label under the timeline; keys on the window."""
    from python_qt_binding.QtCore import Qt
    from python_qt_binding.QtGui import QKeySequence
    from python_qt_binding.QtWidgets import QHBoxLayout, QLabel, QPushButton, QShortcut, QSlider, QWidget

    bar = QWidget(widget)
    row = QHBoxLayout(bar)
    row.setContentsMargins(0, 0, 0, 0)
    button = QPushButton("pause")
    slider = QSlider(Qt.Horizontal)
    slider.setRange(0, max(1, int(round(replay.span * SLIDER_STEPS_PER_S))))
    label = QLabel()
    row.addWidget(button)
    row.addWidget(slider, 1)
    row.addWidget(label)
    state = {"syncing": False}

    def sync() -> None:
        state["syncing"] = True
        slider.setValue(int(round((replay.now - replay.t_first) * SLIDER_STEPS_PER_S)))
        state["syncing"] = False
        end = " (end of bag)" if replay.now >= replay.t_last else ""
        label.setText(f"{replay.now - replay.t_first:7.2f} / {replay.span:.2f} s{end}")
        button.setText("play" if replay.paused or replay.now >= replay.t_last else "pause")

    def on_slider(value: int) -> None:
        if not state["syncing"]:
            replay.seek(replay.t_first + value / SLIDER_STEPS_PER_S)
            sync()

    def step(dt: float) -> None:
        replay.seek(replay.now + dt)
        sync()

    def toggle() -> None:
        replay.toggle_pause()
        sync()

    slider.valueChanged.connect(on_slider)
    button.clicked.connect(toggle)
    keys = {
        Qt.Key_Space: toggle,
        Qt.Key_Left: lambda: step(-1.0),
        Qt.Key_Right: lambda: step(1.0),
        Qt.Key_PageUp: lambda: step(-10.0),
        Qt.Key_PageDown: lambda: step(10.0),
        Qt.Key_Home: lambda: step(-replay.span - 1),
        Qt.Key_End: lambda: step(replay.span + 1),
    }
    for key, fn in keys.items():
        sc = QShortcut(QKeySequence(key), widget)
        sc.setContext(Qt.WindowShortcut)
        sc.activated.connect(fn)
    widget.layout().addWidget(bar)
    bar.sync = sync  # the feed timer refreshes the slider and label
    bar.slider = slider
    return bar


def quit_on_signals(app: Any) -> list[tuple[int, Any]]:
    """SIGINT / SIGTERM quit the Qt loop cleanly (module doc); returns the handlers replaced."""
    old: list[tuple[int, Any]] = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        old.append((sig, signal.getsignal(sig)))
        signal.signal(sig, lambda *_: app.quit())
    return old


def run(args: argparse.Namespace) -> int:
    if not (math.isfinite(args.rate) and args.rate > 0):
        print("timely-llm rqt-timeline: error: --rate must be > 0", file=sys.stderr)
        return 2
    if args.window is not None and not (math.isfinite(args.window) and args.window > 0):
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
    from timely_llm_ros.viz import qt_platform
    from timely_llm_ros.viz.widget import TimelineWidget, wall_clock

    why = qt_platform.problem()
    if why:
        print(f"timely-llm rqt-timeline: error: {why}", file=sys.stderr)
        return 2

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
    window = args.window
    if window is None:
        window = max(run_.events[-1].t - run_.events[0].t, 1.0) * 1.02 if run_ and run_.events else 30.0
    app = QApplication.instance() or QApplication(sys.argv[:1])
    widget = TimelineWidget(window_s=window)
    widget.resize(1300, 720)
    ros: dict[str, Any] = {}
    timers = []
    if run_ is not None:
        replay = Replayer(run_, widget, args.rate)
        widget.clock = replay.clock
        widget.setWindowTitle(f"TimelyLLM timeline — replay of {args.bag} at {args.rate:g}x")
        controls = replay_controls(replay, widget)

        def feed_tick() -> None:
            replay.tick()
            controls.sync()

        feed = QTimer(widget)
        feed.timeout.connect(feed_tick)
        feed.start(20)
        timers.append(feed)
    else:
        try:
            ros = _start_ros(widget, args.trace_topic, use_sim_time=args.use_sim_time)
        except Exception as exc:  # noqa: BLE001 - rclpy missing or the interfaces not built
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
    # a timer that runs Python code often enough for a Ctrl-C to be handled within 0.2 s
    wake = QTimer(widget)
    wake.timeout.connect(lambda: None)
    wake.start(200)
    old_handlers = quit_on_signals(app)
    widget.show()
    if args.screenshot is None:
        print(
            "timely-llm rqt-timeline: window open (Ctrl-C or closing it ends the command)",
            file=sys.stderr,
            flush=True,
        )
    try:
        app.exec_()
    finally:
        widget.stop()
        _stop_ros(ros)
        for sig, handler in old_handlers:
            signal.signal(sig, handler)
    return 0


def _start_ros(widget: Any, trace_topic: str | None, use_sim_time: bool = False) -> dict[str, Any]:
    import rclpy
    import rclpy.signals
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter

    from timely_llm_ros.viz import ros_source

    # rclpy's own SIGINT handler would shut the context down under the running executor; this
    # command's handler quits Qt and _stop_ros then ends rclpy in order
    rclpy.init(signal_handler_options=rclpy.signals.SignalHandlerOptions.NO)
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
