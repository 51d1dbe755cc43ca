"""The planner's ``plan_task`` action (``PlanTask.action``) and ``cancel_task`` service.

Why an action: a task is a long request — the planner accepts it, generates its plan in segments,
the robot executes them — with progress and a final answer, and users expect to cancel it. The
action is a second door to the *same* intake as the ``tasks`` topic: the goal's ``Task`` goes through
the planner node's intake (same validation, same per-robot queue, same statuses and trace events on
``task_status`` / ``trace_events``); this module only follows that task's statuses and segments.

* **Goal** accepted at the action level always; a task the intake refuses ends at once with result
  state REJECTED and the reason (an action-level rejection could not say why).
* **Feedback**, two kinds without empty halves: every status change of the task (kind STATUS, its
  ``segment`` list empty) and every segment dispatched to its robot for execution (kind SEGMENT, the
  segment plus the task's status then). The closing marker (``final`` with no text, sent to the
  robot when the plan ends after its last segment was already sent) is not a segment to execute and
  gives no feedback: the plan's end shows in the statuses (COMPLETED).
* **Result**: the final ``TaskStatus`` (COMPLETED → goal SUCCEEDED; CANCELLED after a cancel request →
  CANCELED; anything else → ABORTED) and ``segments`` = the number of SEGMENT feedbacks sent: what a
  client saw is what the result counts (it once counted only segments with skill calls, so a loop's
  call-less ``}`` tail and the closing marker were shown but not counted).
* **Cancel** (a goal's cancel, or the ``cancel_task`` service for any open task — also one sent on the
  topic): accepted while the task is open; the planner thread's ``PlannerCore.cancel`` stops the
  generation, frees its slot and KV cache and ends the task CANCELLED; the robot stops on that
  terminal status.

Threads: every callback here runs on the node's executor thread, where the planner node also
publishes its statuses and segments (:meth:`PlanTaskServer.on_status` / :meth:`on_segment` are called
from there), so the goal table needs no lock. The execute callback awaits an rclpy ``Future`` that
:meth:`on_status` completes with the terminal status.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.qos import QoSProfile
from rclpy.task import Future

from timely_llm_ros.action import PlanTask
from timely_llm_ros.core import events as ev
from timely_llm_ros.core import limits
from timely_llm_ros.msg import Segment, Task, TaskStatus
from timely_llm_ros.ros import convert
from timely_llm_ros.srv import CancelTask

PLAN_TASK = "plan_task"  # action name, relative: resolved in the planner's (fleet) namespace
CANCEL_TASK = "cancel_task"  # service name, relative
ACTION_CANCEL_REASON = "cancelled by the PlanTask action client"
SERVICE_CANCEL_REASON = "cancelled through the cancel_task service"
FEEDBACK_DEPTH = 100


@dataclass
class _Goal:
    handle: Any  # rclpy ServerGoalHandle
    done: Future
    segments: int = 0
    status: TaskStatus = field(default_factory=TaskStatus)


class PlanTaskServer:
    """Serves ``plan_task`` and ``cancel_task`` for a planner node.

    ``intake(task_msg) -> task_id``: the node's topic intake (returns the id its statuses will carry,
    which may be planner-assigned); ``cancel(task_id, reason) -> str | None``: the node's cancel
    (None = cancellation under way, else why not); ``accepting() -> str``: '' while tasks are taken,
    else why not (a lifecycle planner that is not active).
    """

    def __init__(
        self,
        node: Any,
        intake: Callable[[Task], str],
        cancel: Callable[[str, str], str | None],
        accepting: Callable[[], str] = lambda: "",
    ) -> None:
        self._node = node
        self._intake = intake
        self._cancel = cancel
        self._accepting = accepting
        self._goals: dict[str, _Goal] = {}
        # a deep feedback history: one task's state changes and segments come in bursts (rclpy's
        # default depth 10 could overwrite feedback a slow client has not acknowledged yet)
        self._server = ActionServer(
            node,
            PlanTask,
            PLAN_TASK,
            execute_callback=self._execute,
            goal_callback=self._on_goal,
            cancel_callback=self._on_cancel,
            feedback_pub_qos_profile=QoSProfile(depth=FEEDBACK_DEPTH),
        )
        self._service = node.create_service(CancelTask, CANCEL_TASK, self._on_cancel_service)

    def destroy(self) -> None:
        self._server.destroy()
        self._node.destroy_service(self._service)

    # ------------------------------------------------------------------ action callbacks
    def _on_goal(self, _request: Any) -> GoalResponse:
        # every goal is accepted: a refused task is answered with a REJECTED result that says why
        return GoalResponse.ACCEPT

    async def _execute(self, handle: Any) -> Any:
        why_not = self._accepting()
        if why_not:
            msg = handle.request.task
            status = convert.status_to_msg(msg.task_id, msg.agent_id, ev.REJECTED, 0.0, why_not)
            handle.abort()
            return PlanTask.Result(status=status)
        goal = _Goal(handle, Future())
        task_id = self._intake(handle.request.task)
        self._goals[task_id] = goal  # before any status of it is published (same thread, see module doc)
        status = await goal.done
        return PlanTask.Result(status=status, segments=goal.segments)

    def _on_cancel(self, handle: Any) -> CancelResponse:
        task_id = next((tid for tid, g in self._goals.items() if g.handle is handle), None)
        if task_id is None:
            return CancelResponse.REJECT
        why = self._cancel(task_id, ACTION_CANCEL_REASON)
        if why is not None:
            self._node.get_logger().info(f"cancel of task {task_id!r} refused: {why}")
            return CancelResponse.REJECT
        return CancelResponse.ACCEPT

    def _on_cancel_service(self, request: Any, response: Any) -> Any:
        task_id = request.task_id.strip()
        reason = limits.clip(request.reason.strip(), 300) or SERVICE_CANCEL_REASON
        why = self._cancel(task_id, reason) if task_id else "task_id is empty"
        response.ok = why is None
        response.error = why or ""
        return response

    # ------------------------------------------------------------------ planner output (executor thread)
    def on_status(self, msg: TaskStatus) -> None:
        goal = self._goals.get(msg.task_id)
        if goal is None:
            return
        goal.status = msg
        goal.handle.publish_feedback(PlanTask.Feedback(kind=PlanTask.Feedback.STATUS, status=msg, segment=[]))
        state = convert.TASK_STATE_NAME.get(msg.state)
        if state not in ev.TERMINAL_STATES:
            return
        del self._goals[msg.task_id]
        if state == ev.COMPLETED:
            goal.handle.succeed()
        elif state == ev.CANCELLED and goal.handle.is_cancel_requested:
            goal.handle.canceled()
        else:
            goal.handle.abort()
        goal.done.set_result(msg)

    def on_segment(self, msg: Segment) -> None:
        goal = self._goals.get(msg.task_id)
        if goal is None:
            return
        if is_closing_marker(msg):  # nothing to execute: no feedback, not counted (module doc)
            return
        goal.segments += 1
        goal.handle.publish_feedback(
            PlanTask.Feedback(kind=PlanTask.Feedback.SEGMENT, status=goal.status, segment=[msg])
        )


def is_closing_marker(msg: Segment) -> bool:
    """The planner's end-of-plan marker: final, no calls, no text (as ``Dispatch.closing_marker``; a
    call-less tail with text, such as a loop's ``}``, is executed and is a segment)."""
    return msg.final and not msg.calls and not msg.text.strip()
