"""Simulated robots: execute dispatched segments in order and report STARTED / DONE.

Each agent is one robot. It executes the segments it receives strictly in dispatch order, across
all of that agent's tasks: a segment's action starts at ``max(dispatch + network latency, end of
the agent's previous action)`` and lasts its execution time. Feedback is reported at the action's
start and end (no uplink latency is modelled).

Execution time of a segment (``exec_mode``):

* ``recorded`` — the task's recorded per-skill times (LRTrace ``exe_time_detail``), consumed in
  order: a call takes the next entry when the entry's skill token matches the call's name (the
  traces write scan/goto as ``s(`` / ``g(``; a trailing ``(`` is ignored). A call whose entry does
  not match, or a task without recorded times, falls back to the model's *expected* time and is
  counted in ``stats["exec_fallback"]``; entries never consumed are counted in ``exec_unused``.
* ``min`` — the execution-time model's minimum (the scheduler's own pessimistic assumption).
* ``sampled`` — one draw from the model with a per-task RNG seeded by ``(seed, task_id)``, so results
  do not depend on the order in which tasks happen to be dispatched.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.exectime import ExecTimeModel
from timely_llm_ros.core.generation import Dispatch

EXEC_MODES = ("recorded", "min", "sampled")

# schedule(time, task_id, seg, state) — the simulator delivers feedback at that virtual time
Schedule = Callable[[float, str, int, str], None]


class RobotSim:
    """All simulated robots of one run."""

    def __init__(
        self,
        exec_model: ExecTimeModel,
        schedule: Schedule,
        *,
        exec_mode: str = "recorded",
        network_latency: float = 0.008,
        seed: int = 0,
    ) -> None:
        if exec_mode not in EXEC_MODES:
            raise ValueError(f"exec_mode must be one of {', '.join(EXEC_MODES)}, got {exec_mode!r}")
        self.exec_model = exec_model
        self.exec_mode = exec_mode
        self.net = float(network_latency)
        self.seed = seed
        self._schedule = schedule
        self._free_at: dict[str, float] = {}  # agent -> end of its last scheduled action
        self._recorded: dict[str, list[tuple[str, float]]] = {}
        self._cursor: dict[str, int] = {}
        self._rngs: dict[str, random.Random] = {}
        self.stats = {"segments": 0, "exec_fallback": 0}

    def register(self, task_id: str, exec_times: list[tuple[str, float]]) -> None:
        """Give a task's recorded per-skill times (``recorded`` mode)."""
        self._recorded[task_id] = [(str(tok).rstrip("("), float(sec)) for tok, sec in exec_times]
        self._cursor[task_id] = 0

    def unused_recorded(self) -> int:
        """Recorded entries that no executed call consumed."""
        return sum(len(v) - self._cursor.get(k, 0) for k, v in self._recorded.items())

    def duration(self, d: Dispatch) -> float:
        """Execution time of one dispatched segment (consumes recorded entries)."""
        if self.exec_mode == "min":
            return d.min_exec
        if self.exec_mode == "sampled":
            rng = self._rngs.get(d.task_id)
            if rng is None:
                rng = self._rngs[d.task_id] = random.Random(f"{self.seed}:{d.task_id}")
            return self.exec_model.sample(d.robot_type, list(d.calls), rng)
        rec = self._recorded.get(d.task_id, [])
        i = self._cursor.get(d.task_id, 0)
        total = 0.0
        for call in d.calls:
            if i < len(rec) and rec[i][0] == call.name:
                total += rec[i][1]
                i += 1
            else:
                total += self.exec_model.estimate_call(d.robot_type, call).expected
                self.stats["exec_fallback"] += 1
        self._cursor[d.task_id] = i
        return total

    def dispatch(self, d: Dispatch) -> None:
        """Planner callback: schedule the segment's STARTED and DONE feedback (none for a closing
        marker, which has nothing to execute)."""
        if d.closing_marker:
            return
        start = max(d.t + self.net, self._free_at.get(d.agent_id, -float("inf")))
        end = start + self.duration(d)
        self._free_at[d.agent_id] = end
        self.stats["segments"] += 1
        self._schedule(start, d.task_id, d.seg, ev.STARTED)
        self._schedule(end, d.task_id, d.seg, ev.DONE)
