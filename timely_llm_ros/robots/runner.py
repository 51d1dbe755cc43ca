"""Segment execution for one robot, without ROS: ordering, per-task interpreter state, outcomes.

:class:`SegmentQueue` decides *which* segment runs next: segments run one at a time in arrival
order, but each task's segments strictly by index. A segment whose predecessor has not arrived
waits (DDS keeps per-publisher order, so this only happens after a loss); after ``gap_timeout``
it is handed out as a gap failure instead of waiting forever. A repeated index is handed out as a
duplicate (reported, not executed twice).

:class:`SegmentRunner` executes one segment: parses it with the skill set (the robot never trusts
that the planner did), refuses skills the backend cannot perform before anything moves, keeps the
task's interpreter state across its segments, and turns every failure into an outcome with a reason.
Once a segment of a task fails, the task's later segments fail at once (the planner stops the task;
TimelyLLM segments are parts of one program, running the rest out of context would be unsafe).
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict, deque
from dataclasses import dataclass, field

from timely_llm_ros.core.skills import SkillParseError, SkillSet
from timely_llm_ros.robots.base import RobotBackend, TaskContext
from timely_llm_ros.robots.minispec import SkillFailure, new_program
from timely_llm_ros.robots.scene import parse_scene

MAX_DETAIL = 2000  # characters of feedback detail (log output can be long)


@dataclass
class SegmentItem:
    """One received segment (what the node takes from the Segment message)."""

    task_id: str
    index: int
    text: str
    final: bool = False
    received: float = field(default_factory=time.monotonic)


@dataclass(frozen=True)
class Handout:
    """What :meth:`SegmentQueue.get` hands out. kind: ``run`` | ``duplicate`` | ``gap``."""

    kind: str
    item: SegmentItem
    reason: str = ""


class SegmentQueue:
    """Thread-safe FIFO with per-task index order (see the module docstring)."""

    def __init__(self, gap_timeout: float = 10.0, max_tasks: int = 1024) -> None:
        self.gap_timeout = gap_timeout
        self._items: deque[SegmentItem] = deque()
        self._next: OrderedDict[str, int] = OrderedDict()  # task -> next index to hand out
        self._max_tasks = max_tasks
        self._cv = threading.Condition()
        self._closed = False

    def put(self, item: SegmentItem) -> None:
        with self._cv:
            self._items.append(item)
            self._cv.notify_all()

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def drain(self) -> list[SegmentItem]:
        """Remove and return every segment still waiting (at shutdown, to report them)."""
        with self._cv:
            out = list(self._items)
            self._items.clear()
            return out

    def __len__(self) -> int:
        with self._cv:
            return len(self._items)

    def get(self, timeout: float | None = None) -> Handout | None:
        """Next segment to handle, or None after ``timeout`` / :meth:`close`."""
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._cv:
            while not self._closed:
                out = self._pick()
                if out is not None:
                    return out
                now = time.monotonic()
                waits = [it.received + self.gap_timeout - now for it in self._items]
                if deadline is not None:
                    waits.append(deadline - now)
                    if deadline <= now:
                        return None
                self._cv.wait(max(min(waits), 0.001) if waits else None)
            return None

    def _advance(self, task_id: str, index: int) -> None:
        self._next[task_id] = index + 1
        self._next.move_to_end(task_id)
        while len(self._next) > self._max_tasks:
            self._next.popitem(last=False)

    def _pick(self) -> Handout | None:
        now = time.monotonic()
        for i, it in enumerate(self._items):
            want = self._next.get(it.task_id, 0)
            if it.index == want:
                del self._items[i]
                self._advance(it.task_id, it.index)
                return Handout("run", it)
            if it.index < want:
                del self._items[i]
                return Handout(
                    "duplicate",
                    it,
                    f"segment {it.index} of task {it.task_id!r} was already "
                    f"received (next expected: {want}); not executed again",
                )
        for i, it in enumerate(self._items):
            if now - it.received >= self.gap_timeout:
                del self._items[i]
                want = self._next.get(it.task_id, 0)
                self._advance(it.task_id, it.index)
                missing = f"{want}" if want == it.index - 1 else f"{want}..{it.index - 1}"
                return Handout(
                    "gap",
                    it,
                    f"segment(s) {missing} of task {it.task_id!r} never arrived within "
                    f"{self.gap_timeout:g} s; segment {it.index} cannot run out of order",
                )
        return None


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
    ) -> None:
        self.skill_set = skill_set
        self.backend = backend
        self.default_scene = parse_scene(default_scene)
        self.scene_wait = scene_wait
        self.anonymous_scene: str | None = None  # scene of the latest task sent without a task id
        self.max_tasks = max_tasks
        self._programs: OrderedDict[str, tuple] = OrderedDict()  # task -> (program, ctx)
        self._failed: OrderedDict[str, str] = OrderedDict()  # task -> reason
        self._scenes: OrderedDict[str, str] = OrderedDict()
        self._lock = threading.Lock()

    def set_scene(self, task_id: str, scene: str) -> None:
        """Remember a task's scene (from its Task message). A task sent without an id gets its id
        from the planner, which the robot never learns: its scene serves unknown tasks instead."""
        with self._lock:
            if task_id:
                self._scenes[task_id] = scene
                self._bound(self._scenes)
            else:
                self.anonymous_scene = scene

    def _scene_text(self, task_id: str) -> str | None:
        with self._lock:
            return self._scenes.get(task_id)

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
            return SegmentOutcome(False, time.monotonic() - t0, _clip(reason))
        except Exception as exc:  # a backend bug must not kill the node; report it as the failure
            reason = f"internal error in the {self.backend.kind} backend: {type(exc).__name__}: {exc}"
            self.fail_task(item.task_id, reason)
            return SegmentOutcome(False, time.monotonic() - t0, _clip(reason))
        return SegmentOutcome(True, time.monotonic() - t0, _clip(detail))

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
            entry = (new_program(self.skill_set, self.backend), ctx)
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


def _clip(text: str) -> str:
    return text if len(text) <= MAX_DETAIL else text[: MAX_DETAIL - 3] + "..."
