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

from timely_llm_ros.core.skills import SkillSet
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

    def start(self) -> None:
        """Connect to the robot (default: nothing to do)."""

    def unsupported(self, names: set[str]) -> str | None:
        """Why a segment using these skills cannot run on this robot at all (None: it can)."""
        return None

    def begin_segment(self, ctx: TaskContext) -> None:
        """Called before each segment runs (the real drone takes off here on its first task)."""
        self.ctx = ctx

    @abstractmethod
    def execute(self, call: Call, args: tuple) -> Any:
        """Perform one skill call; return its value or raise :class:`SkillFailure`."""

    def idle(self) -> None:
        """Called periodically while no segment is executing (keep-alive hook)."""

    def stop(self) -> None:
        """Make every wait end now (from another thread, e.g. a signal handler)."""
        self.stop_event.set()

    def close(self) -> None:
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
        """Sleep ``seconds`` of wall time, ending early (with a failure) when the node shuts down."""
        if seconds > 0 and self.stop_event.wait(seconds):
            raise SkillFailure(f"{what} interrupted: the robot node is shutting down")
        if self.stop_event.is_set():
            raise SkillFailure(f"{what} not started: the robot node is shutting down")
