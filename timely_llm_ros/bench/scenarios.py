"""Benchmark scenarios beyond the paper's presets.

At the published loads the simulated engine is busy only ~10–20 % of the time (measured with
``timely-llm bench``), so the presets cannot tell a policy that handles overload from one that
does not. The scenarios here add load along several axes: the
three public workloads, 2× and 3× WID 2's agents, event-rate sweeps, fixed max-batch caps 2/4/6/8
and bursts.

Every scenario is a :class:`Scenario` — a named tuple ``(name, tasks, suffix)``: a label, the
``list[TaskSpec]`` to simulate and the policy suffix to apply (``""`` or ``"@bN"``, a fixed max
batch; :func:`with_suffix` adds it to a policy name). Workloads are resolved with the workload
package's public :func:`~timely_llm_ros.workload.resolve_workload` (preset names with ``key=value``
overrides and the public samples), so a scenario is reproducible from its ``spec`` string alone.

Groups (:data:`GROUPS`, :func:`scenarios`): ``low`` (public samples + presets, the low-load targets),
``agents``, ``batch``, ``rate``, ``burst`` and ``overload`` (2× WID 2 agents at caps 4 and 6, the
overload targets). :func:`run` simulates one scenario under one policy and returns the per-class
metric dicts of :func:`~timely_llm_ros.core.metrics.summarize`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.simulator import SimConfig, simulate
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.workload import resolve_workload

PUBLIC = ("sample1", "sample2", "arm")
PRESETS = ("wid1", "wid2", "wid3")
WID2_AGENTS = 42  # paper Table 3
AGENT_FACTORS = (2, 3)
BATCH_CAPS = (2, 4, 6, 8)
RATES = (0.1, 0.25, 0.5, 0.75, 1.0)  # events/s; WID 2 is 0.25
OVERLOAD_CAPS = (4, 6)
# A burst: rare, large events (one every ~20 s on average, 16–32 tasks at once) with enough agents.
BURSTS = ("wid2:rate=0.05,max_tpe=32,min_tpe=16,agents=120", "wid1:rate=0.05,max_tpe=24,min_tpe=12,agents=80")


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
    """WID 2 with ``factor`` × its 42 agents (more agents: fewer tasks skipped for busy agents)."""
    if isinstance(factor, bool) or not isinstance(factor, int) or factor < 1:
        raise ValueError(f"agent factor must be a positive integer, got {factor!r}")
    return f"wid2:agents={WID2_AGENTS * factor}"


def rate_spec(rate: float) -> str:
    """WID 2 at ``rate`` events/s with agents scaled so that the rate, not the pool, sets the load."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not rate > 0:
        raise ValueError(f"event rate must be a number > 0, got {rate!r}")
    agents = max(WID2_AGENTS, int(round(WID2_AGENTS * 3 * rate / 0.25)))
    return f"wid2:rate={rate:g},agents={agents}"


# -------------------------------------------------------------------------------- the groups
def low_load() -> list[Scenario]:
    """The public samples and the presets as published (the low-load targets)."""
    return [from_spec(s) for s in PUBLIC + PRESETS]


def agents(factors: tuple[int, ...] = AGENT_FACTORS) -> list[Scenario]:
    return [from_spec(agents_spec(f)) for f in factors]


def batch_caps(caps: tuple[int, ...] = BATCH_CAPS, spec: str | None = None) -> list[Scenario]:
    """2× WID 2 agents (default) under fixed max-batch caps."""
    spec = spec or agents_spec(2)
    wl = resolve_workload(spec)
    return [Scenario(spec + _batch_suffix(c), list(wl.tasks), _batch_suffix(c)) for c in caps]


def rate_sweep(rates: tuple[float, ...] = RATES, cap: int | None = None) -> list[Scenario]:
    return [from_spec(rate_spec(r), cap) for r in rates]


def bursts(cap: int | None = None) -> list[Scenario]:
    return [from_spec(s, cap) for s in BURSTS]


def overload() -> list[Scenario]:
    """2× WID 2 agents under caps 4 and 6 (the overload targets)."""
    return batch_caps(OVERLOAD_CAPS)


GROUPS: dict[str, Callable[[], list[Scenario]]] = {
    "low": low_load,
    "agents": agents,
    "batch": batch_caps,
    "rate": rate_sweep,
    "burst": bursts,
    "overload": overload,
}


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
    cfg = SimConfig(policy=with_suffix(policy, scenario.suffix), profile=base.profile,
                    exec_mode=base.exec_mode, network_latency=base.network_latency, seed=base.seed)
    result = simulate(scenario.tasks, cfg)
    return {k: m.as_dict() for k, m in summarize(result.records).items()}
