"""Which robots are alive, from the heartbeats they send (pure Python; the planner node feeds it).

Before, a robot killed with ``kill -9`` was noticed task by task: its current segment timed out
(+5 s), then each queued task became active, was dispatched to the dead robot and timed out in turn
(+17 s, +30 s). Every robot node now sends a beat every ``heartbeat_period`` whether it executes or
idles (``/robot_heartbeat``); a robot heard at least once and then silent for ``timeout`` seconds is
*down*: the planner fails all its open tasks at once with a reason naming it, and refuses new ones
with that reason. Any later beat (the robot was restarted, or the network came back) makes it *up*
again and its tasks are accepted as before.

A robot never heard from is not judged here (an older robot node, or one still starting): the
segment timeouts (:mod:`timely_llm_ros.service.liveness`) cover it. Beats are not authenticated: a participant that fakes
a dead robot's beats only delays its detection back to those segment timeouts (README, "Reliability
and security").
"""

from __future__ import annotations

import math


class RobotLiveness:
    """Last beat per robot and the down/up transitions (see the module docstring)."""

    def __init__(self, timeout: float) -> None:
        self.timeout = timeout
        self._last: dict[str, float] = {}
        self._down: dict[str, float] = {}  # agent -> when it was declared down

    def heard(self, agent: str, t: float) -> bool:
        """A beat (or any feedback) from ``agent`` at ``t``; True when it was down until now. A beat
        no newer than the last one known changes nothing (the node polls the latest beats)."""
        if t <= self._last.get(agent, -math.inf):
            return False
        self._last[agent] = t
        return self._down.pop(agent, None) is not None

    def alive(self, agent: str, t: float) -> bool:
        """Other proof of life (checked feedback) at ``t``: refreshes a robot known by its beats only.
        A robot that never sent a beat (an older or third-party robot node) must not be judged down
        for the silence of beats it never sends; True when it was down until now."""
        if agent not in self._last:
            return False
        return self.heard(agent, t)

    def newly_down(self, now: float) -> list[tuple[str, float]]:
        """Robots silent for more than ``timeout`` since their last beat, each reported once:
        ``(agent, seconds since its last beat)``."""
        if self.timeout <= 0:
            return []
        out = []
        for agent, last in self._last.items():
            if agent not in self._down and now - last > self.timeout:
                self._down[agent] = now
                out.append((agent, now - last))
        return out

    def is_down(self, agent: str) -> bool:
        return agent in self._down

    def reason(self, agent: str, now: float) -> str:
        """The reason given for the tasks of a down robot."""
        silent = now - self._last.get(agent, now)
        return f"robot {agent!r} is down: no heartbeat for {silent:.1f} s (limit {self.timeout:.1f} s)"

    def forget(self, agent: str) -> None:
        """Bounded memory: an agent the planner no longer serves."""
        self._last.pop(agent, None)
        self._down.pop(agent, None)

    def __len__(self) -> int:
        return len(self._last)
