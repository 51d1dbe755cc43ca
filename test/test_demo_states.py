"""The demo's live progress names every task state the planner publishes (it printed EXECUTING as 8)."""

import pytest

from timely_llm_ros.core import events as ev

pytestmark = pytest.mark.ros


def test_every_task_state_has_its_name_in_the_demo():
    TaskStatus = pytest.importorskip("timely_llm_ros.msg").TaskStatus
    from timely_llm_ros.demo import TERMINAL, status_name

    for name in ev.TASK_STATES:
        assert status_name(getattr(TaskStatus, name)) == name
    assert status_name(TaskStatus.EXECUTING) == "EXECUTING" and "EXECUTING" not in TERMINAL
    assert status_name(250) == "250"  # an unknown code stays visible, never dropped
