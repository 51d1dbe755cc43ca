"""Per-robot queueing named as such: a task that waits for its own robot (busy with an earlier task of
that robot) says so in its TaskStatus reason, its trace events and the timeline — never "queued
(waiting for the engine)" — and the report counts that wait. Simulated engine, virtual clock."""

from __future__ import annotations

from types import SimpleNamespace

from test_agent_queue import flood

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.lrtrace.timeline_model import QUEUED, ROBOT_WAIT, TimelineModel, robot_waits
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.viz.style import SPAN_LABELS


def test_status_reasons_name_the_robot_not_the_engine():
    states: list[tuple[str, str, str]] = []
    p = PlannerCore(SimEngine(), on_state=lambda tid, state, why: states.append((tid, state, why)))
    for spec in flood(n=3, other=0):
        p.submit(spec)
    queued = {tid: why for tid, state, why in states if state == ev.QUEUED}
    assert queued["f0"] == ""  # its robot is free: it waits for the engine only
    assert queued["f1"] == (
        "queued for the engine; generating ahead while robot 'd1' ends task 'f0' (segments held until then)"
    )
    assert queued["f2"] == "waiting for robot 'd1' to end task 'f0'"


def _run():
    res = simulate(flood(n=3, other=0), SimConfig(policy="timely", exec_mode="min", lookahead=1))
    model = TimelineModel()
    model.extend(sorted(res.events, key=lambda e: e.t))
    return res, model


def test_trace_events_mark_the_wait_for_the_robot_and_its_end():
    res, _ = _run()
    of = {tid: [e for e in res.events if e.task_id == tid] for tid in ("f0", "f1", "f2")}
    f0_end = next(e.t for e in of["f0"] if e.kind == ev.COMPLETE)
    admits = {tid: [e.detail for e in evs if e.kind == ev.ADMIT] for tid, evs in of.items()}
    assert admits["f0"] == [""]
    assert admits["f1"][0].startswith(f"{ev.ROBOT_BUSY} generating ahead while robot 'd1'")
    assert admits["f2"][0] == f"{ev.ROBOT_BUSY} waiting for robot 'd1' to end task 'f0'"
    # f2 is scheduled when f0 ends (f1 becomes active, f2 may generate ahead)
    scheduled = [e for e in of["f2"] if e.kind == ev.ADMIT and e.detail.startswith(ev.ROBOT_SCHEDULED)]
    assert len(scheduled) == 1 and scheduled[0].t == f0_end
    assert "queued for the engine; generating ahead while robot 'd1' ends task 'f1'" in scheduled[0].detail
    # f1's first segment is held for the robot (SUSPEND says so), then dispatched when f0 ends
    held = [e for e in of["f1"] if e.kind == ev.SUSPEND and e.detail.startswith(ev.ROBOT_BUSY)]
    assert len(held) == 1 and held[0].t < f0_end


def test_the_timeline_shows_the_robot_wait_and_the_report_counts_it():
    res, model = _run()
    ends = {r.task_id: r.terminal_time for r in res.records}
    f2 = model.lanes["f2"]
    first = f2.spans[0]
    # from its arrival until f0 ended, f2 waited for its robot — not for the engine
    assert first.kind == ROBOT_WAIT and first.start == f2.arrival and first.end == ends["f0"]
    assert not any(s.kind == QUEUED and s.start < ends["f0"] for s in f2.spans)
    f1 = model.lanes["f1"]
    waits = [s for s in f1.spans if s.kind == ROBOT_WAIT]
    assert len(waits) == 1 and waits[0].end == ends["f0"]  # held segment: until its robot was free
    assert "waiting for its robot" in SPAN_LABELS[ROBOT_WAIT]
    assert "engine" not in SPAN_LABELS[ROBOT_WAIT]
    w = robot_waits(model)
    assert set(w) == {"f1", "f2"} and w["f2"] > ends["f0"] - f2.arrival - 1e-9

    from timely_llm_ros.viz.report import robot_wait_line

    line = robot_wait_line(SimpleNamespace(model=model))
    assert line.startswith(
        "# waited for their robot (busy with an earlier task of the same robot): 2 of 3 tasks"
    )
    assert robot_wait_line(SimpleNamespace(model=TimelineModel())) == ""
