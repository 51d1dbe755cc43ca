"""PlanTask feedback: two kinds without empty halves, and a result that counts what the feedback showed.

The action server's output side (``PlanTaskServer.on_status`` / ``on_segment``) fed with the
messages the planner node publishes, its goal handle recording what would go to the client. The
end-to-end path over DDS with a real client is test/nodes/test_plan_task_action.py; this one pins
the cases a simulated plan does not always produce: the closing marker (final, no text) and a
loop's call-less ``}`` tail (executed by the robot, so a segment).
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.ros


class _Handle:
    """Records what the server sends for one goal (the rclpy ServerGoalHandle calls it uses)."""

    def __init__(self) -> None:
        self.feedback: list = []
        self.outcome = ""
        self.is_cancel_requested = False

    def publish_feedback(self, fb) -> None:
        self.feedback.append(fb)

    def succeed(self) -> None:
        self.outcome = "succeeded"

    def abort(self) -> None:
        self.outcome = "aborted"

    def canceled(self) -> None:
        self.outcome = "canceled"


def _server_with_goal(task_id: str):
    from rclpy.task import Future

    from timely_llm_ros.ros.plan_task import PlanTaskServer, _Goal

    server = PlanTaskServer.__new__(PlanTaskServer)  # no node: only the output side is exercised
    server._goals = {}
    handle = _Handle()
    goal = _Goal(handle, Future())
    server._goals[task_id] = goal
    return server, goal, handle


def _segment(index: int, text: str, calls: tuple[str, ...] = (), final: bool = False):
    from timely_llm_ros.msg import Segment, SkillCall

    return Segment(
        task_id="t1",
        agent_id="d1",
        index=index,
        text=text,
        calls=[SkillCall(name=c, source=f"{c}();") for c in calls],
        final=final,
    )


def _status(state: int):
    from timely_llm_ros.msg import TaskStatus

    return TaskStatus(task_id="t1", agent_id="d1", state=state)


def test_status_and_segment_feedback_are_separate_kinds_and_the_result_counts_the_segments():
    from timely_llm_ros.action import PlanTask
    from timely_llm_ros.msg import TaskStatus

    server, goal, handle = _server_with_goal("t1")
    server.on_status(_status(TaskStatus.ACCEPTED))
    server.on_status(_status(TaskStatus.GENERATING))
    server.on_segment(_segment(0, "mu(50);", ("mu",)))
    server.on_segment(_segment(1, "4{tc(90);", ("tc",)))
    server.on_segment(_segment(2, "}"))  # a loop's tail: no call, but the robot runs the replays
    server.on_status(_status(TaskStatus.EXECUTING))
    server.on_segment(_segment(3, "", final=True))  # the closing marker: nothing to execute
    server.on_status(_status(TaskStatus.COMPLETED))

    kinds = [f.kind for f in handle.feedback]
    S, G = PlanTask.Feedback.STATUS, PlanTask.Feedback.SEGMENT
    assert kinds == [S, S, G, G, G, S, S]
    for f in handle.feedback:
        assert len(f.segment) == (1 if f.kind == G else 0)  # no empty Segment in a status feedback
    shown = [f.segment[0].index for f in handle.feedback if f.kind == G]
    assert shown == [0, 1, 2]
    assert goal.segments == len(shown) == 3  # the result's `segments`
    # a SEGMENT feedback carries the task's status when the segment was sent, not an empty one
    assert [f.status.state for f in handle.feedback if f.kind == G] == [TaskStatus.GENERATING] * 3
    assert handle.outcome == "succeeded" and goal.done.result().state == TaskStatus.COMPLETED


def test_a_final_segment_with_calls_is_a_segment_not_a_closing_marker():
    from timely_llm_ros.ros.plan_task import is_closing_marker

    assert is_closing_marker(_segment(3, "", final=True))
    assert is_closing_marker(_segment(3, "  \n", final=True))
    assert not is_closing_marker(_segment(2, "tp();", ("tp",), final=True))
    assert not is_closing_marker(_segment(2, "}", final=True))
    assert not is_closing_marker(_segment(2, "", final=False))
