"""Urgent and normal % of Σβ versus load for every policy.

``python -m timely_llm_ros.bench.loadsweep --out results/ [--rates 0.1,0.25,0.5,0.75,1] [--cap 4]
[--policies timely,edf-seg,...] [--metric pct_beta]``

The load axis is WID 2's event rate (events/s; the preset is 0.25) with one agent per task, so that
the rate, not the agent pool, sets the load and no task is skipped (:func:`.scenarios.rate_spec`). Each (rate, policy) is one
simulation; the figure has one panel per task class (urgent, normal) with one line per policy, and
a second row of panels when ``--cap`` adds a fixed max batch. Writes ``loadsweep.json`` (every
class metric of every run, so the PNG can be re-drawn and checked) and ``loadsweep.png``
(matplotlib, Agg backend: no display needed).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path
from typing import Any

from timely_llm_ros.bench import scenarios as sc
from timely_llm_ros.bench.runner import clean

POLICIES = ("timely", "timely-paper", "edf-seg", "fcfs-seg", "vllm-stream", "vllm")
CLASSES = ("urgent", "normal")
MARKERS = ("o", "s", "^", "v", "D", "x", "P", "*")
METRICS = (
    "pct_beta_clamped",
    "pct_beta",
    "utility_mean",
    "utility_mean_clamped",
    "response_p99",
    "response_max",
    "waiting_mean",
)


def sweep(rates: list[float], policies: list[str], caps: list[int | None], log=None) -> list[dict[str, Any]]:
    """One row per (cap, rate, policy): the run's per-class metric dicts."""
    rows = []
    for cap in caps:
        for rate in rates:
            scen = sc.from_spec(sc.rate_spec(rate), cap)
            for pol in policies:
                t0 = time.perf_counter()
                classes = sc.run(scen, pol)
                if log is not None:
                    log(
                        f"{scen.name:<40} {sc.with_suffix(pol, scen.suffix):<22} "
                        f"{time.perf_counter() - t0:6.1f} s"
                    )
                rows.append(
                    {
                        "rate": rate,
                        "cap": cap,
                        "policy": pol,
                        "scenario": scen.name,
                        "classes": clean(classes),
                    }
                )
    return rows


def plot(rows: list[dict[str, Any]], path: Path, metric: str = "pct_beta") -> Path:
    """Draw the sweep: rows = caps, columns = classes, x = event rate, one line per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    caps = list(dict.fromkeys(r["cap"] for r in rows))
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    fig, axes = plt.subplots(
        len(caps), len(CLASSES), figsize=(5.2 * len(CLASSES), 3.6 * len(caps)), squeeze=False
    )
    for i, cap in enumerate(caps):
        for j, cls in enumerate(CLASSES):
            ax = axes[i][j]
            for k, pol in enumerate(policies):
                pts = [
                    (r["rate"], (r["classes"].get(cls) or {}).get(metric))
                    for r in rows
                    if r["cap"] == cap and r["policy"] == pol
                ]
                pts = [(x, y) for x, y in pts if y is not None]
                if pts:  # distinct markers: fcfs-seg and vllm-stream coincide (free resumption)
                    style = "-" if pol.startswith("timely") else "--"
                    ax.plot(
                        *zip(*pts),
                        style,
                        marker=MARKERS[k % len(MARKERS)],
                        label=pol,
                        linewidth=2 if pol == "timely" else 1,
                        markersize=7 - (k % 3),
                    )
            cap_txt = f"max batch {cap}" if cap else "max batch 8 (default)"
            ax.set_title(f"{cls} tasks, WID 2, {cap_txt}", fontsize=10)
            ax.set_xlabel("event rate (events/s)")
            ax.set_ylabel(
                {"pct_beta": "% of Σβ (Eq. 1, unclamped)", "pct_beta_clamped": "% of Σβ (clamped at 0)"}.get(
                    metric, f"[{metric}]"
                )
            )
            ax.grid(alpha=0.3)
            if metric.startswith("pct_beta"):
                ax.set_ylim(top=102)
    axes[0][-1].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def _floats(text: str) -> list[float]:
    try:
        vals = [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated numbers, got {text!r}") from None
    if not vals or any(not (math.isfinite(v) and v > 0) for v in vals):
        raise argparse.ArgumentTypeError(f"rates must be numbers > 0, got {text!r}")
    return vals


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results", help="output directory (loadsweep.json, loadsweep.png)")
    ap.add_argument("--rates", type=_floats, default=list(sc.RATES), help="comma-separated events/s")
    ap.add_argument("--policies", default=",".join(POLICIES), help="comma-separated policy names")
    ap.add_argument(
        "--cap",
        type=int,
        action="append",
        default=None,
        help="also sweep with this fixed max batch (repeatable)",
    )
    ap.add_argument("--metric", default="pct_beta", choices=METRICS, help="plotted metric")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    from timely_llm_ros.core.sched.policies import UnknownPolicy, parse_policy

    policies = [p.strip() for p in args.policies.split(",") if p.strip()]
    try:
        for p in policies:
            parse_policy(p)
    except UnknownPolicy as exc:
        ap.error(str(exc))
    caps: list[int | None] = [None] + [c for c in (args.cap or []) if c]
    if any(c is not None and c < 1 for c in caps):
        ap.error("--cap must be >= 1")
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    rows = sweep(args.rates, policies, caps, log)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "loadsweep.json").write_text(
        json.dumps(
            {
                "axis": "WID 2 event rate (events/s)",
                "rates": args.rates,
                "caps": caps,
                "policies": policies,
                "metric": args.metric,
                "rows": rows,
            },
            indent=1,
        )
    )
    png = plot(rows, out / "loadsweep.png", args.metric)
    print(_text(rows, args.metric))
    print(f"wrote {out / 'loadsweep.json'} and {png}")
    return 0


def _text(rows: list[dict[str, Any]], metric: str) -> str:
    """One line per run: ``metric`` per class, and the clamped % of Σβ beside an unclamped one."""
    keys = [metric] + (["pct_beta_clamped"] if metric == "pct_beta" else [])
    head = "".join(f"{c + ' ' + k:>28}" for c in CLASSES for k in keys)
    lines = [f"{'cap':>4} {'rate':>5}  {'policy':<18}" + head]
    for r in rows:
        cells = []
        for c in CLASSES:
            for k in keys:
                v = (r["classes"].get(c) or {}).get(k)
                cells.append(f"{'-' if v is None else f'{v:.1f}':>28}")
        lines.append(f"{r['cap'] or 8:>4} {r['rate']:>5g}  {r['policy']:<18}" + "".join(cells))
    return "\n".join(lines)


if __name__ == "__main__":
    raise SystemExit(main())
