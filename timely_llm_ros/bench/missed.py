"""Why an urgent row misses ≥ 1.3× ``edf-seg`` where the capacity bound says it is reachable.

Why: the capacity bound (:mod:`.bounds`) is per task class: it lets the urgent class have the engine
to itself (the normal tasks' segments, which in a real batch hold slots — a running segment is never
preempted — and slow every decode step, are dropped) and runs the class on a fluid machine (one
sequence may go faster than a step). A "reachable but missed" row is missed for one of two reasons,
and one extra simulation tells which: ``timely`` on the same workload *with its urgent tasks only*
(same arrivals, robots, batch cap, engine).

* ``shared-engine`` — alone, the urgent tasks do reach 1.3× ``edf-seg``'s urgent utility (on the
  whole workload): what the row misses is lost to the normal work sharing the batch. Reaching it
  would take engine time from the normal tasks, whose utility the bound for the urgent class does
  not count (``timely`` serves Eq. 1 summed over both classes);
* ``within-class`` — even alone the urgent tasks do not reach it: their own bursts need more than
  non-preemptive batched decoding gives on time at this cap; the bound's fluid relaxation is what
  is loose there, not the policy's class trade-off.

The urgent-only run is a diagnostic, not a bound: it is one real schedule of a smaller workload.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from timely_llm_ros.bench.scenario_table import GOAL
from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.task import TaskSpec, task_class
from timely_llm_ros.sim.simulator import SimConfig, simulate

SHARED, WITHIN = "shared-engine", "within-class"


def urgent_alone_pct(tasks: Sequence[TaskSpec], config: SimConfig) -> float:
    """Clamped %Σβ of the urgent tasks of ``tasks`` served without the others (``config.policy``)."""
    urgent = [t for t in tasks if task_class(t) == "urgent"]
    if not urgent:
        return float("nan")
    got = summarize(simulate(urgent, config).records).get("urgent")
    return float("nan") if got is None else float(got.pct_beta_clamped)


def pin_reasons(
    rows: list[dict[str, Any]],
    tasks_of: Callable[[str], Sequence[TaskSpec]],
    config: SimConfig,
    policy_for: Callable[[str, int | None], str],
    timely: str = "timely",
) -> list[dict[str, Any]]:
    """Add ``urgent_alone`` (clamped %Σβ), ``alone_ratio`` (its ×edf-seg) and ``missed_reason`` to
    every ``goal == "missed"`` row of a summary (:mod:`.scenario_table`); returns those rows."""
    out = []
    for r in rows:
        if r.get("goal") != "missed":
            continue
        cfg = dataclasses.replace(config, policy=policy_for(timely, r["cap"]))
        alone = urgent_alone_pct(tasks_of(r["workload"]), cfg)
        edf = r["edf_clamped"]
        r["urgent_alone"] = alone
        r["alone_ratio"] = alone / edf if edf > 0 else float("nan")
        r["missed_reason"] = SHARED if r["alone_ratio"] >= GOAL else WITHIN
        out.append(r)
    return out
