"""``timely-llm timeline``: what the figure draws (matplotlib artists, SVG ids, HTML elements) for
given events, and that damaged or partial bags still give a chart that says what is missing."""

from __future__ import annotations

import re

import pytest

pytest.importorskip("rosbags", reason="rosbags is installed in the project venv (make)")

import matplotlib.pyplot as plt
from matplotlib.colors import to_hex
from viz_testlib import write_scenario_bag

from timely_llm_ros.cli import main
from timely_llm_ros.interfaces.topics import TOPIC_TRACE
from timely_llm_ros.lrtrace.bagio import BagWriter
from timely_llm_ros.lrtrace.bagread import read_bag
from timely_llm_ros.lrtrace.from_bag import load_run
from timely_llm_ros.lrtrace.simbag import write_sim_bag
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.viz import style
from timely_llm_ros.viz.layout import make_layout
from timely_llm_ros.viz.timeline import draw
from timely_llm_ros.workload.fileformat import resolve_workload

COMMANDS = {"timeline": ("timely_llm_ros.viz.timeline", "timeline")}


def _artists(fig) -> dict:
    ax = fig.axes[0]
    found = {}
    for art in [*ax.patches, *ax.lines, *ax.texts, *fig.texts]:
        if art.get_gid():
            found[art.get_gid()] = art
    return found


@pytest.fixture
def scenario_fig(tmp_path):
    run = load_run(write_scenario_bag(tmp_path / "b"))
    layout = make_layout(run.model)
    fig = draw(layout, "scenario", run.notes)
    yield fig, layout
    plt.close(fig)


def test_bars_are_drawn_where_the_events_put_them(scenario_fig):
    fig, layout = scenario_fig
    art = _artists(fig)
    assert layout.t0 == 10.0
    rows = {row.lane.task_id: row.y for row in layout.rows}
    expected = {  # gid -> (x, width) in seconds since the first arrival
        "bar|u1|queued|-1": (0.0, 0.1),
        "bar|u1|generating|0": (0.1, 0.15),
        "bar|u1|suspended|1": (0.25, 0.25),
        "bar|u1|generating|1": (0.5, 0.1),
        "bar|u1|executing|0": (0.3, 1.0),
        "bar|u1|executing|1": (1.3, 0.7),
        "bar|u1|dispatched|1": (0.6, 0.7),
        "bar|n1|generating|0": (0.25, 0.15),
        "bar|n1|executing|0": (0.45, 0.55),
        "bar|f1|generating|0": (0.3, 0.2),
    }
    for gid, (x, w) in expected.items():
        rect = art[gid]
        assert rect.get_x() == pytest.approx(x, abs=1e-6) and rect.get_width() == pytest.approx(
            w, abs=1e-6
        ), gid
        kind = gid.split("|")[2]
        assert to_hex(rect.get_facecolor()) == style.SPAN_COLORS[kind]
        task = gid.split("|")[1]
        robot = kind in ("dispatched", "executing")
        assert (rect.get_y() + rect.get_height() / 2 > rows[task]) == robot  # robot side below the planner's
    assert not any(g.startswith("bar|f1|executing") for g in art)  # f1 never acted


def test_markers_ert_missed_and_urgent_highlight(scenario_fig):
    fig, layout = scenario_fig
    art = _artists(fig)
    u1_ert, n1_ert = art["marker|u1|ert_missed"], art["marker|n1|ert"]
    assert list(u1_ert.get_xdata()) == pytest.approx([0.2, 0.2])
    assert to_hex(u1_ert.get_color()) == style.MISSED_COLOR and "marker|u1|missed_cross" in art
    assert (
        list(n1_ert.get_xdata()) == pytest.approx([1.0, 1.0])
        and to_hex(n1_ert.get_color()) == style.ERT_COLOR
    )
    assert list(art["marker|f1|terminal"].get_xdata()) == pytest.approx([0.5])
    assert list(art["marker|f1|arrival"].get_xdata()) == pytest.approx([0.2])
    assert "urgent|u1" in art and "urgent|n1" not in art
    labels = {t.get_text(): t for t in fig.axes[0].get_yticklabels()}
    assert to_hex(labels["u1"].get_color()) == style.URGENT_TEXT and labels["u1"].get_fontweight() == "bold"
    assert {g for g in art if g.startswith("group|")} == {"group|drone_1", "group|drone_2", "group|arm_1"}
    assert art["group|drone_1"].get_text() == "agent drone_1"


def test_svg_and_html_outputs_name_every_element(tmp_path, capsys):
    bag = write_scenario_bag(tmp_path / "b")
    assert main(["timeline", str(bag), "-o", str(tmp_path / "t.svg")], commands=COMMANDS) == 0
    svg = (tmp_path / "t.svg").read_text()
    for gid in ("bar|u1|generating|0", "bar|n1|executing|0", "marker|u1|ert_missed", "urgent|u1"):
        assert f'id="{gid}"' in svg
    assert main(["timeline", str(bag), "-o", str(tmp_path / "t.html")], commands=COMMANDS) == 0
    page = (tmp_path / "t.html").read_text()
    assert (
        not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", page) and "<link" not in page
    )  # self-contained
    assert page.count('class="lane"') == 3
    assert len(re.findall(r'<rect class="bar k-executing"', page)) == 3
    u1 = (
        page[page.index('id="lane-u1"') : page.index('id="lane-n1"')]
        if page.index('id="lane-u1"') < page.index('id="lane-n1"')
        else page[page.index('id="lane-u1"') :]
    )
    assert 'data-kind="ert_missed"' in u1 and "MISSED the ERT" in u1 and "W(s_0) = 0.300" in u1
    assert 'data-s="0.100000" data-e="0.250000"' in u1  # the first generation bar, hover text in <title>
    assert re.search(r"<title>task u1 \(agent drone_1, urgent\): generating a segment segment 0", u1)
    assert "<script>" in page and "data-tip" in page


def test_fifty_plus_tasks_capped_grouped_and_zoomed(tmp_path, capsys):
    wl = resolve_workload("wid2:agents=8")
    bag = write_sim_bag(simulate(wl.tasks, SimConfig()), wl.tasks, tmp_path / "sim")
    out = tmp_path / "all.png"
    assert main(["timeline", str(bag), "-o", str(out)], commands=COMMANDS) == 0
    err = capsys.readouterr().err
    assert f"showing 80 of {len(wl.tasks)} matching tasks" in err
    run = load_run(bag)
    lay = make_layout(run.model, window=(20.0, 40.0), max_tasks=0)
    assert 5 < len(lay.rows) < len(wl.tasks)
    fig = draw(lay, "zoom")
    try:
        ax = fig.axes[0]
        assert ax.get_xlim() == pytest.approx((20.0, 40.0))
        assert len(ax.get_yticklabels()) == len(lay.rows)
        groups = [t for t in ax.texts if (t.get_gid() or "").startswith("group|")]
        assert 1 < len(groups) <= 8  # one label per agent shown
        h_in = fig.get_size_inches()[1]
        assert h_in / len(lay.rows) >= 0.18  # at least ~0.18 in per lane: labels stay legible
    finally:
        plt.close(fig)
    assert (
        main(
            ["timeline", str(bag), "--agents", "3", "--window", "0:60", "-o", str(tmp_path / "a.png")],
            commands=COMMANDS,
        )
        == 0
    )
    assert (
        main(["timeline", str(bag), "--tasks", "5,6", "-o", str(tmp_path / "t.png")], commands=COMMANDS) == 0
    )


def test_bag_without_tasks_topic_still_draws_and_says_so(tmp_path, capsys):
    bag = write_scenario_bag(tmp_path / "b", with_tasks=False)
    assert main(["timeline", str(bag), "-o", str(tmp_path / "t.png")], commands=COMMANDS) == 0
    err = capsys.readouterr().err
    assert "missing: /tasks (not recorded)" in err and "no /tasks messages" in err
    run = load_run(bag)
    fig = draw(make_layout(run.model), "no tasks", run.notes)
    try:
        art = _artists(fig)
        assert "bar|u1|executing|0" in art  # the events are all there
        assert not any(g.startswith("marker|u1|ert") for g in art)  # no TUF, no ERT marker (not guessed)
        assert "missing: /tasks (not recorded)" in art["notes"].get_text()
    finally:
        plt.close(fig)


def test_truncated_bag_draws_what_is_before_the_damage(tmp_path, capsys):
    bag = write_scenario_bag(tmp_path / "b")
    mcap = bag / "b_0.mcap"
    mcap.write_bytes(mcap.read_bytes()[:-400])  # footer, summary and the end of the data are gone
    assert main(["timeline", str(bag), "-o", str(tmp_path / "t.png")], commands=COMMANDS) == 0
    err = capsys.readouterr().err
    assert "problem:" in err and "scanning the storage file" in err
    assert (tmp_path / "t.png").stat().st_size > 10_000


def test_bag_without_trace_events_is_rebuilt_from_the_other_topics(tmp_path):
    wl = resolve_workload("wid2:agents=8")
    res = simulate(wl.tasks, SimConfig())
    full = read_bag(write_sim_bag(res, wl.tasks, tmp_path / "full"))
    topics = {t.topic: t.msgtype for t in full.topics.values() if t.topic != TOPIC_TRACE}
    with BagWriter(tmp_path / "partial", topics, flush_every_s=None) as w:
        for t in full.topics.values():
            if t.topic != TOPIC_TRACE:
                for t_ns, msg in t.messages:
                    w.write_msg(t.topic, t_ns, msg)
    run = load_run(tmp_path / "partial")
    assert run.events_rebuilt and any("rebuilt from /tasks" in n for n in run.notes)
    assert any(n.startswith("missing: /trace_events") for n in run.notes)
    rec = next(r for r in res.records if len(r.segments) > 1)
    lane = run.model.lanes[rec.task_id]
    execs = sorted((s.seg, s.start, s.end) for s in lane.spans if s.kind == "executing")
    assert execs == [
        (s.idx, pytest.approx(s.exec_start, abs=1e-6), pytest.approx(s.exec_end, abs=1e-6))
        for s in rec.segments
    ]
    assert lane.response_time == pytest.approx(rec.response_time, abs=1e-6)
    assert (
        main(["timeline", str(tmp_path / "partial"), "-o", str(tmp_path / "p.png")], commands=COMMANDS) == 0
    )


@pytest.mark.parametrize(
    "args,msg",
    [
        (["--window", "9"], "T0:T1"),
        (["-o", "x.jpg"], ".png, .svg or .html"),
        (["--max-tasks", "-1"], "max-tasks"),
    ],
)
def test_bad_arguments_are_refused_with_a_reason(tmp_path, capsys, args, msg):
    bag = write_scenario_bag(tmp_path / "b")
    assert main(["timeline", str(bag), *args], commands=COMMANDS) == 2
    assert msg in capsys.readouterr().err
