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


def test_the_progress_line_counts_urgent_answers_on_time():
    # `line` had slid under status_name (dead code after its return): the demo's monitor raised
    # AttributeError at its first progress line
    from timely_llm_ros.demo import Progress

    p = Progress(
        states={"u1": "COMPLETED", "u2": "EXECUTING", "n1": "GENERATING"},
        responses={"u1": (0.15, 2.0), "u2": (0.4, 0.5), "n1": (0.9, 1.0)},
    )
    assert p.line({"u1": 0.2, "u2": 0.2}) == (
        "tasks seen  3  finished  1 (completed 1)  urgent answered 2, on time 1  planning now: n1"
    )
