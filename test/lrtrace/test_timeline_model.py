"""Timeline lanes from trace events: spans per kind and segment, markers, missed ERT, grouping."""

from __future__ import annotations

import math

import pytest
from viz_testlib import SCENARIO, TUFS, stream

from timely_llm_ros.core import events as ev
from timely_llm_ros.lrtrace.timeline_model import TimelineModel, arrival_detail, parse_arrival_detail
from timely_llm_ros.viz.layout import lane_items, make_layout, parse_window


def _model(events=SCENARIO, tufs=True) -> TimelineModel:
    m = TimelineModel()
    if tufs:
        for tid, tuf in TUFS.items():
            m.set_task(tid, tuf=tuf)
    m.extend(events)
    return m


def _spans(lane):
    return [(s.kind, s.seg, round(s.start, 6), round(s.end, 6)) for s in lane.spans]


def test_segmented_task_gets_one_bar_per_segment_generation_and_execution():
    u1 = _model().lanes["u1"]
    assert sorted(_spans(u1)) == sorted(
        [
            ("queued", -1, 10.0, 10.1),
            ("generating", 0, 10.1, 10.25),
            ("dispatched", 0, 10.25, 10.3),
            ("suspended", 1, 10.25, 10.5),
            ("executing", 0, 10.3, 11.3),
            ("generating", 1, 10.5, 10.6),
            ("dispatched", 1, 10.6, 11.3),
            ("generating", 2, 10.6, 10.62),  # the tail after the last cut, up to EOS
            ("executing", 1, 11.3, 12.0),
        ]
    )
    assert u1.state == ev.COMPLETED and u1.terminal == 12.0
    assert u1.task_class == "urgent" and u1.trace_id == 6 and u1.urgent
    assert u1.response_time == pytest.approx(0.3)
    assert u1.utility == pytest.approx(TUFS["u1"](0.3))
    assert u1.missed_ert() and u1.deadline == pytest.approx(10.2)


def test_met_failed_and_pending_tasks():
    m = _model()
    n1, f1 = m.lanes["n1"], m.lanes["f1"]
    assert not n1.missed_ert() and n1.response_time == pytest.approx(0.45)
    assert f1.state == ev.FAILED and "does not parse" in f1.reason
    assert f1.missed_ert()  # failed without acting: it never meets the ERT
    assert not f1.open_spans() and _spans(f1) == [("queued", -1, 10.2, 10.3), ("generating", 0, 10.3, 10.5)]
    # a task still waiting: missed only once "now" is past its deadline
    m2 = _model(SCENARIO[:4])
    assert not m2.lanes["n1"].missed_ert(now=10.9)
    assert m2.lanes["n1"].missed_ert(now=11.1)


def test_stream_policy_keeps_generating_across_cuts():
    E = ev.TraceEvent
    m = TimelineModel()
    m.extend(
        [
            E(0.0, ev.ARRIVAL, "s"),
            E(0.0, ev.GEN_START, "s", seg=0),
            E(0.2, ev.SEGMENT_READY, "s", seg=0),
            E(0.2, ev.DISPATCH, "s", seg=0),
            E(0.5, ev.SEGMENT_READY, "s", seg=1),
            E(0.5, ev.DISPATCH, "s", seg=1),
            E(0.6, ev.GEN_STOP, "s", seg=2, detail="eos"),
        ]
    )
    gens = [(s.seg, s.start, s.end) for s in m.lanes["s"].spans if s.kind == "generating"]
    assert gens == [(0, 0.0, 0.2), (1, 0.2, 0.5), (2, 0.5, 0.6)]


def test_second_terminal_event_and_unknown_kinds_change_nothing():
    E = ev.TraceEvent
    m = TimelineModel()
    m.extend(
        [
            E(0.0, ev.ARRIVAL, "a"),
            E(1.0, ev.COMPLETE, "a"),
            E(2.0, ev.FAIL, "a", detail="late"),
            E(3.0, "SOMETHING_NEW", "a"),
        ]
    )
    assert m.lanes["a"].state == ev.COMPLETED and m.lanes["a"].terminal == 1.0
    assert m.unknown_events == 1


def test_class_without_label_follows_the_core_rule():
    m = _model([ev.TraceEvent(0.0, ev.ARRIVAL, "f1")])
    assert m.lanes["f1"].klass == "normal" and not m.lanes["f1"].urgent
    m = _model([ev.TraceEvent(0.0, ev.ARRIVAL, "u1")])
    assert m.lanes["u1"].klass == "urgent"
    assert parse_arrival_detail(arrival_detail("arm", 9)) == ("arm", 9)
    assert parse_arrival_detail("class=x trace=notanumber other=1") == ("x", None)


def test_lane_items_and_markers():
    m = _model()
    bars, markers = lane_items(m.lanes["u1"], now=13.0, t0=10.0)
    kinds = [mk.kind for mk in markers]
    assert kinds == ["arrival", "ert_missed"]
    assert "MISSED" in markers[1].tip and "W(s_0) = 0.300" in markers[1].tip
    # executing is painted after (over) the dispatched wait of the next segment
    order = [b.kind for b in bars]
    assert order.index("executing") > max(i for i, k in enumerate(order) if k == "dispatched")
    _, f_markers = lane_items(m.lanes["f1"], now=13.0, t0=10.0)
    assert [mk.kind for mk in f_markers] == ["arrival", "ert_missed", "terminal"]
    assert "FAILED" in f_markers[-1].tip and "does not parse" in f_markers[-1].tip


def test_layout_groups_by_agent_caps_lanes_and_zooms():
    m = TimelineModel()
    m.extend(stream(200, 10))  # 166 tasks on 30 agents
    assert len(m.lanes) > 150
    lay = make_layout(m, max_tasks=60)
    assert len(lay.rows) == 60 and lay.omitted == len(m.lanes) - 60 and "showing 60 of" in lay.note()
    groups = [g for g, _, _ in lay.groups]
    assert len(groups) == len(set(groups))  # each agent is one contiguous block
    assert all(row.group == row.lane.agent_id for row in lay.rows)
    # window: only lanes overlapping [t0+5, t0+6]
    lay = make_layout(m, window=(5.0, 6.0), max_tasks=0)
    t0 = lay.t0
    for row in lay.rows:
        assert row.lane.arrival <= t0 + 6.0 and row.lane.end_time(lay.now) >= t0 + 5.0
    assert lay.x_range == (t0 + 5.0, t0 + 6.0)
    only = make_layout(m, agents=["r3"], group="none")
    assert only.rows and {r.lane.agent_id for r in only.rows} == {"r3"} and only.groups[0][0] == ""
    with pytest.raises(ValueError, match="grouping"):
        make_layout(m, group="colour")


@pytest.mark.parametrize(
    "text,expected",
    [("10:40", (10.0, 40.0)), (":5", (-math.inf, 5.0)), ("3:", (3.0, math.inf)), (None, None)],
)
def test_parse_window(text, expected):
    assert parse_window(text) == expected


@pytest.mark.parametrize("text", ["10", "a:b", "5:5", "9:1"])
def test_parse_window_rejects_with_reason(text):
    with pytest.raises(ValueError, match="window"):
        parse_window(text)


def test_activity_says_what_a_task_does_now():
    upto = [e for e in SCENARIO if e.t <= 10.3]
    m = _model(upto)
    assert m.lanes["u1"].activity == "SUSPENDED + EXECUTING s0"
    assert m.lanes["n1"].activity == "GENERATING"
    assert m.lanes["f1"].activity == "GENERATING"
    m = _model([e for e in SCENARIO if e.t <= 10.6])
    assert m.lanes["n1"].activity == "EXECUTING s0"  # TaskStatus would still say GENERATING
    assert m.lanes["u1"].activity == "GENERATING + EXECUTING s0"
    assert _model().lanes["f1"].activity == ev.FAILED
