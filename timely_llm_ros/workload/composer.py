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

Workload families for overload studies (each is a key, so ``wid2:bursty=10,compress=0.5``
reproduces a case from its name alone; with all three at their defaults the draws, and so the
tasks, are exactly those of the plain Poisson composer):

- ``bursty=F`` (F > 1): a two-state Markov-modulated Poisson process. The event stream alternates
  between a *calm* state and a *burst* state whose event rate is F times the calm one; sojourn
  times are exponential with means ``calm_s`` and ``burst_s``. The two rates are chosen so that the
  long-run mean stays ``rate`` (calm rate ``rate / (1 − p + F·p)`` with ``p = burst_s / (burst_s +
  calm_s)`` the share of time in bursts): the same expected load, concentrated. Implemented as a
  time change of the plain stream (the k-th event's arrival solves ``Λ(t) = rate·τ_k`` where ``τ_k``
  is its plain-Poisson time and ``Λ`` the integrated rate), so event sizes and traces are the same
  draws as without ``bursty``; the state process has its own random stream (same seed);
- ``compress=c`` (0 < c ≤ 1 packs, > 1 spreads): every event time ``t`` becomes
  ``start + c·(t − start)`` — the same events, closer together, so bursts overlap; the tasks of an
  event keep their ``job_interval``. Agents are assigned on the compressed timeline (a busy agent is
  still busy), so with a fixed pool more tasks may be skipped — and reported;
- ``unique_agents=true``: every task gets its own agent (the public generator's growing pool taken
  to the limit: nothing is ever skipped and ``agents`` is ignored). The load is then set by the
  event stream alone.

The busy estimate uses the *isolated* planning time; under contention real planning takes
longer, so an agent may receive its next task while the simulator is still planning the previous
one. The simulator treats tasks independently (as the public workloads do), so this only affects
how realistic the agent count is, never correctness.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Iterator
from dataclasses import asdict, dataclass, field
from typing import Any

from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.tasks import TaskCatalog, load_catalog

# Public generator constants (dataset/data_sample_gen.py): 1 ms between the tasks of one event and
# a 1 s guard between two tasks of the same agent.
DEFAULT_JOB_INTERVAL_S = 0.001
DEFAULT_GUARD_S = 1.0
# Bursty family defaults: bursts of ~10 s every ~50 s (a burst state holds 20 % of the time).
DEFAULT_BURST_S = 10.0
DEFAULT_CALM_S = 40.0
DEFAULT_BURST_FACTOR = 10.0  # ``bursty=true``


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
    # Overload families (module docstring): two-state bursts, time compression, one agent per task.
    bursty: float = 0.0  # burst-state rate / calm-state rate; 0 or 1: plain Poisson
    burst_s: float = DEFAULT_BURST_S  # mean length of a burst state (s)
    calm_s: float = DEFAULT_CALM_S  # mean length of a calm state (s)
    compress: float = 1.0  # event times scaled about ``start`` by this factor
    unique_agents: bool = False  # one agent per task (nothing skipped; ``agents`` ignored)

    def __post_init__(self) -> None:
        if self.bursty is True:  # ``bursty=true``: the default burst factor
            self.bursty = DEFAULT_BURST_FACTOR
        elif self.bursty is False:
            self.bursty = 0.0

    @property
    def tpe_range(self) -> tuple[int, int]:
        low = self.min_tpe if self.min_tpe is not None else max(1, self.max_tpe // 2)
        return low, self.max_tpe

    def validate(self, source: str = "<composer>", catalog: TaskCatalog | None = None) -> None:
        def bad(name: str, reason: str) -> WorkloadError:
            return WorkloadError(source, reason, entry="composer", field=name)

        for name in (
            "rate",
            "duration",
            "job_interval",
            "guard_s",
            "start",
            "bursty",
            "burst_s",
            "calm_s",
            "compress",
        ):
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
        if self.bursty < 0 or 0 < self.bursty < 1:
            raise bad("bursty", f"burst/calm rate ratio must be 0 (off) or >= 1, got {self.bursty}")
        for name in ("burst_s", "calm_s", "compress"):
            if getattr(self, name) <= 0:
                raise bad(name, f"must be > 0, got {getattr(self, name)}")
        if not isinstance(self.unique_agents, bool):
            raise bad("unique_agents", f"expected true or false, got {self.unique_agents!r}")
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


RESHAPE_KEYS = ("compress", "unique_agents")  # the families that also apply to explicit task lists


def reshape_tasks(tasks: list[TaskSpec], overrides: dict[str, Any], source: str) -> list[TaskSpec]:
    """``compress`` / ``unique_agents`` applied to an explicit task list (a public trace, a task file).

    Same meaning as in :class:`ComposerSpec`, with the first arrival as ``start`` (every arrival's
    offset from it is scaled, the 1 ms spacing inside an event too). A public trace's agents were
    assigned on its own timeline, so a compressed trace should normally also use ``unique_agents``
    (else one robot may get a task while its previous one is still running). Agents become
    ``u0``, ``u1``, ... in arrival order.
    """
    unknown = sorted(set(overrides) - set(RESHAPE_KEYS))
    if unknown:
        raise WorkloadError(
            source,
            f"overrides {unknown} only apply to composer workloads; a task list "
            f"takes {', '.join(RESHAPE_KEYS)}",
        )
    compress = overrides.get("compress", 1.0)
    unique = overrides.get("unique_agents", False)
    if (
        isinstance(compress, bool)
        or not isinstance(compress, (int, float))
        or not (math.isfinite(compress) and compress > 0)
    ):
        raise WorkloadError(source, f"must be a number > 0, got {compress!r}", field="compress")
    if not isinstance(unique, bool):
        raise WorkloadError(source, f"expected true or false, got {unique!r}", field="unique_agents")
    if not tasks:
        return tasks
    start = min(t.arrival for t in tasks)
    out = []
    for i, t in enumerate(tasks):
        out.append(
            dataclasses.replace(
                t, arrival=start + (t.arrival - start) * compress, agent_id=f"u{i}" if unique else t.agent_id
            )
        )
    return out


class TimeChange:
    """Maps plain-Poisson event times to the bursty (two-state MMPP) timeline (module docstring).

    The intensity is piecewise constant: ``r_calm`` or ``r_burst = F·r_calm`` over alternating
    sojourns, exponential with means ``calm_s`` / ``burst_s`` drawn lazily from the state stream (a
    test may pass ``sojourns``, the state lengths in order, and ``start_burst``). :meth:`real` must
    be called with non-decreasing arguments (the event stream is increasing)."""

    def __init__(
        self, spec: ComposerSpec, sojourns: Iterator[float] | None = None, start_burst: bool | None = None
    ) -> None:
        f = spec.bursty
        p = spec.burst_s / (spec.burst_s + spec.calm_s)
        self.rate = spec.rate
        self.r_calm = spec.rate / (1.0 - p + f * p)
        self.r_burst = f * self.r_calm
        self.rng = random.Random(f"bursty-{spec.seed}")
        self.spec = spec
        self._given = sojourns
        self.burst = self.rng.random() < p if start_burst is None else start_burst  # stationary start
        self.t0 = spec.start  # start of the current sojourn (real time)
        self.lam0 = 0.0  # integrated intensity at t0
        self.t1 = self.t0 + self._sojourn()

    def _sojourn(self) -> float:
        if self._given is not None:
            return next(self._given)
        mean = self.spec.burst_s if self.burst else self.spec.calm_s
        return self.rng.expovariate(1.0 / mean)

    def real(self, tau: float) -> float:
        """Real time at which the integrated intensity reaches ``rate·(tau − start)``."""
        target = self.rate * (tau - self.spec.start)
        while True:
            r = self.r_burst if self.burst else self.r_calm
            lam1 = self.lam0 + r * (self.t1 - self.t0)
            if target <= lam1:
                return self.t0 + (target - self.lam0) / r
            self.t0, self.lam0 = self.t1, lam1
            self.burst = not self.burst
            self.t1 = self.t0 + self._sojourn()


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
    warp = TimeChange(spec) if spec.bursty > 1.0 else None
    tau = spec.start + rng.expovariate(spec.rate)  # plain-Poisson time of the next event
    t = warp.real(tau) if warp else tau
    while t < end:
        n = rng.randint(low, high)
        traces = [rng.choice(spec.traces) for _ in range(n)]
        sizes.append(n)
        t_event = spec.start + (t - spec.start) * spec.compress if spec.compress != 1.0 else t
        for k, trace in enumerate(traces):
            arrival = t_event + k * spec.job_interval
            bench = catalog.get(trace)
            variant = bench.variant(spec.skill_sets.get(trace))
            if spec.unique_agents:
                agent = len(tasks)
            elif free_heap[0][0] > arrival:
                skipped.append(SkippedTask(event=event, trace_id=trace, arrival=arrival))
                continue
            else:
                _, agent = heapq.heappop(free_heap)
                heapq.heappush(
                    free_heap, (arrival + variant.plan_time_s + variant.exec_time + spec.guard_s, agent)
                )
            tasks.append(
                bench.to_spec(task_id=str(len(tasks)), agent_id=str(agent), arrival=arrival, variant=variant)
            )
        event += 1
        tau += rng.expovariate(spec.rate)
        t = warp.real(tau) if warp else tau
    return Composition(spec=spec, tasks=tasks, skipped=skipped, events=event, event_sizes=sizes)
