"""``timely-llm bench --suite related``: every planner option beyond the paper against its off state.

The options (README "Beyond the paper"; :mod:`timely_llm_ros.core.options.planner_options`,
:mod:`timely_llm_ros.core.options.kv_policy`) are switched on one at a time over the ``timely`` policy on
the simulated engine (virtual clock, the default profile), and each run is compared with the run of
the same workload in that option's *off* state:

==================  ==============================  =============================================
group               variants                        off state
==================  ==============================  =============================================
urgency             lexical, llm (probe priced)     the TUF given (tasks sent without one here)
length_predictor    k=1, k=1.5                      the skill set's fixed G
overrun             kill, skip-next                 continue
token_budget        fixed-64, slack (chunked)       whole prompts, unchunked engine
kv (tight KV)       keep, discard, swap, lamps,     evict (furthest resume first, host first)
                    priority eviction, threshold
==================  ==============================  =============================================

Workloads: the presets and public samples (``low``: the defaults may cost at most
:data:`TOLERANCE` points of urgent or normal %Σβ there), two overload cases — permanent overload
(WID 2 at 1 event/s, one agent per task) and bursty overload — and ``mix``: WID 2 with the robot-arm
sample's FLTRNN tasks (~1.3k-token prompts) arriving in the same window (urgent time to first
segment, i.e. the response time, with long prompts mixed in). KV variants run with a tight device KV
budget (:data:`TIGHT_KV_TOKENS`), their off state too. With the urgency variants the planner is not
given the TUF: it derives it; the metrics judge the task by its real TUF (``reference_tuf``).

Writes ``related.json`` (every run's metrics and engine counters, the ablation deltas, the decision
per option) ``related.txt`` (the ablation table) and ``related.png`` (Δ%Σβ per variant, low and
high load).
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.options.kv_policy import KVOptions
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.profile import EngineProfile, load_profile
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import tuf_class
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.workload.fileformat import resolve_workload

TOLERANCE = 1.0  # points of urgent / normal %Σβ an option on by default may cost on a low workload
MIN_GAIN = 0.1  # points of 'all' %Σβ an option must add on average (over every workload) to be on
TIGHT_KV_TOKENS = 6000  # device KV tokens of the "tight" profile (the default profile has 60,000)
LOW = ("sample1", "sample2", "arm", "wid1", "wid2", "wid3")
HIGH = ("wid2:rate=1.0,unique_agents=true", "wid2:bursty=10,compress=0.5,unique_agents=true", "mix")
SHORT = {
    "wid2:rate=1.0,unique_agents=true": "overload",
    "wid2:bursty=10,compress=0.5,unique_agents=true": "bursty",
}
POLICY = "timely"
W = 16  # table column width
# The shipped defaults (PlannerOptions / KVOptions) and why they differ from the measured verdict.
SHIPPED = (
    "shipped defaults: urgency=lexical (tasks without a TUF only), length_predictor off, overrun=continue, "
    "token_budget=whole, kv_policy=evict (furthest, host-first)",
    "overrun=kill passes the rule (never triggers at the published loads; frees the engine under overload) "
    "but changes what robots receive (EXPIRED instead of a late plan): opt in with planner_options",
    "token_budget=slack passes the rule on the simulated GPU profile; on the CPU llama.cpp engine 'whole' "
    "keeps the engine's own preemptible 16/64-token chunks, which slack's unlimited budget (no urgent "
    "decoder running) would replace: not measured there yet, so it stays opt-in",
)


@dataclasses.dataclass(frozen=True)
class Variant:
    """One configuration: planner options, KV options, chunked engine, TUF given or hidden."""

    name: str
    group: str
    off: str  # the variant it is compared with
    options: dict[str, Any] = dataclasses.field(default_factory=dict)
    kv: dict[str, str] | None = None
    chunked: bool = False
    hidden_tuf: bool = False
    tight: bool = False
    note: str = ""


VARIANTS: tuple[Variant, ...] = (
    Variant("base", "-", "base", note="the shipped defaults (PlannerOptions(); every measured option off)"),
    Variant(
        "urgency=lexical",
        "urgency",
        "base",
        {"urgency": "lexical"},
        hidden_tuf=True,
        note="TUF derived by the rule model",
    ),
    Variant(
        "urgency=llm",
        "urgency",
        "base",
        {"urgency": "llm"},
        hidden_tuf=True,
        note="TUF from the LLM probe (sim: the probe's cost; its answer is the true class)",
    ),
    Variant("length_predictor", "length_predictor", "base", {"length_predictor": True}),
    Variant(
        "length_predictor k=1.5", "length_predictor", "base", {"length_predictor": True, "pessimism": 1.5}
    ),
    Variant("overrun=kill", "overrun", "base", {"overrun": "kill"}),
    Variant("overrun=skip-next", "overrun", "base", {"overrun": "skip-next"}),
    Variant(
        "token_budget=fixed-64",
        "token_budget",
        "base",
        {"token_budget": "fixed", "prefill_chunk": 64},
        chunked=True,
    ),
    Variant("token_budget=slack", "token_budget", "base", {"token_budget": "slack"}, chunked=True),
    Variant("kv=evict (tight)", "kv", "kv=evict (tight)", tight=True, note="tight KV budget, current rule"),
    Variant("kv=keep", "kv", "kv=evict (tight)", kv={"policy": "keep"}, tight=True),
    Variant("kv=discard", "kv", "kv=evict (tight)", kv={"policy": "discard"}, tight=True),
    Variant("kv=swap", "kv", "kv=evict (tight)", kv={"policy": "swap"}, tight=True),
    Variant("kv=lamps", "kv", "kv=evict (tight)", kv={"policy": "lamps"}, tight=True),
    Variant("kv eviction=priority", "kv", "kv=evict (tight)", kv={"eviction": "priority"}, tight=True),
    Variant("kv reload=threshold", "kv", "kv=evict (tight)", kv={"reload": "threshold"}, tight=True),
)
BY_NAME = {v.name: v for v in VARIANTS}


# ----------------------------------------------------------------------------------- workloads
def mixed_tasks() -> list[TaskSpec]:
    """WID 2 plus the robot-arm sample's tasks that arrive within WID 2's span (renamed so ids and
    agents stay unique): urgent drone tasks meet ~1.3k-token FLTRNN prompts."""
    base = list(resolve_workload("wid2").tasks)
    end = max(t.arrival for t in base)
    arm = [
        dataclasses.replace(t, task_id=f"mix-{t.task_id}", agent_id=f"mix-{t.agent_id}")
        for t in resolve_workload("arm").tasks
        if t.arrival <= end
    ]
    return sorted(base + arm, key=lambda t: t.arrival)


def workload_tasks(spec: str) -> list[TaskSpec]:
    return mixed_tasks() if spec == "mix" else list(resolve_workload(spec).tasks)


def hide_tuf(tasks: list[TaskSpec]) -> list[TaskSpec]:
    """The tasks as a person would send them: no TUF; judged by the real one (``reference_tuf``),
    grouped by their real class."""
    return [
        dataclasses.replace(
            t,
            tuf=None,
            reference_tuf=t.tuf,
            task_class=t.task_class or (tuf_class(t.tuf) if t.tuf is not None else ""),
        )
        for t in tasks
    ]


# ----------------------------------------------------------------------------------- one run
def run_one(spec: str, name: str) -> dict[str, Any]:
    """Simulate ``spec`` under variant ``name``: per-class metrics and the engine/option counters."""
    v = BY_NAME[name]
    tasks = workload_tasks(spec)
    if v.hidden_tuf:
        tasks = hide_tuf(tasks)
    default = SimConfig().profile
    profile = default if isinstance(default, EngineProfile) else load_profile(default)
    if v.tight:
        profile = dataclasses.replace(
            profile, name=f"{profile.name}-kv{TIGHT_KV_TOKENS}", kv_capacity_tokens=TIGHT_KV_TOKENS
        )
    kv = KVOptions(**{"eviction": profile.eviction, **v.kv}) if v.kv else None
    cfg = SimConfig(
        policy=POLICY, profile=profile, options=PlannerOptions(**v.options), kv=kv, chunked_prefill=v.chunked
    )
    t0 = time.perf_counter()
    res = simulate(tasks, cfg)
    wall = time.perf_counter() - t0
    classes = {k: _clean(m.as_dict()) for k, m in summarize(res.records).items()}
    keep = ("busy_time", "prefill_tokens", "reprefill_tokens", "swap_out", "swap_in", "discard", "steps")
    stats = {k: res.stats.get(f"engine_{k}") for k in keep}
    stats.update(
        {
            k: val
            for k, val in res.stats.items()
            if k.startswith(("predictor_", "urgency_", "overrun_")) or k in ("expired", "failed")
        }
    )
    return {"workload": spec, "variant": name, "classes": classes, "stats": _clean(stats), "wall_s": wall}


def _clean(d: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(x, float) and not math.isfinite(x) else x) for k, x in d.items()}


# ----------------------------------------------------------------------------------- ablation
def pct(run: dict[str, Any], cls: str, key: str = "pct_beta") -> float | None:
    m = run["classes"].get(cls)
    return None if m is None else m.get(key)


def deltas(runs: dict[tuple[str, str], dict[str, Any]]) -> dict[str, dict[str, dict[str, float | None]]]:
    """Δ %Σβ (variant − its off state) per variant, workload and class."""
    out: dict[str, dict[str, dict[str, float | None]]] = {}
    for (spec, name), run in runs.items():
        off = runs.get((spec, BY_NAME[name].off))
        if off is None or name == BY_NAME[name].off:
            continue
        row = out.setdefault(name, {}).setdefault(spec, {})
        for cls in run["classes"]:
            a, b = pct(run, cls), pct(off, cls)
            row[cls] = None if a is None or b is None else a - b
    return out


def decide(name: str, d: dict[str, dict[str, float | None]]) -> tuple[bool, str]:
    """On by default only if it never costs more than :data:`TOLERANCE` points of a class's %Σβ
    on a low workload and helps on average (mean Δ of the 'all' class over every workload at least
    :data:`MIN_GAIN`). An urgency classifier cannot beat the TUF it replaces: it qualifies when it
    costs no more than the tolerance anywhere."""
    worst = min(
        (x for spec in LOW for c, x in d.get(spec, {}).items() if c != "all" and x is not None), default=0.0
    )
    if name in BY_NAME and BY_NAME[name].group == "urgency":
        worst_any = min(
            (x for row in d.values() for c, x in row.items() if c != "all" and x is not None), default=0.0
        )
        if worst_any < -TOLERANCE:
            return False, f"costs {-worst_any:.1f} points against the given TUF"
        return True, f"as good as the given TUF (worst {worst_any:+.2f})"
    gains = [g for g in (d[spec].get("all") for spec in d) if g is not None]
    mean = sum(gains) / len(gains) if gains else 0.0
    if worst < -TOLERANCE:
        return False, f"costs {-worst:.1f} points on a preset/sample"
    if mean < MIN_GAIN:
        return False, f"no gain on average ({mean:+.2f})"
    return True, f"helps ({mean:+.2f} on average, worst {worst:+.2f} on a preset/sample)"


def _fmt(x: float | None, plus: bool = True) -> str:
    if x is None:
        return "-"
    return f"{x:+.1f}" if plus else f"{x:.1f}"


def ablation_table(runs: dict[tuple[str, str], dict[str, Any]], specs: list[str]) -> str:
    """Rows: variants; per workload Δ urgent / Δ normal (or Δ arm) %Σβ vs the off state; then the
    engine busy time and re-prefilled tokens of the overload case, urgent response p99 of ``mix``."""
    d = deltas(runs)
    heads = [SHORT.get(s, s) for s in specs]
    lines = [
        "# Δ %Σβ (Eq. 1, unclamped) vs the option's off state, per workload: urgent/normal "
        "(arm: the arm class); busy = engine busy s, repre = re-prefilled tokens (overload); "
        "mix p99 = urgent response p99 s with FLTRNN prompts mixed in",
        "variant".ljust(26) + "".join(h.rjust(W) for h in heads) + "   busy  repre  mix p99  default",
    ]
    for v in VARIANTS:
        cells = []
        for s in specs:
            run = runs.get((s, v.name))
            if run is None:
                cells.append("-")
                continue
            if v.name == v.off:
                cls = [c for c in ("urgent", "normal", "arm") if c in run["classes"]]
                cells.append("/".join(_fmt(pct(run, c), plus=False) for c in cls))
                continue
            row = d.get(v.name, {}).get(s, {})
            cls = [c for c in ("urgent", "normal", "arm") if c in row]
            cells.append("/".join(_fmt(row[c]) for c in cls))
        ov = runs.get((HIGH[0], v.name), {}).get("stats", {})
        mix = runs.get(("mix", v.name))
        p99 = pct(mix, "urgent", "response_p99") if mix else None
        verdict = "" if v.name == v.off else ("on" if decide(v.name, d.get(v.name, {}))[0] else "off")
        lines.append(
            v.name.ljust(26)
            + "".join(c.rjust(W) for c in cells)
            + f"  {ov.get('busy_time') or 0:5.0f}  {ov.get('reprefill_tokens') or 0:5d}"
            + f"  {_fmt(p99, plus=False):>7}  {verdict:>7}"
        )
    lines.append("# off-state rows (base, kv=evict (tight)) show absolute %Σβ; the others Δ points")
    return "\n".join(lines)


def figure(runs: dict[tuple[str, str], dict[str, Any]], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    d = deltas(runs)
    names = [v.name for v in VARIANTS if v.name != v.off]
    fig, axes = plt.subplots(1, 2, figsize=(13, 5.5), sharey=True)
    for ax, (title, specs) in zip(axes, (("presets + public samples", LOW), ("overload + mix", HIGH))):
        for j, cls in enumerate(("urgent", "normal")):
            vals = []
            for n in names:
                xs = [
                    d.get(n, {}).get(s, {}).get(cls if cls in d.get(n, {}).get(s, {}) else "arm")
                    for s in specs
                ]
                present: list[float] = [x for x in xs if x is not None]
                vals.append(sum(present) / len(present) if present else 0.0)
            ax.barh([i + 0.4 * j for i in range(len(names))], vals, height=0.4, label=f"Δ {cls} %Σβ")
        ax.set_xscale("symlog", linthresh=1.0)  # a few points and thousands (kv=keep's stall) on one axis
        ax.axvline(0, color="k", lw=0.8)
        ax.axvline(-TOLERANCE, color="r", lw=0.6, ls="--")
        ax.set_title(f"mean Δ %Σβ vs off state (symlog): {title}")
        ax.set_yticks([i + 0.2 for i in range(len(names))])
        ax.set_yticklabels(names)
        ax.legend(loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ----------------------------------------------------------------------------------- the suite
def run_suite(
    out: Path,
    workers: int = 1,
    specs: list[str] | None = None,
    variants: list[str] | None = None,
    note: Callable[[str], None] | None = None,
) -> int:
    specs = list(specs or (*LOW, *HIGH))
    names = list(variants or [v.name for v in VARIANTS])
    for n in list(names):  # every variant needs its off state
        if BY_NAME[n].off not in names:
            names.insert(0, BY_NAME[n].off)
    jobs = [(s, n) for s in specs for n in dict.fromkeys(names)]
    say = note or (lambda m: print(m, file=sys.stderr))
    say(f"related suite: {len(jobs)} simulations ({len(specs)} workloads x {len(set(names))} variants)")
    runs: dict[tuple[str, str], dict[str, Any]] = {}
    if workers > 1:
        with ProcessPoolExecutor(workers) as pool:
            for r in pool.map(_run_job, jobs):
                runs[(r["workload"], r["variant"])] = r
    else:
        for j in jobs:
            r = _run_job(j)
            runs[(r["workload"], r["variant"])] = r
    out.mkdir(parents=True, exist_ok=True)
    d = deltas(runs)
    decisions = {n: dict(zip(("on", "why"), decide(n, d.get(n, {})))) for n in names if BY_NAME[n].off != n}
    text = ablation_table(runs, specs)
    text += "\n\n# decisions (on only where it helps and costs <= 1 point of a class on presets/samples)\n"
    text += "\n".join(f"{n:26s} {'on ' if x['on'] else 'off'}  {x['why']}" for n, x in decisions.items())
    text += "\n" + "\n".join(f"# {line}" for line in SHIPPED)
    text += "\n\n" + urgency_table()
    (out / "related.txt").write_text(text + "\n")
    doc = {
        "policy": POLICY,
        "tolerance_points": TOLERANCE,
        "tight_kv_tokens": TIGHT_KV_TOKENS,
        "variants": [dataclasses.asdict(v) for v in VARIANTS if v.name in names],
        "runs": list(runs.values()),
        "deltas": d,
        "decisions": decisions,
    }
    (out / "related.json").write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    figure(runs, out / "related.png")
    print(text)
    say(f"wrote {out / 'related.txt'}, {out / 'related.json'}, {out / 'related.png'}")
    return 0


def urgency_table() -> str:
    """The lexical classifier's accuracy and latency on the LRTrace texts and the labelled set (the
    LLM probe's: ``python -m timely_llm_ros.bench.urgency_bench --llm``, it needs the model)."""
    from timely_llm_ros.bench import urgency_bench as ub

    return ub.table([ub.measure_lexical(ub.all_items())])


def _run_job(job: tuple[str, str]) -> dict[str, Any]:
    return run_one(*job)
