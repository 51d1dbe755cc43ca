"""The planner's front door: what the host's callback threads do with a task before the planner thread.

Validation (each failure → a REJECTED status with the reason, plus ARRIVAL + REJECT events; the checks
themselves are in core — :mod:`~timely_llm_ros.core.limits`, :mod:`~timely_llm_ros.core.intake` — and
raise :class:`~timely_llm_ros.core.intake.Refused`, mapped to the status in one place,
:meth:`FrontDesk.intake`): field limits (id and text lengths, TUF ranges keeping every derived time
finite), malformed fields or TUF, unknown skill set, robot type that does not match the skill set (or
the ``agent_types`` table), a robot whose segment channel cannot be opened, a duplicate ``task_id``
(reported under ``<id>#dup<n>``, so the original task's robot is not told its task was rejected; an
empty id is assigned: ``<agent>-<n>``), no robot node within ``robot_grace_period``, an overloaded
planner (``max_inbound`` tasks not yet taken by the planner thread, or ``max_queued_tasks`` open: the
reason names the queue state) and, for the simulated engine, an instruction without a reference plan.
The core then rejects what only it can judge (a prompt longer than the context).

A task whose robot is not discovered yet waits here (:class:`~timely_llm_ros.service.handoff.Waiting`),
as do tasks recovered from the journal after a restart; the host calls :meth:`FrontDesk.check_waiting`
periodically with its view of the graph (:class:`~timely_llm_ros.service.planner_service.Ports`).
"""

from __future__ import annotations

import queue
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from timely_llm_ros.core import events as ev
from timely_llm_ros.core import limits
from timely_llm_ros.core.intake import (
    NOT_ACTIVE,
    Refused,
    TaskIds,
    check_robot_type,
    load_task_skill_set,
    overload_reason,
    refusal,
)
from timely_llm_ros.core.robot_liveness import RobotLiveness
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.interfaces.mapping import Feedback
from timely_llm_ros.interfaces.topics import valid_agent_id
from timely_llm_ros.service import handoff as ho
from timely_llm_ros.service.journal import RESTARTED, Journal, OpenTask, task_from_entry
from timely_llm_ros.service.liveness import feedback_time
from timely_llm_ros.service.open_tasks import OpenTasks


class DeskHost(Protocol):
    """What the desk needs of the service that owns it (:class:`~.planner_service.PlannerService`):
    written as a protocol so the desk does not import its owner."""

    p: Mapping[str, Any]
    ports: Any  # planner_service.Ports
    log: Any
    active: bool
    stats: dict[str, int]
    inbound: queue.Queue[ho.Inbound]
    open_tasks: OpenTasks
    journal: Journal | None
    liveness: RobotLiveness

    def clock_fn(self) -> float: ...
    def planner_time(self, ros_t: float) -> float: ...
    def warn(self, key: str, text: str) -> None: ...
    def put_event(self, e: ev.TraceEvent) -> None: ...
    def put_status(self, task_id: str, agent: str, state: str, t: float, reason: str = "") -> None: ...
    def find_plan(self, spec: TaskSpec) -> None: ...
    def recovered(self, w: ho.Waiting, problem: str) -> None: ...


class FrontDesk:
    """Intake, ids, tasks waiting for their robot, cancel requests (host callback threads only)."""

    def __init__(self, svc: DeskHost) -> None:
        self.svc = svc
        self.p = svc.p
        self.ids = TaskIds(max(4 * self.p["finished_retention"], 10_000))
        self.waiting: list[ho.Waiting] = []
        self.agent_types: Mapping[str, str] = {}

    # ------------------------------------------------------------------ intake
    def intake(
        self,
        raw_id: str,
        agent_id: str,
        fields: Callable[[], Any],
        to_spec: Callable[[str, float, TUF | None], TaskSpec],
    ) -> str:
        """Intake of one task; returns the id its statuses carry (assigned when empty,
        ``<id>#dup<n>`` for a duplicate's rejection). ``fields()``: the received task's fields for the
        limit checks; ``to_spec(task_id, now, tuf)``: the task converted under the id it was given, with
        the TUF the limit checks validated (None: ``auto``)."""
        svc = self.svc
        now = svc.clock_fn()
        svc.stats["received"] += 1
        agent = limits.clip(agent_id, limits.MAX_AGENT_ID)
        try:
            spec = self._admit(raw_id.strip(), agent, now, fields, to_spec)
        except Refused as exc:  # every front-door rejection, mapped to its status and events here
            self.reject(exc.report_as, agent, now, exc.reason, exc.kind)
            return exc.report_as
        svc.open_tasks.opened(spec.task_id, spec.agent_id)
        if not self.p["require_robot"] or svc.ports.robot_ready(spec.agent_id, False):
            svc.inbound.put(ho.Submit(spec))
        else:
            self.waiting.append(ho.Waiting(spec, now + self.p["robot_grace_period"]))
        return spec.task_id

    def _admit(
        self,
        task_id: str,
        agent: str,
        now: float,
        fields: Callable[[], Any],
        to_spec: Callable[[str, float, TUF | None], TaskSpec],
    ) -> TaskSpec:
        """The front door's checks in order (raises :class:`Refused`)."""
        # ids and sizes first: the rejection must be able to name the task
        with refusal("limits", limits.clip(task_id, limits.MAX_TASK_ID)):
            tuf = limits.check_task_fields(fields())
        task_id = self.ids.claim(task_id, agent if valid_agent_id(agent) else "task")
        if not self.svc.active:  # a managed planner that is not (or no longer) active: say so
            raise Refused(NOT_ACTIVE, "inactive", task_id)
        overload = overload_reason(
            self.svc.inbound.qsize() + len(self.waiting),
            len(self.svc.open_tasks),
            self.p["max_inbound"],
            self.p["max_queued_tasks"],
        )
        if overload:
            raise Refused(overload, "overloaded", task_id)
        with refusal("invalid", task_id):
            # the field limits and the TUF were checked first (so a rejection names the task); not again
            spec = to_spec(task_id, now, tuf)
            if self.svc.liveness.is_down(spec.agent_id):  # read only; the planner thread decides
                raise TaskRejected(self.svc.liveness.reason(spec.agent_id, now))
            check_robot_type(spec, load_task_skill_set(spec.skill_set), self.agent_types)
            self.svc.find_plan(spec)
            self.svc.ports.open_robot(spec.agent_id)  # last: nothing else can reject it afterwards
            return spec

    def feedback(self, fb: Feedback, now: float) -> None:
        """Robot feedback converted by the host; its stamp is used when plausible (clock skew)."""
        robot_t = self.svc.planner_time(fb.t) if fb.t > 0 else float("nan")
        self.svc.inbound.put(
            ho.FeedbackIn(fb, feedback_time(now, robot_t, self.p["feedback_clock_tolerance"]))
        )

    def request_cancel(self, task_id: str, reason: str) -> str | None:
        """Cancel an open task (None = under way, else why not). A task still waiting for its robot
        node ends here; any other open task is cancelled by the planner thread
        (:meth:`PlannerCore.cancel`: generation stopped, slot and KV freed) after whatever of it is
        queued before (FIFO)."""
        svc = self.svc
        agent = svc.open_tasks.agent_of(task_id)
        if agent is None:
            return "no open task with this id (unknown, or already ended)"
        for w in self.waiting:
            if w.spec.task_id == task_id and w.recovered is None:
                self.waiting.remove(w)
                now = svc.clock_fn()
                svc.put_event(ev.TraceEvent(now, ev.ARRIVAL, task_id, agent))
                svc.put_event(ev.TraceEvent(now, ev.CANCEL, task_id, agent, -1, 0.0, reason))
                svc.put_status(task_id, agent, ev.CANCELLED, now, reason)
                svc.ports.put(ho.Closed(task_id))
                return None
        svc.inbound.put(ho.Cancel(task_id, reason))
        return None

    def reject(self, task_id: str, agent: str, t: float, reason: str, kind: str) -> None:
        """Front-door rejection: same events and status the core emits for its own rejections."""
        svc = self.svc
        svc.stats["rejected"] += 1
        svc.warn(f"reject:{kind}", f"task {task_id!r} from {agent!r} rejected: {reason}")
        svc.put_event(ev.TraceEvent(t, ev.ARRIVAL, task_id, agent))
        svc.put_event(ev.TraceEvent(t, ev.REJECT, task_id, agent, -1, 0.0, reason))
        svc.put_status(task_id, agent, ev.REJECTED, t, reason)

    # ------------------------------------------------------------------ tasks waiting for their robot
    def waits_for(self, agent: str) -> bool:
        return any(w.spec.agent_id == agent for w in self.waiting)

    def check_waiting(self) -> None:
        """One look at the graph for every waiting task: submit, resolve, give up or keep waiting."""
        if not self.waiting:
            return
        svc = self.svc
        now = svc.clock_fn()
        ready: dict[tuple[str, bool], bool] = {}
        still: list[ho.Waiting] = []
        gone: set[str] = set()
        status_heard = svc.ports.status_readers_matched()
        for w in self.waiting:
            agent = w.spec.agent_id
            late = now >= w.deadline
            key = (agent, late)
            if key not in ready:
                ready[key] = not self.p["require_robot"] or svc.ports.robot_ready(agent, late)
            outcome = w.outcome(ready[key], status_heard, now)
            if outcome is ho.WaitOutcome.RESOLVE:
                svc.inbound.put(ho.Recovered(w, "" if ready[key] else f"no robot node for agent {agent!r}"))
            elif outcome is ho.WaitOutcome.SUBMIT:
                svc.inbound.put(ho.Submit(w.spec))
            elif outcome is ho.WaitOutcome.GIVE_UP:
                svc.open_tasks.closed(w.spec.task_id)
                self.reject(
                    w.spec.task_id,
                    agent,
                    now,
                    f"no robot node for agent {agent!r}: nothing subscribes to "
                    f"{svc.ports.robot_topic(agent)} (waited {self.p['robot_grace_period']:.1f} s)",
                    "no robot",
                )
                gone.add(agent)
            else:
                still.append(w)
        self.waiting = still
        for agent in gone:  # no topic is left behind for an agent without a robot
            svc.ports.release_robot(agent)

    def end_waiting(self, reason: str, now: float) -> None:
        """Shutdown: recovered tasks end FAILED, new ones REJECTED, with ``reason``."""
        for w in self.waiting:
            if w.recovered is not None:
                self.svc.recovered(w, reason)
            else:
                self.svc.open_tasks.closed(w.spec.task_id)
                self.reject(w.spec.task_id, w.spec.agent_id, now, reason, "shutdown")
        self.waiting = []

    # ------------------------------------------------------------------ crash recovery
    def recover(self, tasks: list[OpenTask]) -> None:
        """Tasks a previous run left open wait (like new ones) for their robot, then are resumed or
        failed on the planner thread (``on_restart``)."""
        svc = self.svc
        now = svc.clock_fn()
        for open_task in tasks:
            try:
                arrival = svc.planner_time(float(open_task.task["arrival"]))
                spec = task_from_entry(open_task.task, min(arrival, now))
            except (KeyError, ValueError, TypeError) as exc:
                svc.log.error(
                    f"journal entry of task {open_task.task_id!r} is unusable ({exc}); it is dropped"
                )
                if svc.journal is not None:
                    svc.journal.ended(open_task.task_id, ev.FAILED, RESTARTED)
                continue
            svc.stats["recovered"] += 1
            self.ids.add(spec.task_id)
            svc.open_tasks.opened(spec.task_id, spec.agent_id)
            try:
                svc.ports.open_robot(spec.agent_id)
            except TaskRejected:
                pass  # reported when it is failed: no robot can be reached
            # announced once its robot and every status reader are discovered, but not before the
            # grace period: a restarted planner does not know who else listens (recorder, senders)
            grace = self.p["robot_grace_period"]
            self.waiting.append(ho.Waiting(spec, now + max(2.0 * grace, 5.0), open_task, now + grace))
        if tasks:
            svc.log.warning(
                f"journal: {len(tasks)} task(s) were open when the planner stopped; "
                f"on_restart = {self.p['on_restart']}"
            )
