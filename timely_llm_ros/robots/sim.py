"""Simulated robots: real waiting in wall time from the execution-time models, answers from the scene.

Timing: every executed skill call waits the time the robot type's execution-time model gives
(``config/exec_time/<robot_type>.yaml``; TimelyLLM's fitted Tello models and assumed arm times):

* ``min`` — the model's minimum, the scheduler's own pessimistic assumption (paper §4.3);
* ``expected`` — the model's expected value;
* ``sampled`` — one draw per call from a seeded RNG (paper §6: "we randomly sample from this
  profiled data"), so a run with the same seed and the same plan takes the same times.

``time_scale`` multiplies every wait (1 = real time; tests use less). The measured duration the
node reports is the real elapsed time.

Perception (drone): the scene is the drone's current view (:mod:`.scene`). ``iv``/``s`` answer
whether the object is listed; ``ox/oy/ow/oh`` its box; ``od`` its ``distance`` when the scene gives
one; ``p``/``sa`` describe the view (there is no LLM on the robot); ``g`` needs the object in view.
Asking about an object that is not in view fails the segment with that reason instead of inventing
a value. Arm skills act on :class:`~timely_llm_ros.robots.arm_world.ArmWorld`.
"""

from __future__ import annotations

import random
import time
from typing import Any

from timely_llm_ros.core.exectime import ExecTimeError, ExecTimeModel, load_exec_time_model
from timely_llm_ros.core.skills.model import SkillCall
from timely_llm_ros.core.skills.skillset import SkillSet
from timely_llm_ros.robots.arm_world import ArmWorld
from timely_llm_ros.robots.base import RobotBackend
from timely_llm_ros.robots.minispec import Call, SkillFailure

EXEC_MODES = ("min", "expected", "sampled")
_BOX = {"ox": "x", "oy": "y", "ow": "width", "oh": "height"}


class SimBackend(RobotBackend):
    """A simulated robot of the skill set's robot type (drone or arm)."""

    kind = "sim"

    def __init__(
        self,
        skill_set: SkillSet,
        *,
        exec_mode: str = "min",
        seed: int = 0,
        time_scale: float = 1.0,
        exec_model: ExecTimeModel | None = None,
    ) -> None:
        super().__init__(skill_set)
        if exec_mode not in EXEC_MODES:
            raise ValueError(f"exec_mode must be one of {', '.join(EXEC_MODES)}, got {exec_mode!r}")
        if not (isinstance(time_scale, (int, float)) and 0 <= time_scale <= 100):
            raise ValueError(f"time_scale must be a number in 0..100, got {time_scale!r}")
        self.exec_mode = exec_mode
        self.time_scale = float(time_scale)
        self.rng = random.Random(seed)
        self.model = exec_model or load_exec_time_model()
        self.robot_type = skill_set.robot_type
        missing = sorted(skill_set.skill_names() - self.model.skills(self.robot_type))
        if missing:
            raise ValueError(
                f"execution-time model of robot type {self.robot_type!r} has no time for "
                f"skill(s) {', '.join(missing)} of skill set {skill_set.name!r}"
            )
        self.arm = ArmWorld() if skill_set.robot_type == "arm" else None
        self.calls = 0
        self.modelled_s = 0.0

    def duration(self, call: Call, args: tuple) -> float:
        """Modelled execution time of one call (seconds, before ``time_scale``)."""
        sc = SkillCall(call.name, tuple(args), call.source)
        try:
            if self.exec_mode == "sampled":
                return self.model.sample(self.robot_type, [sc], self.rng)
            est = self.model.estimate(self.robot_type, [sc])
        except ExecTimeError as exc:
            raise SkillFailure(f"{call.source}: {exc}") from None
        return est.minimum if self.exec_mode == "min" else est.expected

    def execute(self, call: Call, args: tuple) -> Any:
        self.check_interrupt(call.source)  # an ended task changes nothing (arm world included)
        value = self._answer(call, args)  # check first: an impossible call fails without waiting
        seconds = self.duration(call, args)
        self.calls += 1
        self.modelled_s += seconds
        self.wait(seconds * self.time_scale, call.source)
        return value

    def status(self) -> dict[str, Any]:
        return {"calls": self.calls, "modelled_s": self.modelled_s}

    # -- skill semantics
    def _answer(self, call: Call, args: tuple) -> Any:
        if self.arm is not None:
            return self.arm.execute(call.name, args, lambda: self.ctx.scene)
        scene = self.ctx.scene
        name = call.name
        if name in ("iv", "s"):
            return scene.find(args[0]) is not None
        if name in _BOX or name in ("od", "g"):
            obj = scene.find(args[0])
            if obj is None:
                raise SkillFailure(f"{call.source}: {args[0]!r} is not in view ({scene.describe()})")
            if name == "g":
                return None
            if name == "od":
                if obj.distance is None:
                    raise SkillFailure(
                        f"{call.source}: the scene gives no distance for {obj.name!r} "
                        "(add distance:<cm> to its scene entry)"
                    )
                return obj.distance
            return getattr(obj, _BOX[name])
        if name in ("p", "sa"):
            return scene.describe()
        if name == "t":
            return (time.monotonic() - self.ctx.started) / (self.time_scale or 1.0)
        return None  # moves, turns, delay, log, take_picture, re_plan: no value
