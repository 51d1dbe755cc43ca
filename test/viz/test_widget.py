"""The live timeline widget, offscreen (QT_QPA_PLATFORM=offscreen, PyQt5 via python_qt_binding):
what it shows for a replayed event stream, and that it keeps up with 200 events/s."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET

import pytest

os.environ["QT_QPA_PLATFORM"] = "offscreen"  # never open windows from tests
pytest.importorskip("PyQt5", reason="PyQt5 is not installed (pip install PyQt5 python_qt_binding)")
pytest.importorskip("python_qt_binding", reason="python_qt_binding is not installed")

from python_qt_binding.QtWidgets import QApplication
from viz_testlib import SCENARIO, TUFS, stream

from timely_llm_ros.viz.widget import TimelineWidget


@pytest.fixture(scope="module")
def app():
    return QApplication.instance() or QApplication(["test"])


def _widget(clock, **kw) -> TimelineWidget:
    w = TimelineWidget(window_s=kw.pop("window_s", 10.0), clock=clock, start_timer=False, **kw)
    w.resize(1200, 600)
    return w


def test_replayed_scenario_rows_markers_and_table(app):
    now = [0.0]
    w = _widget(lambda: now[0])
    for tid, tuf in TUFS.items():
        w.submit_task(tid, tuf=tuf)
    w.process_pending()
    assert w.table.rowCount() == 0  # announced tasks appear with their first event
    for e in SCENARIO:
        now[0] = e.t
        w.submit(e)
    now[0] = 12.5
    assert w.process_pending() == len(SCENARIO)
    w.grab()  # paints offscreen
    assert w.canvas.painted_rows == ["n1", "u1", "f1"]  # arrival order (ties by id)
    assert ("u1", "ert_missed") in w.canvas.painted_markers
    assert ("n1", "ert") in w.canvas.painted_markers and ("n1", "ert_missed") not in w.canvas.painted_markers
    assert ("f1", "terminal") in w.canvas.painted_markers
    rows = {r[0]: r for r in w.table_rows()}
    assert rows["u1"] == ("u1", "drone_1", "urgent", "COMPLETED", "0.300", f"{TUFS['u1'](0.3):.3f}")
    assert rows["n1"][3:] == ("COMPLETED", "0.450", "1.000")
    assert rows["f1"][3:] == ("FAILED", "", "")
    u1_row = [r for r in range(w.table.rowCount()) if w.table.item(r, 0).text() == "u1"][0]
    assert w.table.item(u1_row, 4).background().color().name() == "#fcc5c0"  # missed ERT cell
    assert "3 tasks" in w.status.text() and "2 missed ERT" in w.status.text()
    w.stop()


def test_window_drops_old_lanes_and_table_forgets_old_tasks(app):
    now = [0.0]
    w = _widget(lambda: now[0], window_s=5.0, keep_s=20.0)
    events = stream(40, 60)  # 60 s of tasks lasting ~2 s each
    i = 0
    for step in range(1, 601):
        now[0] = 100.0 + step * 0.1
        while i < len(events) and events[i].t <= now[0]:
            w.submit(events[i])
            i += 1
        w.process_pending()
    w.grab()
    starts = [w.model.lanes[t].arrival for t in w.canvas.painted_rows]
    assert starts and min(starts) >= now[0] - 5.0 - 3.0  # only what was active in the last 5 s
    assert len(w.model.lanes) < 200 and w.table.rowCount() == len(w.model.lanes)  # pruned after keep_s
    w.stop()


def test_keeps_up_with_200_events_per_second(app):
    """Feed 200 events per simulated second through the real update path (queue, model, table,
    repaint every 0.1 simulated s) and count the CPU time per event: it must be far below the
    5 ms a 200 events/s stream leaves per event."""
    now = [0.0]
    w = _widget(lambda: now[0], window_s=30.0)
    events = stream(200, 10)
    t0 = events[0].t
    steady = [e for e in events if t0 + 2.0 <= e.t < t0 + 10.0]  # after the first tasks complete
    assert 190 <= len(steady) / 8.0 <= 210  # the stream really is ~200 events/s
    i = 0
    refreshes = 0
    cpu0 = time.process_time()
    while i < len(events):
        now[0] += 0.1 if now[0] else events[0].t
        while i < len(events) and events[i].t <= now[0]:
            w.submit(events[i])
            i += 1
        w.process_pending()
        w.canvas.repaint()  # synchronous paint, as the event loop would do after update()
        refreshes += 1
    cpu = time.process_time() - cpu0
    assert w.events_processed == len(events)
    per_event_ms = 1000 * cpu / len(events)
    print(f"widget: {per_event_ms:.3f} ms CPU per event, {refreshes} refreshes")
    assert per_event_ms < 2.5, f"{per_event_ms:.3f} ms CPU per event ({refreshes} refreshes)"
    w.stop()


def test_standalone_replays_a_bag_offscreen(tmp_path, subprocess_env):
    pytest.importorskip("rosbags")
    from viz_testlib import write_scenario_bag

    bag = write_scenario_bag(tmp_path / "b")
    shot = tmp_path / "shot.png"
    env = dict(subprocess_env, QT_QPA_PLATFORM="offscreen")
    code = (
        "import sys; from timely_llm_ros.cli import main; sys.exit(main(sys.argv[1:], "
        "commands={'rqt-timeline': ('timely_llm_ros.viz.standalone', 'viewer')}))"
    )
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "rqt-timeline",
            "--bag",
            str(bag),
            "--rate",
            "10",
            "--screenshot",
            str(shot),
            "--duration",
            "1",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    assert shot.stat().st_size > 5_000
    from python_qt_binding.QtGui import QImage

    img = QImage(str(shot))
    assert img.width() == 1300 and img.height() == 720


def test_plugin_xml_names_the_plugin_class(repo_root):
    root = ET.parse(repo_root / "plugin.xml").getroot()
    cls = root.find("class")
    assert cls.get("base_class_type") == "rqt_gui_py::Plugin"
    module, _, name = cls.get("type").rpartition(".")
    path = repo_root / (module.replace(".", "/") + ".py")
    source = path.read_text()
    assert f"class {name}(Plugin)" in source and "from rqt_gui_py.plugin import Plugin" in source
    assert cls.find("qtgui/label").text.strip() == "TimelyLLM timeline"
