"""``timely-llm bench``: workloads x policies on the simulated engine -> tables, results.json, PNGs.

The foundation's ``timely_llm_ros/cli.py`` registers this module as the ``bench`` subcommand
(:func:`add_arguments`, :func:`run`); ``python -m timely_llm_ros.bench.cli`` runs it standalone.
What to run is decided by :class:`~.run_plan.RunPlan`, which figures to draw by
:mod:`.figure_registry`; this module parses, runs, prints and writes.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from timely_llm_ros.bench import runner as rn
from timely_llm_ros.bench.run_plan import RunPlan
from timely_llm_ros.bench.scenario_table import render as render_summary
from timely_llm_ros.bench.tables import TIME_NOTE, class_tables, overhead_tables
from timely_llm_ros.core.sched.policies import UnknownPolicy, policy_names
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
  --suite paper                      Figures 5-9 + all their tables + the overhead report + the
                                     claims table: each headline claim of the paper, ours beside it
                                     and the reason where they differ (bench.claims); also runs the
                                     paper's baselines as its code ran them (timely-paper, fcfs-requeue)
  --suite scenarios                  overload scenarios: public samples, presets, fleet (1-3x WID2
                                     agents and robots per event), event rate (one agent per task),
                                     batch caps 2-16, bursts (incl. bursty=10), compressed arrivals,
                                     urgent-heavy, overload at caps 4/6/8; a summary table against
                                     the best baseline with x edf-seg and the capacity bound
                                     (bench.bounds) with timely's share of it; load figures
  --suite stress                     bursty workloads never tuned on (4 bursty families x as composed,
                                     compressed x0.5 and x0.35, distinct or shared agents = 20) x
                                     caps 2-16: timely, the best baseline and the gap per row,
                                     unclamped and clamped, with the capacity bound;
                                     --workload-seeds 11,12 draws new ones
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
    _add_mode_arguments(parser)
    _add_simulation_arguments(parser)
    _add_output_arguments(parser)


def _add_mode_arguments(parser: argparse.ArgumentParser) -> None:
    """What to run: workloads, policies, batch caps, sweeps, figures, suites, overheads."""
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
        choices=("paper", "scenarios", "stress", "related"),
        default=None,
        help="paper: figures 5-9 + overhead; scenarios: overload scenario set + summary; stress: bursty "
        "workloads x caps 2-16 + summary; related: the planner options beyond the paper, each against "
        "its off state (ablation table + figure)",
    )
    parser.add_argument(
        "--workload-seeds",
        default=None,
        metavar="N[,N...]",
        help="--suite stress: compose every stress workload with these seeds instead of the presets' own",
    )
    parser.add_argument(
        "--overhead",
        action="store_true",
        help="segmentation and scheduling overhead report (paper Tables 4 and 5)",
    )


def _add_simulation_arguments(parser: argparse.ArgumentParser) -> None:
    """How the simulator runs: seed, workers, execution times, engine profile, latency, Figure 6."""
    parser.add_argument("--seed", type=int, default=0, help="simulator seed (default: %(default)s)")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        metavar="N",
        help="--suite related: simulations run in parallel (default: %(default)s)",
    )
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


def _add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """Where results go and what is shown."""
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


class _Notes:
    def __init__(self, quiet: bool):
        self.quiet = quiet

    def __call__(self, text: str) -> None:
        if not self.quiet:
            print(text, file=sys.stderr)


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
    from timely_llm_ros.lrtrace.simbag import write_sim_bag
    from timely_llm_ros.sim.simulator import SimResult

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
        plan = RunPlan.from_args(args)
        options = rn.BenchOptions(
            policies=plan.policies,
            seed=args.seed,
            exec_mode=args.exec_mode,
            profile=args.profile,
            network_latency=args.network_latency,
        )
        bench, t_start = _run_jobs(plan, options, args, note)
    except (WorkloadError, UnknownPolicy, ValueError, OSError) as exc:  # OSError: e.g. --bag exists
        print(f"timely-llm bench: error: {exc}", file=sys.stderr)
        return 2
    text, extra = _report(bench, plan, options, note)
    print("\n".join(text))
    out = Path(args.out)
    _write_results(out, bench, text, extra, time.perf_counter() - t_start)
    if args.figures and plan.jobs and not _can_plot():
        args.figures = False
    if args.figures and plan.jobs:
        from timely_llm_ros.bench.figure_registry import draw_figures

        try:
            paths = draw_figures(bench, plan, out)
        except ValueError as exc:
            print(f"timely-llm bench: error: {exc}", file=sys.stderr)
            return 2
        for p in paths:
            note(f"figure: {p}")
    note(f"results: {out / 'results.json'} ({time.perf_counter() - t_start:.1f} s)")
    return 0


def _run_jobs(
    plan: RunPlan, options: rn.BenchOptions, args: argparse.Namespace, note: _Notes
) -> tuple[rn.Bench, float]:
    """Every run of the plan (workloads resolved first: bad input fails before any run), and the bags;
    returns the bench and when the runs started (``time.perf_counter``)."""
    progress = rn.Progress(len(plan.jobs), enabled=not args.quiet)
    bench = rn.Bench(options, progress)
    for spec in plan.workloads():
        bench.workload(spec)
    t_start = time.perf_counter()
    if plan.jobs:
        note(f"running {len(plan.jobs)} simulation(s) ...")
    for job in plan.jobs:
        bench.run(job.workload, job.policy)
    progress.close()
    if args.bag:
        for path in _write_bags(bench, plan.jobs, Path(args.bag)):
            note(f"wrote bag {path}")
    return bench, t_start


def _workload_tables(bench: rn.Bench, plan: RunPlan, spec: str) -> list[str]:
    """The header line and the per-class tables of one workload."""
    wl = bench.workload(spec)
    d = wl.describe()
    line = f"# {wl.name}: {d['tasks']} tasks, {d['agents']} agents"
    if wl.composition is not None:
        line += f", {wl.composition.events} events, {d['skipped']} task(s) skipped (no free agent)"
    text = [line]
    runs = [bench.runs[(spec, job.policy)] for job in plan.jobs if job.workload == spec]
    failed = {r.policy: r.stats.get("failed", 0) for r in runs if r.stats.get("failed")}
    if failed:
        text.append(f"# failed tasks: {failed}")
    text.extend(class_tables(wl.name, runs))
    text.append("")
    return text


def _report(
    bench: rn.Bench, plan: RunPlan, options: rn.BenchOptions, note: _Notes
) -> tuple[list[str], dict[str, Any]]:
    """The printed tables (per workload, scenario summary, overheads) and the extra results."""
    text: list[str] = []
    for spec in plan.workloads():
        text.extend(_workload_tables(bench, plan, spec))
    extra: dict[str, Any] = {}
    if plan.scenarios:
        from timely_llm_ros.bench import scenarios as sc

        note("computing the capacity bounds ...")
        rows = _scenario_summary(bench, plan.policies, options, sc.SUITE)
        extra["scenario_summary"] = rn.clean(rows)
        text.append(render_summary(rows))
        text.append("")
    if plan.stress:
        from timely_llm_ros.bench import stress

        note("computing the capacity bounds ...")
        rows = _scenario_summary(bench, plan.policies, options, stress.suite(plan.stress_seeds))
        extra["stress_summary"] = rn.clean(rows)
        text.append(render_summary(rows, title="Stress summary"))
        text.append("")
    if plan.overhead:
        note("measuring overheads ...")
        report = {"segmentation": rn.segmentation_overhead(options), "scheduling": rn.scheduling_overhead()}
        extra["overhead"] = report
        text.extend(overhead_tables(report))
        text.append("")
    if plan.claims:
        from timely_llm_ros.bench.claims import claim_rows
        from timely_llm_ros.bench.claims import render as render_claims

        note("computing the claims table ...")
        rows = claim_rows(bench, extra.get("overhead"), _bound_fn(bench, options))
        extra["claims"] = rows
        text.append(render_claims(rows))
        text.append("")
    if text:
        text.insert(0, f"# {TIME_NOTE}")
    return text, extra


def _bound_fn(bench: rn.Bench, options: rn.BenchOptions) -> Callable[[str, int], dict[str, dict[str, Any]]]:
    """``bound_of(spec, cap)``: :func:`.bounds.class_bounds` of a workload under the bench's settings."""
    from timely_llm_ros.bench.bounds import class_bounds
    from timely_llm_ros.sim.simulator import SimConfig

    config = SimConfig(
        profile=options.profile,
        exec_mode=options.exec_mode,
        network_latency=options.network_latency,
        seed=options.seed,
    )
    return lambda spec, cap: class_bounds(bench.workload(spec).tasks, config, cap)


def _write_results(
    out: Path, bench: rn.Bench, text: list[str], extra: dict[str, Any], total_s: float
) -> None:
    """results.json, tables.txt, timing.json and (with the overhead report) overhead.json."""
    out.mkdir(parents=True, exist_ok=True)
    results = bench.results_json({k: v for k, v in extra.items() if k != "overhead"})
    (out / "results.json").write_text(json.dumps(results, indent=1, sort_keys=False) + "\n")
    (out / "tables.txt").write_text("\n".join(text) + "\n")
    (out / "timing.json").write_text(
        json.dumps({"runs_s": bench.timing, "total_s": total_s}, indent=1) + "\n"
    )
    if "overhead" in extra:
        (out / "overhead.json").write_text(json.dumps(extra["overhead"], indent=1) + "\n")


def _can_plot() -> bool:
    try:
        import matplotlib  # noqa: F401  (optional dependency: the "plot" extra)
    except ImportError:
        print(
            "timely-llm bench: warning: matplotlib is not installed, no figures written "
            "(pip install 'timely_llm_ros[plot]' or pass --no-figures)",
            file=sys.stderr,
        )
        return False
    return True


def _scenario_summary(
    bench: rn.Bench,
    policies: list[str],
    options: rn.BenchOptions,
    entries: Sequence[tuple[str, str, int | None]],
) -> list[dict[str, Any]]:
    """Summary rows of a suite's ``(group, spec, cap)`` entries (:mod:`.scenario_table`), bounds
    computed once per workload."""
    from timely_llm_ros.bench import scenarios as sc
    from timely_llm_ros.bench.bounds import class_bounds
    from timely_llm_ros.bench.missed import pin_reasons
    from timely_llm_ros.bench.scenario_table import summary_rows
    from timely_llm_ros.core.sched.admission import DEFAULT_MAX_BATCH
    from timely_llm_ros.sim.simulator import SimConfig

    config = SimConfig(
        profile=options.profile,
        exec_mode=options.exec_mode,
        network_latency=options.network_latency,
        seed=options.seed,
    )
    bounds: dict[tuple[str, int | None], dict[str, dict[str, Any]]] = {}

    def bound_of(spec: str, cap: int | None) -> dict[str, dict[str, Any]]:
        if (spec, cap) not in bounds:
            bounds[spec, cap] = class_bounds(bench.workload(spec).tasks, config, cap or DEFAULT_MAX_BATCH)
        return bounds[spec, cap]

    def classes_of(spec: str, policy: str) -> dict[str, Any] | None:
        run_ = bench.runs.get((spec, policy))
        return None if run_ is None else run_.classes

    def stats_of(spec: str, policy: str) -> dict[str, Any] | None:
        run_ = bench.runs.get((spec, policy))
        return None if run_ is None else run_.stats

    timely = policies[0] if policies[0].startswith("timely") else "timely"
    rows = summary_rows(
        entries,
        classes_of,
        bound_of,
        lambda spec: len(bench.workload(spec).skipped),
        sc.policy_for,
        timely=timely,
        stats_of=stats_of,
    )
    # why each "reachable but missed" urgent row misses (bench.missed: one urgent-only run per row)
    pin_reasons(rows, lambda spec: bench.workload(spec).tasks, config, sc.policy_for, timely)
    return rows


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="timely-llm bench", description=DESCRIPTION)
    add_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    return run(build_parser().parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
