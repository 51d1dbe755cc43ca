"""Per-skill robot execution-time models (TimelyLLM §4.3 and §6 "Execution time model").

TimelyLLM needs execution times twice: the scheduler estimates when a robot will finish the segment
it is executing (the suspended generation's waiting time uses the **minimum**, the worst case for
being late, §4.3), and the simulator samples plausible times from profiled data ("During simulation,
we randomly sample from this profiled data", §6). Models are data: ``config/exec_time/<robot>.yaml``,
one file per robot type, numbers and their public sources cited there.

Model kinds (``model`` field of a skill), ``v`` = the call's first numeric argument:

* ``poly``: ``coef`` (highest degree first) evaluated at ``v`` — Tello moves and turns.
* ``argument``: ``v`` seconds times ``scale`` (default 1) — Tello delay ``d``.
* ``constant``: ``value`` — skills with consistent times (``g``, ``iv``, ``tp``...).
* ``iterations``: ``per_iteration`` × k, k uniform in ``iterations: [lo, hi]`` — Tello scan.
* ``uniform``: ``range: [low, high]`` — TimelyLLM's arm model; the minimum is ``low``.
* ``samples``: measured ``samples`` (seconds); sampling draws one — FLTRNN arm.
* ``reading``: words in the text argument ÷ ``words_per_minute`` — chatbot output is "executed" by
  the user reading it.

When ``v`` is a run-time variable (``mf(_1)``) a numeric model is evaluated over its ``arg_range``
(min/max over the range, expected at the midpoint, sampled uniformly).

Loops: a call carries ``repeat`` (how many times it runs); every bound is multiplied by it. Calls
inside conditional bodies count as executed (as in the recorded traces). Deterministic models (poly,
argument, constant, reading) return the same value when sampled.

**Segments are timed as the robot executes them** (:func:`executed_calls`,
:meth:`ExecTimeModel.estimate_segment`). The robot's streaming interpreter
(``timely_llm_ros/robots/minispec.py``) runs a loop body *live once* as its text arrives and the
remaining N−1 iterations at the loop's closing ``}``. A loop split over segments — ``10{tc(90)`` then
``;tp}`` — therefore costs one turn in the first segment and the picture plus nine turns and nine
pictures in the second. Pricing each segment's text alone would put all ten turns on the first
segment and almost nothing on the second, whose timeout then expires while the robot is still
turning; the planner estimates with the whole plan so far instead.
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.paths import config_files, describe_search_path
from timely_llm_ros.core.schema import SchemaError
from timely_llm_ros.core.schema import validate as validate_schema
from timely_llm_ros.core.skills.model import SkillCall, Var
from timely_llm_ros.core.skills.skillset import SkillSet

MODEL_KINDS = ("poly", "argument", "constant", "iterations", "uniform", "samples", "reading")
_GRID = 64  # points used to bound a polynomial over an argument range


class UnknownRobotType(KeyError):
    """No execution-time model file for this robot type; the message lists the known ones."""

    def __init__(self, robot_type: str, available: list[str]) -> None:
        self.robot_type = robot_type
        self.available = available
        self.message = f"no execution-time model for robot type {robot_type!r}; available: " + (
            ", ".join(available) or "(none)"
        )
        super().__init__(self.message)

    def __str__(self) -> str:
        return self.message


class ExecTimeError(ValueError):
    """A bad model file, or a call the model cannot time (unknown skill, missing argument)."""


@dataclass(frozen=True)
class ExecEstimate:
    """Execution-time bounds of a list of calls, in seconds."""

    minimum: float
    expected: float
    maximum: float

    def __add__(self, other: ExecEstimate) -> ExecEstimate:
        return ExecEstimate(
            self.minimum + other.minimum, self.expected + other.expected, self.maximum + other.maximum
        )

    def scaled(self, k: int) -> ExecEstimate:
        return ExecEstimate(self.minimum * k, self.expected * k, self.maximum * k)


ZERO = ExecEstimate(0.0, 0.0, 0.0)


@dataclass(frozen=True)
class SkillTimeModel:
    """One skill's model (see the module docstring for the kinds)."""

    skill: str
    kind: str
    params: dict[str, Any]

    def _value_arg(self, call: SkillCall) -> float | Var:
        for a in call.args:
            if isinstance(a, Var) or (isinstance(a, (int, float)) and not isinstance(a, bool)):
                return a
        raise ExecTimeError(
            f"{call.source!r}: the {self.kind} time model of {self.skill!r} needs a numeric first argument"
        )

    def _f(self, v: float) -> float:
        if self.kind == "poly":
            out = 0.0
            for c in self.params["coef"]:
                out = out * v + c
            return out
        scale: float = self.params.get("scale", 1.0)
        return v * scale

    def estimate(self, call: SkillCall) -> ExecEstimate:
        k = self.kind
        p = self.params
        if k in ("poly", "argument"):
            v = self._value_arg(call)
            if isinstance(v, Var):
                lo, hi = p["arg_range"]
                ys = [self._f(lo + (hi - lo) * i / _GRID) for i in range(_GRID + 1)]
                return ExecEstimate(min(ys), self._f((lo + hi) / 2), max(ys))
            y = self._f(float(v))
            return ExecEstimate(y, y, y)
        if k == "constant":
            return ExecEstimate(p["value"], p["value"], p["value"])
        if k == "iterations":
            lo, hi = p["iterations"]
            per = p["per_iteration"]
            return ExecEstimate(lo * per, (lo + hi) / 2 * per, hi * per)
        if k == "uniform":
            lo, hi = p["range"]
            return ExecEstimate(lo, (lo + hi) / 2, hi)
        if k == "samples":
            s = p["samples"]
            return ExecEstimate(min(s), math.fsum(s) / len(s), max(s))
        # reading
        y = self._reading(call)
        return ExecEstimate(y, y, y)

    def sample(self, call: SkillCall, rng: random.Random) -> float:
        k = self.kind
        p = self.params
        if k in ("poly", "argument"):
            v = self._value_arg(call)
            if isinstance(v, Var):
                lo, hi = p["arg_range"]
                return self._f(rng.uniform(lo, hi))
            return self._f(float(v))
        if k == "constant":
            value: float = p["value"]
            return value
        if k == "iterations":
            lo, hi = p["iterations"]
            per_iteration: float = p["per_iteration"]
            return rng.randint(lo, hi) * per_iteration
        if k == "uniform":
            lo, hi = p["range"]
            return rng.uniform(lo, hi)
        if k == "samples":
            sample: float = rng.choice(p["samples"])
            return sample
        return self._reading(call)

    def _reading(self, call: SkillCall) -> float:
        text = " ".join(a for a in call.args if isinstance(a, str))
        wpm: float = self.params["words_per_minute"]
        return len(text.split()) * 60.0 / wpm


class ExecTimeModel:
    """Execution-time models of every robot type found in ``config/exec_time/``."""

    def __init__(self, models: dict[str, dict[str, SkillTimeModel]]) -> None:
        self._models = models

    def robot_types(self) -> list[str]:
        return sorted(self._models)

    def skills(self, robot_type: str) -> set[str]:
        return set(self._robot(robot_type))

    def _robot(self, robot_type: str) -> dict[str, SkillTimeModel]:
        try:
            return self._models[robot_type]
        except (KeyError, TypeError):
            raise UnknownRobotType(str(robot_type), self.robot_types()) from None

    def _skill(self, robot_type: str, call: SkillCall) -> SkillTimeModel:
        models = self._robot(robot_type)
        if not isinstance(call, SkillCall):
            raise ExecTimeError(f"expected a SkillCall, got {call!r}")
        m = models.get(call.name)
        if m is None:
            raise ExecTimeError(
                f"no execution-time model for skill {call.name!r} of robot type "
                f"{robot_type!r} (known: {', '.join(sorted(models))})"
            )
        return m

    def estimate_call(self, robot_type: str, call: SkillCall) -> ExecEstimate:
        """Bounds of one call, loop repeats included."""
        return self._skill(robot_type, call).estimate(call).scaled(call.repeat)

    def estimate(self, robot_type: str, calls: list[SkillCall]) -> ExecEstimate:
        """Minimum / expected / maximum time to execute ``calls`` one after another."""
        self._robot(robot_type)  # an unknown robot type fails even for an empty list
        total = ZERO
        for call in calls:
            total = total + self.estimate_call(robot_type, call)
        return total

    def estimate_segment(
        self, robot_type: str, skill_set: SkillSet, earlier: Sequence[str], text: str
    ) -> ExecEstimate:
        """Bounds of what the robot executes when segment ``text`` arrives after ``earlier`` ones.

        See :func:`executed_calls`; raises the parser's ``SkillParseError`` for text that does not
        parse and :class:`ExecTimeError` / :class:`UnknownRobotType` like :meth:`estimate`.
        """
        return self.estimate(robot_type, executed_calls(skill_set, earlier, text))

    def sample(self, robot_type: str, calls: list[SkillCall], rng: random.Random) -> float:
        """One random execution time of ``calls`` (deterministic for a seeded ``rng``)."""
        self._robot(robot_type)
        if not isinstance(rng, random.Random):
            raise TypeError(f"rng must be a random.Random, got {type(rng).__name__}")
        total = 0.0
        for call in calls:
            model = self._skill(robot_type, call)
            for _ in range(call.repeat):
                total += model.sample(call, rng)
        return total

    def scaled(self, factor: float) -> ExecTimeModel:
        """The same robots on a time axis multiplied by ``factor`` (< 1: faster): every estimate and
        sample times ``factor``. A benchmark that compresses a workload's time axis (realbench
        ``--time-scale``) gives this one model to both the simulated robots and the planner, so the
        scheduler's estimates stay those of the robots it drives."""
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise ExecTimeError(f"execution-time scale must be a finite number > 0, got {factor!r}")
        return ScaledExecTimeModel(self._models, float(factor)) if factor != 1 else self


class ScaledExecTimeModel(ExecTimeModel):
    """An :class:`ExecTimeModel` whose times are all multiplied by ``factor`` (:meth:`ExecTimeModel.scaled`)."""

    def __init__(self, models: dict[str, dict[str, SkillTimeModel]], factor: float) -> None:
        super().__init__(models)
        self.factor = factor

    def estimate_call(self, robot_type: str, call: SkillCall) -> ExecEstimate:
        e = super().estimate_call(robot_type, call)
        return ExecEstimate(e.minimum * self.factor, e.expected * self.factor, e.maximum * self.factor)

    def sample(self, robot_type: str, calls: list[SkillCall], rng: random.Random) -> float:
        return super().sample(robot_type, calls, rng) * self.factor

    def scaled(self, factor: float) -> ExecTimeModel:
        return ExecTimeModel(self._models).scaled(self.factor * factor)


# ------------------------------------------------------------------------- segments as executed
@dataclass
class _Block:
    """A block open across segments: its kind, loop count and body as executed once in full."""

    loop: bool
    count: int
    body: list[SkillCall] = dataclasses.field(default_factory=list)  # repeat = runs per pass


def executed_calls(skill_set: SkillSet, earlier: Sequence[str], text: str) -> list[SkillCall]:
    """The calls a streaming interpreter runs when ``text`` arrives, ``repeat`` = how many times.

    ``earlier`` are the task's previous segments (rebuilding which blocks are open and what their
    bodies hold). Semantics of ``timely_llm_ros/robots/minispec.py``: each call runs once as it
    arrives; a condition's calls run at its header; at a loop's ``}`` its body — nested loops in
    full, conditional bodies counted as taken (an upper bound, like the rest of the model) — runs
    ``count − 1`` more times. A ``}`` that closes nothing opened by the task is ignored (the robot
    rejects it). Returns-``->`` are not modelled (they only shorten execution).
    """
    stack: list[_Block] = []
    for seg in earlier:
        _walk(skill_set, seg, stack)
    return _walk(skill_set, text, stack)


def _walk(skill_set: SkillSet, text: str, stack: list[_Block]) -> list[SkillCall]:
    out: list[SkillCall] = []
    for step in skill_set.steps(text):
        if step.kind == "call":
            assert step.call is not None  # a "call" step carries its call
            once = dataclasses.replace(step.call, repeat=1)
            out.append(once)
            if stack:
                stack[-1].body.append(once)
        elif step.kind in ("open_loop", "open_cond"):
            stack.append(_Block(step.kind == "open_loop", step.count))
        elif stack:  # close
            block = stack.pop()
            if block.loop and block.count > 1:
                out += [dataclasses.replace(c, repeat=c.repeat * (block.count - 1)) for c in block.body]
            passes = block.count if block.loop else 1
            if stack:
                stack[-1].body += [dataclasses.replace(c, repeat=c.repeat * passes) for c in block.body]
    return out


# --------------------------------------------------------------------------------------- loading
def _num(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _pair(raw: dict[str, Any], key: str, where: str, integer: bool = False) -> tuple[Any, ...]:
    val: Any = raw.get(key)
    ok = isinstance(val, list) and len(val) == 2 and all(_num(v) for v in val) and val[0] <= val[1]
    if ok and integer:
        ok = all(isinstance(v, int) and v >= 1 for v in val)
    if not ok:
        kind = "positive ints" if integer else "numbers"
        raise ExecTimeError(
            f"{where}: field {key!r} must be [low, high] {kind} with low <= high, got {val!r}"
        )
    return tuple(val)


def _load_skill_model(skill: str, raw: Any, where: str) -> SkillTimeModel:
    if not isinstance(raw, dict):
        raise ExecTimeError(f"{where}: must be a mapping, got {raw!r}")
    kind = raw.get("model")
    if kind not in MODEL_KINDS:
        raise ExecTimeError(f"{where}: field 'model' must be one of {', '.join(MODEL_KINDS)}, got {kind!r}")
    params: dict[str, Any] = {}

    def positive(key: str, allow_zero: bool = False) -> float:
        val: Any = raw.get(key)
        if not _num(val) or val < 0 or (val == 0 and not allow_zero):
            raise ExecTimeError(f"{where}: field {key!r} must be a positive number, got {val!r}")
        return float(val)

    if kind == "poly":
        coef = raw.get("coef")
        if not isinstance(coef, list) or not coef or not all(_num(c) for c in coef):
            raise ExecTimeError(f"{where}: field 'coef' must be a non-empty list of numbers, got {coef!r}")
        params["coef"] = [float(c) for c in coef]
        params["arg_range"] = _pair(raw, "arg_range", where)
    elif kind == "argument":
        params["scale"] = positive("scale") if "scale" in raw else 1.0
        params["arg_range"] = _pair(raw, "arg_range", where)
    elif kind == "constant":
        params["value"] = positive("value", allow_zero=True)
    elif kind == "iterations":
        params["per_iteration"] = positive("per_iteration")
        params["iterations"] = _pair(raw, "iterations", where, integer=True)
    elif kind == "uniform":
        params["range"] = _pair(raw, "range", where)
        if params["range"][0] < 0:
            raise ExecTimeError(f"{where}: field 'range' must not be negative")
    elif kind == "samples":
        s = raw.get("samples")
        if not isinstance(s, list) or not s or not all(_num(v) and v >= 0 for v in s):
            raise ExecTimeError(f"{where}: field 'samples' must be a non-empty list of non-negative numbers")
        params["samples"] = [float(v) for v in s]
    else:
        params["words_per_minute"] = positive("words_per_minute")
    model = SkillTimeModel(skill, kind, params)
    if kind in ("poly", "argument"):
        lo, hi = params["arg_range"]
        if min(model._f(lo + (hi - lo) * i / _GRID) for i in range(_GRID + 1)) < 0:
            raise ExecTimeError(f"{where}: model gives a negative time inside arg_range {[lo, hi]}")
    return model


def load_exec_time_file(path: str | Path) -> tuple[str, dict[str, SkillTimeModel]]:
    """Load one ``config/exec_time/*.yaml`` file: (robot_type, {skill: model})."""
    p = str(path)
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise ExecTimeError(f"{p}: not valid YAML: {exc}") from exc
    except OSError as exc:
        raise ExecTimeError(f"{p}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise ExecTimeError(f"{p}: top level must be a mapping")
    try:  # structure first (config/schema/exec_time.schema.json): file, field path, reason
        validate_schema(data, "exec_time", p)
    except SchemaError as exc:
        raise ExecTimeError(str(exc)) from None
    robot_type = data.get("robot_type")
    if not isinstance(robot_type, str) or not robot_type:
        raise ExecTimeError(f"{p}: missing field 'robot_type'")
    skills = data.get("skills")
    if not isinstance(skills, dict) or not skills:
        raise ExecTimeError(f"{p}: field 'skills' must be a non-empty mapping")
    return robot_type, {
        name: _load_skill_model(str(name), raw, f"{p}: skills.{name}") for name, raw in skills.items()
    }


@cache
def _load_files(files: tuple[str, ...]) -> ExecTimeModel:
    models: dict[str, dict[str, SkillTimeModel]] = {}
    origin: dict[str, str] = {}
    for f in files:
        robot_type, skills = load_exec_time_file(f)
        if robot_type in models:
            raise ExecTimeError(f"{f}: robot_type {robot_type!r} is also defined in {origin[robot_type]}")
        models[robot_type] = skills
        origin[robot_type] = f
    return ExecTimeModel(models)


def load_exec_time_model() -> ExecTimeModel:
    """Every ``exec_time/*.yaml`` on the config search path (a user's file overrides the shipped one
    of the same name; cached per set of files)."""
    files = config_files("exec_time")
    if not files:
        raise ExecTimeError(f"no execution-time model files (exec_time/*.yaml) in {describe_search_path()}")
    return _load_files(tuple(str(f) for f in files.values()))
