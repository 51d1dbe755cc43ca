"""One task at a time per robot: the planner's per-agent task queue.

A robot executes one plan at a time. Before this queue existed the planner dispatched segments of
every open task of an agent as soon as they were generated, so a robot received ``f3 s0, f3 s1,
f7 s0, f11 s0 …`` and executed two plans mixed together (249 of 250 arm tasks of a flood failed with
"the gripper already holds …"; a drone would have flown two plans at once).

Rules, per agent (robot):

* **active** — at most one task. Only the active task's segments are dispatched. It stays active
  until it is terminal (COMPLETED / FAILED / EXPIRED; the planner is the judge, see
  :meth:`AgentQueues.leave`).
* **ahead** — the next ``lookahead`` tasks (default 1) may *generate* while the active one executes,
  but the segments they produce are **held** by the planner, not sent; when the active task ends, the
  first one ahead becomes active and its held segments go out at once.
* **waiting** — the others wait unscheduled (no generation, no KV memory), in arrival order.
* at most ``depth`` open tasks per agent (active + ahead + waiting); one more is REJECTED with the
  queue state as reason.

Why generate ahead, and why only one task: the TUF counts a task's response time from its arrival
(paper §2.3), so a task that waits for its robot's previous plan already loses time; generating its
first segment meanwhile lets the robot start it the moment the previous plan ends instead of one
prefill + segment generation later. But a held generation keeps its tokens and KV cache (suspended
generation, §4.1) and competes with other robots' urgent work for the engine: generating a whole
queue ahead would spend engine time and KV memory on plans that cannot execute for a long time. One
task ahead per robot bounds that cost to one suspended context per robot; the segmented scheduler
suspends it after its first executable segment (it is not re-queued until it becomes active, see
:mod:`..planner`). ``lookahead = 0`` makes every queued task wait unscheduled.

Pure Python, no ROS: the same queue runs in the simulator (virtual clock) and in the ROS planner node.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

ACTIVE = "active"
AHEAD = "ahead"
WAITING = "waiting"


class AgentQueueFull(ValueError):
    """The agent already has ``depth`` open tasks; the message says which."""


@dataclass
class _Agent:
    active: str | None = None
    queued: deque[str] = field(default_factory=deque)  # ahead first (the first `lookahead`), then waiting

    def __len__(self) -> int:
        return (self.active is not None) + len(self.queued)


@dataclass(frozen=True, slots=True)
class Promotion:
    """What one task's end changed for its agent: the new active task and tasks now allowed ahead."""

    active: str | None
    ahead: tuple[str, ...]


class AgentQueues:
    """Per-agent order of open tasks (see the module docstring)."""

    def __init__(self, depth: int = 16, lookahead: int = 1) -> None:
        if not isinstance(depth, int) or depth < 1:
            raise ValueError(f"agent queue depth must be an integer >= 1, got {depth!r}")
        if not isinstance(lookahead, int) or lookahead < 0:
            raise ValueError(f"lookahead must be an integer >= 0, got {lookahead!r}")
        self.depth = depth
        self.lookahead = lookahead
        self._agents: dict[str, _Agent] = {}

    def check_room(self, agent: str) -> None:
        """Raise AgentQueueFull (with the queue state) if the robot cannot take one more task."""
        a = self._agents.get(agent)
        if a is not None and len(a) >= self.depth:
            raise AgentQueueFull(
                f"robot {agent!r} already has {len(a)} open tasks (active {a.active!r}, "
                f"{len(a.queued)} queued; agent_queue_depth = {self.depth})"
            )

    def enter(self, agent: str, task_id: str) -> str:
        """Queue a new task; returns its role (ACTIVE, AHEAD or WAITING). Raises AgentQueueFull."""
        self.check_room(agent)
        a = self._agents.get(agent)
        if a is None:
            a = self._agents[agent] = _Agent()
        if a.active is None:
            a.active = task_id
            return ACTIVE
        a.queued.append(task_id)
        return AHEAD if len(a.queued) <= self.lookahead else WAITING

    def role(self, agent: str, task_id: str) -> str | None:
        a = self._agents.get(agent)
        if a is None:
            return None
        if a.active == task_id:
            return ACTIVE
        for i, tid in enumerate(a.queued):
            if tid == task_id:
                return AHEAD if i < self.lookahead else WAITING
        return None

    def active(self, agent: str) -> str | None:
        a = self._agents.get(agent)
        return None if a is None else a.active

    def next_of(self, agent: str) -> str | None:
        """The task that waits first for ``agent``'s active task to end (None if none)."""
        a = self._agents.get(agent)
        return a.queued[0] if a is not None and a.queued else None

    def may_dispatch(self, agent: str, task_id: str) -> bool:
        """True if ``task_id`` is its robot's active task (its segments may be sent)."""
        return self.active(agent) == task_id

    def open_tasks(self, agent: str) -> int:
        a = self._agents.get(agent)
        return 0 if a is None else len(a)

    def leave(self, agent: str, task_id: str) -> Promotion:
        """``task_id`` ended (terminal): remove it; returns who is active now and who may now generate
        ahead (tasks that were WAITING before). Unknown tasks change nothing."""
        a = self._agents.get(agent)
        if a is None:
            return Promotion(None, ())
        before = set(list(a.queued)[: self.lookahead])
        if a.active == task_id:
            a.active = a.queued.popleft() if a.queued else None
        else:
            try:
                a.queued.remove(task_id)
            except ValueError:
                return Promotion(a.active, ())
        ahead = tuple(t for t in list(a.queued)[: self.lookahead] if t not in before)
        if a.active is None:
            del self._agents[agent]  # bounded memory: no entry for an agent without open tasks
        return Promotion(a.active, ahead)

    def agents(self) -> list[str]:
        return list(self._agents)

    def describe(self, agent: str) -> str:
        a = self._agents.get(agent)
        if a is None:
            return f"robot {agent!r}: no open task"
        return f"robot {agent!r}: active {a.active!r}, {len(a.queued)} queued"
