"""Response-length predictor and segment generation-time estimate G(·) (related paper 002, TimeBill).

TimeBill predicts a response's length N̂ before generating it, turns it into an execution time
with its estimator (prefill ``aN² + bN + c``, decode step ``pN_kv + q``) and guards against
under-prediction with a *pessimistic factor* k: ``N̂_W = min(k·N̂, N_max)`` (its Eq. 9). Here the
unit of prediction is a *segment* (paper 000 §4.3: G(s_k), "the average generation time calculated
from profiling data"), and the predictor is learned **online** from the segments the planner has
finished: per skill set, task class and position (the first segment of a plan, which follows the
prompt, differs from the later ones), a running mean of their token counts.

:class:`LengthPredictor` keeps those means and measures its own error: every observation is first
compared with what it would have predicted (mean absolute error, bias, and the share of segments
longer than the pessimistic bound ``k·N̂``).

:func:`segment_time` turns a token count into seconds for the scheduler's G(·): the engine's
measured per-token decode time (``1 / Engine.speed()``, pure decode steps) times the tokens, plus,
for a first segment, the prefill of the task's own prompt tokens (the engine's cost profile, where
it has one). Before the engine has measured a speed, or before a class has ``min_obs`` segments,
the planner keeps the skill set's prior G (``segment_gen_estimate_s``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass
class _Mean:
    n: int = 0
    mean: float = 0.0

    def add(self, x: float) -> None:
        self.n += 1
        self.mean += (x - self.mean) / self.n


@dataclass
class PredictorError:
    """Errors of the predictions made before each observation (tokens)."""

    n: int = 0
    abs_sum: float = 0.0
    signed_sum: float = 0.0
    rel_sum: float = 0.0
    over_bound: int = 0  # segments longer than the pessimistic bound k·N̂

    def as_dict(self) -> dict[str, float | int]:
        n = self.n
        return {
            "n": n,
            "mae_tokens": self.abs_sum / n if n else math.nan,
            "bias_tokens": self.signed_sum / n if n else math.nan,
            "mape_pct": 100.0 * self.rel_sum / n if n else math.nan,
            "over_bound_pct": 100.0 * self.over_bound / n if n else math.nan,
        }


class LengthPredictor:
    """Online mean segment length per (skill set, task class, first/later segment).

    ``k`` is TimeBill's pessimistic factor (k ≥ 1); ``min_obs`` observations are needed before a
    key predicts anything (until then the caller keeps its prior)."""

    def __init__(self, k: float = 1.0, min_obs: int = 3) -> None:
        if not (isinstance(k, (int, float)) and math.isfinite(k) and k >= 1.0):
            raise ValueError(f"pessimistic factor k must be a finite number >= 1, got {k!r}")
        if not isinstance(min_obs, int) or min_obs < 1:
            raise ValueError(f"min_obs must be an integer >= 1, got {min_obs!r}")
        self.k = float(k)
        self.min_obs = min_obs
        self._stats: dict[tuple[str, str, bool], _Mean] = {}
        self.error = PredictorError()

    @staticmethod
    def key(skill_set: str, task_class: str, index: int) -> tuple[str, str, bool]:
        return (skill_set, task_class, index == 0)

    def predict(self, skill_set: str, task_class: str, index: int) -> float | None:
        """N̂: mean token count of this kind of segment (None until ``min_obs`` were seen)."""
        s = self._stats.get(self.key(skill_set, task_class, index))
        if s is None or s.n < self.min_obs:
            return None
        return s.mean

    def pessimistic(self, skill_set: str, task_class: str, index: int, n_max: int) -> float | None:
        """TimeBill Eq. 9's ``N̂_W = min(k·N̂, N_max)`` (None while :meth:`predict` is None)."""
        n = self.predict(skill_set, task_class, index)
        return None if n is None else min(self.k * n, float(n_max))

    def observe(self, skill_set: str, task_class: str, index: int, n_tokens: int) -> None:
        """A finished segment's token count; scores the prediction it replaces first."""
        if not (isinstance(n_tokens, int) and n_tokens > 0):
            return
        pred = self.predict(skill_set, task_class, index)
        if pred is not None:
            e = self.error
            e.n += 1
            e.abs_sum += abs(pred - n_tokens)
            e.signed_sum += pred - n_tokens
            e.rel_sum += abs(pred - n_tokens) / n_tokens
            e.over_bound += n_tokens > self.k * pred
        self._stats.setdefault(self.key(skill_set, task_class, index), _Mean()).add(float(n_tokens))

    def table(self) -> dict[str, dict[str, float]]:
        """Current means per key (for reports): ``"skill_set/class/first|next" -> {n, mean}``."""
        return {
            f"{s}/{c}/{'first' if first else 'next'}": {"n": m.n, "mean": m.mean}
            for (s, c, first), m in sorted(self._stats.items())
        }


def segment_time(tokens: float, speed: float | None, prefill_s: float = 0.0) -> float | None:
    """Seconds to generate ``tokens`` at ``speed`` tokens/s per sequence, plus ``prefill_s``
    (first segments); None without a measured speed."""
    if speed is None or not speed > 0 or not math.isfinite(speed):
        return None
    return prefill_s + tokens / speed
