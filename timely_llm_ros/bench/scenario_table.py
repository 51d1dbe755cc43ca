"""The ``--suite scenarios`` summary: ``timely`` against the best baseline on every scenario row.

One row per (scenario, max batch, task class). Columns (all % of the class's Σβ):

* ``timely`` and ``best`` (the best of the baselines :data:`BASELINES` on that class, named) with the
  paper's Eq. 1 utility **unclamped** first (the headline: a starved task counts with its negative
  utility) and clamped at 0 beside it; ``Δ`` = timely − best (unclamped, then clamped);
* ``×edf`` — the ratio of timely's to ``edf-seg``'s utility clamped at 0 (the project's goal is
  ≥ 1.3 for urgent tasks under overload; clamped because unclamped sums may be negative);
* ``bound`` / ``bound≥0`` — the capacity bound of :mod:`.bounds` (per-pass engine costs at the row's
  batch cap, each robot's chain of its own tasks, every task no sooner than served alone), unclamped
  and clamped: no policy can get more on that row; ``%bound`` = timely's clamped utility as % of the
  clamped bound (how much of what is reachable it gets);
* ``bound/edf`` — the clamped bound over edf-seg's clamped utility: < 1.3 means the 1.3× goal is
  impossible on that row, computed;
* ``goal`` (urgent rows) — ``met`` (×edf ≥ 1.3), ``impossible`` (bound/edf < 1.3) or ``missed``;
* ``skip`` — tasks the composer skipped because every agent was busy (0 with ``unique_agents``);
* ``defer`` / ``broken`` / ``cost`` — timely's admission deferrals of that class's segments beside a
  free slot, the promises among them that were broken (admitted after the decision their promise
  fell due at) and the Eq. 1 utility those extra delays cost (:mod:`timely_llm_ros.core.sched.deferral_ledger`).

The closing lines count the rows where timely trails the best baseline by more than
:data:`TOLERANCE` points (unclamped, and clamped): the robustness criterion.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

BASELINES = ("vllm", "vllm-stream", "fcfs-seg", "edf-seg")
TOLERANCE = 1.0  # points of %Σβ timely may trail the best baseline by
GOAL = 1.3  # ×edf-seg urgent utility under overload (the project's target)
CLASSES = ("urgent", "normal", "arm")


def _pct(classes: dict[str, Any], cls: str, key: str) -> float:
    v = (classes.get(cls) or {}).get(key)
    return math.nan if v is None else float(v)


def summary_rows(
    entries: Sequence[tuple[str, str, int | None]],
    classes_of: Callable[[str, str], dict[str, Any] | None],
    bound_of: Callable[[str, int | None], dict[str, dict[str, Any]]],
    skipped_of: Callable[[str], int],
    policy_for: Callable[[str, int | None], str],
    timely: str = "timely",
    stats_of: Callable[[str, str], dict[str, Any] | None] | None = None,
) -> list[dict[str, Any]]:
    """Rows for ``entries`` = (group, workload spec, cap); ``classes_of(spec, policy)`` gives a run's
    per-class metric dicts (None if not run), ``bound_of(spec, cap)`` the bounds per class
    (:func:`.bounds.class_bounds`: ``pct_beta`` unclamped, ``pct_beta_clamped``), ``stats_of(spec,
    policy)`` a run's statistics (the deferral ledger's ``deferral_<class>_*``; None: no columns)."""
    rows = []
    for group, spec, cap in entries:
        mine = classes_of(spec, policy_for(timely, cap))
        if mine is None:
            continue
        base = {b: classes_of(spec, policy_for(b, cap)) for b in BASELINES}
        served = {b: c for b, c in base.items() if c is not None}
        bound = bound_of(spec, cap)
        stats = (stats_of(spec, policy_for(timely, cap)) if stats_of else None) or {}
        for cls in CLASSES:
            if cls not in mine:
                continue
            row: dict[str, Any] = {
                "group": group,
                "workload": spec,
                "cap": cap or 8,
                "class": cls,
                "n": int((mine.get(cls) or {}).get("n") or 0),
                "timely": _pct(mine, cls, "pct_beta"),
                "timely_clamped": _pct(mine, cls, "pct_beta_clamped"),
                "skipped": skipped_of(spec),
            }
            scored = [(_pct(c, cls, "pct_beta"), b) for b, c in served.items() if cls in c]
            if scored:
                best, name = max(scored, key=lambda x: (x[0], x[1]))
                row["best"], row["best_policy"] = best, name
                row["best_clamped"] = max(
                    _pct(c, cls, "pct_beta_clamped") for c in served.values() if cls in c
                )
                row["delta"] = row["timely"] - best
                row["delta_clamped"] = row["timely_clamped"] - row["best_clamped"]
            edf = _pct(base.get("edf-seg") or {}, cls, "pct_beta_clamped")
            row["edf_clamped"] = edf
            row["ratio_edf"] = row["timely_clamped"] / edf if edf > 0 else math.nan
            cb = bound.get(cls) or {}
            row["bound"] = float(cb.get("pct_beta", math.nan))
            row["bound_clamped"] = float(cb.get("pct_beta_clamped", row["bound"]))
            bc = row["bound_clamped"]
            row["of_bound"] = 100.0 * row["timely_clamped"] / bc if bc > 0 else math.nan
            row["bound_ratio"] = bc / edf if edf > 0 else math.nan
            if cls == "urgent":
                row["goal"] = (
                    "met"
                    if row["ratio_edf"] >= GOAL
                    else "impossible"
                    if row["bound_ratio"] < GOAL
                    else "missed"
                )
            if any(k.startswith("deferral_") for k in stats):
                for key in _LEDGER:
                    row[key] = stats.get(f"deferral_{cls}_{key}", 0)
            rows.append(row)
    return rows


_LEDGER = (
    "deferrals",
    "promises_kept",
    "promises_broken",
    "promises_broken_free",
    "promises_broken_unexplained",
    "broken_cost",
    "wait_cost",
    "expected_cost",
)


def _f(v: Any, digits: int = 1) -> str:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    return f"{v:.{digits}f}"


def render(rows: list[dict[str, Any]], title: str = "Scenario summary") -> str:
    """Aligned text table + the trailing-row counts (module docstring)."""
    header = [
        "group",
        "workload",
        "cap",
        "class",
        "timely",
        "best",
        "best policy",
        "Δ",
        "timely≥0",
        "best≥0",
        "Δ≥0",
        "×edf",
        "bound",
        "bound≥0",
        "%bound",
        "bound/edf",
        "goal",
        "skip",
        "defer",
        "broken",
        "cost",
    ]
    body = []
    for r in rows:
        body.append(
            [
                r["group"],
                r["workload"],
                str(r["cap"]),
                r["class"],
                _f(r["timely"]),
                _f(r.get("best")),
                r.get("best_policy", "-"),
                _f(r.get("delta")),
                _f(r["timely_clamped"]),
                _f(r.get("best_clamped")),
                _f(r.get("delta_clamped")),
                _f(r["ratio_edf"], 2),
                _f(r["bound"]),
                _f(r["bound_clamped"]),
                _f(r["of_bound"]),
                _f(r["bound_ratio"], 2),
                r.get("goal", ""),
                str(r["skipped"]),
                str(r.get("deferrals", "-")),
                str(r.get("promises_broken", "-")),
                _f(r.get("broken_cost"), 2),
            ]
        )
    widths = [max(len(x[i]) for x in [header, *body]) for i in range(len(header))]
    left = {0, 1, 3, 6, 16}

    def line(cells: list[str]) -> str:
        return "  ".join(
            c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))
        )

    out = [
        f"== {title}: % of Σβ, Eq. 1 unclamped first, clamped at 0 (≥0) beside; "
        "×edf, %bound and bound/edf on clamped sums; bound = capacity + robot-chain bound (bench.bounds)",
        line(header),
        "  ".join("-" * w for w in widths),
    ]
    out += [line(b) for b in body]
    out.append(verdict(rows))
    return "\n".join(out)


def trailing(rows: list[dict[str, Any]], key: str = "delta") -> list[dict[str, Any]]:
    """Rows where timely trails the best baseline by more than :data:`TOLERANCE` points."""
    return [r for r in rows if r.get(key) is not None and r[key] < -TOLERANCE]


def verdict(rows: list[dict[str, Any]]) -> str:
    goals = [r["goal"] for r in rows if r.get("goal")]
    lines = [
        f"# rows where timely trails the best baseline by > {TOLERANCE:g} point: "
        f"{len(trailing(rows))} of {len(rows)} (unclamped), {len(trailing(rows, 'delta_clamped'))} (clamped)"
    ]
    for r in trailing(rows):
        lines.append(
            f"#   {r['workload']} @b{r['cap']} {r['class']}: timely {r['timely']:.1f} vs "
            f"{r['best_policy']} {r['best']:.1f}"
        )
    lines.append(
        f"# urgent ×edf-seg ≥ {GOAL:g}: met {goals.count('met')}, impossible (bound/edf < {GOAL:g}) "
        f"{goals.count('impossible')}, missed {goals.count('missed')} of {len(goals)} urgent rows"
    )
    led = [r for r in rows if "deferrals" in r]
    if led:
        n, broken = sum(r["deferrals"] for r in led), sum(r["promises_broken"] for r in led)
        cost = math.fsum(r["broken_cost"] for r in led)
        free = sum(r.get("promises_broken_free", 0) for r in led)
        odd = sum(r.get("promises_broken_unexplained", 0) for r in led)
        lines.append(
            f"# admission deferrals beside a free slot: {n}, promises kept {n - broken}, broken {broken} "
            f"costing {cost:.2f} utility (Eq. 1); the waits cost the deferred "
            f"{math.fsum(r['wait_cost'] for r in led):.2f} (the trades expected "
            f"{math.fsum(r['expected_cost'] for r in led):.2f})"
        )
        lines.append(
            f"#   broken with the batch full {broken - free}, beside a free slot behind a refused candidate "
            f"{free - odd}, otherwise {odd} (core.sched.deferral_ledger: should be 0)"
        )
    above = [r for r in rows if r["timely_clamped"] > r.get("bound_clamped", math.inf) + 1e-6]
    if above:  # the bound holds for every schedule: a row above it is a bug in the bound or the run
        lines.append(f"# BUG: timely above the capacity bound on {len(above)} row(s)")
    missed = [r for r in rows if r.get("goal") == "missed"]
    if missed:
        lines.append(
            f"# reachable (bound/edf ≥ {GOAL:g}) but missed (×edf < {GOAL:g}); reason "
            "(bench.missed): shared-engine = the urgent tasks alone reach it, within-class = not even alone"
        )
    for r in missed:
        alone = r.get("alone_ratio")
        why = (
            f"; {r['missed_reason']}: urgent alone ×edf {alone:.2f}"
            if r.get("missed_reason") and alone is not None and alone == alone
            else ""
        )
        lines.append(
            f"#   missed: {r['workload']} @b{r['cap']}: ×edf {r['ratio_edf']:.2f}, reachable "
            f"{r['bound_ratio']:.2f}; timely {r['timely_clamped']:.1f} of bound {r['bound_clamped']:.1f}{why}"
        )
    if missed and all(r.get("missed_reason") for r in missed):
        counts = {k: sum(r["missed_reason"] == k for r in missed) for k in ("shared-engine", "within-class")}
        lines.append("# missed rows by reason: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    return "\n".join(lines)
