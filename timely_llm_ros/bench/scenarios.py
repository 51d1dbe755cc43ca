"""Benchmark scenarios beyond the paper's presets.

At the published loads the simulated engine is busy only ~10–20 % of the time (measured with
``timely-llm bench``), so the presets cannot tell a policy that handles overload from one that
does not. The scenarios here add load along axes that really add load, each
reproducible from its workload spec alone (``--workload`` syntax, :mod:`timely_llm_ros.workload`):

* ``low`` — the three public samples and the three presets as published (the low-load targets);
* ``agents`` — the fleet: f × WID 2's 42 agents where every event involves f × as many robots
  (``max_tpe`` 16·f, so ``min_tpe`` 8·f), f = 1, 2, 3. (More agents alone do not add load: 2× and
  3× gave the same 739 tasks once no task was skipped for lack of a free agent);
* ``rate`` — WID 2's event rate 0.1 … 1.0 events/s with one agent per task (``unique_agents``): the
  rate alone sets the load and no task is skipped (with WID 2's fixed pool of 42 the 1.0 point
  skipped 1,761 tasks for lack of a free agent);
* ``batch`` — WID 2 with one agent per task under max-batch caps 2 … 16;
* ``burst`` — rare large events (16–32 tasks at once) and two-state bursty arrivals (``bursty=10``:
  a burst state with 10× the calm state's event rate, same mean rate);
* ``compress`` — the public samples and WID 2 with arrivals compressed ×0.5 so bursts overlap;
* ``urgent`` — urgent-heavy WID 2 (traces 1, 6–8: three urgent tasks for each normal one);
* ``overload`` — the combinations at caps 4, 6 and 8 (bursty + compressed, urgent-heavy bursty +
  compressed, public sample compressed) and the robot-arm sample compressed ×0.5, once with one
  robot per task and once with the trace's own robots (each arm then waits for its previous plan:
  the case where the capacity bound's robot chains bind, :mod:`.bounds`).

Every scenario is a :class:`Scenario` — a named tuple ``(name, tasks, suffix)``: a label, the
``list[TaskSpec]`` to simulate and the policy suffix (``""`` or ``"@bN"``, a fixed max batch;
:func:`with_suffix` adds it to a policy name). :data:`SUITE` lists ``(group, spec, cap)`` for the CLI's
``--suite scenarios`` (:func:`suite_jobs`), :func:`scenarios` resolves groups to task lists for
:mod:`.ablation` and :mod:`.loadsweep`, and :func:`run` simulates one scenario under one policy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.workload.fileformat import resolve_workload

PUBLIC = ("sample1", "sample2", "arm")
PRESETS = ("wid1", "wid2", "wid3")
WID2_AGENTS = 42  # paper Table 3
WID2_MAX_TPE = 16
AGENT_FACTORS = (1, 2, 3)
BATCH_CAPS = (2, 4, 6, 8, 12, 16)
RATES = (0.1, 0.25, 0.5, 0.75, 1.0)  # events/s; WID 2 is 0.25
OVERLOAD_CAPS = (4, 6, 8)
UNIQUE = "unique_agents=true"
# A burst: rare, large events (one every ~20 s on average, 16–32 tasks at once) with enough agents;
# and two-state bursts (mean 10 s bursts at 10x the calm rate, every ~50 s; same mean rate).
BURSTS = (
    "wid2:rate=0.05,max_tpe=32,min_tpe=16,agents=120",
    "wid1:rate=0.05,max_tpe=24,min_tpe=12,agents=80",
    f"wid2:bursty=10,{UNIQUE}",
    f"wid1:bursty=10,{UNIQUE}",
)
COMPRESSED = (
    f"sample1:compress=0.5,{UNIQUE}",
    f"sample2:compress=0.5,{UNIQUE}",
    f"wid2:compress=0.5,{UNIQUE}",
)
URGENT_HEAVY = (f"wid2:traces=1,6-8,{UNIQUE}",)
OVERLOAD_SPECS = (
    f"wid2:bursty=10,compress=0.5,{UNIQUE}",
    f"wid2:traces=1,6-8,bursty=10,compress=0.5,{UNIQUE}",
    f"sample1:compress=0.5,{UNIQUE}",
)
ARM_OVERLOAD = f"arm:compress=0.5,{UNIQUE}"
ARM_SHARED = "arm:compress=0.5"  # the trace's own robots: chains of arm plans


class Scenario(NamedTuple):
    """One benchmark case: unpacks as ``(name, tasks, suffix)``."""

    name: str
    tasks: list[TaskSpec]
    suffix: str  # "" or "@bN"


def with_suffix(policy: str, suffix: str) -> str:
    """``("timely", "@b4")`` → ``"timely@b4"``; a policy that names its own batch keeps it."""
    if not suffix or "@" in policy:
        return policy
    return policy + suffix


def _batch_suffix(cap: int | None) -> str:
    if cap is None:
        return ""
    if isinstance(cap, bool) or not isinstance(cap, int) or cap < 1:
        raise ValueError(f"max batch cap must be a positive integer, got {cap!r}")
    return f"@b{cap}"


def from_spec(spec: str, cap: int | None = None, name: str | None = None) -> Scenario:
    """A scenario from a ``--workload`` style spec (``wid2:agents=84``) and an optional batch cap."""
    suffix = _batch_suffix(cap)
    wl = resolve_workload(spec)
    return Scenario(name or (spec + suffix), list(wl.tasks), suffix)


def agents_spec(factor: int) -> str:
    """WID 2's fleet scaled ``factor`` ×: agents and robots per event (module docstring)."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"agent factor must be a positive integer, got {factor!r}")
    if factor == 1:
        return "wid2"
    return f"wid2:agents={WID2_AGENTS * factor},max_tpe={WID2_MAX_TPE * factor}"


def rate_spec(rate: float) -> str:
    """WID 2 at ``rate`` events/s with one agent per task: the rate, not the pool, sets the load."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ValueError(f"event rate must be a number > 0, got {rate!r}")
    return f"wid2:rate={rate:g},{UNIQUE}"


def batch_spec() -> str:
    """The workload of the batch-cap axis: WID 2 with one agent per task."""
    return f"wid2:{UNIQUE}"


# -------------------------------------------------------------------------------- the suite
SuiteEntry = tuple[str, str, int | None]  # (group, workload spec, max-batch cap or None = default 8)


def _suite() -> list[SuiteEntry]:
    out: list[SuiteEntry] = [("low", s, None) for s in PUBLIC + PRESETS]
    out += [("agents", agents_spec(f), None) for f in AGENT_FACTORS]
    out += [("rate", rate_spec(r), None) for r in RATES]
    out += [("batch", batch_spec(), c) for c in BATCH_CAPS]
    out += [("burst", s, None) for s in BURSTS]
    out += [("compress", s, None) for s in COMPRESSED]
    out += [("urgent", s, None) for s in URGENT_HEAVY]
    out += [("overload", s, c) for s in OVERLOAD_SPECS for c in OVERLOAD_CAPS]
    out.append(("overload", ARM_OVERLOAD, None))
    out.append(("overload", ARM_SHARED, None))
    return out


SUITE: tuple[SuiteEntry, ...] = tuple(_suite())
GROUP_NAMES = tuple(dict.fromkeys(g for g, _, _ in SUITE))


def suite(groups: tuple[str, ...] | list[str] | None = None) -> list[SuiteEntry]:
    """The suite's entries of the named groups (all by default), in suite order."""
    names = list(GROUP_NAMES) if groups is None else list(groups)
    unknown = [g for g in names if g not in GROUP_NAMES]
    if unknown:
        raise ValueError(f"unknown scenario group(s) {unknown}; known: {', '.join(GROUP_NAMES)}")
    return [e for e in SUITE if e[0] in names]


def policy_for(policy: str, cap: int | None) -> str:
    return with_suffix(policy, _batch_suffix(cap))


# -------------------------------------------------------------------------------- the groups
def _group(name: str) -> Callable[[], list[Scenario]]:
    def build() -> list[Scenario]:
        cache: dict[str, list[TaskSpec]] = {}
        out = []
        for _, spec, cap in suite([name]):
            if spec not in cache:
                cache[spec] = list(resolve_workload(spec).tasks)
            out.append(Scenario(spec + _batch_suffix(cap), cache[spec], _batch_suffix(cap)))
        return out

    build.__doc__ = f"The suite's {name!r} scenarios, resolved."
    return build


GROUPS: dict[str, Callable[[], list[Scenario]]] = {g: _group(g) for g in GROUP_NAMES}


def agents(factors: tuple[int, ...] = AGENT_FACTORS) -> list[Scenario]:
    return [from_spec(agents_spec(f)) for f in factors]


def batch_caps(caps: tuple[int, ...] = BATCH_CAPS, spec: str | None = None) -> list[Scenario]:
    """One workload (default: WID 2, one agent per task) under fixed max-batch caps."""
    spec = spec or batch_spec()
    wl = resolve_workload(spec)
    return [Scenario(spec + _batch_suffix(c), list(wl.tasks), _batch_suffix(c)) for c in caps]


def bursts(cap: int | None = None) -> list[Scenario]:
    return [from_spec(s, cap) for s in BURSTS]


def overload() -> list[Scenario]:
    """The overload group of the suite (module docstring)."""
    return GROUPS["overload"]()


def scenarios(groups: tuple[str, ...] | list[str] | None = None) -> list[Scenario]:
    """The scenarios of the named groups (all by default), in group order."""
    names = list(GROUPS) if groups is None else list(groups)
    unknown = [g for g in names if g not in GROUPS]
    if unknown:
        raise ValueError(f"unknown scenario group(s) {unknown}; known: {', '.join(GROUPS)}")
    out: list[Scenario] = []
    for g in names:
        out.extend(GROUPS[g]())
    return out


def run(scenario: Scenario, policy: str, config: SimConfig | None = None) -> dict[str, dict[str, Any]]:
    """Simulate ``scenario`` under ``policy`` (the scenario's suffix applied): class → metric dict."""
    base = config or SimConfig()
    cfg = SimConfig(
        policy=with_suffix(policy, scenario.suffix),
        profile=base.profile,
        exec_mode=base.exec_mode,
        network_latency=base.network_latency,
        seed=base.seed,
    )
    result = simulate(scenario.tasks, cfg)
    return {k: m.as_dict() for k, m in summarize(result.records).items()}
