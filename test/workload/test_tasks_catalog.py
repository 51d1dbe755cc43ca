"""The 11 LRTrace benchmark tasks (paper Table 2) and their TUF classes (§7.1)."""

from __future__ import annotations

import pytest
import yaml

from timely_llm_ros.core.paths import config_path
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.tasks import load_catalog, parse_catalog, split_task_input


def test_eleven_tasks_with_paper_classes():
    catalog = load_catalog()
    assert sorted(catalog.tasks) == list(range(1, 12))
    for task in catalog:
        expected = "normal" if task.id <= 5 else "urgent" if task.id <= 8 else "arm"
        assert task.task_class == expected
        assert task.tuf == (URGENT_TUF if expected == "urgent" else NORMAL_TUF)
        robot = "arm" if task.id >= 9 else "drone"
        assert task.primary.robot_type == robot
        assert task.primary.skill_set == ("robot_arm" if robot == "arm" else "tello_minispec")
        assert task.primary.exec_times and task.primary.plan_time_s > 0
    # Urgent requests are emergency re-plans.
    assert all(catalog.get(i).primary.instruction.startswith("[E]") for i in (6, 7, 8))
    assert catalog.get(1).title == "Look for the cat" and catalog.get(10).title == "Desk cleaning"


def test_arm_tasks_have_fltrnn_variants_with_public_ids():
    catalog = load_catalog()
    for public_id, task_id in enumerate((9, 10, 11)):
        task, variant = catalog.by_public_trace("robotarm", "fltrnn", public_id)
        assert task.id == task_id and variant.skill_set == "arm_fltrnn"
        # gt/pi/dr of the sc/gt/pi/dr variant reuse the FLTRNN move_to/take/drop times in order.
        fl = {"move_to": "gt", "take": "pi", "drop": "dr"}
        mapped = [(fl[tok], sec) for tok, sec in variant.exec_times]
        assert [x for x in task.primary.exec_times if x[0] != "sc"] == mapped
    assert catalog.public_trace_ids("drone", "typefly") == list(range(8))


def test_split_task_input():
    assert split_task_input("Scene: [], Task: [A] go") == ("[]", "[A] go")
    assert split_task_input("Scene: [a x:0.1] Task: [Q] is it?") == ("[a x:0.1]", "[Q] is it?")
    assert split_task_input("[A] just a task") == ("", "[A] just a task")


def test_bad_catalog_is_rejected_with_field():
    data = yaml.safe_load(config_path("tasks", "lrtrace_tasks.yaml").read_text())
    data["tasks"][2]["exec_times"][0][1] = -1
    with pytest.raises(WorkloadError, match="task 3: field 'exec_times'"):
        parse_catalog(data, "x.yaml")
    data = yaml.safe_load(config_path("tasks", "lrtrace_tasks.yaml").read_text())
    data["tasks"][0]["tuf"] = "fast"
    with pytest.raises(WorkloadError, match="unknown TUF class"):
        parse_catalog(data, "x.yaml")
