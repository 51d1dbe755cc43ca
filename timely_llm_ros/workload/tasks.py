"""The LRTrace benchmark tasks (paper Table 2) loaded from ``config/tasks/lrtrace_tasks.yaml``.

Tasks are data, not code, so users can add their own robots' tasks by copying the file (point
``TIMELY_LLM_CONFIG`` at the copy) and composers/importers pick them up by id. A task may have
several *variants*: the same job written for another skill set (the arm tasks 9-11 exist in
TimelyLLM's sc/gt/pi/dr style and in the FLTRNN move_to/take/drop style of the public arm
workload). Each variant records which public trace it corresponds to, so the importer can map a
public ``(robot_type, robot_system, trace_id)`` back to a task.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.paths import config_path
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import TUF, InvalidTUF
from timely_llm_ros.workload.errors import WorkloadError

TASKS_FILE = ("tasks", "lrtrace_tasks.yaml")

_TASK_INPUT = re.compile(r"^\s*Scene:\s*(?P<scene>.*?)\s*,?\s*Task:\s*(?P<task>.*?)\s*$", re.DOTALL)


def split_task_input(text: str) -> tuple[str, str]:
    """Split a public ``"Scene: [...] Task: [A] ..."`` string into (scene, instruction).

    A text without the ``Scene:``/``Task:`` markers is all instruction (scene empty).
    """
    match = _TASK_INPUT.match(text)
    if match is None:
        return "", text.strip()
    return match.group("scene"), match.group("task")


def skill_sequence(exec_times: list[tuple[str, float]] | tuple[tuple[str, float], ...]) -> list[str]:
    """Skill names of a recorded ``exe_time_detail``: tokens without the trailing ``(``.

    The public files write scan/goto as ``'s('``/``'g('`` (the regex that matched them); every
    other token is the bare abbreviation.
    """
    return [token.rstrip("(").strip() for token, _ in exec_times]


@dataclass(frozen=True)
class PublicTraceRef:
    """Which public trace a plan variant corresponds to (``robot_type``/``robot_system`` as the
    public arm files write them; drone files carry neither and mean ``drone``/``typefly``)."""

    robot_type: str
    robot_system: str
    trace_id: int


@dataclass(frozen=True)
class PlanVariant:
    """One way of writing a benchmark task for one skill set."""

    skill_set: str
    robot_type: str
    scene: str
    instruction: str
    plan: str
    exec_times: tuple[tuple[str, float], ...]
    plan_time_s: float
    public: PublicTraceRef | None = None

    @property
    def exec_time(self) -> float:
        """Total recorded execution time of the plan (seconds)."""
        return sum(seconds for _, seconds in self.exec_times)

    @property
    def skills(self) -> list[str]:
        return skill_sequence(self.exec_times)


@dataclass(frozen=True)
class BenchmarkTask:
    """One Table-2 task: its primary variant plus alternatives keyed by skill set."""

    id: int
    title: str
    category: str
    task_class: str
    tuf_class: str
    tuf: TUF
    primary: PlanVariant
    variants: tuple[PlanVariant, ...] = ()

    def variant(self, skill_set: str | None = None) -> PlanVariant:
        """The variant for ``skill_set`` (the primary one when ``None``)."""
        if skill_set is None or skill_set == self.primary.skill_set:
            return self.primary
        for candidate in self.variants:
            if candidate.skill_set == skill_set:
                return candidate
        known = [self.primary.skill_set, *(v.skill_set for v in self.variants)]
        raise KeyError(f"task {self.id} has no variant for skill set {skill_set!r} (has {known})")

    def all_variants(self) -> tuple[PlanVariant, ...]:
        return (self.primary, *self.variants)

    def to_spec(
        self,
        *,
        task_id: str,
        agent_id: str,
        arrival: float,
        variant: PlanVariant | None = None,
        tuf: TUF | None = None,
        exec_times: list[tuple[str, float]] | None = None,
        scene: str | None = None,
        instruction: str | None = None,
        plan: str | None = None,
    ) -> TaskSpec:
        """Build the TaskSpec one agent sends for this task; overrides come from a workload file."""
        v = variant or self.primary
        return TaskSpec(
            task_id=task_id,
            agent_id=agent_id,
            robot_type=v.robot_type,
            skill_set=v.skill_set,
            instruction=v.instruction if instruction is None else instruction,
            scene=v.scene if scene is None else scene,
            tuf=self.tuf if tuf is None else tuf,
            arrival=float(arrival),
            task_class=self.task_class,
            reference_plan=v.plan if plan is None else plan,
            exec_times=list(v.exec_times) if exec_times is None else list(exec_times),
            trace_id=self.id,
        )


@dataclass
class TaskCatalog:
    """All benchmark tasks of one tasks file."""

    source: str
    tasks: dict[int, BenchmarkTask]
    tuf_classes: dict[str, TUF] = field(default_factory=dict)

    def get(self, task_id: int) -> BenchmarkTask:
        try:
            return self.tasks[task_id]
        except KeyError:
            raise KeyError(
                f"unknown benchmark task (trace id) {task_id!r}; {self.source} defines {sorted(self.tasks)}"
            ) from None

    def by_public_trace(
        self, robot_type: str, robot_system: str, trace_id: int
    ) -> tuple[BenchmarkTask, PlanVariant]:
        """Task and variant recorded as public trace ``trace_id`` of (robot_type, robot_system)."""
        for task in self.tasks.values():
            for v in task.all_variants():
                ref = v.public
                if ref and (ref.robot_type, ref.robot_system, ref.trace_id) == (
                    robot_type,
                    robot_system,
                    trace_id,
                ):
                    return task, v
        raise KeyError(f"no benchmark task is public trace {trace_id} of {robot_type}/{robot_system}")

    def public_trace_ids(self, robot_type: str, robot_system: str) -> list[int]:
        return sorted(
            v.public.trace_id
            for t in self.tasks.values()
            for v in t.all_variants()
            if v.public and (v.public.robot_type, v.public.robot_system) == (robot_type, robot_system)
        )

    def __iter__(self):
        return iter(self.tasks[k] for k in sorted(self.tasks))

    def __len__(self) -> int:
        return len(self.tasks)


def _require(source: str, entry: str, data: dict, name: str, kind: type | tuple[type, ...]) -> Any:
    if name not in data:
        raise WorkloadError(source, "missing", entry=entry, field=name)
    value = data[name]
    if isinstance(value, bool) or not isinstance(value, kind):
        raise WorkloadError(
            source, f"expected {getattr(kind, '__name__', kind)}, got {value!r}", entry=entry, field=name
        )
    return value


def parse_exec_times(
    source: str, entry: str, value: Any, name: str = "exec_times"
) -> tuple[tuple[str, float], ...]:
    """Validate a ``[[skill, seconds], ...]`` list (non-negative, finite seconds)."""
    if not isinstance(value, list):
        raise WorkloadError(
            source, f"expected a list of [skill, seconds], got {value!r}", entry=entry, field=name
        )
    out = []
    for i, item in enumerate(value):
        if not isinstance(item, (list, tuple)) or len(item) != 2:
            raise WorkloadError(
                source, f"item {i} must be [skill, seconds], got {item!r}", entry=entry, field=name
            )
        token, seconds = item
        if not isinstance(token, str) or not token.strip():
            raise WorkloadError(
                source, f"item {i}: skill must be a non-empty string, got {token!r}", entry=entry, field=name
            )
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not math.isfinite(seconds):
            raise WorkloadError(
                source, f"item {i}: seconds must be a number, got {seconds!r}", entry=entry, field=name
            )
        if seconds < 0:
            raise WorkloadError(
                source, f"item {i}: negative execution time {seconds}", entry=entry, field=name
            )
        out.append((token, float(seconds)))
    return tuple(out)


def parse_public_tuf(source: str, entry: str, value: Any, name: str = "tuf") -> TUF:
    """``[Umax, ERT, t_zero]`` -> TUF, with the reason in a WorkloadError when it is not one."""
    if not isinstance(value, (list, tuple)) or len(value) != 3:
        raise WorkloadError(source, f"expected [Umax, ERT, t_zero], got {value!r}", entry=entry, field=name)
    for v in value:
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
            raise WorkloadError(
                source, f"expected three finite numbers, got {value!r}", entry=entry, field=name
            )
    umax, ert, t_zero = value
    if ert < 0:
        raise WorkloadError(source, f"negative ERT {ert}", entry=entry, field=name)
    if t_zero <= ert:
        raise WorkloadError(
            source, f"t_zero ({t_zero}) must be greater than ERT ({ert})", entry=entry, field=name
        )
    try:
        return TUF.from_public(umax, ert, t_zero)
    except InvalidTUF as exc:
        raise WorkloadError(source, str(exc), entry=entry, field=name) from None


def _parse_variant(source: str, entry: str, data: dict, defaults: dict | None = None) -> PlanVariant:
    merged = {**(defaults or {}), **data}
    public = None
    if merged.get("public") is not None:
        ref = merged["public"]
        if not isinstance(ref, dict):
            raise WorkloadError(
                source, "expected {robot_type, robot_system, trace_id}", entry=entry, field="public"
            )
        public = PublicTraceRef(
            robot_type=_require(source, entry, ref, "robot_type", str),
            robot_system=_require(source, entry, ref, "robot_system", str),
            trace_id=_require(source, entry, ref, "trace_id", int),
        )
    plan_time = _require(source, entry, merged, "plan_time_s", (int, float))
    if plan_time < 0:
        raise WorkloadError(source, f"negative planning time {plan_time}", entry=entry, field="plan_time_s")
    exec_times = parse_exec_times(source, entry, _require(source, entry, merged, "exec_times", list))
    if not exec_times:
        raise WorkloadError(
            source, "a reference plan needs at least one skill", entry=entry, field="exec_times"
        )
    return PlanVariant(
        skill_set=_require(source, entry, merged, "skill_set", str),
        robot_type=_require(source, entry, merged, "robot_type", str),
        scene=str(merged.get("scene", "")),
        instruction=_require(source, entry, merged, "instruction", str),
        plan=_require(source, entry, merged, "plan", str),
        exec_times=exec_times,
        plan_time_s=float(plan_time),
        public=public,
    )


def parse_catalog(data: Any, source: str) -> TaskCatalog:
    """Validate the parsed YAML of a tasks file."""
    if not isinstance(data, dict):
        raise WorkloadError(source, "expected a mapping with 'tuf_classes' and 'tasks'")
    classes_raw = data.get("tuf_classes") or {}
    if not isinstance(classes_raw, dict):
        raise WorkloadError(source, "expected a mapping of name: [Umax, ERT, t_zero]", field="tuf_classes")
    classes = {name: parse_public_tuf(source, f"tuf class {name!r}", v) for name, v in classes_raw.items()}
    tasks_raw = data.get("tasks")
    if not isinstance(tasks_raw, list) or not tasks_raw:
        raise WorkloadError(source, "expected a non-empty list", field="tasks")
    tasks: dict[int, BenchmarkTask] = {}
    for index, raw in enumerate(tasks_raw):
        entry = f"task #{index}"
        if not isinstance(raw, dict):
            raise WorkloadError(source, f"expected a mapping, got {raw!r}", entry=entry)
        task_id = _require(source, entry, raw, "id", int)
        entry = f"task {task_id}"
        if task_id in tasks:
            raise WorkloadError(source, "duplicate task id", entry=entry, field="id")
        tuf_name = _require(source, entry, raw, "tuf", str)
        if tuf_name not in classes:
            raise WorkloadError(
                source, f"unknown TUF class {tuf_name!r} (known: {sorted(classes)})", entry=entry, field="tuf"
            )
        primary = _parse_variant(source, entry, raw)
        variants_raw = raw.get("variants") or []
        if not isinstance(variants_raw, list):
            raise WorkloadError(source, "expected a list", entry=entry, field="variants")
        variants = tuple(
            _parse_variant(source, f"{entry} variant {i}", v if isinstance(v, dict) else {})
            for i, v in enumerate(variants_raw)
        )
        tasks[task_id] = BenchmarkTask(
            id=task_id,
            title=_require(source, entry, raw, "title", str),
            category=_require(source, entry, raw, "category", str),
            task_class=_require(source, entry, raw, "task_class", str),
            tuf_class=tuf_name,
            tuf=classes[tuf_name],
            primary=primary,
            variants=variants,
        )
    return TaskCatalog(source=source, tasks=tasks, tuf_classes=classes)


def load_catalog_file(path: str | Path) -> TaskCatalog:
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise WorkloadError(str(path), f"cannot read tasks file: {exc.strerror or exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise WorkloadError(str(path), f"not valid YAML: {exc}") from None
    return parse_catalog(data, str(path))


@cache
def _default_catalog(path: str) -> TaskCatalog:
    return load_catalog_file(path)


def load_catalog(path: str | Path | None = None) -> TaskCatalog:
    """The benchmark tasks (default: ``config/tasks/lrtrace_tasks.yaml``; cached per path)."""
    return _default_catalog(str(Path(path) if path is not None else config_path(*TASKS_FILE)))
