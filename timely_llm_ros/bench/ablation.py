"""Ablation of the robust ``timely`` policy: each change switched off on its own.

``python -m timely_llm_ros.bench.ablation --out results/ [--groups low,overload] [--variants ...]``

Variants (:data:`timely_llm_ros.core.sched.policy_timely.VARIANTS`, registered as policies):

==================  ====================================================================
timely              everything on
timely-unclamped    objective unclamped Eq. 1 alone (every segment by |α|/G, only on-time ones
                    tested; no preemption claim): the default before the "lex" objective
timely-clamped      objective clamped at 0 alone (late work worthless: the late tier, PUD order)
timely-no-claim     a preemption victim is ranked like any other segment (may be pushed back)
timely-no-ua        no utility-accrual deferral (EDF among live segments even under overload)
timely-no-late      late segments in EDF order (by zero-utility time) among the live ones
timely-no-aging     late tier without promotion (a late task may wait while live work exists)
timely-promote-half promoted work takes at most half the slots (trades the wait bound for utility)
timely-crit-d       tardy live segments keep their deadline D as critical time (not Z)
timely-adm-group    admission trades the group the free slots would take, not just the candidate
timely-adm-nocap    admission ignores the idle capacity's cost to the tardy backlog
timely-adm-paper    §4.4 admission read literally instead of the utility-guided one
timely-adm-g        the earlier admission (candidates timed by G, waiting credited with every loss)
timely-adm-nopromise a refusal does not promise admission at its deferral point
timely-adm-keepdue  a due promise whose candidate would lose utility overtakes a refused candidate
timely-floor05/1/2  a deferral must expect to gain > 0.5 / 1 / 2 % of the candidates' β
timely-floor1-idle2 the 1 % floor only where at least two batch slots are free
timely-no-preempt   a running segment is never suspended for urgent work (no core.sched.preemption)
timely-preempt2     a segment may be preempted twice (default: once)
timely-preempt-again a running segment past its estimate G is expected to run as long again
timely-preempt-ontime only an urgent candidate still on time may preempt (default: a late one
                    too, of a victim whose deadline holds even at its maximum segment length)
timely-preempt-late a late candidate preempts a victim safe at its expected length (not maximum)
timely-preempt-late0 ... only while its utility is still positive
timely-full-ua      the utility-accrual test over the whole live queue (no lookahead window)
timely-no-chain     a robot's active generation ranked by its own deadline only, not by the task
                    waiting behind it for the same robot (robot chain)
timely-no-adm       no admission check (batch + memory only)
timely-edf-dyn      all off: EDF on segment deadlines, no admission check
timely-paper        the paper's Eq. 4 + §4.4 literally (reference)
edf-seg             EDF on the task's initial deadline (baseline)
==================  ====================================================================

Prints one table per scenario and class (:func:`timely_llm_ros.bench.tables.render_table`: mean
utility unclamped and clamped, % of Σβ, n U ≤ 0, response p50/p99/max, mean waiting) and two compact
summaries (urgent/normal % of Σβ per variant and scenario: Eq. 1 unclamped, then clamped at 0);
writes ``ablation.json`` and ``ablation.txt``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from timely_llm_ros.bench import scenarios as sc
from timely_llm_ros.bench.runner import clean
from timely_llm_ros.bench.tables import TIME_NOTE, class_order, render_table
from timely_llm_ros.core.sched.policy_timely import VARIANTS

VARIANT_NAMES = ("timely", *VARIANTS, "timely-paper", "edf-seg")
# Default scenario set: three low-load cases and five loaded ones (kept small: two shared cores).
DEFAULT_SPECS = (
    ("sample1", None),
    ("wid2", None),
    ("arm", None),
    (sc.batch_spec(), 4),
    (sc.BURSTS[2], None),
    (sc.OVERLOAD_SPECS[0], 6),
    (sc.OVERLOAD_SPECS[2], 8),
    (sc.rate_spec(0.5), None),
)


def ablate(scenarios: list[sc.Scenario], variants: list[str], log=None) -> list[dict[str, Any]]:
    rows = []
    for scen in scenarios:
        for var in variants:
            t0 = time.perf_counter()
            classes = sc.run(scen, var)
            if log is not None:
                log(f"{scen.name:<42} {var:<18} {time.perf_counter() - t0:6.1f} s")
            rows.append({"scenario": scen.name, "policy": var, "classes": clean(classes)})
    return rows


def summary(rows: list[dict[str, Any]], key: str = "pct_beta_clamped") -> str:
    """Variants × scenarios (columns s1, s2, ... with a legend), cells ``urgent/normal`` of ``key``
    (the only class for single-class workloads such as the arm ones)."""
    scen = list(dict.fromkeys(r["scenario"] for r in rows))
    variants = list(dict.fromkeys(r["policy"] for r in rows))
    cell = {(r["scenario"], r["policy"]): r["classes"] for r in rows}
    width = 13
    lines = [
        f"{key}: urgent/normal per scenario (single-class workloads: that class)",
        f"{'variant':<20}" + "".join(f"{f's{i + 1}':>{width}}" for i in range(len(scen))),
    ]
    for v in variants:
        parts = []
        for s in scen:
            cls = cell.get((s, v), {})
            vals = [cls[c][key] for c in ("urgent", "normal") if c in cls and cls[c].get(key) is not None]
            if not vals:
                vals = [m[key] for c, m in cls.items() if c != "all" and m.get(key) is not None][:1]
            parts.append(f"{'/'.join(f'{x:.1f}' for x in vals):>{width}}")
        lines.append(f"{v:<20}" + "".join(parts))
    lines += [f"  s{i + 1} = {s}" for i, s in enumerate(scen)]
    return "\n".join(lines)


def tables(rows: list[dict[str, Any]]) -> list[str]:
    out = []
    for s in dict.fromkeys(r["scenario"] for r in rows):
        runs = [r for r in rows if r["scenario"] == s]
        classes = class_order(list(dict.fromkeys(c for r in runs for c in r["classes"])))
        if len([c for c in classes if c != "all"]) == 1:
            classes = [c for c in classes if c != "all"]
        for cls in classes:
            out.append(
                render_table(
                    f"== {s} | task type: {cls}",
                    [(r["policy"], r["classes"][cls]) for r in runs if cls in r["classes"]],
                )
            )
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="results", help="output directory (ablation.json, ablation.txt)")
    ap.add_argument("--variants", default=",".join(VARIANT_NAMES), help="comma-separated policy names")
    ap.add_argument(
        "--groups", default="", help=f"scenario groups instead of the default set ({', '.join(sc.GROUPS)})"
    )
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args(argv)
    from timely_llm_ros.core.sched.policies import UnknownPolicy, parse_policy

    variants = [v.strip() for v in args.variants.split(",") if v.strip()]
    try:
        for v in variants:
            parse_policy(v)
        if args.groups:
            scen = sc.scenarios([g.strip() for g in args.groups.split(",") if g.strip()])
        else:
            scen = [sc.from_spec(spec, cap) for spec, cap in DEFAULT_SPECS]
    except (UnknownPolicy, ValueError) as exc:
        ap.error(str(exc))
    log = None if args.quiet else (lambda s: print(s, file=sys.stderr, flush=True))
    rows = ablate(scen, variants, log)
    text = "\n\n".join([summary(rows, "pct_beta"), summary(rows), *tables(rows), TIME_NOTE])
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "ablation.json").write_text(json.dumps({"variants": variants, "rows": rows}, indent=1))
    (out / "ablation.txt").write_text(text + "\n")
    print(text)
    print(f"wrote {out / 'ablation.json'} and {out / 'ablation.txt'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
