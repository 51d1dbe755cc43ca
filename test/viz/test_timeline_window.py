"""``timely-llm rqt-timeline`` as a user meets it: a real X server (Xvfb), its platform plugin's
system libraries, Ctrl-C on the window, the legend, and a bag replay that stops at the bag's end and
can be scrubbed.

The Xvfb tests skip (with the reason) where ``Xvfb`` is not installed (``apt-get install xvfb``);
the replay controls are also tested offscreen. Nothing is timed: the window is given
generous time to come up, and only outcomes (exit status, output, the PNG) are checked.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import threading
import time

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # this process never opens windows; children choose
pytest.importorskip("PyQt5", reason="PyQt5 is not installed (pip install PyQt5 python_qt_binding)")
pytest.importorskip("python_qt_binding", reason="python_qt_binding is not installed")

from timely_llm_ros.viz import qt_platform

CLI = (
    "import sys; from timely_llm_ros.cli import main; sys.exit(main(sys.argv[1:], "
    "commands={'rqt-timeline': ('timely_llm_ros.viz.standalone', 'viewer')}))"
)
XVFB = shutil.which("Xvfb")
needs_xvfb = pytest.mark.skipif(XVFB is None, reason="Xvfb not installed (apt-get install xvfb)")
READY = "window open"
LDD_MISSING = """\
\tlinux-vdso.so.1 (0x00007ffd)
\tlibxcb-icccm.so.4 => not found
\tlibxcb-image.so.0 => /lib/x86_64-linux-gnu/libxcb-image.so.0 (0x00007f)
\tlibxcb-keysyms.so.1 => not found
\tlibxcb-icccm.so.4 => not found
\tlibxcb-xinerama.so.0 => not found
"""


def test_missing_xcb_libraries_are_named_with_their_debian_packages():
    missing = qt_platform.missing_libraries(LDD_MISSING)
    assert missing == ["libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-xinerama.so.0"]
    assert qt_platform.install_hint(missing) == (
        "sudo apt-get install libxcb-icccm4 libxcb-keysyms1 libxcb-xinerama0"
    )
    assert qt_platform.missing_libraries("\tlibc.so.6 => /lib/libc.so.6 (0x1)\n") == []


def test_no_display_and_other_platforms():
    assert "DISPLAY is not set" in qt_platform.problem({"QT_QPA_PLATFORM": "xcb"})
    assert qt_platform.problem({"QT_QPA_PLATFORM": "offscreen"}) == ""
    assert qt_platform.platform_name({"QT_QPA_PLATFORM": "xcb:foo=1"}) == "xcb"


@pytest.fixture(scope="module")
def display():
    """A private X server (Xvfb picks a free display number and writes it to us). It runs in its own
    session, as a user's X server does: a Ctrl-C for the viewer does not reach it."""
    if XVFB is None:
        pytest.skip("Xvfb not installed (apt-get install xvfb)")
    xvfb = subprocess.Popen(
        [XVFB, "-displayfd", "1", "-screen", "0", "1400x900x24", "-nolisten", "tcp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        start_new_session=True,
    )
    try:
        number = xvfb.stdout.readline().strip()
        if not number.isdigit():
            pytest.skip(f"Xvfb did not start (rc {xvfb.poll()})")
        yield f":{number}"
    finally:
        xvfb.terminate()
        xvfb.wait(timeout=30)


def _viewer_cmd(*args: str) -> list[str]:
    return [sys.executable, "-c", CLI, "rqt-timeline", *args]


def _window_env(subprocess_env: dict[str, str], display: str) -> dict[str, str]:
    env = dict(subprocess_env, DISPLAY=display)
    env.pop("QT_QPA_PLATFORM", None)  # the default platform: xcb on the Xvfb display
    return env


def _libraries_or_skip(env: dict[str, str]) -> None:
    why = qt_platform.problem(env)
    if why:
        pytest.skip(f"the window cannot open on this machine: {why}")


@needs_xvfb
def test_window_under_xvfb_opens_with_legend_or_names_the_missing_packages(tmp_path, subprocess_env, display):
    pytest.importorskip("rosbags")
    from viz_testlib import write_scenario_bag

    bag = write_scenario_bag(tmp_path / "b")
    shot = tmp_path / "window.png"
    env = _window_env(subprocess_env, display)
    proc = subprocess.run(
        _viewer_cmd("--bag", str(bag), "--rate", "20", "--screenshot", str(shot), "--duration", "2"),
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    # never Qt's abort (rc 134, "Could not load the Qt platform plugin"): a window, or the packages
    assert proc.returncode != 134 and "Could not load the Qt platform plugin" not in proc.stderr, proc.stderr
    if qt_platform.problem(env):
        assert proc.returncode == 2 and "sudo apt-get install" in proc.stderr, proc.stderr
        return
    assert proc.returncode == 0, proc.stderr
    assert shot.stat().st_size > 10_000  # a real window (looked at: lanes, legend, slider at the end)


@needs_xvfb
@pytest.mark.parametrize("mode", ["bag", "live"])
def test_ctrl_c_closes_the_window_cleanly(mode, tmp_path, subprocess_env, display):
    env = _window_env(subprocess_env, display)
    _libraries_or_skip(env)
    if mode == "bag":
        pytest.importorskip("rosbags")
        from viz_testlib import write_scenario_bag

        args = ["--bag", str(write_scenario_bag(tmp_path / "b"))]
    else:
        pytest.importorskip("rclpy")
        args = []
    proc = subprocess.Popen(
        _viewer_cmd(*args),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(proc.stdout), daemon=True)
    reader.start()
    try:
        deadline = time.monotonic() + 120
        while (
            not any(READY in line for line in lines) and proc.poll() is None and time.monotonic() < deadline
        ):
            time.sleep(0.2)
        assert proc.poll() is None, "".join(lines)
        assert any(READY in line for line in lines), "".join(lines)
        time.sleep(1.0)  # let it paint and run its timers a little
        # Ctrl-C in a terminal signals the command's whole process group
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    out = "".join(lines)
    assert "Traceback" not in out and "Aborted" not in out and "core dumped" not in out, out
    assert proc.returncode == 0, out


def test_bag_replay_freezes_at_the_end_and_scrubs(tmp_path):
    pytest.importorskip("rosbags")
    from python_qt_binding.QtWidgets import QApplication
    from viz_testlib import SCENARIO, write_scenario_bag

    from timely_llm_ros.lrtrace.from_bag import load_run
    from timely_llm_ros.viz.standalone import Replayer, replay_controls
    from timely_llm_ros.viz.widget import TimelineWidget

    app = QApplication.instance() or QApplication(["test"])
    run_ = load_run(write_scenario_bag(tmp_path / "b"))
    w = TimelineWidget(window_s=5.0, start_timer=False)
    w.resize(1200, 600)
    replay = Replayer(run_, w, rate=1000.0)
    w.clock = replay.clock
    controls = replay_controls(replay, w)
    t_end = SCENARIO[-1].t
    time.sleep(0.05)
    for _ in range(3):
        replay.tick()
        time.sleep(0.01)
    w.process_pending()
    assert replay.now == t_end  # stopped at the bag's end, not running on past it
    w.grab()
    assert set(w.canvas.painted_rows) == {"u1", "n1", "f1"}
    controls.sync()
    assert controls.slider.value() == controls.slider.maximum()
    # scrub back to before the first segment executed: u1 is suspended, nothing has run yet
    controls.slider.setValue(int(round((10.26 - SCENARIO[0].t) * 100)))
    assert abs(replay.now - 10.26) < 0.011
    rows = {r[0]: r for r in w.table_rows()}
    assert "EXECUTING" not in rows["u1"][3] and rows["n1"][3] != "COMPLETED"
    assert w.events_processed == sum(e.t <= replay.now for e in SCENARIO)
    # and forward again to the end: the same final table as the plain replay
    controls.slider.setValue(controls.slider.maximum())
    assert {r[0]: r[3] for r in w.table_rows()} == {"u1": "COMPLETED", "n1": "COMPLETED", "f1": "FAILED"}
    w.stop()
    app.processEvents()


def test_the_window_has_a_legend_for_bars_and_ticks():
    from python_qt_binding.QtWidgets import QApplication

    from timely_llm_ros.viz.widget import TimelineWidget

    app = QApplication.instance() or QApplication(["test"])
    w = TimelineWidget(start_timer=False)
    text = w.legend.text()
    for words in (
        "ERT deadline",
        "ERT missed",
        "failed",
        "generating",
        "executing",
        "urgent",
        "planner",
        "robot",
    ):
        assert words in text
    w.stop()
    app.processEvents()
