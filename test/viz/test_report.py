"""``timely-llm report``: a simulated run's bag reports exactly what the bench computed and printed."""

from __future__ import annotations

import json
import math

import pytest

pytest.importorskip("rosbags", reason="rosbags is installed in the project venv (make)")

from viz_testlib import write_scenario_bag

from timely_llm_ros.bench.runner import Bench, BenchOptions
from timely_llm_ros.bench.tables import class_tables
from timely_llm_ros.cli import main
from timely_llm_ros.lrtrace.from_bag import load_run
from timely_llm_ros.lrtrace.simbag import write_sim_bag
from timely_llm_ros.viz import report

COMMANDS = {
    "report": ("timely_llm_ros.viz.report", "report"),
    "timeline": ("timely_llm_ros.viz.timeline", "t"),
}


def _same(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if x is None or y is None:
            assert x is None and y is None, key
        else:
            assert math.isclose(x, y, rel_tol=1e-9, abs_tol=1e-7), (key, x, y)


@pytest.mark.parametrize("policy", ["timely", "vllm-stream"])
def test_report_of_a_sim_bag_equals_the_bench(tmp_path, policy, capsys):
    bench = Bench(BenchOptions(policies=[policy]))
    spec = "wid2:agents=8"
    run = bench.run(spec, policy)
    bag = write_sim_bag(_sim(bench, spec, policy), bench.workload(spec).tasks, tmp_path / "bag")
    result = report.build(load_run(bag))
    assert result.policy == policy
    assert result.classes.keys() == run.classes.keys() and result.traces.keys() == run.traces.keys()
    for cls in run.classes:
        _same(run.classes[cls], result.classes[cls])
    for trace in run.traces:
        _same(run.traces[trace], result.traces[trace])
    # the printed tables are the bench's, cell for cell
    bench_text = "\n".join(class_tables("x", [run]))
    report_text = "\n".join(class_tables("x", [result]))
    assert bench_text == report_text
    # and the CLI prints them (plus the on-time and per-type tables)
    assert main(["report", str(bag), "-o", str(tmp_path / "out")], commands=COMMANDS) == 0
    out = capsys.readouterr().out
    for table in class_tables(bag.name, [run]):
        assert table in out
    type_lines = out.split("per task type")[1].splitlines()[3:]
    assert {ln.split()[0]: ln.split()[-1] for ln in type_lines if ln.strip()} == {
        k: f"{v['on_time_pct']:.1f}" for k, v in run.traces.items()
    }
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert written == {
        "report.txt",
        "metrics.json",
        "per_class.png",
        "per_task_type.png",
        "timeline.png",
        "timeline.html",
    }
    saved = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert saved["classes"]["all"]["n"] == len(bench.workload(spec).tasks)
    assert "on-time %" in (tmp_path / "out" / "report.txt").read_text()


def _sim(bench, spec, policy):
    """The SimResult behind a bench run (the bench keeps records and events, not the object)."""
    from timely_llm_ros.sim.simulator import SimResult

    run = bench.runs[(spec, policy)]
    return SimResult(records=run.records, events=run.events, stats=dict(run.stats))


def test_report_of_the_scenario_counts_failed_and_missed(tmp_path, capsys):
    bag = write_scenario_bag(tmp_path / "b")
    result = report.build(load_run(bag))
    assert result.classes["urgent"]["on_time_pct"] == 0.0
    assert result.classes["normal"]["n_failed"] == 1 and result.classes["normal"]["on_time_pct"] == 50.0
    assert result.traces.keys() == {"6", "1", "-"}


def test_report_without_tasks_topic_says_why_nothing_is_scored(tmp_path, capsys):
    bag = write_scenario_bag(tmp_path / "b", with_tasks=False)
    assert main(["report", str(bag)], commands=COMMANDS) == 1
    out = capsys.readouterr().out
    assert "missing: /tasks (not recorded)" in out
    assert "left out of the metrics: no TUF known" in out and "no task could be scored" in out


def test_report_of_no_bag_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path / "none")], commands=COMMANDS) == 2
    assert "no bag at" in capsys.readouterr().err


def test_a_task_sent_without_an_id_is_scored_under_the_id_the_planner_gave_it(tmp_path):
    """``ros2 topic pub /tasks`` without a task_id: the planner names the task ``<agent>-<n>`` and the
    recorder keeps the message as sent; the report pairs the two and scores the task."""
    import dataclasses

    from viz_testlib import SCENARIO, scenario_specs

    from timely_llm_ros.interfaces.mapping import seconds_to_ns
    from timely_llm_ros.interfaces.topics import TOPIC_TASKS, TOPIC_TRACE
    from timely_llm_ros.lrtrace import convert as cv
    from timely_llm_ros.lrtrace import typestore as ts
    from timely_llm_ros.lrtrace.bagio import DEFAULT_TOPICS, BagWriter

    renamed = {"n1": "drone_2-1"}
    store = ts.shared_typestore()
    with BagWriter(tmp_path / "b", dict(DEFAULT_TOPICS), flush_every_s=None) as w:
        for spec in scenario_specs():
            sent = dataclasses.replace(spec, task_id="") if spec.task_id in renamed else spec
            w.write_msg(TOPIC_TASKS, seconds_to_ns(spec.arrival), cv.task_to_msg(store, sent, spec.arrival))
        for e in SCENARIO:
            e = dataclasses.replace(e, task_id=renamed.get(e.task_id, e.task_id))
            w.write_msg(TOPIC_TRACE, seconds_to_ns(e.t), cv.event_to_msg(store, e))
    run = load_run(tmp_path / "b")
    assert "drone_2-1" in run.tasks and "" not in run.tasks
    assert not [n for n in run.notes if "no /tasks message" in n]
    result = report.build(run)
    assert result.classes["normal"]["n_failed"] == 1 and result.classes["normal"]["on_time_pct"] == 50.0
