"""Time-utility functions (TimelyLLM paper §2.3, Eq. 1, and §4.2 for segment TUFs).

A TUF maps a response time ``t`` (seconds) to the utility a robot gets from an answer:

    TUF(t) = min(beta, alpha * (t - ERT) + beta)                      (Eq. 1)

``ERT`` is the expected response time (the soft deadline), ``alpha <= 0`` the slope of the
decline after it and ``beta > 0`` the initial utility. The first segment of a plan uses the
agent's TUF as given (TUF_0). Later segments use TUF_1, which inherits alpha and beta but has
ERT = 0, because the robot is already waiting once its previous action has finished:

    TUF_1(t) = min(beta, alpha * max(t, 0) + beta)

The public TimelyLLM workloads write a TUF as ``[Umax, ERT, t_zero]`` (utility reaches zero at
``t_zero``); :meth:`TUF.from_public` converts that form.

This module is the one home of the TUF maths; the scheduler, the policies, the metrics and the
trace readers call these functions instead of writing the formulas out (their float operations
are the ones the callers used to inline, so results stay bit-identical):

* :func:`utility` — Eq. 1 for a segment: ``min(β, α·(max(W, 0) − ERT_k) + β)`` (TUF_0 with
  ``ERT_k = ERT``, TUF_1 with ``ERT_k = 0``), and :func:`utilities`, the same over numpy arrays;
* :func:`segment_deadline` — ``D = ref + ERT_k − net``, the latest generation end of a segment whose
  action may still start on time (``ref``: arrival for k = 0, previous action's end after);
* :func:`utility_span` / :func:`zero_utility_time` — ``β/|α|`` and ``D + β/|α|``: where utility
  reaches 0 (``inf`` for a flat TUF);
* :func:`waiting_time` — ``W(s_k) = F + net − ref`` of a segment whose generation ends at ``F``
  (``F = t + G`` when it starts at ``t``): the argument of Eq. 1 the priorities, the ``timely``
  index and its admission evaluate (floats or numpy arrays alike);
* :func:`on_time` — whether a response (or segment waiting) time met its ERT, the one rule of the
  metrics, the timeline and the demo's progress line;
* :func:`is_urgent` / :func:`tuf_class` — the urgent/normal class of a TUF (ERT < 1 s).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:  # numpy only for the array form: the TUF itself imports with the standard library alone
    import numpy as np

# A task whose ERT is below this is "urgent", else "normal" (the paper's two classes, §7.1: urgent
# requests need ~200 ms, normal ones tolerate ~1 s).
URGENT_ERT_S = 1.0

# How far past its ERT a response still counts as on time: one nanosecond, the resolution of a ROS
# time stamp (see :func:`on_time`).
ON_TIME_TOLERANCE_S = 1e-9

# A float, or a numpy array of them (the long-queue path of the PUD priority).
Times = TypeVar("Times", float, "np.ndarray")


def utility(w: float, ert: float, alpha: float, beta: float) -> float:
    """Eq. 1 at response time (or segment waiting time) ``w``: ``min(β, α·(max(w, 0) − ERT) + β)``.

    Unclamped below (negative once past the zero-utility time). ``max(w, 0)`` only matters for
    TUF_1 (``ERT = 0``, §4.2): an action that can start early is worth β, not more. A nan ``w``
    counts as 0 (worth β); a flat TUF (``α = 0``) at ``w = +inf`` gives nan, like :func:`utilities`."""
    u = alpha * ((w if w > 0.0 else 0.0) - ert) + beta
    return beta if u > beta else u


def utilities(w: np.ndarray, ert: np.ndarray, alpha: np.ndarray, beta: np.ndarray) -> np.ndarray:
    """:func:`utility` over arrays (the long-queue path of the PUD priority; equal for finite ``w``)."""
    import numpy as np  # only the array path needs numpy (see the module imports)

    out: np.ndarray = np.minimum(alpha * (np.maximum(w, 0.0) - ert) + beta, beta)
    return out


def waiting_time(gen_end: Times, net: Times, ref: Times) -> Times:
    """``W(s_k) = F + net − ref``: how long after ``ref`` the action of a segment whose generation
    ends at ``F`` (``gen_end``) starts, ``net`` (planner→robot latency) later. For k = 0 (``ref`` =
    arrival) the response time; for k > 0 (``ref`` = the previous action's estimated end) the robot's
    wait, negative when the segment is early. A candidate that starts generating at ``t`` with
    estimate G ends at ``F = t + G``: callers pass ``t + g``, so the sum is ``((t + G) + net) − ref``
    in this order (the priorities' scalar and numpy paths rely on the same IEEE operations)."""
    w: Times = gen_end + net - ref
    return w


def on_time(w: float, ert: float) -> bool:
    """Whether a response time (or a segment's waiting time, against ``ERT_k``) met its ERT: the
    action started no later than the ERT, where Eq. 1 still gives β.

    Tolerance :data:`ON_TIME_TOLERANCE_S` (1 ns), the one rule for the metrics, the timeline
    (``missed_ert``) and the demo's progress line, which once used 0, 1 ns and 0. Why 1 ns and not
    0: times read back from a bag or a ROS message are whole nanoseconds, each stamp rounded by up
    to ½ ns, so a response the simulator measured exactly at the ERT can read 1 ns late from its own
    bag; and a segment timed to end exactly at its deadline (``ref + ERT − net``, then ``+ net −
    ref``) can land one float ulp past the ERT. Neither is lateness; anything above 1 ns is
    (DDS latency alone is ~1e5 times larger). A nan ``w`` (the action never started) is not on time."""
    return w <= ert + ON_TIME_TOLERANCE_S


def segment_deadline(ref: float, ert_k: float, net: float) -> float:
    """``D = ref + ERT_k − net``: the latest generation end of a segment for its action to start
    within ERT_k of ``ref`` (arrival for k = 0, the previous action's end after; ``net``: the
    planner→robot latency)."""
    return ref + ert_k - net


def utility_span(alpha: float, beta: float) -> float:
    """``β/|α|``: how long past its ERT a TUF keeps a positive utility (``inf`` for a flat TUF)."""
    return beta / -alpha if alpha < 0.0 else math.inf


def zero_utility_time(deadline: float, alpha: float, beta: float) -> float:
    """``deadline + β/|α|``: where utility reaches 0 (``deadline``: ERT for a response time, a
    :func:`segment_deadline` for a segment's generation end); ``inf`` for a flat TUF."""
    return deadline + utility_span(alpha, beta) if alpha < 0.0 else math.inf


class InvalidTUF(ValueError):
    """Raised when TUF parameters cannot describe a non-increasing utility."""


@dataclass(frozen=True, slots=True)
class TUF:
    """One time-utility function. Times are seconds, utilities are unitless."""

    ert: float
    alpha: float
    beta: float

    def __post_init__(self) -> None:
        for name in ("ert", "alpha", "beta"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise InvalidTUF(f"{name} must be a number, got {value!r}")
            if not math.isfinite(value):
                raise InvalidTUF(f"{name} must be finite, got {value!r}")
        if self.ert < 0:
            raise InvalidTUF(f"ERT must be >= 0 s, got {self.ert}")
        if self.alpha > 0:
            raise InvalidTUF(f"alpha must be <= 0 (utility may not grow with delay), got {self.alpha}")
        if self.beta <= 0:
            raise InvalidTUF(f"beta must be > 0, got {self.beta}")

    def __call__(self, t: float) -> float:
        """Utility of a response after ``t`` seconds (Eq. 1, unclamped below)."""
        return utility(t, self.ert, self.alpha, self.beta)

    def scaled(self, factor: float) -> TUF:
        """The same TUF on a time axis stretched by ``factor``: ERT and zero-utility time multiply by
        it, the slope divides by it, beta stays. Used to run the paper's GPU-calibrated TUFs on a
        slower engine (the CPU demo) without changing what "urgent" means."""
        if not (isinstance(factor, (int, float)) and math.isfinite(factor) and factor > 0):
            raise InvalidTUF(f"TUF scale factor must be a finite number > 0, got {factor!r}")
        return TUF(ert=self.ert * factor, alpha=self.alpha / factor, beta=self.beta)

    @property
    def zero_time(self) -> float:
        """Response time at which utility reaches 0 (``inf`` for a flat TUF)."""
        return zero_utility_time(self.ert, self.alpha, self.beta)

    @classmethod
    def from_public(cls, umax: float, ert: float, t_zero: float) -> TUF:
        """Build from the public TimelyLLM form ``[Umax, ERT, t_zero]``: alpha = -Umax / (t_zero - ERT)."""
        if not all(isinstance(v, (int, float)) and math.isfinite(v) for v in (umax, ert, t_zero)):
            raise InvalidTUF(f"TUF [Umax, ERT, t_zero] must be finite numbers, got {[umax, ert, t_zero]!r}")
        if t_zero <= ert:
            raise InvalidTUF(f"t_zero ({t_zero}) must be greater than ERT ({ert})")
        return cls(ert=float(ert), alpha=-float(umax) / (float(t_zero) - float(ert)), beta=float(umax))


# TUF classes used throughout the paper's evaluation (§2.3, §7.1; public code [1, 1, 1.5] and
# [2, 0.2, 0.5]): normal requests tolerate ~1 s (HCI), urgent ones need ~200 ms (drone at 2 m/s).
NORMAL_TUF = TUF(ert=1.0, alpha=-2.0, beta=1.0)
URGENT_TUF = TUF.from_public(2.0, 0.2, 0.5)


def is_urgent(tuf: TUF) -> bool:
    """Whether a task with this TUF is in the urgent class (ERT below :data:`URGENT_ERT_S`)."""
    return tuf.ert < URGENT_ERT_S


def tuf_class(tuf: TUF) -> str:
    """The metric class a TUF implies when a task names none: ``"urgent"`` or ``"normal"``."""
    return "urgent" if is_urgent(tuf) else "normal"
