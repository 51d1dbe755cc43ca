"""``timely-llm skills``: check a skill-set file before a fleet uses it, and list what is on the path.

``timely-llm skills check FILE`` validates the file against the skill-set JSON Schema and the
loader's own rules (the same code the planner and the robots run), prints the plan grammar the LLM
is constrained to (GBNF, :mod:`timely_llm_ros.core.grammar`) and every worked example parsed into
its skill calls, checks that the execution-time model of its robot type covers every skill, and —
when the file maps its skills for a backend (``backends: ros:``) — checks that mapping the way the
robot checks it at start-up. Exit status 0 when the file is usable, 1 when it is not (the message
names the file, the field and the reason).

``timely-llm skills list`` prints every skill set on the config search path with the file that
provides it (a user's overlay shadows the shipped file of the same name).

A FILE inside a ``skills/`` folder is checked with that config directory on the search path (its
``exec_time/`` next to it counts).

Both take ``--config-path DIR`` (repeatable): directories searched before the shipped config, like
``TIMELY_LLM_CONFIG``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--config-path",
        action="append",
        default=[],
        metavar="DIR",
        help="config directory searched before the shipped one (repeatable)",
    )
    sub = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    check = sub.add_parser("check", help="validate a skill-set file, print its grammar, parse its examples")
    check.add_argument("file", help="skill-set YAML file")
    check.add_argument("--no-grammar", action="store_true", help="do not print the GBNF grammar")
    sub.add_parser("list", help="skill sets on the config search path and where each comes from")


def _check(path: Path, show_grammar: bool, out) -> int:
    from timely_llm_ros.core.exectime import ExecTimeError, load_exec_time_model
    from timely_llm_ros.core.grammar import GrammarError, build_gbnf
    from timely_llm_ros.core.skills.loader import load_skill_set_file, skill_list_text
    from timely_llm_ros.core.skills.model import SkillSetError
    from timely_llm_ros.robots.plugins import PluginError, check_backend

    try:
        sset = load_skill_set_file(path)  # schema, fields, examples parse
    except SkillSetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    if path.stem != sset.name:
        print(
            f"error: {path}: field 'name' is {sset.name!r} but the file is {path.name}: the planner and "
            f"the robots look skill sets up by file name",
            file=sys.stderr,
        )
        return 1
    print(
        f"{path}: skill set {sset.name!r} for {sset.robot_type!r} robots, language {sset.language}, "
        f"{len(sset.skills)} skills",
        file=out,
    )
    print("\nskills (as the prompt lists them):\n" + skill_list_text(sset.skills), file=out)
    if show_grammar:
        try:
            gbnf = build_gbnf(sset)
        except GrammarError as exc:
            print(f"error: {path}: no grammar can be built: {exc}", file=sys.stderr)
            return 1
        print("\ngrammar (GBNF; the LLM's output is constrained to it):\n" + gbnf.rstrip(), file=out)
    print(f"\nexamples ({len(sset.examples)}, each parsed as a complete plan):", file=out)
    for ex in sset.examples:
        calls = sset.parse_plan(ex["plan"])
        shown = ", ".join(f"{c.name}{c.args!r}" + (f" x{c.repeat}" if c.repeat > 1 else "") for c in calls)
        print(f"  {ex['task']}\n    -> {ex['plan']}\n    calls: {shown or '(none)'}", file=out)
    problems = 0
    try:
        model = load_exec_time_model()
        known = model.skills(sset.robot_type) if sset.robot_type in model.robot_types() else set()
    except ExecTimeError as exc:
        print(f"error: execution-time models: {exc}", file=sys.stderr)
        return 1
    missing = sorted(sset.skill_names() - known)
    if missing:
        problems += 1
        print(
            f"error: no execution-time model for skill(s) {', '.join(missing)} of robot type "
            f"{sset.robot_type!r}: the planner cannot estimate these plans; add exec_time/"
            f"{sset.robot_type}.yaml to a config directory",
            file=sys.stderr,
        )
    else:
        print(f"\nexecution-time model: every skill of robot type {sset.robot_type!r} is covered", file=out)
    for backend in sorted(sset.backends):
        try:
            check_backend(backend, sset)
        except (ValueError, PluginError) as exc:
            problems += 1
            print(f"error: backend {backend!r}: {exc}", file=sys.stderr)
        else:
            print(f"backend {backend!r}: every skill is mapped and checked", file=out)
    if problems:
        return 1
    print("\nOK", file=out)
    return 0


def _list(out) -> int:
    from timely_llm_ros.core.paths import config_dirs, config_files

    print("config search path (first wins): " + ", ".join(str(d) for d in config_dirs()), file=out)
    for name, path in config_files("skills").items():
        print(f"  {name:24s} {path}", file=out)
    return 0


def run(args: argparse.Namespace) -> int:
    from timely_llm_ros.core.paths import ConfigPathError, extra_config_dirs

    dirs = list(args.config_path)
    path = Path(args.file) if args.action == "check" else None
    if path is not None and path.parent.name == "skills" and path.parent.parent.is_dir():
        dirs.append(path.parent.parent)  # a file in a config directory: its time models count too
    try:
        with extra_config_dirs(dirs):
            return _list(sys.stdout) if path is None else _check(path, not args.no_grammar, sys.stdout)
    except ConfigPathError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
