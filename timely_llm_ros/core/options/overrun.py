"""What happens once a task's utility horizon has passed (related paper 002, TimeBill's overrun strategies).

A segment's *utility horizon* is the latest generation end at which its action can still start with
positive utility: ``H = D + β/|α|`` with ``D = ref + ERT_k − net`` the segment's deadline (paper 000
Eq. 1 for the first segment, TUF_1 for later ones, §4.2). A flat TUF (α = 0) has none. For a later
segment the robot is not waiting before it has finished the previous one, so there is no horizon
until the robot reported that segment DONE (the time model's *minimum* execution time, which the
scheduler's ``ref`` uses, would otherwise expire tasks whose robot is still busy).

Per task (``TaskSpec.overrun``; "" = the planner's default, option ``overrun``):

* ``continue`` — keep generating (the paper's behaviour; the late tier of ``timely`` bounds the wait);
* ``kill`` — stop generating once the horizon has passed: the task is EXPIRED with the reason, its
  generation released; the robot is told by TaskStatus EXPIRED (a robot ends the task: it executes
  nothing more of it). The segments it already executed stay executed;
* ``skip-next`` — the task keeps generating, but its robot's *next* tasks that have not started
  (no segment sent) are EXPIRED as skipped, and so are new ones that arrive while it still overruns
  (TimeBill: "skip the next few jobs until the current job completes"), so the robot is not sent
  plans that queued behind a late one.

:class:`OverrunTracker` keeps the tracked generations in a lazy heap ordered by horizon: one check
per scheduling point costs O(log n) per expiry, not a scan of every open task.
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from timely_llm_ros.core.tuf import segment_deadline, zero_utility_time

if TYPE_CHECKING:
    from timely_llm_ros.core.generation import Generation
    from timely_llm_ros.core.task import TaskSpec

STRATEGIES = ("continue", "kill", "skip-next")


def horizon(ref: float, ert_k: float, alpha: float, beta: float, net: float) -> float:
    """Latest generation end of a segment that still yields positive utility (inf: flat TUF)."""
    return zero_utility_time(segment_deadline(ref, ert_k, net), alpha, beta)


def gen_horizon(gen: Generation) -> float:
    """The horizon of a generation's next segment (module docstring: none while its robot still
    executes the previous segment)."""
    segs = gen.record.segments
    if gen.k > 0 and segs and math.isnan(segs[-1].exec_end):
        return math.inf
    return horizon(gen.ref, gen.ert_k, gen.alpha, gen.beta, gen.net)


class OverrunTracker:
    """Generations whose strategy is ``kill`` or ``skip-next``, by horizon; agents that overrun."""

    def __init__(self, default: str = "continue") -> None:
        if default not in STRATEGIES:
            raise ValueError(f"overrun must be one of {', '.join(STRATEGIES)}, got {default!r}")
        self.default = default
        self._heap: list[tuple[float, int, int, Generation]] = []
        self._version: dict[int, int] = {}
        self.overrunning: dict[str, str] = {}  # agent -> task id whose horizon passed (skip-next)
        self.expired = 0
        self.skipped = 0

    def strategy(self, spec: TaskSpec) -> str:
        return getattr(spec, "overrun", "") or self.default

    def track(self, gen: Generation) -> None:
        """(Re)enter a generation with its current horizon (after a push, feedback or re-queue)."""
        if self.strategy(gen.spec) == "continue" or gen.finished:
            return
        h = gen_horizon(gen)
        v = self._version.get(gen.gen_id, 0) + 1
        self._version[gen.gen_id] = v
        if h < math.inf:
            heapq.heappush(self._heap, (h, gen.gen_id, v, gen))

    def forget(self, gen: Generation) -> None:
        self._version.pop(gen.gen_id, None)
        if self.overrunning.get(gen.record.agent_id) == gen.record.task_id:
            del self.overrunning[gen.record.agent_id]

    def due(self, t: float) -> list[Generation]:
        """Generations whose horizon has passed at ``t`` (each returned once per horizon)."""
        out: list[Generation] = []
        heap = self._heap
        while heap and heap[0][0] <= t:
            h, gid, v, gen = heapq.heappop(heap)
            if self._version.get(gid) != v or gen.finished:
                continue
            now_h = gen_horizon(gen)
            if now_h > t:  # feedback moved it: back in line
                if now_h < math.inf:
                    heapq.heappush(heap, (now_h, gid, v, gen))
                continue
            self._version.pop(gid, None)
            out.append(gen)
        return out

    def __len__(self) -> int:
        return len(self._version)
