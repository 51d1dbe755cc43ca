"""Programmable LRTrace workload composer (paper §6 "Programmable trace composition", Table 3).

A workload is a Poisson stream of *events*; each event makes several robots ask for a plan at
(almost) the same time. Facts reused from the paper and the public generator
(TimelyLLM ``dataset/data_sample_gen.py``):

- event inter-arrival times are exponential with mean ``1 / rate`` (rate in events per second);
- an event holds between ``max_tpe // 2`` and ``max_tpe`` tasks (uniform), each drawn uniformly
  from the chosen trace ids, and the tasks of one event arrive ``job_interval`` (1 ms) apart;
- an agent is busy from its task's arrival until ``planning + execution + guard`` later, where
  the public generator uses the trace's recorded isolated planning time, its recorded execution
  time and a 1 s guard gap "to guarantee a time interval between two tasks".

Where this composer differs from the public generator, on purpose:

- the agent pool is **fixed** (Table 3's AN column). The public generator grows the pool
  whenever no agent is free (which is why its files report 42/25/94 agents). Here a task whose
  event finds every agent busy is **skipped** and recorded in :attr:`Composition.skipped` with its
  event, trace and arrival, so reports can say how many were lost instead of dropping them
  silently;
- the free agent chosen is the one that has been free longest (ties: lowest index), which is the
  public generator's "earliest timer" rule restricted to free agents.

The busy estimate uses the *isolated* planning time; under contention real planning takes
longer, so an agent may receive its next task while the simulator is still planning the previous
one. The simulator treats tasks independently (as the public workloads do), so this only affects
how realistic the agent count is, never correctness.
"""

from __future__ import annotations

import heapq
import math
import random
from dataclasses import asdict, dataclass, field
from typing import Any

from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.tasks import TaskCatalog, load_catalog

# Public generator constants (dataset/data_sample_gen.py): 1 ms between the tasks of one event and
# a 1 s guard between two tasks of the same agent.
DEFAULT_JOB_INTERVAL_S = 0.001
DEFAULT_GUARD_S = 1.0


@dataclass
class ComposerSpec:
    """Parameters of one composed workload (all times in seconds)."""

    rate: float  # events per second (Poisson)
    max_tpe: int  # maximum tasks per event
    traces: list[int]  # benchmark task ids (Table 2) to draw from
    agents: int  # fixed agent pool
    duration: float  # events arrive in [start, start + duration)
    seed: int = 0
    min_tpe: int | None = None  # default: max(1, max_tpe // 2) as in the public generator
    job_interval: float = DEFAULT_JOB_INTERVAL_S
    guard_s: float = DEFAULT_GUARD_S
    start: float = 0.0
    # Traces listed here are written for another skill set of the same task, e.g.
    # {9: "arm_fltrnn"}; default: each task's primary variant.
    skill_sets: dict[int, str] = field(default_factory=dict)

    @property
    def tpe_range(self) -> tuple[int, int]:
        low = self.min_tpe if self.min_tpe is not None else max(1, self.max_tpe // 2)
        return low, self.max_tpe

    def validate(self, source: str = "<composer>", catalog: TaskCatalog | None = None) -> None:
        def bad(name: str, reason: str) -> WorkloadError:
            return WorkloadError(source, reason, entry="composer", field=name)

        for name in ("rate", "duration", "job_interval", "guard_s", "start"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise bad(name, f"expected a finite number, got {value!r}")
        if self.rate <= 0:
            raise bad("rate", f"must be > 0 events/s, got {self.rate}")
        if self.duration <= 0:
            raise bad("duration", f"must be > 0 s, got {self.duration}")
        for name in ("job_interval", "guard_s", "start"):
            if getattr(self, name) < 0:
                raise bad(name, f"must be >= 0, got {getattr(self, name)}")
        for name in ("max_tpe", "agents", "seed"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise bad(name, f"expected an integer, got {value!r}")
        if self.max_tpe < 1:
            raise bad("max_tpe", f"must be >= 1, got {self.max_tpe}")
        if self.agents < 1:
            raise bad("agents", f"must be >= 1, got {self.agents}")
        if self.min_tpe is not None and (
            isinstance(self.min_tpe, bool)
            or not isinstance(self.min_tpe, int)
            or not 1 <= self.min_tpe <= self.max_tpe
        ):
            raise bad("min_tpe", f"must be an integer in [1, max_tpe={self.max_tpe}], got {self.min_tpe!r}")
        if not isinstance(self.traces, list) or not self.traces:
            raise bad("traces", "expected a non-empty list of benchmark task ids")
        for trace in self.traces:
            if isinstance(trace, bool) or not isinstance(trace, int):
                raise bad("traces", f"expected integer task ids, got {trace!r}")
        if catalog is not None:
            unknown = [t for t in self.traces if t not in catalog.tasks]
            if unknown:
                raise bad(
                    "traces",
                    f"unknown trace id(s) {unknown}; {catalog.source} defines {sorted(catalog.tasks)}",
                )
            for trace, skill_set in self.skill_sets.items():
                try:
                    catalog.get(trace).variant(skill_set)
                except KeyError as exc:
                    raise bad("skill_sets", str(exc.args[0])) from None

    @classmethod
    def from_mapping(cls, data: Any, source: str) -> ComposerSpec:
        """Build from a YAML/JSON mapping, rejecting unknown keys (typos would silently do nothing)."""
        if not isinstance(data, dict):
            raise WorkloadError(source, f"expected a mapping, got {data!r}", entry="composer")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(set(data) - known)
        if unknown:
            raise WorkloadError(source, f"unknown key(s) {unknown}; known: {sorted(known)}", entry="composer")
        for required in ("rate", "max_tpe", "traces", "agents", "duration"):
            if required not in data:
                raise WorkloadError(source, "missing", entry="composer", field=required)
        values = dict(data)
        traces = values["traces"]
        if isinstance(traces, str):
            values["traces"] = parse_trace_list(traces, source)
        skill_sets = values.get("skill_sets") or {}
        if not isinstance(skill_sets, dict):
            raise WorkloadError(
                source, "expected a mapping of trace id to skill set", entry="composer", field="skill_sets"
            )
        try:
            values["skill_sets"] = {int(k): str(v) for k, v in skill_sets.items()}
        except (TypeError, ValueError):
            raise WorkloadError(
                source,
                f"keys must be trace ids, got {sorted(map(str, skill_sets))}",
                entry="composer",
                field="skill_sets",
            ) from None
        return cls(**values)


def parse_trace_list(text: str, source: str = "<traces>") -> list[int]:
    """``"1-8"`` / ``"9,10,11"`` / ``"1-5,7"`` -> list of ids (the paper writes ranges like [1-8])."""
    out: list[int] = []
    for part in str(text).strip("[] ").split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                low, high = (int(p) for p in part.split("-", 1))
                if high < low:
                    raise ValueError
                out.extend(range(low, high + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise WorkloadError(
                source, f"bad trace list {text!r} (write e.g. 1-8 or 9,10,11)", field="traces"
            ) from None
    return out


@dataclass(frozen=True)
class SkippedTask:
    """A task the composer could not give to any agent (all busy at its arrival)."""

    event: int
    trace_id: int
    arrival: float
    reason: str = "no free agent"


@dataclass
class Composition:
    """Output of :func:`compose`: the tasks, what was skipped and how many events were drawn."""

    spec: ComposerSpec
    tasks: list[TaskSpec]
    skipped: list[SkippedTask]
    events: int
    event_sizes: list[int] = field(default_factory=list)  # tasks drawn per event (given + skipped)

    def summary(self) -> dict[str, Any]:
        return {
            "events": self.events,
            "tasks": len(self.tasks),
            "skipped": len(self.skipped),
            "agents_used": len({t.agent_id for t in self.tasks}),
            "spec": asdict(self.spec),
        }


def compose(
    spec: ComposerSpec, catalog: TaskCatalog | None = None, source: str = "<composer>"
) -> Composition:
    """Draw one workload. Deterministic: the same spec (seed included) gives identical tasks."""
    catalog = catalog or load_catalog()
    spec.validate(source, catalog)
    rng = random.Random(spec.seed)
    low, high = spec.tpe_range
    # (free-from time, agent index): the heap top is the agent free longest, ties to the lowest index.
    free_heap = [(-math.inf, a) for a in range(spec.agents)]
    tasks: list[TaskSpec] = []
    skipped: list[SkippedTask] = []
    end = spec.start + spec.duration
    event = 0
    sizes: list[int] = []
    t = spec.start + rng.expovariate(spec.rate)
    while t < end:
        n = rng.randint(low, high)
        traces = [rng.choice(spec.traces) for _ in range(n)]
        sizes.append(n)
        for k, trace in enumerate(traces):
            arrival = t + k * spec.job_interval
            if free_heap[0][0] > arrival:
                skipped.append(SkippedTask(event=event, trace_id=trace, arrival=arrival))
                continue
            _, agent = heapq.heappop(free_heap)
            bench = catalog.get(trace)
            variant = bench.variant(spec.skill_sets.get(trace))
            heapq.heappush(
                free_heap, (arrival + variant.plan_time_s + variant.exec_time + spec.guard_s, agent)
            )
            tasks.append(
                bench.to_spec(task_id=str(len(tasks)), agent_id=str(agent), arrival=arrival, variant=variant)
            )
        event += 1
        t += rng.expovariate(spec.rate)
    return Composition(spec=spec, tasks=tasks, skipped=skipped, events=event, event_sizes=sizes)
