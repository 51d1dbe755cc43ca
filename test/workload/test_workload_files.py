"""Our own workload file format and the --workload argument resolution."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.fileformat import (
    load_workload_file,
    parse_overrides,
    resolve_workload,
)

DATA = Path(__file__).parent / "data"

TASK_LIST = """
name: hand
tasks:
  - {trace: 6, arrival: 0.5, agent: r1}
  - trace: 1
    arrival: 0.2
    agent: 7
    tuf: [2, 0.2, 0.5]
  - arrival: 1.0
    agent: r3
    robot_type: drone
    skill_set: tello_minispec
    instruction: "[A] Go up 50 cm."
    plan: "mu(50);"
    exec_times: [[mu, 2.5]]
    tuf: [1, 1, 1.5]
    class: custom
"""


def test_explicit_task_list(tmp_path):
    path = tmp_path / "hand.yaml"
    path.write_text(TASK_LIST)
    wl = load_workload_file(path)
    assert wl.name == "hand" and wl.kind == "list"
    assert [t.arrival for t in wl.tasks] == [0.2, 0.5, 1.0]  # sorted by arrival
    first, second, third = wl.tasks
    assert (first.trace_id, first.agent_id, first.tuf) == (1, "7", TUF.from_public(2, 0.2, 0.5))
    assert (second.trace_id, second.task_class, second.agent_id) == (6, "urgent", "r1")
    assert (third.trace_id, third.task_class, third.reference_plan, third.exec_times) == (
        None,
        "custom",
        "mu(50);",
        [("mu", 2.5)],
    )


@pytest.mark.parametrize(
    "text,match",
    [
        ("tasks:\n  - {trace: 6, agent: a}\n", "'arrival': missing"),
        ("tasks:\n  - {trace: 60, arrival: 1, agent: a}\n", "unknown trace id 60"),
        ("tasks:\n  - {trace: 6, arrival: -1, agent: a}\n", r"tasks\[0\].arrival: must be >= 0, got -1"),
        (
            "tasks:\n  - {trace: 6, arrival: 1, agent: a, tuff: [1, 1, 2]}\n",
            r"tasks\[0\]: unknown field\(s\) 'tuff'",
        ),
        ("tasks:\n  - {trace: 6, arrival: 1, agent: a, tuf: [1, 2, 2]}\n", "t_zero"),
        ("tasks:\n  - {arrival: 1, agent: a, instruction: x}\n", "required for a task without 'trace'"),
        (
            "tasks:\n  - {trace: 6, arrival: 1, agent: a, task_id: x}\n"
            "  - {trace: 1, arrival: 2, agent: b, task_id: x}\n",
            "duplicate task_id",
        ),
        ("composer: {rate: 1}\ntasks: []\n", "tasks: must not be empty"),
        ("composer: {rate: 1}\ntasks: [{trace: 6, arrival: 1, agent: a}]\n", "exactly one of"),
        ("workload: {}\n", r"unknown field\(s\) 'workload'; known: composer, description, name, tasks"),
        ("composer: {rate: 1, max_tpe: 2, traces: 1-2, agents: 3}\n", "'duration': missing"),
        ("tasks: [\n", "not valid YAML"),
    ],
)
def test_bad_workload_files(tmp_path, text, match):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(WorkloadError, match=match) as info:
        load_workload_file(path)
    assert str(path) in str(info.value)


def test_composer_file_and_overrides(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("composer: {rate: 0.5, max_tpe: 4, traces: '6-8', agents: 10, duration: 60, seed: 4}\n")
    wl = resolve_workload(str(path))
    assert wl.kind == "composed" and {t.trace_id for t in wl.tasks} <= {6, 7, 8}
    again = resolve_workload(f"{path}:agents=3,traces=1,2")
    assert again.composition.spec.agents == 3 and again.composition.spec.traces == [1, 2]
    assert len({t.agent_id for t in again.tasks}) <= 3


def test_preset_overrides_and_errors():
    wl = resolve_workload("wid2:agents=84,seed=9")
    assert wl.composition.spec.agents == 84 and wl.composition.spec.seed == 9
    assert wl.name == "wid2:agents=84,seed=9"
    with pytest.raises(WorkloadError, match="unknown key"):
        resolve_workload("wid1:agnets=3")
    with pytest.raises(WorkloadError, match="no such workload.*wid1"):
        resolve_workload("wid9")
    assert parse_overrides("traces=1,3,5,agents=10", "x") == {"traces": "1,3,5", "agents": 10}


def test_public_sample_names_use_data_dir(tmp_path, monkeypatch):
    shutil.copy(DATA / "public_small.json", tmp_path / "data_sample_1.json")
    monkeypatch.setenv("TIMELY_LLM_DATA", str(tmp_path))
    wl = resolve_workload("sample1")
    assert wl.kind == "public" and wl.name == "sample1" and len(wl.tasks) == 4
    with pytest.raises(WorkloadError, match="only apply to composer"):
        resolve_workload("sample1:agents=3")
    with pytest.raises(WorkloadError, match="TIMELY_LLM_DATA"):
        resolve_workload("arm")


def test_json_list_file_is_public_format(tmp_path):
    path = tmp_path / "w.json"
    path.write_text(json.dumps(json.loads((DATA / "public_small.json").read_text())))
    assert load_workload_file(path).kind == "public"


def test_tuf_auto_leaves_the_tuf_to_the_planner(tmp_path):
    """``tuf: auto``: a trace task keeps its trace TUF only as the reference it is judged by; a custom
    task has none; both reach the planner without a TUF (it derives one: planner option urgency)."""
    path = tmp_path / "auto.yaml"
    path.write_text(
        "tasks:\n"
        "  - {trace: 6, arrival: 0.5, agent: r1, tuf: auto}\n"
        "  - {trace: 1, arrival: 0.7, agent: r2}\n"
        "  - {arrival: 1.0, agent: r3, robot_type: drone, skill_set: tello_minispec,\n"
        "     instruction: 'Go up 50 cm.', plan: 'mu(50);', exec_times: [[mu, 2.5]], tuf: auto}\n"
    )
    first, second, custom = load_workload_file(path).tasks
    assert first.tuf is None and first.reference_tuf == TUF.from_public(2, 0.2, 0.5)
    assert second.tuf is not None and second.reference_tuf is None
    assert custom.tuf is None and custom.reference_tuf is None
    bad = tmp_path / "bad.yaml"
    bad.write_text("tasks:\n  - {trace: 6, arrival: 0.5, agent: r1, tuf: automatic}\n")
    with pytest.raises(WorkloadError, match="tuf"):
        load_workload_file(bad)
