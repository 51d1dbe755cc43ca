"""What the planner node needs to run the *simulated* engine on the wall clock (no ROS here).

**Real-time simulated engine.** :class:`~timely_llm_ros.engines.sim.SimEngine` keeps a virtual clock:
``step()`` prices one decoding iteration from the engine profile and advances the clock by that
amount instantly. The planner node works in wall time (robots execute for real), so
:class:`RealtimeSimEngine` drives the same model in real time: before every step the virtual clock
is moved up to "now" (``advance_to``: the engine was idle or the planner was busy in between), the
step is priced as usual, and then the call *sleeps until the modelled end of the step* before it
returns the tokens — so tokens, segment cuts and dispatches happen at the wall times the profile
predicts, exactly as they would with a real GPU in lock-step. ``now()`` is the wall clock. The
sleep watches a stop event so shutdown is never delayed by more than one step.

**Reference plans.** The simulated engine emits a scripted plan per task (``TaskSpec.reference_plan``),
but a ``Task`` message carries no plan (a real robot has none to give). :class:`PlanTable` holds the
plans the simulated planner may emit, keyed by (skill set, instruction, scene); sources are
``catalog`` (the LRTrace benchmark tasks, config/tasks/lrtrace_tasks.yaml) and any workload spec
``resolve_workload`` accepts (preset, public sample, file — custom tasks with a ``plan:``). A task
whose instruction is in no source is rejected with that reason.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable

from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.engines.base import TokenOut
from timely_llm_ros.engines.sim import SimEngine

CATALOG = "catalog"


class RealtimeSimEngine(SimEngine):
    """SimEngine whose steps take their modelled duration in wall time (see module docstring)."""

    def __init__(self, profile: str = "llama3-8b-fp16-rtx4090", *, clock: Callable[[], float] = time.time,
                 stop: threading.Event | None = None, max_sleep: float = 5.0) -> None:
        self._clock = clock
        self._stop = stop or threading.Event()
        self._max_sleep = float(max_sleep)
        super().__init__(profile, start_time=clock())
        self.info.name = f"sim-realtime:{self.profile.name}"
        self.late_s = 0.0  # total time steps returned after their modelled end (host too slow)

    def now(self) -> float:
        return self._clock()

    def virtual_now(self) -> float:
        """End of the last modelled step (the parent's virtual clock)."""
        return SimEngine.now(self)

    def step(self) -> list[TokenOut]:
        self.advance_to(self._clock())
        outs = super().step()
        if outs:
            delay = self.virtual_now() - self._clock()
            if delay > 0:
                # a profile never prices one iteration near max_sleep; the cap guards a bad profile
                self._stop.wait(min(delay, self._max_sleep))
            else:
                self.late_s += -delay
        return outs


class PlanTable:
    """Reference plans for the simulated engine, by (skill_set, instruction, scene)."""

    def __init__(self) -> None:
        self._exact: dict[tuple[str, str, str], str] = {}
        self._loose: dict[tuple[str, str], str | None] = {}  # None: several scenes, different plans
        self.sources: list[str] = []

    def __len__(self) -> int:
        return len(self._exact)

    def add(self, skill_set: str, instruction: str, scene: str, plan: str) -> None:
        key = (skill_set.strip(), instruction.strip())
        self._exact[(*key, scene.strip())] = plan
        if key in self._loose and self._loose[key] not in (None, plan):
            self._loose[key] = None
        else:
            self._loose.setdefault(key, plan)

    def add_tasks(self, tasks: Iterable[TaskSpec]) -> int:
        n = 0
        for t in tasks:
            if t.reference_plan:
                self.add(t.skill_set, t.instruction, t.scene or "", t.reference_plan)
                n += 1
        return n

    def load(self, source: str) -> int:
        """Add the plans of one source (``catalog`` or a workload spec); raises with a reason."""
        source = source.strip()
        if source == CATALOG:
            from timely_llm_ros.workload.tasks import load_catalog

            n = 0
            for task in load_catalog():
                for v in task.all_variants():
                    self.add(v.skill_set, v.instruction, v.scene, v.plan)
                    n += 1
        else:
            from timely_llm_ros.workload import resolve_workload

            n = self.add_tasks(resolve_workload(source).tasks)
        self.sources.append(source)
        return n

    def lookup(self, skill_set: str, instruction: str, scene: str = "") -> str | None:
        key = (skill_set.strip(), instruction.strip())
        plan = self._exact.get((*key, scene.strip()))
        return plan if plan is not None else self._loose.get(key)
