"""Front-door checks of an inbound task (core/intake.py, core/limits.py): each check has one home and
the texts a sender sees."""

from __future__ import annotations

import pytest

from timely_llm_ros.core import limits
from timely_llm_ros.core.intake import (
    DuplicateTaskId,
    TaskIds,
    check_robot_type,
    load_task_skill_set,
    overload_reason,
)
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF


def spec(robot_type: str = "drone", skill_set: str = "tello_minispec", agent: str = "d1") -> TaskSpec:
    return TaskSpec("t1", agent, robot_type, skill_set, "take off", NORMAL_TUF)


def test_ids_are_assigned_per_agent_and_duplicates_are_reported_under_their_own_id():
    ids = TaskIds(100)
    assert ids.claim("", "d1") == "d1-1"
    assert ids.claim("x", "d1") == "x"
    ids.add("d1-2")  # e.g. recovered from the journal: never assigned again
    assert ids.claim("", "d1") == "d1-3"
    with pytest.raises(DuplicateTaskId) as err:
        ids.claim("x", "d1")
    assert err.value.report_as == "x#dup1"
    assert err.value.reason == (
        "duplicate task_id 'x': that id is in use (or was used recently); this "
        "rejection is reported as 'x#dup1'"
    )
    with pytest.raises(DuplicateTaskId) as err:
        ids.claim("x", "d1")
    assert err.value.report_as == "x#dup2"
    assert isinstance(err.value, TaskRejected)


def test_ids_memory_is_bounded():
    ids = TaskIds(2)
    for t in ("a", "b", "c"):
        ids.claim(t, "d1")
    assert "a" not in ids and "c" in ids
    assert ids.claim("a", "d1") == "a"  # seen long ago: may be reused


def test_overload_names_the_queue_state():
    assert overload_reason(3, 10, 4, 11) == ""
    assert overload_reason(4, 10, 4, 11) == (
        "overloaded: 4 tasks received but not yet taken by the planner (limit max_inbound = 4), 10 open tasks"
    )
    assert overload_reason(0, 11, 4, 11) == "overloaded: 11 open tasks (limit max_queued_tasks = 11)"


def test_skill_set_and_robot_type_checks():
    sset = load_task_skill_set("tello_minispec")
    check_robot_type(spec(), sset, {})
    with pytest.raises(TaskRejected, match=r"^unknown skill set 'nope'; available: "):
        load_task_skill_set("nope")
    with pytest.raises(TaskRejected) as err:
        check_robot_type(spec(robot_type="arm"), sset, {})
    assert err.value.reason == (
        "robot type mismatch: the task is for a 'arm' robot but skill set "
        "'tello_minispec' is for 'drone' robots"
    )
    with pytest.raises(TaskRejected) as err:
        check_robot_type(spec(), sset, {"d1": "arm"})
    assert (
        err.value.reason
        == "robot type mismatch: agent 'd1' is a 'arm' robot, the task asks for a 'drone' robot"
    )


def test_one_wording_for_a_tuf_that_is_no_tuf():
    assert limits.tuf_or_reject(1.0, -2.0, 1.0) == NORMAL_TUF
    with pytest.raises(TaskRejected, match=r"^invalid TUF: beta must be > 0, got 0.0$"):
        limits.tuf_or_reject(1.0, -2.0, 0.0)
    with pytest.raises(TaskRejected, match=r"^invalid TUF: beta must be > 0"):
        limits.check_tuf_range(1.0, -2.0, 0.0)  # the range check says it the same way


def test_a_refusal_keeps_the_reason_and_names_its_kind_and_id():
    from timely_llm_ros.core.intake import Refused, refusal

    with pytest.raises(Refused) as err:
        with refusal("limits", "t1"):
            limits.check_task_fields(limits.TaskFields("t1", "a" * 65, "drone", "s", "i", "", "", 0, 0, 0, 0))
    assert (err.value.kind, err.value.report_as) == ("limits", "t1")
    assert err.value.reason == "agent_id is 65 characters long; the limit is 64"
    with pytest.raises(Refused) as err:  # a Refused inside keeps its own kind and id
        with refusal("invalid", "t1"):
            ids = TaskIds(4)
            ids.claim("x", "d1")
            ids.claim("x", "d1")
    assert (err.value.kind, err.value.report_as) == ("duplicate", "x#dup1")


@pytest.mark.parametrize("name", ["agent_id", "robot_type", "skill_set", "instruction"])
def test_one_list_of_required_fields_for_the_core_and_the_ros_boundary(name):
    # the ROS adapter required robot_type, TaskSpec.validate did not: a workload task or a direct
    # core caller with a blank robot type was planned, the same task over ROS was rejected
    from timely_llm_ros.core.task import REQUIRED_FIELDS

    assert REQUIRED_FIELDS == ("agent_id", "robot_type", "skill_set", "instruction")
    bad = spec()
    setattr(bad, name, "  ")
    with pytest.raises(TaskRejected, match=f"^{name} is empty$"):
        bad.validate()


def test_the_field_check_returns_the_tuf_it_validated():
    f = limits.TaskFields("t1", "d1", "drone", "s", "i", "", "", 0, 1.0, -2.0, 1.0)
    assert limits.check_task_fields(f) == NORMAL_TUF
    assert (
        limits.check_task_fields(limits.TaskFields("t1", "d1", "drone", "s", "i", "", "", 0, 0, 0, 0)) is None
    )
