"""The paper's headline claims next to ours (``timely-llm bench --suite paper``), each with its reason.

Why: a reproduction that lands above the paper on some claims and below it on others says little
until every difference is traced to something the paper states. Each row gives the claim (paper
section), the paper's value, ours on the simulated engine (paper GPU profile, same workloads) and a
verdict; where they differ the reason cites what the paper (text, or its public code where the text
is silent) does differently from this package:

* vLLM (§7.1: FCFS continuous batching, the plan dispatched at the end) is the same design here;
  its urgent utility sits near the zero-utility time (0.5 s), where a few tens of milliseconds of
  mean response change a ratio against it by an order of magnitude;
* EDF-seg (§7.3.2: segmented, "maintaining the initial generation priority", i.e. the task's
  deadline arrival + ERT for every segment) is the same design here (``edf-seg``; the public code
  agrees); the capacity bound (:mod:`.bounds`) says how far above it any policy can get;
* FCFS-seg: the text keeps the task's arrival for every segment (``fcfs-seg``); the public code
  re-queues a resumed segment at the time it is re-queued — that variant runs as ``fcfs-requeue``;
* TimelyLLM itself: the paper's Eq. 4 and §4.4 read literally (``timely-paper``) beside the
  package's default ``timely`` (docs/scheduling.md says what changed and why);
* the engine loop: the public code adds at most one request (new or resumed) per engine
  iteration in every scheduler it compares; ``@a1`` runs a policy that way (:mod:`~timely_llm_ros.
  core.sched.policies`), and the rows show our loop and the paper's side by side;
* overheads (Tables 4 and 5) are measured on a different implementation; they are shown, not
  expected to match.

Every run goes through :meth:`.runner.Bench.run` (runs the figures already did are reused).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from typing import Any

from timely_llm_ros.bench import runner as rn
from timely_llm_ros.sim.simulator import SimConfig, simulate

DESK_CLEAN = "10"  # LRTrace trace id of 'Desk cleaning' (paper Table 2)
PAPER_POLICIES = ("timely", "timely-paper", "vllm", "vllm-stream", "fcfs-seg", "fcfs-requeue", "edf-seg")
ONE = "@a1"  # one admission per engine step: the paper's public code (module docstring)


def claims_jobs() -> list[rn.Job]:
    """Every run the claims table needs beyond the figures (the paper's baselines as its code ran them)."""
    jobs = [rn.Job(w, p + a) for w in ("wid1", "wid2") for a in ("", ONE) for p in PAPER_POLICIES]
    jobs += [rn.Job("wid3", p + a) for a in ("", ONE) for p in ("timely", "vllm")]
    jobs.append(rn.Job("wid3", "vllm-stream"))
    jobs += [rn.Job("wid2", rn.batch_policy(p, b)) for p in ("timely", "vllm") for b in rn.FIG7_BATCHES]
    return jobs


def _cls(bench: rn.Bench, spec: str, policy: str, cls: str, key: str) -> float:
    v = (bench.run(spec, policy).classes.get(cls) or {}).get(key)
    return math.nan if v is None else float(v)


def _type(bench: rn.Bench, spec: str, policy: str, trace: str, key: str) -> float:
    v = (bench.run(spec, policy).traces.get(trace) or {}).get(key)
    return math.nan if v is None else float(v)


def _alone_response(bench: rn.Bench, spec: str, trace: str, policy: str) -> float:
    """Response time of the first task of type ``trace`` in ``spec`` served alone under ``policy`` on a
    warm engine (the skill set's prefix cached by an identical request long before)."""
    task = next((t for t in bench.workload(spec).tasks if str(t.trace_id) == trace), None)
    if task is None:
        return math.nan
    o = bench.options
    cfg = SimConfig(
        policy=policy, profile=o.profile, exec_mode=o.exec_mode, network_latency=o.network_latency
    )
    warm = dataclasses.replace(task, task_id="warm", agent_id="warm", arrival=0.0)
    probe = dataclasses.replace(task, task_id="probe", agent_id="probe", arrival=1000.0)
    return simulate([warm, probe], cfg).records[1].response_time


def _verdict(paper: float, ours: float, rel: float, direction_ok: bool) -> str:
    if math.isnan(ours):
        return "not reproduced"
    if abs(ours - paper) <= rel * abs(paper):
        return "reproduced"
    return "direction only" if direction_ok else "not reproduced"


def _join(*parts: str) -> str:
    """Reason sentences joined with '; ' ("-" and empty parts left out; "-" when nothing is left)."""
    kept = [p for p in parts if p and p != "-"]
    return "; ".join(kept) if kept else "-"


def _row(claim: str, paper: str, ours: str, verdict: str, reason: str) -> dict[str, str]:
    return {"claim": claim, "paper": paper, "ours": ours, "verdict": verdict, "reason": reason}


def claim_rows(
    bench: rn.Bench,
    overhead: dict[str, Any] | None,
    bound_of: Callable[[str, int], dict[str, dict[str, Any]]],
) -> list[dict[str, str]]:
    """The claims table (module docstring); ``bound_of(spec, cap)`` = :func:`.bounds.class_bounds`."""
    rows = _desk_clean(bench)
    rows += _wid1(bench)
    rows += _wid2_vllm(bench)
    rows += _fig8(bench, bound_of)
    rows.append(_fig7(bench))
    rows += _overheads(overhead)
    return rows


def _desk_clean(bench: rn.Bench) -> list[dict[str, str]]:
    ut = _type(bench, "wid3", "timely", DESK_CLEAN, "utility_mean")
    uv = _type(bench, "wid3", "vllm", DESK_CLEAN, "utility_mean")
    rv = _type(bench, "wid3", "vllm", DESK_CLEAN, "response_mean")
    d = ut - uv
    d1 = _type(bench, "wid3", "timely" + ONE, DESK_CLEAN, "utility_mean") - _type(
        bench, "wid3", "vllm" + ONE, DESK_CLEAN, "utility_mean"
    )
    alone = _alone_response(bench, "wid3", DESK_CLEAN, "vllm")
    reason = (
        "the paper's 'increases utility by 1.97' is a difference of mean utilities (a ratio is undefined: "
        "vLLM's is ≤ 0 in both); with β = 1 it puts the paper's vLLM at ≈ −0.97, i.e. Desk Clean "
        f"answered at ≈ 1.99 s (normal TUF: ERT 1 s, α −2). Served alone our vLLM answers it in "
        f"{alone:.2f} s (the whole plan at Table 1's ≈ 21.5 ms per token), so the paper's figure is "
        f"vLLM with almost no queueing; in WID 3 ours answers at {rv:.2f} s (utility {uv:+.2f}) because "
        "each Desk Clean waits behind other arms' whole plans (FCFS, plans sent at EOS)"
    )
    wt = _type(bench, "wid3", "timely", DESK_CLEAN, "waiting_mean")
    wv = _type(bench, "wid3", "vllm", DESK_CLEAN, "waiting_mean")
    cut = 100.0 * (1.0 - wt / wv) if wv > 0 else math.nan
    return [
        _row(
            "Desk Clean (WID 3): utility +1.97 vs vLLM (§7.4.1)",
            "+1.97",
            f"{d:+.2f} ({ut:+.2f} vs {uv:+.2f}); one admission/step {d1:+.2f}",
            _verdict(1.97, d, 0.1, d > 0),
            "-" if abs(d - 1.97) <= 0.197 else reason,
        ),
        _row(
            "Desk Clean (WID 3): waiting time −84 % vs vLLM (§7.4.1)",
            "−84 %",
            f"−{cut:.0f} % ({wt:.2f} vs {wv:.2f} s)",
            _verdict(84.0, cut, 0.1, cut > 0),
            "-"
            if abs(cut - 84.0) <= 8.4
            else "segmented generation starts the arm after its first statement; the size of the cut "
            "follows the whole-plan generation time of vLLM (see the row above)",
        ),
    ]


def _wid1(bench: rn.Bench) -> list[dict[str, str]]:
    def u(p: str) -> float:
        return _cls(bench, "wid1", p, "urgent", "pct_beta")

    t, tp, v = u("timely"), u("timely-paper"), u("vllm")
    t1, tp1, v1 = u("timely" + ONE), u("timely-paper" + ONE), u("vllm" + ONE)
    named = ((t, "timely"), (tp, "timely-paper"), (t1, "timely@a1"), (tp1, "timely-paper@a1"))
    near = [(abs(x - 81.5), name) for x, name in named if not math.isnan(x)] or [(math.inf, "-")]
    gap, closest = min(near)
    return [
        _row(
            "WID 1 urgent: TimelyLLM 81.5 % of max utility (§7.2, Fig. 5a)",
            "81.5 %",
            f"timely {t:.1f}, timely-paper {tp:.1f}; one admission/step: {t1:.1f}, {tp1:.1f}",
            f"reproduced ({closest})" if gap <= 4.1 else _verdict(81.5, t, 0.05, t > v),
            "-"
            if gap <= 4.1
            else "the paper's method read literally (`timely-paper`: Eq. 4 + the §4.4 check) stalls "
            "admissions behind late generations and starves late tasks (docs/scheduling.md); the "
            "package's `timely` fixes both and lands above the paper. The paper's own code sits "
            "between the two readings: it ranks by another PUD form and drops queued tasks whose "
            "utility has reached 0 (never answered)",
        ),
        _row(
            "WID 1 urgent: vLLM 59.5 % of max utility (§7.2, Fig. 5a)",
            "59.5 %",
            f"{v:.1f}; one admission/step {v1:.1f}",
            _verdict(59.5, v, 0.1, True),
            _join(
                "-" if abs(v - 59.5) <= 5.95 else "see the WID 2 vLLM row",
                f"with one admission per step vLLM falls to {v1:.1f}: the paper's vLLM did not suffer that "
                "loop's delays the way its EDF did (the 142 % row)"
                if abs(v1 - 59.5) > 5.95
                else "",
            ),
        ),
    ]


def _wid2_vllm(bench: rn.Bench) -> list[dict[str, str]]:
    ut = _cls(bench, "wid2", "timely", "urgent", "utility_mean")
    uv = _cls(bench, "wid2", "vllm", "urgent", "utility_mean")
    us = _cls(bench, "wid2", "vllm-stream", "urgent", "utility_mean")
    rv = _cls(bench, "wid2", "vllm", "urgent", "response_mean")
    gain = 100.0 * (ut / uv - 1.0) if uv > 0 else math.nan
    gain_s = 100.0 * (ut / us - 1.0) if us > 0 else math.nan
    need = ut / 2.91  # the vLLM urgent utility that would give the paper's +191 %
    need_w = 0.2 + (2.0 - need) / (20.0 / 3.0)  # its response under the urgent TUF (ERT 0.2, α −6.67)
    ut1 = _cls(bench, "wid2", "timely" + ONE, "urgent", "utility_mean")
    uv1 = _cls(bench, "wid2", "vllm" + ONE, "urgent", "utility_mean")
    one = f"+{100.0 * (ut1 / uv1 - 1.0):.0f} %" if uv1 > 0 else f"undefined ({ut1:+.2f} vs {uv1:+.2f})"
    ok = not math.isnan(gain) and abs(gain - 191.0) <= 19.1
    return [
        _row(
            "WID 2 urgent: +191 % utility vs vLLM (§7.2, Fig. 5d)",
            "+191 %",
            f"+{gain:.0f} % (vs vllm-stream +{gain_s:.0f} %); one admission/step {one}",
            "reproduced" if ok else ("direction only" if gain > 0 else "not reproduced"),
            "-"
            if ok
            else f"vLLM's urgent mean response is {rv:.3f} s, next to the 0.5 s zero-utility time, so "
            f"its mean utility ({uv:.3f}) is small and the ratio ill-conditioned: the paper's +191 % "
            f"needs vLLM at {need:.2f} (mean response ≈ {need_w:.2f} s), {1000 * (rv - need_w):.0f} ms "
            "sooner than ours. Same design (FCFS, plan sent at EOS, §7.1); the paper's engine is real "
            "vLLM on the GPU, ours the Table-1 profile",
        )
    ]


def _fig8(bench: rn.Bench, bound_of: Callable[[str, int], dict[str, dict[str, Any]]]) -> list[dict[str, str]]:
    rows = []
    for base, paper, policies in (("FCFS", 1.83, ("fcfs-seg", "fcfs-requeue")), ("EDF", 1.42, ("edf-seg",))):
        parts, ratios = [], []
        for a in ("", ONE):
            for w in ("wid1", "wid2"):
                t = _cls(bench, w, "timely" + a, "urgent", "pct_beta")
                for p in policies:
                    b = _cls(bench, w, p + a, "urgent", "pct_beta")
                    ratio = t / b if b > 0 and t > 0 else math.nan  # Eq. 1 means: undefined at ≤ 0
                    ratios.append((w, p + a, ratio, b))
                    parts.append(
                        f"{w} {p + a} " + (f"{100 * ratio:.0f} %" if ratio == ratio else "undefined")
                    )
        best = min(ratios, key=lambda r: abs(r[2] - paper) if not math.isnan(r[2]) else math.inf)
        ok = abs(best[2] - paper) <= 0.1 * paper
        if base == "EDF":
            bound = float(bound_of("wid2", 8)["urgent"]["pct_beta"])
            edf2 = next(r[3] for r in ratios if r[0] == "wid2")
            n1 = _cls(bench, "wid2", "edf-seg" + ONE, "normal", "pct_beta")
            reason = (
                "our edf-seg is the paper's design (task deadline arrival + ERT kept for every segment: "
                f"§7.3.2, and the public code). In our loop it gets {edf2:.1f} % on WID 2 and the "
                f"capacity bound (bench.bounds) is {bound:.1f} %: no policy can reach more than "
                f"{100 * bound / edf2:.0f} % of edf-seg there. The paper's loop admits one request "
                "per engine step (public code), so resumed segments of older tasks, whose deadlines "
                "are earliest, take the admissions new urgent requests need; with that loop (@a1) "
                f"EDF also 'neglects normal tasks' (normal {n1:.1f} % on WID 2)"
            )
        else:
            reason = (
                "the text keeps the task's arrival for resumed segments (`fcfs-seg`); the public code "
                "re-queues them at the time they are re-queued (`fcfs-requeue`), which lets new "
                "(urgent) requests overtake resumed segments; the public code also admits one request "
                "per engine step (@a1). Fig. 8's workload is not named: WID 1 and WID 2 are shown"
            )
        rows.append(
            _row(
                f"urgent utility {100 * paper:.0f} % of {base}-seg (§7.3.2, Fig. 8)",
                f"{100 * paper:.0f} %",
                ", ".join(parts),
                f"reproduced ({best[0]} {best[1]})"
                if ok
                else ("direction only" if best[2] > 1 else "not reproduced"),
                reason,
            )
        )
    return rows


def _fig7(bench: rn.Bench) -> dict[str, str]:
    curves = {
        p: {b: _cls(bench, "wid2", rn.batch_policy(p, b), "all", "utility_mean") for b in rn.FIG7_BATCHES}
        for p in ("timely", "vllm")
    }
    (ut, bt), (uv, bv) = (max((u, b) for b, u in curves[p].items()) for p in ("timely", "vllm"))
    ok = abs(ut - 1.21) <= 0.121 and abs(uv - 0.74) <= 0.074 and bt == 6 and bv == 12
    t6, v12 = curves["timely"].get(6, math.nan), curves["vllm"].get(12, math.nan)
    return _row(
        "Fig. 7 (WID 2, fixed batch 1–16): peak mean utility TimelyLLM 1.21 @6, vLLM 0.74 @12 (§7.3.1)",
        "1.21 @6, 0.74 @12",
        f"timely {t6:.2f} @6, peak {ut:.2f} @{bt}; vllm {v12:.2f} @12, peak {uv:.2f} @{bv}",
        "reproduced" if ok else ("direction only" if ut > uv else "not reproduced"),
        "-"
        if ok
        else "both curves rise sharply to batch 4-6 as in the paper and timely stays above vLLM at every "
        "batch size; the paper's decline after the peak comes from interference growing with the batch "
        "and from GPU memory limits (§7.3.1), while our profile charges a larger batch only 0.8 ms per "
        "sequence per step (decode_r, an assumption of config/profiles) and 16 drone contexts fit its "
        "KV memory, so vLLM keeps gaining up to 16; our timely is the package's policy at a fixed cap",
    )


def _overheads(overhead: dict[str, Any] | None) -> list[dict[str, str]]:
    if not overhead:
        return []
    rows = []
    sched = {r["queue"]: r for r in overhead.get("scheduling", [])}
    if 8 in sched and "timely median ms" in sched[8]:
        ms1 = sched.get(1, {}).get("timely median ms", math.nan)
        ms8 = sched[8]["timely median ms"]
        rows.append(
            _row(
                "Table 5: scheduling overhead 0.58 ms (1 task) … 2.03 ms (8 tasks) (§7.5.2)",
                "0.58 … 2.03 ms",
                f"{ms1:.4f} … {ms8:.4f} ms",
                "lower (not a target)",
                "the paper re-scores every queued task through a multiprocessing PriorityQueue on each "
                "fetch (§5); ours keeps the queue order incrementally in-process (CPU time, this machine)",
            )
        )
    seg = overhead.get("segmentation") or []
    if seg:
        worst = max(float(r.get("overhead_pct", 0.0)) for r in seg)
        rows.append(
            _row(
                "Table 4: segmented generation overhead < 6 % (§7.5.1)",
                "2.6 … 5.6 %",
                f"≤ {worst:.1f} % (model-level)",
                "not comparable",
                "the paper measures stop checks and KV caching/retrieval on the GPU; the simulated engine "
                "resumes a context kept in device memory at no cost and the stop checker's CPU time is "
                "not on its clock, so only the timing model's extra passes show here (the real engines' "
                "cost is measured by the engine benchmarks)",
            )
        )
    return rows


def render(rows: list[dict[str, str]]) -> str:
    """The claims table: one block per claim (the reasons are sentences, not table cells)."""
    out = ["== The paper's claims: paper vs ours (simulated engine, paper GPU profile) =="]
    for r in rows:
        out.append(f"* {r['claim']}")
        out.append(f"    paper {r['paper']} | ours {r['ours']} | {r['verdict']}")
        if r["reason"] and r["reason"] != "-":
            out.append(f"    why: {r['reason']}")
    kinds = ("reproduced", "direction", "not reproduced", "not comparable", "lower")
    counts = {v: sum(r["verdict"].startswith(v) for r in rows) for v in kinds}
    out.append(
        f"# {counts['reproduced']} reproduced, {counts['direction']} in direction only, "
        f"{counts['not reproduced']} not reproduced, {counts['not comparable'] + counts['lower']} "
        f"overheads not comparable, of {len(rows)} rows"
    )
    return "\n".join(out)
