"""Segment execution for one robot, without ROS: per-task interpreter state, motion budget, outcomes.

Which segment runs next (one task at a time, by index, gaps, duplicates) is decided by
:class:`~timely_llm_ros.robots.task_queue.TaskQueue`. :class:`SegmentRunner` executes one segment:
parses it with the skill set (the robot never trusts that the planner did), refuses skills the
backend cannot perform before anything moves, charges it to the plan's motion budget
(:mod:`timely_llm_ros.core.motion_budget`) before anything moves, keeps the task's interpreter
state across its segments, and turns every failure into an outcome with a reason.
Once a segment of a task fails, the task's later segments fail at once (the planner stops the task;
TimelyLLM segments are parts of one program, running the rest out of context would be unsafe).

Bounded: per-task state (program, failure, scene) is dropped by :meth:`SegmentRunner.forget` when
the task is over, and at most ``max_tasks`` of each are kept anyway; a scene longer than
``MAX_SCENE`` characters is not stored (a perception skill of that task fails with the reason);
every outcome detail is cut to ``MAX_DETAIL`` characters.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from dataclasses import dataclass

from timely_llm_ros.core.exectime import ExecTimeModel
from timely_llm_ros.core.motion_budget import BudgetLimits, MotionBudget, budget_limits
from timely_llm_ros.core.skills.model import SkillParseError
from timely_llm_ros.core.skills.skillset import SkillSet
from timely_llm_ros.robots.base import RobotBackend, TaskContext
from timely_llm_ros.robots.minispec import SkillFailure, new_program
from timely_llm_ros.robots.scene import parse_scene
from timely_llm_ros.robots.task_queue import SegmentItem

__all__ = ["MAX_DETAIL", "MAX_SCENE", "SegmentOutcome", "SegmentRunner", "clip"]

MAX_DETAIL = 1000  # characters of any text the robot forwards (feedback detail); the planner's limit
MAX_SCENE = 16_000  # characters of a task scene kept for perception (the planner's Task limit)


class _TooLarge:
    """Stands in for a scene that was too long to keep; using it fails with the reason."""

    def __init__(self, size: int) -> None:
        self.size = size


@dataclass(frozen=True)
class SegmentOutcome:
    ok: bool
    duration: float  # seconds of wall time spent on the segment
    detail: str


class SegmentRunner:
    """Executes segments on a backend, keeping each task's program state (see the module docstring)."""

    def __init__(
        self,
        skill_set: SkillSet,
        backend: RobotBackend,
        *,
        default_scene: str = "",
        max_tasks: int = 256,
        scene_wait: float = 0.0,
        motion_budget: BudgetLimits | None | bool = True,
        exec_model: ExecTimeModel | None = None,
    ) -> None:
        self.skill_set = skill_set
        self.backend = backend
        # True: the skill set's own budget (its YAML); False/None: no budget; or explicit limits
        self.limits = budget_limits(skill_set) if motion_budget is True else (motion_budget or None)
        self.exec_model = exec_model
        self.default_scene = parse_scene(default_scene)
        self.scene_wait = scene_wait
        self.anonymous_scene: str | None = None  # scene of the latest task sent without a task id
        self.max_tasks = max_tasks
        self._programs: OrderedDict[str, tuple] = OrderedDict()  # task -> (program, ctx)
        self._failed: OrderedDict[str, str] = OrderedDict()  # task -> reason
        self._scenes: OrderedDict[str, str | _TooLarge] = OrderedDict()
        self._lock = threading.Lock()

    def set_scene(self, task_id: str, scene: str) -> None:
        """Remember a task's scene (from its Task message). A task sent without an id gets its id
        from the planner, which the robot never learns: its scene serves unknown tasks instead."""
        kept: str | _TooLarge = scene if len(scene) <= MAX_SCENE else _TooLarge(len(scene))
        with self._lock:
            if task_id:
                self._scenes[task_id] = kept
                self._bound(self._scenes)
            else:
                self.anonymous_scene = kept if isinstance(kept, str) else ""

    def _scene_text(self, task_id: str) -> str | None:
        with self._lock:
            scene = self._scenes.get(task_id)
        if isinstance(scene, _TooLarge):
            raise SkillFailure(
                f"the task's scene has {scene.size} characters; this robot keeps at most {MAX_SCENE}"
            )
        return scene

    def forget(self, task_id: str) -> None:
        """The task is over: drop its program, failure record and scene (bounded memory)."""
        with self._lock:
            self._programs.pop(task_id, None)
            self._failed.pop(task_id, None)
            self._scenes.pop(task_id, None)

    def task_states(self) -> int:
        """Per-task records held (for tests and status logs)."""
        with self._lock:
            return len(self._programs) + len(self._failed) + len(self._scenes)

    def fail_task(self, task_id: str, reason: str) -> None:
        """Mark a task failed (e.g. a gap in its segments): its later segments fail at once.

        The first reason is kept: later segments failing *because* of it must not wrap it again
        (each would otherwise quote the previous one, growing the message without bound).
        """
        with self._lock:
            self._failed.setdefault(task_id, reason)
            self._bound(self._failed)
            self._programs.pop(task_id, None)

    def _bound(self, d: OrderedDict) -> None:
        while len(d) > self.max_tasks:
            d.popitem(last=False)

    def run(self, item: SegmentItem) -> SegmentOutcome:
        t0 = time.monotonic()
        try:
            detail = self._run(item)
        except SkillFailure as exc:
            self.fail_task(item.task_id, exc.reason)
            notes = self.backend.take_notes()
            reason = exc.reason + (f" (robot notes: {'; '.join(notes)})" if notes else "")
            return SegmentOutcome(False, time.monotonic() - t0, clip(reason))
        except Exception as exc:  # noqa: BLE001 - a backend bug must not kill the node; report it as the failure
            reason = f"internal error in the {self.backend.kind} backend: {type(exc).__name__}: {exc}"
            self.fail_task(item.task_id, reason)
            return SegmentOutcome(False, time.monotonic() - t0, clip(reason))
        return SegmentOutcome(True, time.monotonic() - t0, clip(detail))

    def _run(self, item: SegmentItem) -> str:
        with self._lock:
            failed = self._failed.get(item.task_id)
            entry = self._programs.get(item.task_id)
        if failed is not None:
            raise SkillFailure(
                f"an earlier segment of task {item.task_id!r} failed ({failed}); "
                f"segment {item.index} is not executed"
            )
        try:
            calls = self.skill_set.parse(item.text)
        except SkillParseError as exc:
            raise SkillFailure(f"segment does not parse: {exc}") from None
        why = self.backend.unsupported({c.name for c in calls})
        if why:
            raise SkillFailure(why)
        if entry is None:
            if item.index != 0:
                raise SkillFailure(
                    f"segment {item.index} of task {item.task_id!r} arrived, but this robot "
                    "never received the task's earlier segments"
                )
            task_id = item.task_id
            ctx = TaskContext(
                task_id,
                lambda: self._scene_text(task_id),
                self.default_scene,
                self.scene_wait,
                lambda: self.anonymous_scene,
            )
            budget = MotionBudget(self.skill_set, self.limits, self.exec_model) if self.limits else None
            entry = (new_program(self.skill_set, self.backend, budget), ctx)
            with self._lock:
                self._programs[item.task_id] = entry
                self._bound(self._programs)
        program, ctx = entry
        self.backend.take_notes()
        self.backend.begin_segment(ctx)
        notes = program.run_segment(item.text) + self.backend.take_notes()
        if item.final:
            with self._lock:
                self._programs.pop(item.task_id, None)
            if program.open_blocks and not program.returned:
                notes.append(f"plan ended with {program.open_blocks} unclosed block(s)")
        return "; ".join(notes)


def clip(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` cut to at most ``limit`` characters, saying how much was cut (forwarded text is bounded)."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(f"... [{len(text)} more characters cut]"), 0)  # the count never grows
    return text[:keep] + f"... [{len(text) - keep} more characters cut]"
