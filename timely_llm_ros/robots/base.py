"""The robot backend interface: what a robot node needs from a simulated or a real robot.

A backend performs single skill calls (the interpreter in :mod:`.minispec` walks the plan and calls
:meth:`RobotBackend.execute`). The node owns ordering, feedback and threads; a backend owns the
hardware (or its simulation) and its timing. Backends are pure Python so they can be tested without
ROS (tests in ``test/robots``).
"""

from __future__ import annotations

import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from timely_llm_ros.core.skills.skillset import SkillSet
from timely_llm_ros.robots.minispec import Call, SkillFailure
from timely_llm_ros.robots.scene import Scene, SceneError, parse_scene


@dataclass
class TaskContext:
    """What a backend knows about the task whose segment it is executing.

    The scene is looked up and parsed when a skill first needs it. Looked up: ``Task`` and
    ``Segment`` travel on different topics, so the first segment can overtake its task's scene;
    :attr:`scene` then waits up to ``scene_wait`` seconds for it, and falls back to ``fallback`` (the
    latest scene of a task sent without an id) or ``default_scene``. Parsed lazily: a plan that asks
    nothing about the scene is not failed for a malformed scene (the public arm workload has one).
    """

    task_id: str
    scene_lookup: Callable[[], str | None] = lambda: None
    default_scene: Scene = field(default_factory=Scene)
    scene_wait: float = 0.0
    fallback: Callable[[], str | None] = lambda: None
    started: float = field(default_factory=time.monotonic)  # first segment's start (for skill `t`)
    _scene: Scene | None = None

    @property
    def scene(self) -> Scene:
        if self._scene is None:
            text = self.scene_lookup()
            deadline = time.monotonic() + self.scene_wait
            while text is None and time.monotonic() < deadline:
                time.sleep(0.02)
                text = self.scene_lookup()
            if text is None:
                text = self.fallback()
            if text is None or not text.strip():
                self._scene = self.default_scene
            else:
                try:
                    self._scene = parse_scene(text)
                except SceneError as exc:
                    raise SkillFailure(f"the task's scene cannot be used: {exc}") from None
        return self._scene


class RobotBackend(ABC):
    """One robot. Lifecycle: :meth:`start` → (:meth:`begin_segment`, :meth:`execute`...)* → :meth:`close`."""

    kind = "abstract"

    def __init__(self, skill_set: SkillSet) -> None:
        self.skill_set = skill_set
        self.ctx = TaskContext("")
        self.stop_event = threading.Event()  # set by shutdown: waits end early, calls fail
        self.notes: list[str] = []  # anomalies worth reporting in the segment's feedback detail
        self._interrupt = threading.Event()  # set by interrupt(): the current segment's task ended
        self._interrupt_reason = ""
        self._interrupted_task = ""
        self._ctx_lock = threading.Lock()

    def start(self) -> None:  # noqa: B027 (an optional hook: doing nothing is the default)
        """Connect to the robot (default: nothing to do)."""

    def unsupported(self, names: set[str]) -> str | None:
        """Why a segment using these skills cannot run on this robot at all (None: it can)."""
        return None

    def begin_segment(self, ctx: TaskContext) -> None:
        """Called before each segment runs (the real drone takes off here on its first task)."""
        with self._ctx_lock:
            self.ctx = ctx
            # an interrupt of an earlier task never reaches this one; one of this task still holds
            if ctx.task_id and ctx.task_id == self._interrupted_task:
                self._interrupt.set()
            else:
                self._interrupt.clear()

    def interrupt(self, task_id: str, reason: str, *, halt: bool = True) -> None:
        """The planner ended ``task_id`` (timed out, failed, ...): stop its motion now.

        Called from another thread. A wait of the task's running segment ends at once and every
        later call of the task fails with ``reason`` (also a segment that was about to start);
        with ``halt`` (the task's segment is running) a real robot also gets its stop/hover
        command (:meth:`halt`).
        """
        with self._ctx_lock:
            self._interrupted_task = task_id
            self._interrupt_reason = reason
            if self.ctx.task_id == task_id:
                self._interrupt.set()
        if halt:
            self.halt()

    def halt(self) -> None:  # noqa: B027 (an optional hook: doing nothing is the default)
        """Make the robot stop moving and hold position (default: nothing beyond ending the waits)."""

    def interrupted(self) -> bool:
        """True once the current segment's task was interrupted (see :meth:`interrupt`)."""
        return self._interrupt.is_set()

    def check_interrupt(self, what: str) -> None:
        """Raise :class:`SkillFailure` if the current segment was interrupted."""
        if self._interrupt.is_set():
            raise SkillFailure(f"{what} interrupted: {self._interrupt_reason}")

    @abstractmethod
    def execute(self, call: Call, args: tuple) -> Any:
        """Perform one skill call; return its value or raise :class:`SkillFailure`."""

    def idle(self) -> None:  # noqa: B027 (an optional hook: doing nothing is the default)
        """Called periodically while no segment is executing (keep-alive hook)."""

    def stop(self) -> None:
        """Make every wait end now (from another thread, e.g. a signal handler)."""
        self.stop_event.set()

    def close(self) -> None:  # noqa: B027 (an optional hook: doing nothing is the default)
        """Release the robot (the real drone lands here)."""

    def take_notes(self) -> list[str]:
        """Notes gathered since the last call (clamped values, retries, late replies...)."""
        out, self.notes = self.notes, []
        return out

    def status(self) -> dict[str, Any]:
        """Backend-specific counters for logs and tests."""
        return {}

    # helpers for subclasses
    def wait(self, seconds: float, what: str) -> None:
        """Sleep ``seconds`` of wall time, ending early (with a failure) when the node shuts down or
        the segment is interrupted (:meth:`interrupt`)."""
        self.check_interrupt(what)
        end = time.monotonic() + max(seconds, 0.0)
        while not self.stop_event.is_set():
            left = end - time.monotonic()
            if left <= 0 or self._interrupt.wait(min(left, 0.05)):
                break
        self.check_interrupt(what)
        if self.stop_event.is_set():
            raise SkillFailure(f"{what} interrupted: the robot node is shutting down")
