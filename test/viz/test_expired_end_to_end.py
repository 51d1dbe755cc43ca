"""EXPIRED end to end: a simulated run with the planner option ``overrun: kill`` expires the tasks whose
utility horizon passed; the bag, ``timely-llm report`` (state counts + reasons, class metrics) and the
timeline all show them."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("rosbags", reason="rosbags is installed in the project venv (make)")

from timely_llm_ros.cli import main
from timely_llm_ros.core import events as ev
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.lrtrace.from_bag import load_run
from timely_llm_ros.lrtrace.simbag import write_sim_bag
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.viz import report
from timely_llm_ros.workload import resolve_workload

COMMANDS = {
    "report": ("timely_llm_ros.viz.report", "report"),
    "timeline": ("timely_llm_ros.viz.timeline", "t"),
}
DOOMED = TUF(0.0, -10.0, 0.01)  # horizon 1 ms after arrival: no first segment can make it


def test_expired_tasks_in_bag_report_and_timeline(tmp_path, capsys):
    tasks = resolve_workload("sample1").tasks[:8]
    tasks = [dataclasses.replace(t, tuf=DOOMED) if i % 3 == 0 else t for i, t in enumerate(tasks)]
    doomed = {t.task_id for i, t in enumerate(tasks) if i % 3 == 0}
    res = simulate(tasks, SimConfig(options=PlannerOptions(overrun="kill")))
    assert {r.task_id for r in res.records if r.state == ev.EXPIRED} == doomed
    assert res.stats["expired"] == len(doomed)
    bag = write_sim_bag(res, tasks, tmp_path / "bag")
    run = load_run(bag)
    got = {r.task_id: r for r in run.records()}
    for tid in doomed:
        assert got[tid].state == ev.EXPIRED and got[tid].reason.startswith("overrun (kill)")
    result = report.build(run)
    assert result.classes["all"]["n_expired"] == len(doomed)
    assert main(["report", str(bag), "--out", str(tmp_path / "rep")], commands=COMMANDS) == 0
    out = capsys.readouterr().out
    assert f"EXPIRED {len(doomed)}" in out and "#   expired " in out and "overrun (kill)" in out
    png = tmp_path / "timeline.png"
    assert main(["timeline", str(bag), "-o", str(png)], commands=COMMANDS) == 0
    assert png.stat().st_size > 0


def test_per_task_overrun_is_recorded_in_the_bags_task_messages(tmp_path):
    """A task's own strategy (``TaskSpec.overrun`` = ``Task.overrun``) expires it under the planner's
    default ``continue`` and travels in the recorded ``Task``; the others record ``""`` (default)."""
    from timely_llm_ros.lrtrace import typestore as ts
    from timely_llm_ros.lrtrace.bagread import read_bag

    tasks = resolve_workload("sample1").tasks[:3]
    tasks[0] = dataclasses.replace(tasks[0], tuf=DOOMED, overrun="kill")
    res = simulate(tasks, SimConfig())
    assert [r.state for r in res.records if r.task_id == tasks[0].task_id] == [ev.EXPIRED]
    bag = write_sim_bag(res, tasks, tmp_path / "bag")
    recorded = {m.task_id: m.overrun for _topic, _t, m in read_bag(bag).by_type(ts.TASK)}
    assert recorded == {tasks[0].task_id: "kill", tasks[1].task_id: "", tasks[2].task_id: ""}
