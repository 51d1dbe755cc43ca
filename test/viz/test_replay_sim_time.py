"""A replayed bag shows in the timeline widget under sim time, and a recorder on sim time stamps it
with the bag's time — offscreen (QT_QPA_PLATFORM=offscreen), real DDS, the replay node as a process.

The bag holds a three-task run at 10-12 s after the epoch: on a wall clock its events lie decades
outside any window, so only a widget whose node follows the replay's ``/clock`` (``use_sim_time``,
the same node clock the rqt plugin uses) can show them. Outcomes only; bounds are generous.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # never open windows from tests
pytest.importorskip("PyQt5", reason="PyQt5 is not installed (pip install PyQt5 python_qt_binding)")
pytest.importorskip("python_qt_binding", reason="python_qt_binding is not installed")

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT_S = 90.0


@pytest.fixture
def sim_node():
    """An rclpy node with use_sim_time:=true in its own context, spinning in a thread."""
    import rclpy
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.parameter import Parameter
    from rclpy.signals import SignalHandlerOptions

    ctx = Context()
    rclpy.init(context=ctx, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node(
        "timeline_sim_viewer", context=ctx, parameter_overrides=[Parameter("use_sim_time", value=True)]
    )
    executor = SingleThreadedExecutor(context=ctx)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        yield node
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.shutdown(context=ctx)
        thread.join(timeout=10)


def _wait(cond, what: str, procs=()) -> None:
    deadline = time.monotonic() + WAIT_S
    while not cond():
        for proc in procs:
            if proc.poll() is not None and proc.returncode != 0:
                raise AssertionError(
                    f"{what}: {proc.args[:3]} exited with {proc.returncode}:\n"
                    f"{proc.log_path.read_text()[-3000:]}"
                )
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _start(module, params, env, log):
    argv = [sys.executable, "-m", module, "--ros-args"]
    for key, value in params.items():
        argv += ["-p", f"{key}:={value}"]
    proc = subprocess.Popen(
        argv, env=env, stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True
    )
    proc.log_path = log
    return proc


def _stop(proc) -> int:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGINT)
    try:
        return proc.wait(timeout=WAIT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        return proc.wait(timeout=10)


def test_a_replayed_bag_shows_in_the_widget_under_sim_time(sim_node, subprocess_env, tmp_path):
    from python_qt_binding.QtWidgets import QApplication
    from viz_testlib import SCENARIO, write_scenario_bag

    from timely_llm_ros.lrtrace.bagread import read_bag
    from timely_llm_ros.viz import ros_source
    from timely_llm_ros.viz.widget import TimelineWidget, wall_clock

    app = QApplication.instance() or QApplication(["test"])  # noqa: F841 - owns the widgets
    bag = write_scenario_bag(tmp_path / "bag")
    recorder = _start(
        "timely_llm_ros.nodes.recorder",
        {"output": str(tmp_path / "rec"), "use_sim_time": "true", "discover": "false"},
        subprocess_env,
        tmp_path / "recorder.log",
    )
    replay = None
    sim = TimelineWidget(window_s=30.0, clock=ros_source.node_clock(sim_node), start_timer=False)
    wall = TimelineWidget(window_s=30.0, clock=wall_clock, start_timer=False)
    for w in (sim, wall):
        w.resize(1200, 500)
    try:
        assert sim.now() == 0.0  # sim time before any /clock: the newest event's time (none yet)
        subs = ros_source.attach(sim_node, sim) + ros_source.attach(sim_node, wall)
        _wait(lambda: "recording to" in (tmp_path / "recorder.log").read_text(), "the recorder", [recorder])
        # the replay starts once the recorder and this viewer both subscribe to its topics and /clock
        replay = _start(
            "timely_llm_ros.nodes.replay",
            {
                "bag": str(bag),
                "topics": "['/tasks','/trace_events']",
                "wait_for_subscribers": 60.0,
                "min_subscribers": 2,
                "clock_subscribers": 2,
                "clock_frequency": 50.0,
            },
            subprocess_env,
            tmp_path / "replay.log",
        )
        _wait(
            lambda: (sim.process_pending(), sim.events_processed)[1] >= len(SCENARIO),
            "every replayed event at the viewer",
            [replay, recorder],
        )
        assert replay.wait(timeout=WAIT_S) == 0, (tmp_path / "replay.log").read_text()
        sim.process_pending()
        wall.process_pending()
        # the node clock is the bag's time (held at the last message), not the wall clock
        assert 10.0 <= sim.now() <= 12.0 + 1e-6
        sim.grab()
        wall.grab()
        assert sim.canvas.painted_rows == ["n1", "u1", "f1"]
        assert ("u1", "ert_missed") in sim.canvas.painted_markers
        rows = {r[0]: r[3] for r in sim.table_rows()}
        assert rows == {"n1": "COMPLETED", "u1": "COMPLETED", "f1": "FAILED"}
        assert wall.events_processed == len(SCENARIO) and wall.canvas.painted_rows == []
        ros_source.detach(sim_node, subs)
    finally:
        if replay is not None:
            _stop(replay)
        rc = _stop(recorder)
        sim.stop()
        wall.stop()
    assert rc == 0, (tmp_path / "recorder.log").read_text()
    # the recorder on sim time logged each event at the bag time it was replayed at
    events = read_bag(tmp_path / "rec").messages("/trace_events")
    assert len(events) == len(SCENARIO)
    for t_ns, msg in events:
        stamp = msg.stamp.sec + msg.stamp.nanosec * 1e-9
        assert 10.0 <= stamp <= 12.0 and t_ns * 1e-9 == pytest.approx(stamp, abs=0.5), (t_ns, stamp)
