"""Does the simulator order the policies as the real runs did? (``timely-llm realbench``'s check)

The paper compares policies by utility (%Σβ: 100·ΣU/Σβ with Eq. 1's utilities, over all tasks and
over the urgent ones) and by mean response time W(s₀). A real engine's runs on a shared machine move
by a few % from run to run, so a pair of policies whose real values are closer than that cannot be
ordered by the real runs at all: such a pair is a **tie**, never a swap, whatever the simulator says.
A pair is a tie when its real values differ by no more than the tolerance (:data:`ORDER_TOL`: 5 % of
the mean response, 5 points of %Σβ — Eq. 1's utility is unbounded below, so %Σβ may be near 0 or
negative and a relative tolerance would mean nothing there) or, with repeated runs, when the two
policies' real ranges overlap. Every other pair the real runs *separate*: the prediction **agrees**
when it puts the same policy ahead (any margin), and **swaps** the pair otherwise.

The ordering is reproduced when no separated pair is swapped in any metric and at least one pair is
separated (a slice where every pair ties does not test the ordering: it says so).

Pure functions over realbench's per-run results (``policy``, ``real`` / ``sim``: class -> metrics).
"""

from __future__ import annotations

import math
import statistics
from typing import Any

#: How far apart two policies' real values must be for the real runs to order them (see above).
ORDER_TOL: dict[str, float] = {"response_mean": 0.05, "pct_beta": 5.0}
#: The metrics the check orders by: (key, task class); a class no run has is left out.
ORDER_METRICS: tuple[tuple[str, str], ...] = (
    ("pct_beta", "all"),
    ("pct_beta", "urgent"),
    ("response_mean", "all"),
)
LABELS = {"pct_beta": "%Σβ", "response_mean": "mean response"}
KEYS = ("pct_beta", "pct_beta_clamped", "response_mean", "on_time_pct", "n")


def _num(x: Any) -> float:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else math.nan


def _mean(xs: list[float]) -> float:
    xs = [x for x in xs if math.isfinite(x)]
    return statistics.fmean(xs) if xs else math.nan


def by_policy(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The runs of each policy (several with ``--repeats``) merged, in first-seen order: the mean real
    and predicted value of each metric per class, and the real values' range (``real_range``)."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        groups.setdefault(r["policy"], []).append(r)
    out = []
    for pol, runs in groups.items():
        classes = list(dict.fromkeys(c for r in runs for c in r["real"]))
        agg: dict[str, Any] = {"policy": pol, "runs": len(runs), "real": {}, "sim": {}, "real_range": {}}
        for cls in classes:
            for side in ("real", "sim"):
                agg[side][cls] = {k: _mean([_num(r[side].get(cls, {}).get(k)) for r in runs]) for k in KEYS}
            vals = {k: [_num(r["real"].get(cls, {}).get(k)) for r in runs] for k in KEYS}
            agg["real_range"][cls] = {
                k: (min(v), max(v)) if v and all(math.isfinite(x) for x in v) else (math.nan, math.nan)
                for k, v in vals.items()
            }
        out.append(agg)
    return out


def pair_verdict(
    key: str,
    real: tuple[float, float],
    sim: tuple[float, float],
    tol: float,
    ranges: tuple[tuple[float, float], tuple[float, float]] | None = None,
) -> str:
    """``agree`` / ``swap`` / ``tie`` / ``n/a`` for policies a, b: ``real`` and ``sim`` are their
    (a, b) values of ``key``; ``tol`` as in :data:`ORDER_TOL` (relative for the response, points for
    %Σβ); ``ranges``: each policy's real (min, max) over repeated runs (overlapping: a tie)."""
    if not all(math.isfinite(x) for x in (*real, *sim)):
        return "n/a"
    sign = -1.0 if key == "response_mean" else 1.0  # > 0: a is better
    d_real, d_sim = sign * (real[0] - real[1]), sign * (sim[0] - sim[1])
    margin = tol * max(abs(real[0]), abs(real[1])) if key == "response_mean" else tol
    if abs(d_real) <= margin:
        return "tie"
    if ranges is not None and all(math.isfinite(x) for r in ranges for x in r):
        (lo_a, hi_a), (lo_b, hi_b) = ranges
        if lo_a <= hi_b and lo_b <= hi_a:
            return "tie"
    return "agree" if d_sim * d_real > 0 else "swap"


def ordering(
    results: list[dict[str, Any]], key: str, cls: str = "all", tol: float | None = None
) -> dict[str, Any]:
    """Policies best first by ``key`` of class ``cls`` (smaller response, larger %Σβ), real and
    predicted, and each pair's verdict (:func:`pair_verdict`); ``match``: no pair swapped."""
    tol = ORDER_TOL[key] if tol is None else tol
    pols = by_policy(results)
    sign = -1.0 if key == "response_mean" else 1.0
    val: dict[str, dict[str, float]] = {
        side: {p["policy"]: _num(p[side].get(cls, {}).get(key)) for p in pols} for side in ("real", "sim")
    }

    def best_first(v: dict[str, float]) -> list[str]:
        return sorted(v, key=lambda q: -sign * v[q] if math.isfinite(v[q]) else math.inf)

    order = {side: best_first(val[side]) for side in val}
    pairs = []
    for i, a in enumerate(pols):
        for b in pols[i + 1 :]:
            ranges = None
            if a["runs"] > 1 and b["runs"] > 1:
                ranges = (
                    a["real_range"].get(cls, {}).get(key, (math.nan, math.nan)),
                    b["real_range"].get(cls, {}).get(key, (math.nan, math.nan)),
                )
            pa, pb = a["policy"], b["policy"]
            real, sim = (val["real"][pa], val["real"][pb]), (val["sim"][pa], val["sim"][pb])
            pairs.append(
                {
                    "a": pa,
                    "b": pb,
                    "real": real,
                    "sim": sim,
                    "verdict": pair_verdict(key, real, sim, tol, ranges),
                }
            )
    count = {v: sum(p["verdict"] == v for p in pairs) for v in ("agree", "swap", "tie", "n/a")}
    return {
        **order,
        "key": key,
        "class": cls,
        "tol": tol,
        "pairs": pairs,
        **{f"{k}s" if k != "n/a" else "n_a": v for k, v in count.items()},
        "match": count["swap"] == 0,
        "discordant": count["swap"],
    }


def ordering_check(results: list[dict[str, Any]], tol: dict[str, float] | None = None) -> dict[str, Any]:
    """The ordering by every metric of :data:`ORDER_METRICS` that the runs have, and the verdict:
    ``reproduced`` (no swap anywhere, at least one separated pair) with its reason."""
    tol = {**ORDER_TOL, **(tol or {})}
    classes = {c for r in results for c in r["real"]}
    metrics = [ordering(results, k, c, tol[k]) for k, c in ORDER_METRICS if c in classes]
    swaps = [(m, p) for m in metrics for p in m["pairs"] if p["verdict"] == "swap"]
    agree = sum(m["agrees"] for m in metrics)
    ties = sum(m["ties"] for m in metrics)
    if swaps:
        reason = "; ".join(
            f"{p['a']} vs {p['b']} by {LABELS[m['key']]} ({m['class']}): real {_fmt(m['key'], p['real'])}, "
            f"sim {_fmt(m['key'], p['sim'])}"
            for m, p in swaps
        )
        reason = f"{len(swaps)} pair(s) swapped: {reason}"
    elif agree == 0:
        reason = "every pair is a tie within the tolerance: this slice does not separate the policies"
    else:
        reason = f"{agree} separated pair(s) ordered alike, {ties} tie(s) within the tolerance"
    return {
        "reproduced": not swaps and agree > 0,
        "reason": reason,
        "tol": tol,
        "agrees": agree,
        "ties": ties,
        "swaps": len(swaps),
        "metrics": metrics,
    }


def _fmt(key: str, pair: tuple[float, float]) -> str:
    return " vs ".join(f"{v:.2f} s" if key == "response_mean" else f"{v:.1f}" for v in pair)


def lines(check: dict[str, Any]) -> list[str]:
    """The check as the realbench table prints it: one line per metric, then the verdict."""
    out = []
    for m in check["metrics"]:
        tol = f"{100 * m['tol']:.0f} %" if m["key"] == "response_mean" else f"{m['tol']:g} points"
        ties = [f"{p['a']}~{p['b']}" for p in m["pairs"] if p["verdict"] == "tie"]
        swaps = [f"{p['a']}/{p['b']}" for p in m["pairs"] if p["verdict"] == "swap"]
        out.append(
            f"ordering by {LABELS[m['key']]} ({m['class']}, best first): real {' > '.join(m['real'])}; "
            f"sim {' > '.join(m['sim'])}: {m['agrees']} agree, {m['swaps']} swapped"
            + (f" ({', '.join(swaps)})" if swaps else "")
            + f", {m['ties']} tied within {tol}"
            + (f" ({', '.join(ties)})" if ties else "")
        )
    out.append(f"ordering reproduced: {'yes' if check['reproduced'] else 'no'} ({check['reason']})")
    return out
