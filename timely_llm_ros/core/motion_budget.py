"""Per-plan motion budget of a robot type: how far, how much turning, how long one plan may move a robot.

Why: every skill call is range-checked on its own (``mf`` takes 20-500 cm), but loops multiply
calls past every per-call limit — a model asked to "fly forward 100000 cm" wrote ``20{mf(200)``
and the drone flew about 40 m. The budget bounds the *whole plan*. It is checked twice with this
same code: by the planner before each segment is dispatched (:class:`PlanBudgets`, a violation
fails the task and nothing is sent) and by the robot before it executes a segment (the interpreter
in :mod:`timely_llm_ros.robots.minispec` refuses the segment before anything moves).

Limits live in the skill set's YAML (``motion_budget`` section, documented in
``config/skills/tello_minispec.yaml``); a skill set without the section has no budget (chatbots)::

    motion_budget:
      max_distance_cm: 2000     # total travel of the plan
      max_rotation_deg: 1440    # total turning
      max_time_s: 120           # total execution time, from the execution-time model's maximum
      max_calls: 100            # skill calls executed, loop repeats included
      max_loop_depth: 1         # loops inside loops
      costs:                    # what one call of a skill adds: a number, or `arg` (its 1st argument)
        mf: {distance_cm: arg}
        s: {rotation_deg: 360}

Every limit is optional (absent = unlimited). Costs are worst cases, computed before execution from
the plan text alone, so planner and robot reach the same verdict: a loop counts all its repeats
(counts of loops opened in earlier segments included), a conditional body counts as executed, a
variable argument (``mf(_1)``) counts as the argument's declared maximum, and a ``->`` return does
not shorten anything. Pure Python: no ROS import.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.exectime import ExecTimeError, ExecTimeModel, UnknownRobotType, load_exec_time_model
from timely_llm_ros.core.skills.lexer import TOKEN_RE
from timely_llm_ros.core.skills.model import SkillCall, SkillParseError, Var
from timely_llm_ros.core.skills.skillset import SkillSet

SECTION = "motion_budget"
COST_DIMENSIONS = ("distance_cm", "rotation_deg")
ARG = "arg"  # cost = the call's first argument
_LIMIT_KEYS = ("max_distance_cm", "max_rotation_deg", "max_time_s", "max_calls", "max_loop_depth")
INF = math.inf


class MotionBudgetError(ValueError):
    """A malformed ``motion_budget`` section; the message names the file and the field."""


class BudgetExceeded(Exception):
    """A segment would take its plan over a limit; ``reason`` says which, by how much."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class BudgetLimits:
    """One skill set's limits (``inf`` = no limit) and per-skill costs."""

    max_distance_cm: float = INF
    max_rotation_deg: float = INF
    max_time_s: float = INF
    max_calls: float = INF
    max_loop_depth: float = INF
    costs: Mapping[str, Mapping[str, float | str]] = field(default_factory=dict)
    source: str = ""


@dataclass
class Usage:
    """What a plan (or one segment) is charged, worst case."""

    distance_cm: float = 0.0
    rotation_deg: float = 0.0
    time_s: float = 0.0
    calls: int = 0

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.distance_cm + other.distance_cm,
            self.rotation_deg + other.rotation_deg,
            self.time_s + other.time_s,
            self.calls + other.calls,
        )


# ---------------------------------------------------------------------------------------- loading
def parse_limits(raw: Any, sset: SkillSet, where: str) -> BudgetLimits:
    """Validate a ``motion_budget`` mapping against the skill set; MotionBudgetError with the field."""
    if not isinstance(raw, dict):
        raise MotionBudgetError(f"{where}: '{SECTION}' must be a mapping, got {raw!r}")
    unknown = sorted(set(raw) - {*_LIMIT_KEYS, "costs"})
    if unknown:
        raise MotionBudgetError(
            f"{where}: unknown field(s) {unknown} in '{SECTION}'; known: {sorted({*_LIMIT_KEYS, 'costs'})}"
        )
    limits: dict[str, float] = {}
    for key in _LIMIT_KEYS:
        if key not in raw:
            continue
        v = raw[key]
        whole = key in ("max_calls", "max_loop_depth")
        ok = not isinstance(v, bool) and isinstance(v, int if whole else (int, float)) and v >= 0
        if not ok or not math.isfinite(v):
            kind = "a non-negative int" if whole else "a finite number >= 0"
            raise MotionBudgetError(f"{where}: '{SECTION}.{key}' must be {kind}, got {v!r}")
        limits[key] = v
    costs_raw = raw.get("costs", {})
    if not isinstance(costs_raw, dict):
        raise MotionBudgetError(f"{where}: '{SECTION}.costs' must be a mapping of skill -> costs")
    costs: dict[str, dict[str, float | str]] = {}
    for skill, cost in costs_raw.items():
        here = f"{where}: '{SECTION}.costs.{skill}'"
        spec = sset.skills.get(skill)
        if spec is None:
            raise MotionBudgetError(f"{here}: no skill {skill!r} in skill set {sset.name!r}")
        if not isinstance(cost, dict) or not cost or set(cost) - set(COST_DIMENSIONS):
            raise MotionBudgetError(
                f"{here} must map some of {list(COST_DIMENSIONS)} to a number or {ARG!r}, got {cost!r}"
            )
        for dim, v in cost.items():
            if v == ARG:
                if not spec.args or spec.args[0].type not in ("int", "float"):
                    raise MotionBudgetError(f"{here}.{dim}: {ARG!r} needs a numeric first argument")
            elif isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
                raise MotionBudgetError(f"{here}.{dim} must be a number >= 0 or {ARG!r}, got {v!r}")
        costs[skill] = dict(cost)
    return BudgetLimits(**limits, costs=costs, source=where)


@cache
def _section(path: str, mtime_ns: int) -> Any:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise MotionBudgetError(f"{path}: cannot read the motion budget: {exc}") from None
    return data.get(SECTION) if isinstance(data, dict) else None


_parsed: dict[tuple[str, int, str], BudgetLimits] = {}


def budget_limits(sset: SkillSet) -> BudgetLimits | None:
    """The skill set's limits from its YAML file (None: the file has no budget section).

    Read from the same file as the skill set (cached per file version), so the budget is data next
    to the skills it prices; raises :class:`MotionBudgetError` for a malformed section.
    """
    if not sset.source_path:
        return None
    try:
        mtime = Path(sset.source_path).stat().st_mtime_ns
    except OSError as exc:
        raise MotionBudgetError(f"{sset.source_path}: cannot read the motion budget: {exc}") from None
    key = (sset.source_path, mtime, sset.name)
    if key not in _parsed:
        raw = _section(sset.source_path, mtime)
        if raw is None:
            return None
        _parsed[key] = parse_limits(raw, sset, sset.source_path)
    return _parsed[key]


# ---------------------------------------------------------------------------------------- checking
def loop_depth(text: str) -> int:
    """Deepest nesting of loops (``N{``) in a MiniSpec text that already parsed.

    A ``{`` opens a loop when a count that starts a statement precedes it (``3{``); after a
    condition (``?ox('a')>0.5{``) the number before it is a comparison operand instead.
    """
    stack: list[bool] = []
    deepest = 0
    toks = [m.group() for m in TOKEN_RE.finditer(text) if m.lastgroup != "ws"]
    for i, tok in enumerate(toks):
        if tok == "{":
            count = i >= 1 and toks[i - 1].isdigit() and (i < 2 or toks[i - 2] in (";", "{", "}"))
            stack.append(count)
            deepest = max(deepest, sum(stack))
        elif tok == "}" and stack:
            stack.pop()
    return deepest


class MotionBudget:
    """One plan's running total against its limits (see the module docstring).

    :meth:`charge` takes the plan's segments in order; a segment that would exceed a limit raises
    :class:`BudgetExceeded` and is *not* added, so the caller can refuse it and stop the plan.
    """

    def __init__(
        self, sset: SkillSet, limits: BudgetLimits | None = None, exec_model: ExecTimeModel | None = None
    ) -> None:
        self.skill_set = sset
        self.limits = limits if limits is not None else (budget_limits(sset) or BudgetLimits())
        self._exec_model = exec_model
        self.used = Usage()
        self.segments = 0
        self._texts: list[str] = []

    @property
    def exec_model(self) -> ExecTimeModel:
        if self._exec_model is None:
            self._exec_model = load_exec_time_model()
        return self._exec_model

    def cost(self, calls: list[SkillCall]) -> Usage:
        """Worst-case cost of parsed calls (``repeat`` already holds the enclosing loop counts)."""
        out = Usage()
        for c in calls:
            per = self.limits.costs.get(c.name, {})
            for dim, v in per.items():
                amount = self._arg_cost(c) if v == ARG else float(v)
                setattr(out, dim, getattr(out, dim) + amount * c.repeat)
            out.calls += c.repeat
        if math.isfinite(self.limits.max_time_s) and calls:
            try:
                out.time_s = self.exec_model.estimate(self.skill_set.robot_type, calls).maximum
            except (ExecTimeError, UnknownRobotType) as exc:
                raise BudgetExceeded(f"the plan's execution time cannot be bounded: {exc}") from None
        return out

    def _arg_cost(self, c: SkillCall) -> float:
        v = c.args[0] if c.args else None
        if isinstance(v, Var):
            hi = self.skill_set.skills[c.name].args[0].max
            return abs(float(hi)) if hi is not None else INF
        return abs(float(v)) if isinstance(v, (int, float)) and not isinstance(v, bool) else 0.0

    def charge(self, text: str) -> Usage:
        """Add the next segment; returns its cost. Raises BudgetExceeded (nothing added) when the
        plan would go over a limit, SkillParseError when the text is not a valid continuation."""
        texts = [*self._texts, text]
        calls = self.skill_set.parse_segments(texts)[-1]  # carries loops opened in earlier segments
        depth = loop_depth(";".join(texts)) if self.skill_set.language == "minispec" else 0
        lim = self.limits
        if depth > lim.max_loop_depth:
            raise BudgetExceeded(
                f"loops nested {depth} deep; the limit is {lim.max_loop_depth:g} "
                f"(skill set {self.skill_set.name!r})"
            )
        cost = self.cost(calls)
        total = self.used + cost
        for name, value, limit, unit in (
            ("distance", total.distance_cm, lim.max_distance_cm, "cm"),
            ("rotation", total.rotation_deg, lim.max_rotation_deg, "deg"),
            ("execution time", total.time_s, lim.max_time_s, "s"),
            ("skill calls", total.calls, lim.max_calls, ""),
        ):
            if value > limit:
                raise BudgetExceeded(
                    f"plan {name} would reach {_fmt(value)}{unit and ' ' + unit} (this segment: "
                    f"{_fmt(value - getattr(self.used, _FIELD[name]))}), over the limit of "
                    f"{_fmt(limit)}{unit and ' ' + unit} per plan (skill set {self.skill_set.name!r}; "
                    "loops count every repeat)"
                )
        self.used = total
        self.segments += 1
        self._texts.append(text)
        return cost


_FIELD = {
    "distance": "distance_cm",
    "rotation": "rotation_deg",
    "execution time": "time_s",
    "skill calls": "calls",
}


def _fmt(x: float) -> str:
    return "unbounded" if math.isinf(x) else (f"{x:.0f}" if float(x).is_integer() else f"{x:.1f}")


class PlanBudgets:
    """The planner's budgets, one per generation, bounded in number (least recently used dropped).

    A dropped (or never seen) generation's budget is rebuilt from the segments it already
    dispatched, so the verdict never depends on the cache and memory stays flat however many
    tasks pass (no per-task clean-up hook is needed in the planner).
    """

    def __init__(self, exec_model: ExecTimeModel | None = None, max_plans: int = 1024) -> None:
        self.exec_model = exec_model
        self.max_plans = max_plans
        self._plans: OrderedDict[Hashable, MotionBudget] = OrderedDict()

    def __len__(self) -> int:
        return len(self._plans)

    def check(self, key: Hashable, sset: SkillSet, dispatched: list[str], text: str) -> str | None:
        """Charge segment ``text`` of plan ``key``; None if within budget, else the reason."""
        try:
            limits = budget_limits(sset)
            if limits is None:
                return None
            budget = self._plans.pop(key, None)
            if budget is None or budget.skill_set is not sset or budget.segments != len(dispatched):
                budget = MotionBudget(sset, limits, self.exec_model)
                for earlier in dispatched:
                    budget.charge(earlier)
            budget.charge(text)
        except (BudgetExceeded, MotionBudgetError) as exc:
            return str(exc)
        except SkillParseError as exc:
            return f"the plan's structure cannot be checked: {exc}"
        self._plans[key] = budget
        while len(self._plans) > self.max_plans:
            self._plans.popitem(last=False)
        return None
