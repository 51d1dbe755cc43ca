"""Measured skill execution times and refitted execution-time models (pure Python).

The time-model node (:mod:`timely_llm_ros.nodes.timemodel`) only wires ROS: it learns each DONE
segment's calls and robot type from the topics and hands the measurement to :class:`Measurements`;
everything that turns measurements into models lives here, so it can be tested without ROS and
reused offline.

* A DONE segment with exactly one call is a clean measurement of that skill; segments with several
  calls only count toward a per-robot-type ratio measured / expected (the split between their calls
  is unknown, so no per-skill number is invented).
* Refit: skills with at least ``min_samples`` measurements get a ``samples`` model of the measured
  values — or, for argument-dependent models (``poly``, ``argument``) measured at ≥ 2 distinct
  argument values, a least-squares line in the argument (when slope and intercept are ≥ 0) — and
  every other skill keeps its configured model. The output is the format
  :func:`~timely_llm_ros.core.exectime.load_exec_time_file` reads.

Also here: :func:`estimate_segment`, the answer of the ``EstimateExecTime`` service (which skill
set parses the text, and the model's minimum / expected / maximum).
"""

from __future__ import annotations

import math
import os
import re
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.exectime import ExecTimeModel
from timely_llm_ros.core.paths import config_path
from timely_llm_ros.core.skills.loader import load_skill_set

# a robot type from the wire becomes a file name: nothing that could leave the output directory
_SAFE_NAME = re.compile(r"[A-Za-z0-9_-]+")


@dataclass
class SkillStats:
    """Measured durations of one skill (single-call segments), with the call's numeric argument."""

    durations: list[float] = field(default_factory=list)
    args: list[float | None] = field(default_factory=list)

    def add(self, duration: float, arg: float | None) -> None:
        self.durations.append(duration)
        self.args.append(arg)

    def summary(self) -> dict[str, float]:
        d = self.durations
        mean = math.fsum(d) / len(d)
        var = math.fsum((x - mean) ** 2 for x in d) / len(d)
        return {"n": len(d), "mean": mean, "std": math.sqrt(var), "min": min(d), "max": max(d)}


def first_number(args: list[str]) -> float | None:
    """The first argument that reads as a finite number (the argument a ``poly`` model uses)."""
    for a in args:
        try:
            v = float(a)
        except ValueError:
            continue
        if math.isfinite(v):
            return v
    return None


def fit_line(xs: list[float], ys: list[float]) -> tuple[float, float] | None:
    """Least-squares ``y = a·x + b``; None with fewer than two distinct x."""
    if len(set(xs)) < 2:
        return None
    n = len(xs)
    mx = math.fsum(xs) / n
    my = math.fsum(ys) / n
    sxx = math.fsum((x - mx) ** 2 for x in xs)
    sxy = math.fsum((x - mx) * (y - my) for x, y in zip(xs, ys))
    a = sxy / sxx
    return a, my - a * mx


class Measurements:
    """Per robot type: per-skill statistics and the measured / expected ratios of whole segments."""

    def __init__(self) -> None:
        self.stats: dict[str, dict[str, SkillStats]] = defaultdict(lambda: defaultdict(SkillStats))
        self.ratios: dict[str, list[float]] = defaultdict(list)  # robot type -> measured / expected

    def record(
        self, robot_type: str, calls: list[tuple[str, list[str]]], duration: float, expected: float
    ) -> bool:
        """One measured segment; True when it measured a skill (exactly one call), else False."""
        if expected > 0:
            self.ratios[robot_type].append(duration / expected)
        if len(calls) != 1:
            return False
        name, args = calls[0]
        self.stats[robot_type][name].add(duration, first_number(args))
        return True

    def robot_types(self) -> list[str]:
        return sorted(set(self.stats) | set(self.ratios))

    def ratio(self, robot_type: str) -> dict[str, float] | None:
        r = self.ratios.get(robot_type)
        if not r:
            return None
        return {"n": len(r), "mean": math.fsum(r) / len(r)}

    def refitted(self, robot_type: str, min_samples: int) -> dict[str, Any]:
        """The model file content for ``robot_type`` with measured skills refitted (the configured
        ``config/exec_time/<robot_type>.yaml`` for the rest)."""
        path = config_path("exec_time", f"{robot_type}.yaml")
        data: dict[str, Any] = (
            yaml.safe_load(path.read_text(encoding="utf-8"))
            if path.is_file()
            else {"robot_type": robot_type, "skills": {}}
        )
        skills = dict(data.get("skills") or {})
        notes = {}
        for name, st in sorted(self.stats.get(robot_type, {}).items()):
            if len(st.durations) < min_samples:
                continue
            old = skills.get(name) or {}
            line = None
            if old.get("model") in ("poly", "argument"):
                pts = [(a, d) for a, d in zip(st.args, st.durations) if a is not None]
                line = fit_line([a for a, _ in pts], [d for _, d in pts]) if pts else None
            if line is not None and line[0] >= 0 and line[1] >= 0:
                skills[name] = {
                    "model": "poly",
                    "coef": [round(line[0], 6), round(line[1], 6)],
                    "arg_range": list(old["arg_range"]),
                }
            else:
                skills[name] = {"model": "samples", "samples": [round(d, 6) for d in st.durations]}
            notes[name] = st.summary()
        return {
            "robot_type": robot_type,
            "skills": skills,
            "refit": {"measured": notes, "segment_ratio_measured_over_expected": self.ratio(robot_type)},
        }

    def write(self, directory: Path, min_samples: int, header: str) -> list[Path]:
        """Write ``<directory>/<robot_type>.yaml`` for every measured robot type (atomically: a reader
        never sees a half-written model); returns the files. Raises OSError."""
        directory.mkdir(parents=True, exist_ok=True)
        written = []
        for rtype in self.robot_types():
            if not _SAFE_NAME.fullmatch(rtype):
                continue  # a robot type from the wire must not become a path outside the directory
            target = directory / f"{rtype}.yaml"
            tmp = target.with_suffix(".yaml.tmp")
            tmp.write_text(
                header + yaml.safe_dump(self.refitted(rtype, min_samples), sort_keys=False), encoding="utf-8"
            )
            os.replace(tmp, target)
            written.append(target)
        return written


def estimate_segment(
    model: ExecTimeModel, defaults: Mapping[str, str], robot_type: str, skill_set: str, text: str
) -> tuple[float, float, float]:
    """(minimum, expected, maximum) execution time of a segment, or ValueError/KeyError with the
    reason (SkillParseError, a ValueError, for text that does not parse). ``defaults``: robot type ->
    the skill set used when ``skill_set`` is empty."""
    if not robot_type.strip():
        raise ValueError("robot_type is empty")
    if robot_type not in model.robot_types():
        raise ValueError(
            f"no execution-time model for robot type {robot_type!r}; available: "
            f"{', '.join(model.robot_types())}"
        )
    name = skill_set.strip() or defaults.get(robot_type)
    if not name:
        raise ValueError(f"no skill set for robot type {robot_type!r}; name one in skill_set")
    sset = load_skill_set(name)
    if sset.robot_type != robot_type:
        raise ValueError(f"skill set {name!r} is for {sset.robot_type!r} robots, not {robot_type!r}")
    if not text.strip():
        raise ValueError("segment_text is empty")
    calls = sset.parse(text)
    if not calls:
        raise ValueError("segment_text holds no skill call")
    est = model.estimate(robot_type, calls)
    return est.minimum, est.expected, est.maximum
