"""``timely-llm bench``: workloads x policies on the simulated engine -> tables, results.json, PNGs.

The foundation's ``timely_llm_ros/cli.py`` registers this module as the ``bench`` subcommand
(:func:`add_arguments`, :func:`run`); ``python -m timely_llm_ros.bench.cli`` runs it standalone.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.bench import runner as rn
from timely_llm_ros.bench.scenario_table import render as render_summary
from timely_llm_ros.bench.tables import TIME_NOTE, class_tables, overhead_tables
from timely_llm_ros.core.scheduler import UnknownPolicy, parse_policy, policy_names
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.fileformat import PUBLIC_SAMPLES, presets

DESCRIPTION = "Run workloads through scheduling policies on the simulated engine (virtual time)."

EPILOG = """\
modes (combine freely; runs shared between them are done once):
  --workload W [--workload W2 ...]   tables for each workload x each policy (default: wid1)
  --max-batch 4,8                    fixed maximum batch sizes: each policy P runs as P@b4, P@b8
  --sweep rate=0.1,0.25,0.5          composer parameter sweep on every --workload (load figure)
  --figure N                         the runs and PNG of the paper's Figure N (repeatable):
                                       5  utility/response/waiting per task type, WID1 (low load)
                                          and WID2 (high load)
                                       6  timeline of two tasks (a normal and an urgent one of the
                                          same event) under the first two policies, WID2
                                       7  mean utility vs max batch size 1-16, first two policies, WID2
                                       8  policies side by side per task class, WID1 and WID2
                                       9  robot-arm workload WID3 per task type
  --suite paper                      Figures 5-9 + all their tables + the overhead report
  --suite scenarios                  overload scenarios: public samples, presets, fleet (1-3x WID2
                                     agents and robots per event), event rate (one agent per task),
                                     batch caps 2-16, bursts (incl. bursty=10), compressed arrivals,
                                     urgent-heavy, overload at caps 4/6/8; a summary table against
                                     the best baseline with x edf-seg and an upper bound; load figures
  --suite related                    planner options beyond the paper (urgency, length predictor,
                                     overrun, token budget, KV handling) each against its off
                                     state: related.txt/json/png (--workers N runs N in parallel)
  --overhead                         segmentation (Table 4) and scheduling (Table 5) overhead

workloads: a preset (%(presets)s), a public TimelyLLM sample (%(samples)s; files
shipped with the package; $TIMELY_LLM_DATA names another copy), or a path to a workload file (YAML/JSON,
composer spec or task list; public JSON lists too). Composer workloads take overrides:
wid2:agents=84,rate=0.5  wid1:seed=7,traces=6-8.

output (in --out, default results/): results.json (options, workloads, every run's metrics per
task class and per task type; identical for identical inputs), tables.txt (the printed tables),
timing.json (wall-clock seconds per run), overhead.json, and the PNG figures.
Tables: one per task type per workload; %(note)s; n U<=0 = tasks with utility <= 0.
--seed seeds the simulator (sampled execution times); a composed workload's own seed is in its
file or given as an override (wid1:seed=7).
"""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the bench options to ``parser`` (used by the top-level ``timely-llm`` CLI)."""
    parser.formatter_class = argparse.RawDescriptionHelpFormatter
    if not parser.description:
        parser.description = DESCRIPTION
    parser.epilog = EPILOG % {
        "presets": ", ".join(presets()) or "none found",
        "samples": ", ".join(PUBLIC_SAMPLES),
        "note": TIME_NOTE,
    }
    parser.add_argument(
        "--workload",
        "-w",
        action="append",
        default=None,
        metavar="W",
        help="workload to run (repeatable; default wid1 unless --figure/--suite/--overhead)",
    )
    parser.add_argument(
        "--policies",
        "-p",
        default=",".join(rn.DEFAULT_POLICIES),
        metavar="P1,P2",
        help="comma-separated policies, optionally with a batch cap as name@bN (default: %(default)s)",
    )
    parser.add_argument(
        "--max-batch",
        default=None,
        metavar="N[,N...]",
        help="fixed maximum batch size(s) applied to every policy",
    )
    parser.add_argument(
        "--sweep",
        default=None,
        metavar="KEY=V1,V2,...",
        help="sweep one composer parameter of every --workload (e.g. rate=0.1,0.25,0.5)",
    )
    parser.add_argument(
        "--figure",
        action="append",
        choices=rn.FIGURES,
        default=None,
        help="reproduce one of the paper's figures 5-9 (repeatable)",
    )
    parser.add_argument(
        "--suite",
        choices=("paper", "scenarios", "related"),
        default=None,
        help="paper: figures 5-9 + overhead; scenarios: overload scenario set + summary; related: the "
        "planner options beyond the paper, each against its off state (ablation table + figure)",
    )
    parser.add_argument(
        "--overhead",
        action="store_true",
        help="segmentation and scheduling overhead report (paper Tables 4 and 5)",
    )
    parser.add_argument("--seed", type=int, default=0, help="simulator seed (default: %(default)s)")
    parser.add_argument("--workers", type=int, default=1, metavar="N",
                        help="--suite related: simulations run in parallel (default: %(default)s)")
    parser.add_argument(
        "--exec-mode",
        choices=("recorded", "min", "sampled"),
        default="recorded",
        help="robot execution times: the trace's recorded values, the time model's "
        "minimum, or samples from it (default: %(default)s)",
    )
    parser.add_argument(
        "--profile",
        default="llama3-8b-fp16-rtx4090",
        help="engine profile name (config/profiles) or YAML path (default: %(default)s)",
    )
    parser.add_argument(
        "--network-latency",
        type=float,
        default=0.008,
        help="planner-to-robot latency in seconds (default: %(default)s, paper §7.2)",
    )
    parser.add_argument(
        "--fig6-workload",
        default="wid2",
        metavar="W",
        help="workload of the Figure 6 timeline (default: %(default)s)",
    )
    parser.add_argument(
        "--fig6-tasks",
        default=None,
        metavar="ID,ID",
        help="task ids shown in Figure 6 (default: a normal and an urgent task of one event "
        "where the second policy misses the urgent ERT and the first does not)",
    )
    parser.add_argument(
        "--out", "-o", default="results", metavar="DIR", help="output directory (default: %(default)s)"
    )
    parser.add_argument(
        "--bag",
        metavar="DIR",
        help="also write each simulated run as a rosbag2 bag DIR/<workload>_<policy> (for timely-llm "
        "timeline / report / replay)",
    )
    parser.add_argument(
        "--figures",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="write PNG figures (default: yes)",
    )
    parser.add_argument(
        "--quiet",
        "-q",
        action="store_true",
        help="no progress bar and no notes on stderr; tables still go to stdout",
    )
    parser.add_argument(
        "--list", action="store_true", help="list presets, public samples and policies, then exit"
    )


# --------------------------------------------------------------------------------- helpers
def _csv(text: str) -> list[str]:
    return [part.strip() for part in text.split(",") if part.strip()]


def _batches(text: str | None) -> list[int | None]:
    if text is None:
        return [None]
    out = []
    for part in _csv(text):
        if not part.isdigit() or int(part) < 1:
            raise ValueError(f"--max-batch: {part!r} is not a positive integer")
        out.append(int(part))
    if not out:
        raise ValueError("--max-batch: no value given")
    return out


def _sweep(text: str | None) -> tuple[str, list[str]] | None:
    if text is None:
        return None
    key, sep, values = text.partition("=")
    key = key.strip()
    if not sep or not re.fullmatch(r"[a-z_]+", key) or not _csv(values):
        raise ValueError(f"--sweep: write KEY=V1,V2,... (e.g. rate=0.1,0.25), got {text!r}")
    if key == "traces":
        raise ValueError("--sweep: traces cannot be swept (commas separate the values)")
    return key, _csv(values)


def _with_override(workload: str, key: str, value: str) -> str:
    return f"{workload}{',' if ':' in workload else ':'}{key}={value}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9._=-]+", "_", text).strip("_") or "workload"


def _dedupe(jobs: list[rn.Job]) -> list[rn.Job]:
    seen: set[rn.Job] = set()
    out = []
    for job in jobs:
        if job not in seen:
            seen.add(job)
            out.append(job)
    return out


class _Notes:
    def __init__(self, quiet: bool):
        self.quiet = quiet

    def __call__(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr)


# --------------------------------------------------------------------------------- planning
def plan_jobs(args: argparse.Namespace, policies: list[str]) -> tuple[list[rn.Job], dict[str, Any]]:
    """All runs the arguments ask for, plus what the figure step needs to know about them."""
    figures = list(dict.fromkeys((args.figure or []) + (list(rn.FIGURES) if args.suite == "paper" else [])))
    batches = _batches(args.max_batch)
    sweep = _sweep(args.sweep)
    workloads = list(args.workload or [])
    if not workloads and not figures and not args.suite and not args.overhead:
        workloads = ["wid1"]
    jobs: list[rn.Job] = []
    explicit: list[str] = []  # workload specs of the explicit mode, in order
    sweeps: dict[str, list[tuple[str, str]]] = {}  # base workload -> [(value, spec)]
    for w in workloads:
        variants = [(None, w)] if sweep is None else [(v, _with_override(w, sweep[0], v)) for v in sweep[1]]
        if sweep is not None:
            sweeps[w] = [(v, spec) for v, spec in variants]
        for _, spec in variants:
            explicit.append(spec)
            jobs += [rn.Job(spec, rn.batch_policy(p, b)) for b in batches for p in policies]
    for fig in figures:
        if fig == "6":
            pair = policies[:2] if len(policies) >= 2 else ["timely", "vllm"]
            jobs += [rn.Job(args.fig6_workload, p) for p in pair]
        else:
            jobs += rn.figure_jobs(fig, policies)
    if args.suite == "scenarios":
        jobs += rn.scenario_jobs(policies)
    return _dedupe(jobs), {
        "figures": figures,
        "batches": batches,
        "sweep": sweep,
        "explicit": explicit,
        "sweeps": sweeps,
    }


# --------------------------------------------------------------------------------- figures
def _fig6_pick(runs: Sequence[rn.RunResult], chosen: str | None) -> list[Any]:
    """Records of the two tasks to show (same task ids in every run)."""
    first = {r.task_id: r for r in runs[0].records}
    if chosen:
        ids = _csv(chosen)
        missing = [i for i in ids if i not in first]
        if missing:
            raise ValueError(f"--fig6-tasks: no task {missing} in {runs[0].workload}")
        return ids
    other = {r.task_id: r for r in runs[-1].records}
    recs = sorted(first.values(), key=lambda r: r.arrival)
    fallback = None
    for i, urgent in enumerate(recs):
        if urgent.task_class != "urgent":
            continue
        for normal in recs[max(0, i - 16) : i + 16]:
            if normal.task_class == "urgent" or abs(normal.arrival - urgent.arrival) > 0.02:
                continue
            fallback = fallback or [normal.task_id, urgent.task_id]
            a, b = urgent.response_time, other[urgent.task_id].response_time
            if a <= urgent.tuf.ert < b:
                return [normal.task_id, urgent.task_id]
    return fallback or [r.task_id for r in recs[:2]]


def draw_figures(
    bench: rn.Bench,
    plan: dict[str, Any],
    policies: list[str],
    out: Path,
    fig6_tasks: str | None,
    fig6_workload: str,
) -> list[Path]:
    from timely_llm_ros.bench import figures as fg

    written: list[Path] = []

    def runs_of(spec: str, pols: Sequence[str]) -> list[rn.RunResult]:
        return [bench.runs[(spec, p)] for p in pols if (spec, p) in bench.runs]

    # Explicit mode: one workload and one batch setting -> policies per class and per task type;
    # several batch caps -> a batch-size sweep figure; --sweep -> a load figure (the per-variant
    # bar charts would only repeat what the sweep shows).
    for spec in plan["explicit"]:
        name = _slug(bench.workload(spec).name)
        if len(plan["batches"]) == 1 and not plan["sweeps"]:
            runs = runs_of(spec, [rn.batch_policy(p, plan["batches"][0]) for p in policies])
            written.append(fg.fig_policies(spec, runs, out / f"policies_{name}.png"))
            written.append(
                fg.fig_per_task_type([(spec, runs)], out / f"tasktypes_{name}.png", f"{spec}: per task type")
            )
        if len(plan["batches"]) > 1:
            series = {
                p: [(b, bench.runs[(spec, rn.batch_policy(p, b))]) for b in plan["batches"]] for p in policies
            }
            written.append(
                fg.fig_sweep(
                    series,
                    out / f"batch_sweep_{name}.png",
                    xlabel="max batch size",
                    title=bench.workload(spec).name,
                    class_keys=_load_keys(series),
                )
            )
    for variants in plan["sweeps"].values():
        base_name = _slug(bench.workload(variants[0][1]).name.split(":")[0])
        for b in plan["batches"]:
            series = {}
            for p in policies:
                pol = rn.batch_policy(p, b)
                series[pol] = [(float(yaml.safe_load(v)), bench.runs[(spec, pol)]) for v, spec in variants]
            name = f"sweep_{plan['sweep'][0]}_{base_name}" + (f"_b{b}" if b is not None else "")
            written.append(
                fg.fig_sweep(
                    series,
                    out / f"{name}.png",
                    xlabel=plan["sweep"][0],
                    title=f"{base_name}: % of Σβ vs {plan['sweep'][0]}",
                    class_keys=_load_keys(series),
                )
            )
    figs = plan["figures"]
    pair = policies[:2] if len(policies) >= 2 else ["timely", "vllm"]
    if "5" in figs:
        written.append(
            fg.fig_per_task_type(
                [("WID1 (LW)", runs_of("wid1", policies)), ("WID2 (HW)", runs_of("wid2", policies))],
                out / "fig5_task_types.png",
                "Figure 5: end-to-end performance per task type",
            )
        )
    if "6" in figs:
        runs = runs_of(fig6_workload, pair)
        ids = _fig6_pick(runs, fig6_tasks)
        panels = [
            (run.policy, run, [next(r for r in run.records if r.task_id == i) for i in ids]) for run in runs
        ]
        written.append(
            fg.fig_timeline(
                panels,
                out / "fig6_timeline.png",
                f"Figure 6: tasks {', '.join(ids)} of {fig6_workload} under {' and '.join(pair)}",
            )
        )
    if "7" in figs:
        series = {
            p: [(b, bench.runs[("wid2", rn.batch_policy(p, b))]) for b in rn.FIG7_BATCHES] for p in pair
        }
        written.append(
            fg.fig_sweep(
                series,
                out / "fig7_batch_size.png",
                xlabel="max batch size",
                title="Figure 7: WID2 utility vs max batch size",
                class_keys=(
                    ("all", "utility_mean_clamped"),
                    ("urgent", "utility_mean_clamped"),
                    ("normal", "utility_mean_clamped"),
                    ("all", "utility_mean"),
                ),
            )
        )
    if "8" in figs:
        for w in ("wid1", "wid2"):
            written.append(
                fg.fig_policies(
                    f"Figure 8: {w}",
                    runs_of(w, policies),
                    out / f"fig8_policies_{w}.png",
                    classes=("urgent", "normal", "all"),
                )
            )
    if "9" in figs:
        runs = runs_of("wid3", policies)
        written.append(
            fg.fig_per_task_type(
                [("WID3 robot arm", runs)], out / "fig9_arm.png", "Figure 9: robot-arm workload per task type"
            )
        )
    if plan.get("scenarios"):
        from timely_llm_ros.bench import scenarios as sc

        axes = (
            ("rate", [(r, sc.rate_spec(r), None) for r in sc.RATES], "events per second (WID2, one agent per task)"),
            ("agents", [(sc.WID2_AGENTS * f, sc.agents_spec(f), None) for f in sc.AGENT_FACTORS],
             "agents (WID2; robots per event scaled alike)"),
            ("batch", [(c, sc.batch_spec(), c) for c in sc.BATCH_CAPS], "max batch size (WID2, one agent per task)"),
        )
        for name, points, label in axes:
            series = {
                p: [(x, bench.runs[(s, sc.policy_for(p, c))]) for x, s, c in points
                    if (s, sc.policy_for(p, c)) in bench.runs]
                for p in policies
            }
            written.append(
                fg.fig_sweep(
                    series,
                    out / f"load_{name}.png",
                    xlabel=label,
                    title=f"% of Σβ vs load ({name})",
                    class_keys=_load_keys(series),
                )
            )
    return written


def _load_keys(series: dict[str, list[tuple[Any, rn.RunResult]]]) -> tuple[tuple[str, str], ...]:
    """Panels of a sweep figure: % of Σβ per class, unclamped (Eq. 1: the headline) and clamped at 0
    (readable when a few late tasks make the unclamped mean plunge)."""
    classes = {c for points in series.values() for _, run in points for c in run.classes}
    present = [c for c in ("urgent", "normal", "arm") if c in classes] or ["all"]
    return tuple((c, key) for key in ("pct_beta", "pct_beta_clamped") for c in present)


# --------------------------------------------------------------------------------- entry points
def _list() -> int:
    from timely_llm_ros.core.profile import available_profiles

    print("workload presets:  " + ", ".join(presets()))
    print("public samples:    " + ", ".join(PUBLIC_SAMPLES))
    print("policies:          " + ", ".join(policy_names()) + "  (append @bN for a fixed max batch)")
    print("engine profiles:   " + ", ".join(available_profiles()))
    return 0


def _write_bags(bench: rn.Bench, jobs: list, out: Path) -> list[Path]:
    """One bag per (workload, policy) run, named so that reruns never overwrite (the writer refuses)."""
    from timely_llm_ros.sim.simulator import SimResult
    from timely_llm_ros.lrtrace.simbag import write_sim_bag

    paths = []
    for job in jobs:
        run_ = bench.runs[(job.workload, job.policy)]
        wl = bench.workload(job.workload)
        name = re.sub(r"[^A-Za-z0-9_.@-]+", "_", f"{wl.name}_{job.policy}")
        result = SimResult(run_.records, run_.events, {**run_.stats, "policy": job.policy})
        paths.append(write_sim_bag(result, wl.tasks, out / name))
    return paths


def run(args: argparse.Namespace) -> int:
    """Execute the bench command; returns the process exit status (2 on bad input)."""
    if args.list:
        return _list()
    if args.suite == "related":
        from timely_llm_ros.bench.related import run_suite

        return run_suite(Path(args.out), workers=args.workers)
    note = _Notes(args.quiet)
    try:
        policies = _csv(args.policies)
        if not policies:
            raise ValueError("--policies: no policy given")
        for p in policies:
            parse_policy(p)
        jobs, plan = plan_jobs(args, policies)
        plan["scenarios"] = args.suite == "scenarios"
        options = rn.BenchOptions(
            policies=policies,
            seed=args.seed,
            exec_mode=args.exec_mode,
            profile=args.profile,
            network_latency=args.network_latency,
        )
        progress = rn.Progress(len(jobs), enabled=not args.quiet)
        bench = rn.Bench(options, progress)
        for spec in dict.fromkeys(job.workload for job in jobs):
            bench.workload(spec)  # resolve every workload first: bad input fails before any run
        out = Path(args.out)
        t_start = time.perf_counter()
        if jobs:
            note(f"running {len(jobs)} simulation(s) ...")
        for job in jobs:
            bench.run(job.workload, job.policy)
        progress.close()
        if args.bag:
            for path in _write_bags(bench, jobs, Path(args.bag)):
                note(f"wrote bag {path}")
    except (WorkloadError, UnknownPolicy, ValueError, OSError) as exc:  # OSError: e.g. --bag exists
        print(f"timely-llm bench: error: {exc}", file=sys.stderr)
        return 2

    text: list[str] = []
    for spec in dict.fromkeys(job.workload for job in jobs):
        wl = bench.workload(spec)
        d = wl.describe()
        line = f"# {wl.name}: {d['tasks']} tasks, {d['agents']} agents"
        if wl.composition is not None:
            line += f", {wl.composition.events} events, {d['skipped']} task(s) skipped (no free agent)"
        text.append(line)
        runs = [bench.runs[(spec, job.policy)] for job in jobs if job.workload == spec]
        failed = {r.policy: r.stats.get("failed", 0) for r in runs if r.stats.get("failed")}
        if failed:
            text.append(f"# failed tasks: {failed}")
        text.extend(class_tables(wl.name, runs))
        text.append("")
    extra: dict[str, Any] = {}
    if args.suite == "scenarios":
        note("computing the alone bounds ...")
        rows = _scenario_summary(bench, policies, options)
        extra["scenario_summary"] = rn.clean(rows)
        text.append(render_summary(rows))
        text.append("")
    if args.overhead or args.suite == "paper":
        note("measuring overheads ...")
        report = {"segmentation": rn.segmentation_overhead(options), "scheduling": rn.scheduling_overhead()}
        extra["overhead"] = report
        text.extend(overhead_tables(report))
        text.append("")
    if text:
        text.insert(0, f"# {TIME_NOTE}")
    print("\n".join(text))

    out.mkdir(parents=True, exist_ok=True)
    results = bench.results_json({k: v for k, v in extra.items() if k != "overhead"})
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    (out / "tables.txt").write_text("\n".join(text) + "\n")
    (out / "timing.json").write_text(
        json.dumps({"runs_s": bench.timing, "total_s": time.perf_counter() - t_start}, indent=1) + "\n"
    )
    if "overhead" in extra:
        (out / "overhead.json").write_text(json.dumps(extra["overhead"], indent=1) + "\n")
    if args.figures and jobs:
        try:
            import matplotlib  # noqa: F401  (optional dependency: the "plot" extra)
        except ImportError:
            print(
                "timely-llm bench: warning: matplotlib is not installed, no figures written "
                "(pip install 'timely_llm_ros[plot]' or pass --no-figures)",
                file=sys.stderr,
            )
            args.figures = False
    if args.figures and jobs:
        try:
            paths = draw_figures(bench, plan, policies, out, args.fig6_tasks, args.fig6_workload)
        except ValueError as exc:
            print(f"timely-llm bench: error: {exc}", file=sys.stderr)
            return 2
        for p in paths:
            note(f"figure: {p}")
    note(f"results: {out / 'results.json'} ({time.perf_counter() - t_start:.1f} s)")
    return 0


def _scenario_summary(bench: rn.Bench, policies: list[str], options: rn.BenchOptions) -> list[dict[str, Any]]:
    """Summary rows of the scenario suite (:mod:`.scenario_table`), bounds computed once per workload."""
    from timely_llm_ros.bench import scenarios as sc
    from timely_llm_ros.bench.bounds import class_bounds
    from timely_llm_ros.bench.scenario_table import summary_rows
    from timely_llm_ros.sim.simulator import SimConfig

    config = SimConfig(profile=options.profile, exec_mode=options.exec_mode,
                       network_latency=options.network_latency, seed=options.seed)
    bounds: dict[str, dict[str, dict[str, Any]]] = {}

    def bound_of(spec: str) -> dict[str, dict[str, Any]]:
        if spec not in bounds:
            bounds[spec] = class_bounds(bench.workload(spec).tasks, config)
        return bounds[spec]

    def classes_of(spec: str, policy: str) -> dict[str, Any] | None:
        run_ = bench.runs.get((spec, policy))
        return None if run_ is None else run_.classes

    return summary_rows(sc.SUITE, classes_of, bound_of, lambda spec: len(bench.workload(spec).skipped),
                        sc.policy_for, timely=policies[0] if policies[0].startswith("timely") else "timely")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="timely-llm bench", description=DESCRIPTION)
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
