"""``timely-llm bench-replicas``: how urgent/normal %Σβ and response times scale with engine replicas.

Two parts:

1. **Simulated scaling** (always): WID 2 at 2× and 4× its event rate (0.5 and 1.0 events/s, agents
   scaled as in :func:`~.scenarios.rate_spec`) through one planner over 1, 2, 4 and 8 simulated
   replicas (:func:`~timely_llm_ros.engines.replicas.simulated_replicas`); the policy's maximum batch
   is ``8 × replicas`` (8 per replica, the reference model's). Placement and the one scheduler are
   the product's code (:class:`~timely_llm_ros.engines.replicas.ReplicaSetEngine`).
2. **Real vs predicted** (``--endpoints URL URL``): one workload run in wall time through
   :class:`~timely_llm_ros.core.planner.PlannerCore` on ``engine: openai`` over those servers, with the
   simulator's robots (:class:`~timely_llm_ros.core.robot_sim.RobotSim`, recorded execution times) —
   then the simulator predicts the *same* run: the same tasks and robots, as many simulated replicas,
   timed by ``--profile`` (default: the SmolLM2/llama.cpp CPU profile), each task emitting the plan
   the real model generated, tokenized by the real server (same token counts). TUFs are scaled by
   ``--tuf-scale`` (default 8: a CPU serves the paper's GPU deadlines 8× slower, see demo.py).

Writes ``replicas.json`` (every number) and ``replicas.png``; prints the tables.

    timely-llm bench-replicas --out results/replicas
    timely-llm bench-replicas --out results/real --skip-sim \\
        --endpoints http://127.0.0.1:8080 http://127.0.0.1:8081 --workload wid1:duration=30,rate=0.1
"""

from __future__ import annotations

import argparse
import dataclasses
import heapq
import json
import math
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from timely_llm_ros.bench import scenarios as sc
from timely_llm_ros.bench.runner import clean
from timely_llm_ros.core import events as ev
from timely_llm_ros.core.engine import Engine
from timely_llm_ros.core.exectime import load_exec_time_model
from timely_llm_ros.core.metrics import summarize
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import load_profile
from timely_llm_ros.core.robot_sim import RobotSim
from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.engines.replicas import simulated_replicas
from timely_llm_ros.sim.simulator import SimConfig, simulate

LOADS = (2, 4)  # × WID 2's event rate
REPLICAS = (1, 2, 4, 8)
BATCH_PER_REPLICA = 8
WID2_RATE = 0.25
CLASSES = ("urgent", "normal")
KEYS = ("pct_beta_clamped", "response_mean", "response_p99", "on_time_pct", "n_completed", "n_failed", "n")
CPU_PROFILE = "smollm2-135m-q4_1-cpu"


# ------------------------------------------------------------------------------ simulated scaling
def scaling(
    loads: tuple[int, ...] = LOADS,
    replicas: tuple[int, ...] = REPLICAS,
    policy: str = "timely",
    profile: str = "llama3-8b-fp16-rtx4090",
    seed: int = 0,
    log: Callable[[str], None] | None = None,
) -> list[dict[str, Any]]:
    """One row per (load, replicas): per-class metrics and where generations were placed."""
    rows = []
    for load in loads:
        scen = sc.from_spec(sc.rate_spec(WID2_RATE * load))
        for n in replicas:
            t0 = time.perf_counter()
            cfg = SimConfig(
                policy=f"{policy}@b{BATCH_PER_REPLICA * n}", profile=profile, replicas=n, seed=seed
            )
            res = simulate(scen.tasks, cfg)
            classes = {
                k: {m: v for m, v in metric.as_dict().items() if m in KEYS}
                for k, metric in summarize(res.records).items()
            }
            rows.append(
                {
                    "load": load,
                    "replicas": n,
                    "workload": scen.name,
                    "policy": cfg.policy,
                    "classes": clean(classes),
                    "placed": res.stats.get("engine_placed"),
                }
            )
            if log is not None:
                log(f"{load}x WID2, {n} replica(s): {time.perf_counter() - t0:.1f} s")
    return rows


def scaling_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'load':>5} {'repl':>4} | {'urgent %Σβ':>10} {'resp mean':>9} {'p99':>7} | "
        f"{'normal %Σβ':>10} {'resp mean':>9} {'p99':>7}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        cells = []
        for c in CLASSES:
            m = r["classes"].get(c, {})
            cells.append(
                f"{_f(m.get('pct_beta_clamped'), 1):>10} {_f(m.get('response_mean'), 3):>9} "
                f"{_f(m.get('response_p99'), 3):>7}"
            )
        lines.append(f"{str(r['load']) + 'x':>5} {r['replicas']:>4} | {cells[0]} | {cells[1]}")
    return "\n".join(lines)


def _f(v: Any, digits: int) -> str:
    return "-" if v is None or (isinstance(v, float) and not math.isfinite(v)) else f"{v:.{digits}f}"


# ------------------------------------------------------------------------------ real run
def run_realtime(
    tasks: list[TaskSpec],
    engine: Engine,
    policy: str,
    *,
    exec_mode: str = "recorded",
    network_latency: float = 0.008,
    seed: int = 0,
    timeout: float = 900.0,
    hook: Callable[[float, PlannerCore], None] | None = None,
    log: Callable[[str], None] | None = None,
) -> PlannerCore:
    """``tasks`` through :class:`PlannerCore` on a real ``engine`` in wall time, robots simulated.

    Arrivals are relative to the start. ``hook(elapsed, planner)`` runs before every scheduling point
    (fault injection). Stops when every task is terminal, or fails what is left after ``timeout``.
    """
    heap: list[tuple[float, int, int, Any]] = []  # payload: a TaskSpec (kind 0) or (task, seg, state)
    counter = 0

    def schedule(t: float, task_id: str, seg: int, state: str) -> None:
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (t, counter, 1, (task_id, seg, state)))

    robot = RobotSim(
        load_exec_time_model(), schedule, exec_mode=exec_mode, network_latency=network_latency, seed=seed
    )
    planner = PlannerCore(engine, policy, dispatch=robot.dispatch, network_latency=network_latency)
    t0 = engine.now()
    for spec in tasks:
        counter += 1
        heapq.heappush(
            heap, (t0 + spec.arrival, counter, 0, dataclasses.replace(spec, arrival=t0 + spec.arrival))
        )
    done_before = -1
    while True:
        now = engine.now()
        while heap and heap[0][0] <= now:
            _, _, kind, payload = heapq.heappop(heap)
            if kind == 0:
                try:
                    rec = planner.submit(payload)
                except TaskRejected:
                    continue
                robot.register(rec.task_id, payload.exec_times or [])
            else:
                task_id, seg, state = payload
                planner.on_feedback(task_id, seg, state, now)
        if hook is not None:
            hook(now - t0, planner)
        done = sum(r.state in ev.TERMINAL_STATES for r in planner.records)
        if log is not None and done != done_before:
            log(f"{now - t0:7.1f} s: {done}/{len(tasks)} tasks terminal")
            done_before = done
        if now - t0 > timeout:
            planner.abort_all(f"benchmark timeout after {timeout:g} s")
            break
        if planner.has_work() and planner.step():
            continue
        if not heap:
            if not planner.has_work():
                break
            time.sleep(0.02)
            continue
        time.sleep(max(0.0, min(0.05, heap[0][0] - engine.now())))
    return planner


class ServerTokenizer:
    """The real model's tokenization for the simulated engine: ``encode`` through the server, each id's
    text from the server (``/detokenize``), so predicted runs have the real token counts."""

    def __init__(self, engine: Any) -> None:
        self.engine = engine
        self._text: dict[int, str] = {}

    def encode(self, text: str) -> list[int]:
        return self.engine.tokenize(text)

    def token_text(self, token_id: int) -> str:
        if token_id not in self._text:
            from timely_llm_ros.engines.openai_http import call

            ep = self.engine.replicas[0].engine.endpoint
            ans: Any = call(ep, "POST", "/detokenize", {"tokens": [int(token_id)]})
            self._text[token_id] = str((ans or {}).get("content", ""))
        return self._text[token_id]


def warm_replicas(engine: Any, skill_sets: list[str]) -> dict[str, float]:
    """Prefill each skill prompt on every replica and slot (what the first admission would do)."""
    took = {}
    for name in skill_sets:
        for replica, seconds in engine.warm_prefix(
            engine.tokenize(load_skill_set(name).prompt), name
        ).items():
            took[f"{replica}:{name}"] = seconds
    return took


def real_vs_predicted(
    endpoints: list[str],
    workload: str,
    policy: str,
    profile: str,
    tuf_scale: float,
    engine_options: dict | None = None,
    timeout: float = 900.0,
    log: Callable[[str], None] | None = None,
) -> dict[str, Any]:
    """The real run over ``endpoints`` and the simulator's prediction of it (module docstring)."""
    from timely_llm_ros.engines.openai import OpenAIEngine

    wl = sc.from_spec(workload)
    tasks = [dataclasses.replace(t, tuf=t.tuf.scaled(tuf_scale) if t.tuf else None) for t in wl.tasks]
    engine = OpenAIEngine(endpoints=endpoints, **(engine_options or {}))
    pol = f"{policy}@b{BATCH_PER_REPLICA * len(endpoints)}"
    try:
        warm = warm_replicas(engine, sorted({t.skill_set for t in tasks}))
        if log is not None:
            log(f"warm-up: {', '.join(f'{k} {v:.1f} s' for k, v in warm.items())}")
        t0 = time.monotonic()
        planner = run_realtime(tasks, engine, pol, timeout=timeout, log=log)
        wall = time.monotonic() - t0
        real = planner.records
        # the prediction: the same tasks, each emitting the plan the real model wrote
        plans = {r.task_id: "".join(s.text for s in r.segments) for r in real}
        pred_tasks = [
            dataclasses.replace(t, reference_plan=plans.get(t.task_id) or t.reference_plan) for t in tasks
        ]
        prof = load_profile(profile)
        first: Any = engine.replicas[0].engine  # an OpenAIEndpointEngine
        slots = first.max_running or BATCH_PER_REPLICA
        cap = min(BATCH_PER_REPLICA, slots)
        prof = dataclasses.replace(prof, kv_capacity_tokens=max(prof.kv_capacity_tokens, first.capacity))
        tokenizer = ServerTokenizer(engine)

        def predict(profile_: Any) -> Any:
            sim_engine = simulated_replicas(profile_, len(endpoints), tokenizer)
            for r in getattr(sim_engine, "replicas", []):  # warm like the real ones
                r.prefixes.update(t.skill_set for t in tasks)
            return simulate(
                pred_tasks,
                SimConfig(
                    policy=f"{policy}@b{cap * len(endpoints)}", profile=profile_, replicas=len(endpoints)
                ),
                engine=sim_engine,
            )

        pred = predict(prof)
        measured = _measured(engine)
        out = {
            "workload": wl.name,
            "policy": pol,
            "tuf_scale": tuf_scale,
            "profile": profile,
            "endpoints": endpoints,
            "wall_s": wall,
            "warm_up_s": warm,
            "real": _classes(list(real)),
            "predicted": _classes(pred.records),
            "replica_status": engine.status(),
            "engine_stats": engine.stats,
            "resume_cache": _resume_cache(engine),
            # the speeds the engine measured from the streams (gaps between tokens, time to first token:
            # they include waiting behind other slots' prompts) next to what the profile assumes
            "measured_speed": {
                **{
                    r.name: {
                        "decode_tok_s_per_seq": r.engine.speed(),
                        "prefill_tok_s": r.engine.prefill_speed(),  # type: ignore[attr-defined]  # an OpenAIEndpointEngine
                    }
                    for r in engine.replicas
                },
                "mean": measured,
            },
            "profile_speed": {
                "decode_tok_s_per_seq": 1.0 / prof.decode_time(1, 1300),
                "prefill_tok_s": 1000 / prof.prefill_time(1000),
            },
            "tasks": [
                {
                    "task_id": r.task_id,
                    "class": r.task_class,
                    "state": r.state,
                    "reason": r.reason,
                    "response_real": r.response_time,
                    "response_pred": p.response_time,
                    "segments": len(r.segments),
                }
                for r, p in zip(real, pred.records)
            ],
        }
    finally:
        engine.close()
    return clean(out)


def _measured(engine: Any) -> dict[str, float | None]:
    def mean(what: str) -> float | None:
        vals = [v for v in (getattr(r.engine, what)() for r in engine.replicas) if v]
        return sum(vals) / len(vals) if vals else None

    return {"decode_tok_s_per_seq": mean("speed"), "prefill_tok_s": mean("prefill_speed")}


def _classes(records: list[Any]) -> dict[str, dict[str, Any]]:
    return {
        k: {m: v for m, v in metric.as_dict().items() if m in KEYS}
        for k, metric in summarize(records).items()
    }


def _resume_cache(engine: Any) -> dict[str, Any]:
    """How much of each resumed prompt the servers took from their cache."""
    recs = [x for r in engine.replicas for x in getattr(r.engine, "resume_log", [])]
    counted = [x for x in recs if x.cached_tokens is not None]
    recomputed = [x.prompt_tokens - x.cached_tokens for x in counted]
    return {
        "resumes": len(recs),
        "with_count": len(counted),
        "prompt_tokens_mean": _mean([x.prompt_tokens for x in counted]),
        "recomputed_mean": _mean(recomputed),
        "recomputed_max": max(recomputed) if recomputed else None,
    }


def _mean(values: list[float]) -> float:
    return sum(values) / len(values) if values else math.nan


def real_table(res: dict[str, Any]) -> str:
    head = f"{'class':>7} | {'real %Σβ':>8} {'pred':>6} | {'real resp':>9} {'pred':>6} | done/fail"
    lines = [head, "-" * len(head)]
    for c in (*CLASSES, "all"):
        r, p = res["real"].get(c), res["predicted"].get(c, {})
        if r is None:
            continue
        lines.append(
            f"{c:>7} | {_f(r.get('pct_beta_clamped'), 1):>8} {_f(p.get('pct_beta_clamped'), 1):>6} | "
            f"{_f(r.get('response_mean'), 2):>9} {_f(p.get('response_mean'), 2):>6} | "
            f"{r.get('n_completed')}/{r.get('n_failed')}"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------------------ figure, CLI
def plot(rows: list[dict[str, Any]], real: dict[str, Any] | None, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sim_cols = 2 if rows else 0
    ncols = sim_cols + (1 if real else 0)
    fig, axes = plt.subplots(2, ncols, figsize=(4.2 * ncols, 7), squeeze=False)
    loads = list(dict.fromkeys(r["load"] for r in rows))
    for j, c in enumerate(CLASSES if rows else ()):
        for load in loads:
            sel = [r for r in rows if r["load"] == load]
            xs = [r["replicas"] for r in sel]
            axes[0][j].plot(
                xs,
                [r["classes"].get(c, {}).get("pct_beta_clamped") for r in sel],
                "o-",
                label=f"{load}× WID 2",
            )
            axes[1][j].plot(
                xs, [r["classes"].get(c, {}).get("response_mean") for r in sel], "s-", label=f"{load}× WID 2"
            )
        axes[0][j].set_title(f"{c}: % of Σβ (simulated)")
        axes[1][j].set_title(f"{c}: mean response time (s)")
        for i in (0, 1):
            axes[i][j].set_xscale("log", base=2)
            axes[i][j].set_xticks(REPLICAS, [str(x) for x in REPLICAS])
            axes[i][j].set_xlabel("replicas")
            axes[i][j].grid(alpha=0.3)
            axes[i][j].legend(fontsize=8)
    if real:
        for i, key in enumerate(("pct_beta_clamped", "response_mean")):
            ax = axes[i][sim_cols]
            xs = list(range(len(CLASSES)))
            series = [
                ("real", f"real ({len(real['endpoints'])} servers)"),
                ("predicted", "simulated prediction"),
            ]
            for k, (name, label) in enumerate(series):
                data = real.get(name) or {}
                ax.bar(
                    [x + (k - 0.5) * 0.4 for x in xs],
                    [data.get(c, {}).get(key) or 0 for c in CLASSES],
                    0.4,
                    label=label,
                )
            ax.set_xticks(list(xs), list(CLASSES))
            ax.set_title(
                ("% of Σβ" if i == 0 else "mean response (s)") + f", {len(real['endpoints'])} replicas"
            )
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", type=Path, default=Path("results/replicas"), help="output directory")
    p.add_argument("--replicas", default=",".join(map(str, REPLICAS)), help="replica counts (simulated)")
    p.add_argument("--loads", default=",".join(map(str, LOADS)), help="multiples of WID 2's event rate")
    p.add_argument("--policy", default="timely")
    p.add_argument(
        "--profile", default="llama3-8b-fp16-rtx4090", help="engine profile of the simulated scaling"
    )
    p.add_argument("--skip-sim", action="store_true", help="only the real run")
    p.add_argument("--endpoints", nargs="*", default=[], help="real servers for the real-vs-predicted run")
    p.add_argument("--workload", default="wid1:duration=30,rate=0.1", help="workload of the real run")
    p.add_argument("--real-profile", default=CPU_PROFILE, help="profile of the prediction of the real run")
    p.add_argument("--tuf-scale", type=float, default=8.0, help="ERT scale of the real run (CPU vs GPU)")
    p.add_argument("--timeout", type=float, default=900.0, help="seconds the real run may take")


def run(args: argparse.Namespace) -> int:
    def log(msg: str) -> None:
        print(f"[bench-replicas] {msg}", file=sys.stderr, flush=True)

    try:
        reps = tuple(int(x) for x in args.replicas.split(","))
        loads = tuple(int(x) for x in args.loads.split(","))
    except ValueError:
        print("--replicas and --loads are comma-separated integers", file=sys.stderr)
        return 2
    args.out.mkdir(parents=True, exist_ok=True)
    result: dict[str, Any] = {"scaling": [], "real": None}
    if not args.skip_sim:
        result["scaling"] = scaling(loads, reps, args.policy, args.profile, log=log)
        print(
            f"Simulated replica scaling (policy {args.policy}, max batch 8 per replica, profile {args.profile})"
        )
        print(scaling_table(result["scaling"]))
    if args.endpoints:
        result["real"] = real_vs_predicted(
            args.endpoints,
            args.workload,
            args.policy,
            args.real_profile,
            args.tuf_scale,
            timeout=args.timeout,
            log=log,
        )
        print(
            f"\nReal run on {len(args.endpoints)} server(s) vs the simulator's prediction "
            f"({args.workload}, TUF x{args.tuf_scale:g}):"
        )
        print(real_table(result["real"]))
        print(f"resumed prompts taken from the servers' caches: {result['real']['resume_cache']}")
        print(
            f"measured speeds {result['real']['measured_speed']}; the profile assumes "
            f"{result['real']['profile_speed']}"
        )
    (args.out / "replicas.json").write_text(json.dumps(result, indent=1))
    if result["scaling"] or result["real"]:
        png = plot(result["scaling"], result["real"], args.out / "replicas.png")
        print(f"wrote {args.out / 'replicas.json'} and {png}")
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="timely-llm bench-replicas", description=__doc__.split("\n\n")[0])
    add_arguments(p)
    return run(p.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
