"""Importer for the public TimelyLLM workload JSON (dataset/data_sample_*.json).

Format (the TimelyLLM artifact's ``dataset/`` files, shipped in ``timely_llm_ros/data/timelyllm``): a JSON list, one object per task::

    {"job_id": int, "trigger time": float s, "agent_id": int, "trace_id": int,
     "task_input": "Scene: [...] Task: [A|Q|E] ...", "exe_time_detail": [[skill, seconds], ...],
     "task_exe_time": float, "tuf": [Umax, ERT, t_zero]}

Arm files add ``"robot_type": "robotarm"`` and ``"robot_system": "fltrnn"``; drone files carry
neither (``drone``/``typefly``). The public ``trace_id`` is 0-based per (robot_type,
robot_system) and is mapped to a benchmark task through the ``public`` reference of the task
catalogue (config/tasks/lrtrace_tasks.yaml), whose reference plan becomes the plan the simulated
engine emits. A ``task_plan`` field (trace-set entries have one) overrides that plan.

Everything else comes from the entry itself, unchanged: arrival = trigger time, agent, TUF,
``exe_time_detail``, scene and instruction. So the imported workload reproduces the published
task count, arrival times, agents and TUFs exactly. Validation is strict: the first problem
raises one :class:`~timely_llm_ros.workload.errors.WorkloadError` naming the file, the entry
(index and job id) and the field.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.tasks import (
    TaskCatalog,
    load_catalog,
    parse_exec_times,
    parse_public_tuf,
    skill_sequence,
    split_task_input,
)

# Public files record execution times rounded to 4-6 decimals; the total must still add up.
EXEC_TOTAL_TOLERANCE_S = 0.01

REQUIRED_FIELDS = (
    "job_id",
    "trigger time",
    "agent_id",
    "trace_id",
    "task_input",
    "exe_time_detail",
    "task_exe_time",
    "tuf",
)


def _number(source: str, entry: str, item: dict, name: str, *, minimum: float | None = 0.0) -> float:
    value = item[name]
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise WorkloadError(source, f"expected a finite number, got {value!r}", entry=entry, field=name)
    if minimum is not None and value < minimum:
        raise WorkloadError(source, f"negative value {value}", entry=entry, field=name)
    return float(value)


def _integer(source: str, entry: str, item: dict, name: str) -> int:
    value = item[name]
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(source, f"expected an integer, got {value!r}", entry=entry, field=name)
    if value < 0:
        raise WorkloadError(source, f"negative value {value}", entry=entry, field=name)
    return value


def _entry_label(index: int, item: Any) -> str:
    if isinstance(item, dict) and "job_id" in item:
        return f"entry {index} (job_id {item['job_id']!r})"
    return f"entry {index}"


def import_public_entries(data: Any, source: str, catalog: TaskCatalog | None = None) -> list[TaskSpec]:
    """Validate parsed public-format JSON and convert it to TaskSpecs (in file order)."""
    catalog = catalog or load_catalog()
    if not isinstance(data, list):
        raise WorkloadError(source, f"expected a JSON list of task objects, got {type(data).__name__}")
    if not data:
        raise WorkloadError(source, "the workload holds no tasks")
    specs: list[TaskSpec] = []
    seen_jobs: dict[int, int] = {}
    for index, item in enumerate(data):
        entry = _entry_label(index, item)
        if not isinstance(item, dict):
            raise WorkloadError(source, f"expected an object, got {item!r}", entry=entry)
        for name in REQUIRED_FIELDS:
            if name not in item:
                raise WorkloadError(source, "missing", entry=entry, field=name)
        job_id = _integer(source, entry, item, "job_id")
        if job_id in seen_jobs:
            raise WorkloadError(
                source, f"duplicate job_id (also entry {seen_jobs[job_id]})", entry=entry, field="job_id"
            )
        seen_jobs[job_id] = index
        arrival = _number(source, entry, item, "trigger time")
        agent = item["agent_id"]
        if (
            isinstance(agent, bool)
            or not isinstance(agent, (int, str))
            or (isinstance(agent, str) and not agent.strip())
        ):
            raise WorkloadError(
                source, f"expected an integer or a name, got {agent!r}", entry=entry, field="agent_id"
            )
        if isinstance(agent, int) and agent < 0:
            raise WorkloadError(source, f"negative value {agent}", entry=entry, field="agent_id")
        trace = _integer(source, entry, item, "trace_id")
        task_input = item["task_input"]
        if not isinstance(task_input, str) or not task_input.strip():
            raise WorkloadError(
                source, f"expected a non-empty string, got {task_input!r}", entry=entry, field="task_input"
            )
        exec_times = parse_exec_times(source, entry, item["exe_time_detail"], "exe_time_detail")
        total = _number(source, entry, item, "task_exe_time")
        recorded = sum(seconds for _, seconds in exec_times)
        if abs(recorded - total) > EXEC_TOTAL_TOLERANCE_S:
            raise WorkloadError(
                source,
                f"{total} s differs from the sum of exe_time_detail ({recorded:.6f} s)",
                entry=entry,
                field="task_exe_time",
            )
        tuf = parse_public_tuf(source, entry, item["tuf"])
        robot_type = item.get("robot_type", "drone")
        robot_system = item.get("robot_system", "typefly")
        for name, value in (("robot_type", robot_type), ("robot_system", robot_system)):
            if not isinstance(value, str) or not value.strip():
                raise WorkloadError(
                    source, f"expected a non-empty string, got {value!r}", entry=entry, field=name
                )
        robot_system = robot_system.lower()
        try:
            bench, variant = catalog.by_public_trace(robot_type, robot_system, trace)
        except KeyError:
            known = catalog.public_trace_ids(robot_type, robot_system)
            raise WorkloadError(
                source,
                f"unknown trace id {trace} for {robot_type}/{robot_system} (known: {known or 'none'})",
                entry=entry,
                field="trace_id",
            ) from None
        plan = item.get("task_plan")
        if plan is not None and (not isinstance(plan, str) or not plan.strip()):
            raise WorkloadError(
                source, f"expected a non-empty string, got {plan!r}", entry=entry, field="task_plan"
            )
        if plan is None and skill_sequence(exec_times) != variant.skills:
            # The recorded times are attached to the reference plan's skills in order; a different
            # sequence would silently pair times with the wrong skills.
            raise WorkloadError(
                source,
                f"skills {skill_sequence(exec_times)} do not match trace {trace}'s reference plan "
                f"(task {bench.id}: {variant.skills}); add a task_plan to use another plan",
                entry=entry,
                field="exe_time_detail",
            )
        scene, instruction = split_task_input(task_input)
        specs.append(
            bench.to_spec(
                task_id=str(job_id),
                agent_id=str(agent),
                arrival=arrival,
                variant=variant,
                tuf=tuf,
                exec_times=list(exec_times),
                scene=scene,
                instruction=instruction,
                plan=plan,
            )
        )
    return specs


def import_public(path: str | Path, catalog: TaskCatalog | None = None) -> list[TaskSpec]:
    """Read and import one public-format workload file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(str(path), f"cannot read workload file: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(
            str(path), f"not valid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"
        ) from None
    return import_public_entries(data, str(path), catalog)
