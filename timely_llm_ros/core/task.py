"""What a robot asks the planner for: one task, independent of ROS messages.

A :class:`TaskSpec` is the core's view of a ``timely_llm_ros/msg/Task`` (the ROS adapter converts
between the two) and of one entry of an LRTrace workload. Fields that only a simulation needs
(reference plan text, recorded per-skill execution times, trace id) are optional: a real robot
sends none of them, and the real engines ignore them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from timely_llm_ros.core.tuf import TUF, tuf_class

# Overrun strategies a task may ask for ("" = the planner's default); see core/options/overrun.py.
OVERRUNS = ("", "continue", "kill", "skip-next")
# Text fields a task cannot be planned without, in the order they are checked (the planner routes by
# agent, checks the robot type against the skill set's, and prompts with the set and the instruction);
# the one list for :meth:`TaskSpec.validate`, the ROS adapter and the workload files.
REQUIRED_FIELDS = ("agent_id", "robot_type", "skill_set", "instruction")


class TaskRejected(ValueError):
    """A task that cannot be planned; ``reason`` is meant for the robot's TaskStatus."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


@dataclass(slots=True)
class TaskSpec:
    """One planning request from one agent.

    ``arrival`` is the time (seconds, on the clock of whoever runs the planner) at which the task
    reached the planner; response time W(s_0) is measured from it.
    """

    task_id: str
    agent_id: str
    robot_type: str
    skill_set: str
    instruction: str
    # None: the task names no TUF (``auto``); the planner's urgency classifier derives one from the
    # instruction (core/options/urgency.py), or, with it off, rejects the task
    tuf: TUF | None
    arrival: float = 0.0
    scene: str = ""
    max_tokens: int = 256
    # Class label used to group metrics ("normal", "urgent", "arm", ...). Derived from the TUF
    # when empty: see :func:`task_class`.
    task_class: str = ""
    # Simulation-only inputs (LRTrace): the plan the simulated engine emits, the recorded
    # per-skill execution times [(skill token, seconds), ...], and the benchmark trace id.
    reference_plan: str | None = None
    exec_times: list[tuple[str, float]] = field(default_factory=list)
    trace_id: int | None = None
    # What the planner does once the task's utility horizon has passed (its current segment can no
    # longer yield positive utility): "continue", "kill" or "skip-next" (TimeBill's overrun
    # strategies, core/options/overrun.py); "" = the planner's default.
    overrun: str = ""
    # Simulation only: the TUF a benchmark judges a task by when the planner has to derive its own
    # (``tuf`` None): metrics use this one, the scheduler the derived one.
    reference_tuf: TUF | None = None

    def validate(self) -> None:
        """Reject malformed tasks with a reason (never a crash later in the scheduler)."""
        for name in REQUIRED_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, str) or not value.strip():
                raise TaskRejected(f"{name} is empty")
        if not isinstance(self.tuf, TUF):
            raise TaskRejected(
                "tuf is missing (send a TUF, or run the planner with an urgency classifier "
                "to derive one from the instruction)"
            )
        if self.overrun not in OVERRUNS:
            raise TaskRejected(
                f"overrun must be one of {', '.join(repr(o) for o in OVERRUNS)}, got {self.overrun!r}"
            )
        if isinstance(self.max_tokens, bool) or not isinstance(self.max_tokens, int) or self.max_tokens <= 0:
            raise TaskRejected(f"max_tokens must be a positive integer, got {self.max_tokens!r}")
        if not isinstance(self.arrival, (int, float)) or not math.isfinite(self.arrival):
            raise TaskRejected(f"arrival time must be finite, got {self.arrival!r}")

    @property
    def prompt_text(self) -> str:
        """The task-specific part of the prompt (the skill set's fixed prompt is a shared prefix)."""
        if self.scene:
            return f"Scene: {self.scene}\nTask: {self.instruction}"
        return f"Task: {self.instruction}"


def task_class(spec: TaskSpec) -> str:
    """Metric group of a task: its explicit class, else 'urgent' for ERT < 1 s, else 'normal'
    (the judged TUF: ``reference_tuf`` when a benchmark hides the TUF from the planner)."""
    if spec.task_class:
        return spec.task_class
    tuf = spec.reference_tuf or spec.tuf
    assert tuf is not None, "only a validated task (or one with a reference TUF) has a class"
    return tuf_class(tuf)
