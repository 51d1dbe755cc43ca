"""Prompt tokens per engine step chosen from the tightest running slack (related paper 004).

Paper 004 calls the number of tokens one iteration may process the *token budget* and shows it is a
latency knob: a small budget keeps decoding iterations short (inter-token latency) but delays the
first token of long prompts; a large one does the opposite. A fixed chunked-prefill size picks one
trade-off for all moments. Here it is chosen before every engine step:

* ``whole`` (off): prompts are prefilled whole (the engines' behaviour before this option);
* ``fixed``: at most ``chunk`` prompt tokens per step;
* ``slack``: small chunks while a generation that is decoding could miss its segment deadline,
  whole prompts otherwise. For every running generation ``r`` that already produced a token of its
  current segment (it decodes, its prompt is done) and whose TUF still decays (``α < 0``):

  - ``n_r`` = tokens left in its segment, at least 1 (``max_seg_tokens − seg_tokens``; with the
    length predictor on, ``max_seg_tokens`` is the predicted bound);
  - slack ``s_r = D_r − (t + n_r·T)`` with ``D_r`` its segment deadline and ``T`` the current
    decode-step time: how much longer its remaining steps may take in total;
  - it allows each of its remaining steps ``e_r = max(0, s_r) / n_r`` of extra prompt work; a
    generation already tardy (``s_r < 0``) is late whatever the chunk, so by default it limits
    nothing (holding prompts back for it would only make the waiting ones late too);
    ``protect_tardy`` gives it ``min_chunk`` instead.

  The budget is the largest chunk whose prefill time fits the smallest ``e_r``, at least
  ``min_chunk`` (progress: paper 004 warns that tiny chunks inflate time-to-first-token) and at
  most ``max_chunk``; with no such decoding generation, or when a prompt waiting for its first token
  has an earlier deadline than every decoding generation (paper 001's stage-aware batching: the
  most urgent request is in its prefill stage, so nothing is held back), the budget is unlimited.

The planner passes the budget to the engine before each step (``Engine.set_prefill_budget``); the
engine feeds prompt chunks in deadline order (``Engine.set_priority``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass

TOKEN_BUDGETS = ("whole", "fixed", "slack")


@dataclass(frozen=True)
class BudgetOptions:
    mode: str = "whole"
    chunk: int = 64  # ``fixed``: tokens per step
    min_chunk: int = 16  # ``slack``: never fewer (progress)
    max_chunk: int | None = None  # ``slack``: never more (None: up to a whole prompt)
    protect_tardy: bool = False  # ``slack``: a decoder already past its deadline also limits the chunk

    def __post_init__(self) -> None:
        if self.mode not in TOKEN_BUDGETS:
            raise ValueError(f"token_budget must be one of {', '.join(TOKEN_BUDGETS)}, got {self.mode!r}")
        for name in ("chunk", "min_chunk"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or v < 1:
                raise ValueError(f"{name} must be an integer >= 1, got {v!r}")
        if self.max_chunk is not None and (
            not isinstance(self.max_chunk, int) or self.max_chunk < self.min_chunk
        ):
            raise ValueError(f"max_chunk must be None or an integer >= min_chunk, got {self.max_chunk!r}")


@dataclass(frozen=True, slots=True)
class Running:
    """What the budget needs of one running generation (plain numbers: the rule is testable alone)."""

    deadline: float  # latest end of its current segment's generation (ref + ERT_k − net)
    tokens_left: int  # expected tokens left in the segment (>= 1)
    decoding: bool  # produced a token of this segment already (its prompt work is done)
    decays: bool  # α < 0: being late costs utility


def largest_chunk(allow_s: float, cost: Callable[[int], float], hi: int) -> int:
    """Largest ``c`` in ``[0, hi]`` with ``cost(c) <= allow_s`` (``cost`` non-decreasing)."""
    if hi <= 0 or cost(1) > allow_s:
        return 0
    lo = 1
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cost(mid) <= allow_s:
            lo = mid
        else:
            hi = mid - 1
    return lo


def choose_budget(
    opts: BudgetOptions,
    t: float,
    running: Iterable[Running],
    step_time: float | None,
    prefill_cost: Callable[[int], float] | None,
    limit: int = 1 << 16,
) -> int | None:
    """Prompt tokens the next step may feed (None: unlimited). See the module docstring."""
    if opts.mode == "whole":
        return None
    if opts.mode == "fixed":
        return opts.chunk
    runs = list(running)
    first_prompt = min((r.deadline for r in runs if not r.decoding), default=math.inf)
    if step_time is None or not step_time > 0 or prefill_cost is None:
        return None
    allow = math.inf
    for r in runs:
        if not r.decoding or not r.decays or r.deadline >= first_prompt:
            continue
        n = max(1, r.tokens_left)
        slack = r.deadline - (t + n * step_time)
        if slack < 0.0 and not opts.protect_tardy:
            continue
        allow = min(allow, max(0.0, slack) / n)
    if allow == math.inf:
        return None
    hi = opts.max_chunk if opts.max_chunk is not None else limit
    return min(hi, max(opts.min_chunk, largest_chunk(allow, prefill_cost, hi)))
