"""``timely-llm``: one command-line entry point with subcommands (demo, bench, profile, ...).

Subcommands are registered in :data:`COMMANDS` by module path and imported only when chosen, so
that ``timely-llm --help`` and every other subcommand keep working when one subcommand's module
(or a heavy dependency of it: rclpy, an LLM engine) cannot be imported. Each module exposes::

    def add_arguments(parser: argparse.ArgumentParser) -> None
    def run(args: argparse.Namespace) -> int
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence
from types import ModuleType

from timely_llm_ros import __version__

PROG = "timely-llm"

# name -> (module path, one-line help). Add a subcommand by adding a line here.
COMMANDS: dict[str, tuple[str, str]] = {
    "demo": (
        "timely_llm_ros.demo",
        "the main job: a ROS 2 fleet planned by the embedded LLM, live progress, summary, timeline",
    ),
    "bench": ("timely_llm_ros.bench.cli", "run the scheduling benchmarks on the simulator"),
    "profile": ("timely_llm_ros.bench.profile_cli", "measure an LLM engine's speed and fit its profile"),
    "realbench": (
        "timely_llm_ros.bench.realbench",
        "policies side by side on a real engine (llamacpp, vllm) vs the simulator's prediction",
    ),
    "gpucheck": (
        "timely_llm_ros.bench.gpucheck",
        "measure a GPU machine (vLLM tests, 8B-shaped bench, realbench) against the GPU goals",
    ),
    "bench-replicas": (
        "timely_llm_ros.bench.replicas",
        "replica scaling on the simulator; a real multi-server run next to its prediction",
    ),
    "fleet": (
        "timely_llm_ros.fleet",
        "start a fleet's node graph (planner, robots, time model, recorder, workload) from one YAML",
    ),
    "timeline": (
        "timely_llm_ros.viz.timeline",
        "plot a recorded run's timeline from a bag (PNG, SVG or HTML)",
    ),
    "report": ("timely_llm_ros.viz.report", "metrics tables and bar charts of a recorded run (bag)"),
    "security": (
        "timely_llm_ros.security_cli",
        "secure fleet (SROS2): write the fleet's access-control policy, create keystore + enclaves",
    ),
    "record": ("timely_llm_ros.nodes.recorder", "record an LRTrace bag (rosbag2, MCAP) from a running fleet"),
    "replay": ("timely_llm_ros.nodes.replay", "republish a recorded bag's topics with the original timing"),
    "skills": (
        "timely_llm_ros.skills_cli",
        "check a skill-set file (schema, grammar, examples, mappings); list skill sets",
    ),
    "tello-emulator": ("timely_llm_ros.robots.tello_emulator", "run a Tello SDK emulator over UDP for tests"),
    "rqt-timeline": (
        "timely_llm_ros.viz.standalone",
        "live timeline window (ROS 2 /trace_events, or --bag replay)",
    ),
}


class CommandUnavailable(RuntimeError):
    """The chosen subcommand's module cannot be loaded; the message says which module and why."""


def load_command(name: str, commands: dict[str, tuple[str, str]] | None = None) -> ModuleType:
    """Import the module of subcommand ``name`` and check that it has the required functions."""
    table = COMMANDS if commands is None else commands
    module_path, _ = table[name]
    try:
        module = importlib.import_module(module_path)
    except ModuleNotFoundError as exc:
        if exc.name and (module_path == exc.name or module_path.startswith(exc.name + ".")):
            raise CommandUnavailable(
                f"subcommand '{name}' is not available: module {module_path} "
                "does not exist in this installation"
            ) from exc
        raise CommandUnavailable(
            f"subcommand '{name}' is not available: importing {module_path} "
            f"needs the missing module '{exc.name}'"
        ) from exc
    except Exception as exc:  # any import-time failure of that one module
        raise CommandUnavailable(
            f"subcommand '{name}' is not available: importing {module_path} "
            f"failed with {type(exc).__name__}: {exc}"
        ) from exc
    missing = [fn for fn in ("add_arguments", "run") if not callable(getattr(module, fn, None))]
    if missing:
        raise CommandUnavailable(
            f"subcommand '{name}' is broken: {module_path} does not define "
            + " and ".join(f"{fn}()" for fn in missing)
        )
    return module


def _chosen(argv: Sequence[str], commands: dict[str, tuple[str, str]]) -> str | None:
    """The subcommand named in ``argv`` (the first argument that is not an option), if any."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in commands else None
    return None


def main(argv: Sequence[str] | None = None, commands: dict[str, tuple[str, str]] | None = None) -> int:
    """Parse ``argv`` (default: ``sys.argv[1:]``), run the subcommand and return its exit status."""
    args_in = list(sys.argv[1:] if argv is None else argv)
    table = COMMANDS if commands is None else commands
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="TimelyLLM for ROS 2: segmented, time-utility-aware LLM planning for robot fleets.",
    )
    parser.add_argument("--version", action="version", version=f"{PROG} {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    chosen = _chosen(args_in, table)
    module = None
    for name, (_, help_text) in table.items():
        sub_parser = sub.add_parser(name, help=help_text, description=help_text)
        if name == chosen:
            try:
                module = load_command(name, table)
            except CommandUnavailable as exc:
                print(f"{PROG}: error: {exc}", file=sys.stderr)
                return 2
            module.add_arguments(sub_parser)
    args = parser.parse_args(args_in)
    if module is None:  # argparse exits on unknown commands; this guards a table/parser mismatch
        parser.error(f"unknown command {args.command!r}")
    try:
        return int(module.run(args) or 0)
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
