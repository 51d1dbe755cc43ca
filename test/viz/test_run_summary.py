"""The summary table ``timely-llm demo`` prints, also at the end of ``timely-llm fleet`` when a
workload ran: the fleet names the recorder's bag before starting it, then summarises that bag."""

from __future__ import annotations

from pathlib import Path

import pytest

from timely_llm_ros import fleet
from timely_llm_ros.viz.report import print_summary

REPO = Path(__file__).resolve().parents[2]


def test_a_workload_fleet_names_its_bag_and_one_without_workload_does_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    nodes = fleet.fleet_nodes(fleet.load_fleet(REPO / "config" / "demo_fleet.yaml"))
    bag = fleet._bag_of_workload_run(nodes)
    (recorder,) = [n for n in nodes if n.role == "recorder"]
    assert bag is not None and bag.is_absolute() and bag.parent == tmp_path
    assert bag.name.startswith("lrtrace_") and recorder.params["output"] == str(bag)
    no_workload = [n for n in nodes if n.role != "workload"]
    assert fleet._bag_of_workload_run(no_workload) is None


def test_the_fleet_prints_the_demo_summary_table_of_its_bag(tmp_path, capsys):
    pytest.importorskip("rosbags")
    from viz_testlib import write_scenario_bag

    bag = write_scenario_bag(tmp_path / "run")
    assert fleet._print_summary(bag) == 0
    out = capsys.readouterr().out
    assert "== fleet | task type:" in out and "on-time %" in out
    assert f"[fleet] bag:      {bag}" in out
    assert fleet._print_summary(tmp_path / "missing") == 1
    assert "no bag was recorded" in capsys.readouterr().out
    assert print_summary(bag, tmp_path / "out", tag="demo") == 0
    assert (tmp_path / "out" / "report" / "report.txt").is_file()
