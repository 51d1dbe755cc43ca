"""The planner's open tasks as its front door sees them: accepted and not yet terminal.

Why a separate book from the core's task records: the executor thread (intake, cancel requests,
lifecycle transitions, publisher housekeeping) must answer "is this task open, which robot has open
tasks, how many are open" at once, while the planner thread may sit in the engine for a whole
decoding iteration. So the front door keeps its own count under a lock; the planner thread tells it
when a task closes (a :class:`~timely_llm_ros.service.handoff.Closed` item) and, at shutdown, whatever
is still open is answered from here.
"""

from __future__ import annotations

import threading


class OpenTasks:
    """Task id -> agent of every open task, and the number of open tasks per agent (thread-safe)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._agent_of: dict[str, str] = {}
        self._per_agent: dict[str, int] = {}

    def opened(self, task_id: str, agent: str) -> None:
        with self._lock:
            self._agent_of[task_id] = agent
            self._per_agent[agent] = self._per_agent.get(agent, 0) + 1

    def closed(self, task_id: str) -> None:
        """The task ended (an id not open is ignored: a task is closed once)."""
        with self._lock:
            agent = self._agent_of.pop(task_id, None)
            if agent is None:
                return
            n = self._per_agent.get(agent, 0) - 1
            if n > 0:
                self._per_agent[agent] = n
            else:
                self._per_agent.pop(agent, None)  # bounded memory: no entry for an idle robot

    def agent_of(self, task_id: str) -> str | None:
        with self._lock:
            return self._agent_of.get(task_id)

    def __contains__(self, task_id: str) -> bool:
        with self._lock:
            return task_id in self._agent_of

    def __len__(self) -> int:
        with self._lock:
            return len(self._agent_of)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._agent_of)

    def busy_agents(self) -> set[str]:
        """Agents with at least one open task."""
        with self._lock:
            return set(self._per_agent)

    def take_all(self) -> dict[str, str]:
        """Every open task (id -> agent), forgotten here: the caller gives each its final status."""
        with self._lock:
            out = dict(self._agent_of)
            self._agent_of.clear()
            self._per_agent.clear()
            return out
