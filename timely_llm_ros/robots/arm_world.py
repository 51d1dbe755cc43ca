"""State of a simulated robot arm: where the gripper is and what it holds.

Enough physics to catch plans that cannot work (the prompt rules of ``config/skills/robot_arm.yaml``:
go to an object before picking it, the gripper holds at most one object, drop only what is held),
nothing more. The state persists across tasks, as a real arm's would.

Skill sets: ``robot_arm`` (``sc`` scan, ``gt`` goto, ``pi`` pick, ``dr`` drop — TimelyLLM's arm
prompts) and ``arm_fltrnn`` (``move_to(x, y)``, ``take(obj)``, ``drop(obj)`` — FLTRNN style).
Scenes in the arm workloads list only some objects, so going to an unlisted object is allowed;
``sc`` reports whether the object is listed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from timely_llm_ros.robots.minispec import SkillFailure
from timely_llm_ros.robots.scene import Scene, object_key


@dataclass
class ArmWorld:
    at: str | tuple[float, float] | None = None  # object name (gt) or table position (move_to)
    holding: str | None = None

    def execute(self, name: str, args: tuple, scene: Callable[[], Scene]) -> Any:
        """Perform one skill; ``scene()`` gives the task's scene (parsed only if a skill needs it)."""
        if name == "sc":
            return scene().find(args[0]) is not None
        if name == "gt":
            self.at = args[0]
            return None
        if name == "move_to":
            self.at = (float(args[0]), float(args[1]))
            return None
        if name in ("pi", "take"):
            obj = args[0]
            if self.holding is not None:
                raise SkillFailure(f"cannot pick {obj!r}: the gripper already holds {self.holding!r}")
            if name == "pi" and (not isinstance(self.at, str) or object_key(self.at) != object_key(obj)):
                where = f"at {self.at!r}" if self.at is not None else "not at any object"
                raise SkillFailure(f"cannot pick {obj!r}: the gripper is {where} (go to it first with gt)")
            self.holding = obj
            return None
        if name in ("dr", "drop"):
            if self.holding is None:
                raise SkillFailure("cannot drop: the gripper holds nothing")
            if name == "drop" and object_key(args[0]) != object_key(self.holding):
                raise SkillFailure(f"cannot drop {args[0]!r}: the gripper holds {self.holding!r}")
            self.holding = None
            return None
        raise SkillFailure(f"the simulated arm has no skill {name!r}")
