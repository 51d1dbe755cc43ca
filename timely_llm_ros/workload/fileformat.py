"""Workload files and the ``--workload`` argument.

Our own workload files are YAML or JSON (JSON is YAML), hand-writable, and hold either a
composer spec or an explicit task list::

    name: my-workload                # optional; default: the file name
    description: free text           # optional
    composer:                        # a Poisson workload, see composer.ComposerSpec
      rate: 0.25                     # events/s
      max_tpe: 8
      traces: [1, 2, 3, 4, 5, 6, 7, 8]   # or "1-8"
      agents: 25
      duration: 260
      seed: 1

    tasks:                           # ... or explicit tasks
      - {trace: 6, arrival: 0.5, agent: r1}          # a benchmark task (Table 2 id)
      - trace: 1                                      # with overrides
        arrival: 0.7
        agent: r2
        tuf: [2, 0.2, 0.5]           # [Umax, ERT, t_zero]
      - {trace: 6, arrival: 0.9, agent: r4, tuf: auto}  # no TUF: the planner derives one (option urgency)
      - arrival: 1.0                 # a custom task (no trace): all of these are required
        agent: r3
        robot_type: drone
        skill_set: tello_minispec
        instruction: "[A] Go up 50 cm."
        plan: "mu(50);"
        exec_times: [[mu, 2.5]]
        tuf: [1, 1, 1.5]
        class: normal                # optional metric group (default: from the TUF)

A JSON file whose top level is a *list* is the public TimelyLLM format (importer.py).

``--workload`` accepts a preset name (any ``config/workloads/<name>.yaml``: wid1, wid2, wid3),
``sample1`` / ``sample2`` / ``arm`` for the three public TimelyLLM traces (shipped in the package,
``timely_llm_ros/data/timelyllm``, CC BY 4.0; ``$TIMELY_LLM_DATA`` names another copy), or a path. Composer workloads take
overrides after a colon: ``wid2:agents=84,rate=0.5`` or ``wid1:seed=7,traces=6-8``; task lists and
the public samples take ``compress`` and ``unique_agents`` (``sample1:compress=0.5,unique_agents=true``).
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.paths import config_files
from timely_llm_ros.core.schema import problems as schema_problems
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.workload.composer import (
    ComposerSpec,
    Composition,
    SkippedTask,
    compose,
    reshape_tasks,
)
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.importer import import_public_entries
from timely_llm_ros.workload.tasks import (
    TaskCatalog,
    load_catalog,
    parse_exec_times,
    parse_public_tuf,
)

PUBLIC_SAMPLES = {
    "sample1": "data_sample_1.json",
    "sample2": "data_sample_2.json",
    "arm": "data_sample_robotarm_fltrnn.json",
}
DATA_ENV = "TIMELY_LLM_DATA"
_ANY_TUF = TUF(ert=1.0, alpha=-1.0, beta=1.0)  # stands in for a TUF the planner derives later
_TASK_KEYS = {
    "trace",
    "arrival",
    "agent",
    "task_id",
    "tuf",
    "skill_set",
    "robot_type",
    "instruction",
    "scene",
    "plan",
    "exec_times",
    "class",
    "max_tokens",
}


@dataclass
class Workload:
    """A resolved workload: tasks in arrival order plus where they came from."""

    name: str
    source: str
    kind: str  # "composed" | "public" | "list"
    tasks: list[TaskSpec]
    description: str = ""
    composition: Composition | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def skipped(self) -> list[SkippedTask]:
        return self.composition.skipped if self.composition else []

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary (the bench results file embeds it)."""
        out: dict[str, Any] = {
            "name": self.name,
            "source": self.source,
            "kind": self.kind,
            "description": self.description,
            "tasks": len(self.tasks),
            "agents": len({t.agent_id for t in self.tasks}),
            "skipped": len(self.skipped),
        }
        if self.tasks:
            out["first_arrival"] = min(t.arrival for t in self.tasks)
            out["last_arrival"] = max(t.arrival for t in self.tasks)
        if self.composition is not None:
            out["composer"] = self.composition.summary()["spec"]
            out["events"] = self.composition.events
        out.update(self.meta)
        return out


PACKAGED_DATA = Path(__file__).resolve().parents[1] / "data" / "timelyllm"


def data_dir() -> Path:
    """Directory of the public TimelyLLM traces.

    The copies shipped inside the Python package (installed with it by pip, CMake and colcon, so a
    clone and an installed package both have them; attribution and licence in that folder's
    README.md and DATA_LICENSE), unless ``$TIMELY_LLM_DATA`` names another directory."""
    override = os.environ.get(DATA_ENV)
    if override:
        return Path(override)
    return PACKAGED_DATA


def presets() -> list[str]:
    """Names of the workload presets shipped in ``config/workloads``."""
    try:
        return sorted(config_files("workloads"))
    except FileNotFoundError:
        return []


def _read_structured(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(str(path), f"cannot read workload file: {exc.strerror or exc}") from None
    if path.suffix.lower() == ".json":
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise WorkloadError(
                str(path), f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
            ) from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(str(path), f"not valid YAML: {exc}") from None


def _task_from_mapping(item: Any, index: int, source: str, catalog: TaskCatalog) -> TaskSpec:
    entry = f"task {index}"
    if not isinstance(item, dict):
        raise WorkloadError(source, f"expected a mapping, got {item!r}", entry=entry)
    unknown = sorted(set(item) - _TASK_KEYS)
    if unknown:
        raise WorkloadError(source, f"unknown key(s) {unknown}; known: {sorted(_TASK_KEYS)}", entry=entry)
    for name in ("arrival", "agent"):
        if name not in item:
            raise WorkloadError(source, "missing", entry=entry, field=name)
    arrival = item["arrival"]
    if isinstance(arrival, bool) or not isinstance(arrival, (int, float)) or not math.isfinite(arrival):
        raise WorkloadError(
            source, f"expected a finite number, got {arrival!r}", entry=entry, field="arrival"
        )
    if arrival < 0:
        raise WorkloadError(source, f"negative value {arrival}", entry=entry, field="arrival")
    agent = item["agent"]
    if isinstance(agent, bool) or not isinstance(agent, (int, str)) or not str(agent).strip():
        raise WorkloadError(
            source, f"expected an integer or a name, got {agent!r}", entry=entry, field="agent"
        )
    task_id = str(item.get("task_id", index))
    # ``tuf: auto``: the task comes without a TUF (a person speaking to a robot); the planner derives
    # one from the instruction (planner option ``urgency``). A trace task is still judged by its trace
    # TUF (``reference_tuf``), any other task by the TUF the planner derives.
    auto_tuf = item.get("tuf") == "auto"
    tuf = parse_public_tuf(source, entry, item["tuf"]) if "tuf" in item and not auto_tuf else None
    exec_times = (
        list(parse_exec_times(source, entry, item["exec_times"], "exec_times"))
        if "exec_times" in item
        else None
    )
    for name in ("skill_set", "robot_type", "instruction", "scene", "plan", "class"):
        if name in item and not isinstance(item[name], str):
            raise WorkloadError(source, f"expected a string, got {item[name]!r}", entry=entry, field=name)
    if "trace" in item:
        trace = item["trace"]
        if isinstance(trace, bool) or not isinstance(trace, int) or trace not in catalog.tasks:
            raise WorkloadError(
                source,
                f"unknown trace id {trace!r}; known: {sorted(catalog.tasks)}",
                entry=entry,
                field="trace",
            )
        bench = catalog.get(trace)
        try:
            variant = bench.variant(item.get("skill_set"))
        except KeyError as exc:
            raise WorkloadError(source, str(exc.args[0]), entry=entry, field="skill_set") from None
        spec = bench.to_spec(
            task_id=task_id,
            agent_id=str(agent),
            arrival=float(arrival),
            variant=variant,
            tuf=tuf,
            exec_times=exec_times,
            scene=item.get("scene"),
            instruction=item.get("instruction"),
            plan=item.get("plan"),
        )
    else:
        for name in ("robot_type", "skill_set", "instruction", "plan", "exec_times", "tuf"):
            if name not in item:
                raise WorkloadError(
                    source, "missing (required for a task without 'trace')", entry=entry, field=name
                )
        spec = TaskSpec(
            task_id=task_id,
            agent_id=str(agent),
            robot_type=item["robot_type"],
            skill_set=item["skill_set"],
            instruction=item["instruction"],
            scene=item.get("scene", ""),
            tuf=tuf,
            arrival=float(arrival),
            reference_plan=item["plan"],
            exec_times=exec_times or [],
        )
    if "class" in item:
        spec.task_class = item["class"]
    if "max_tokens" in item:
        spec.max_tokens = item["max_tokens"]
    try:
        # a custom ``tuf: auto`` task has no TUF to check yet; every other field is checked
        (dataclasses.replace(spec, tuf=_ANY_TUF) if spec.tuf is None else spec).validate()
    except ValueError as exc:
        raise WorkloadError(source, str(exc), entry=entry) from None
    if auto_tuf:
        spec.reference_tuf, spec.tuf = spec.tuf, None
    return spec


def workload_from_data(
    data: Any,
    source: str,
    *,
    name: str | None = None,
    overrides: dict[str, Any] | None = None,
    catalog: TaskCatalog | None = None,
) -> Workload:
    """Build a workload from parsed file content (any of the three formats)."""
    catalog = catalog or load_catalog()
    default_name = name or Path(source).stem
    if isinstance(data, list):
        tasks = import_public_entries(data, source, catalog)
        if overrides:
            tasks = reshape_tasks(_ordered(tasks), overrides, source)
        return Workload(
            name=default_name + _suffix(overrides), source=source, kind="public", tasks=_ordered(tasks)
        )
    if not isinstance(data, dict):
        raise WorkloadError(
            source, "expected a mapping with 'composer' or 'tasks', or a list in the public format"
        )
    found = schema_problems(data, "workload")  # structure (config/schema/workload.schema.json)
    if found:
        raise WorkloadError(source, found[0] + (f" (and {len(found) - 1} more)" if len(found) > 1 else ""))
    unknown = sorted(set(data) - {"name", "description", "composer", "tasks"})
    if unknown:
        raise WorkloadError(
            source, f"unknown top-level key(s) {unknown}; known: composer, tasks, name, description"
        )
    if ("composer" in data) == ("tasks" in data):
        raise WorkloadError(source, "a workload file needs exactly one of 'composer' or 'tasks'")
    wl_name = str(data.get("name") or default_name)
    description = str(data.get("description") or "")
    if "composer" in data:
        raw = data["composer"]
        if overrides:
            if not isinstance(raw, dict):
                raise WorkloadError(source, "expected a mapping", entry="composer")
            raw = {**raw, **overrides}
            wl_name = wl_name + _suffix(overrides)
        spec = ComposerSpec.from_mapping(raw, source)
        composition = compose(spec, catalog, source)
        return Workload(
            name=wl_name,
            source=source,
            kind="composed",
            tasks=composition.tasks,
            description=description,
            composition=composition,
        )
    items = data["tasks"]
    if not isinstance(items, list) or not items:
        raise WorkloadError(source, "expected a non-empty list", field="tasks")
    tasks = [_task_from_mapping(item, i, source, catalog) for i, item in enumerate(items)]
    ids = [t.task_id for t in tasks]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise WorkloadError(source, f"duplicate task_id(s) {duplicates}", field="tasks")
    if overrides:
        tasks = reshape_tasks(_ordered(tasks), overrides, source)
    return Workload(
        name=wl_name + _suffix(overrides),
        source=source,
        kind="list",
        tasks=_ordered(tasks),
        description=description,
    )


def _suffix(overrides: dict[str, Any] | None) -> str:
    """``:key=value,...`` naming the overrides (empty without any)."""
    if not overrides:
        return ""
    return ":" + ",".join(f"{k}={_fmt(v)}" for k, v in overrides.items())


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return "|".join(str(v) for v in value)
    return str(value)


def _ordered(tasks: list[TaskSpec]) -> list[TaskSpec]:
    # Stable: tasks with equal arrival keep file order.
    return sorted(tasks, key=lambda t: t.arrival)


def load_workload_file(
    path: str | Path, *, overrides: dict[str, Any] | None = None, catalog: TaskCatalog | None = None
) -> Workload:
    """Load one workload file (our YAML/JSON format or the public JSON list)."""
    path = Path(path)
    return workload_from_data(_read_structured(path), str(path), overrides=overrides, catalog=catalog)


def parse_overrides(text: str, source: str) -> dict[str, Any]:
    """``"agents=84,rate=0.5,traces=1,3,5"`` -> dict (commas inside a value are allowed)."""
    out: dict[str, Any] = {}
    for part in re.split(r",(?=\s*[A-Za-z_]\w*\s*=)", text):
        if not part.strip():
            continue
        key, sep, value = part.partition("=")
        key = key.strip()
        if not sep or not re.fullmatch(r"[A-Za-z_]\w*", key):
            raise WorkloadError(source, f"bad override {part!r} (write key=value, e.g. agents=84)")
        try:
            parsed = yaml.safe_load(value)
        except yaml.YAMLError:
            parsed = value.strip()
        if key == "traces" and not isinstance(parsed, list):
            parsed = str(value)
        out[key] = parsed
    return out


def resolve_workload(arg: str, catalog: TaskCatalog | None = None) -> Workload:
    """Resolve a ``--workload`` argument (see the module docstring)."""
    if not isinstance(arg, str) or not arg.strip():
        raise WorkloadError("<--workload>", "empty workload argument")
    arg = arg.strip()
    path = Path(arg)
    if path.exists():
        return load_workload_file(path, catalog=catalog)
    base, sep, rest = arg.partition(":")
    overrides = parse_overrides(rest, f"<{arg}>") if sep else None
    if base in PUBLIC_SAMPLES:
        sample = data_dir() / PUBLIC_SAMPLES[base]
        if not sample.is_file():
            raise WorkloadError(
                str(sample),
                f"public sample {base!r} not found in {sample.parent}"
                + (f" (${DATA_ENV} is set)" if os.environ.get(DATA_ENV) else " (the package is incomplete)")
                + f"; set ${DATA_ENV} to a directory holding {PUBLIC_SAMPLES[base]}",
            )
        workload = load_workload_file(sample, overrides=overrides, catalog=catalog)
        workload.name = base + _suffix(overrides)
        return workload
    preset = config_files("workloads").get(base)
    if preset is not None:
        return load_workload_file(preset, overrides=overrides, catalog=catalog)
    if sep and Path(base).exists():
        return load_workload_file(Path(base), overrides=overrides, catalog=catalog)
    raise WorkloadError(
        f"<{arg}>",
        f"no such workload: not a file, not a preset ({', '.join(presets()) or 'none found'}) "
        f"and not a public sample ({', '.join(PUBLIC_SAMPLES)})",
    )
