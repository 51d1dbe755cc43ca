"""Which prompt tokens one engine step feeds: the llama.cpp engine's rule, shared with the simulator.

Why one module: the llama.cpp engine does not feed whole prompts. Each step it decodes every running
generation's next token and adds at most ``chunk`` prompt tokens (or one ``fast`` batch of a long
prompt: llama.cpp's CPU matmul is much cheaper per token from some batch size up), most urgent
prompt first, and holds a prompt back while a generation with a strictly smaller priority is
decoding (a CPU step that also feeds a prompt is many times longer, which would delay an urgent
segment). With a per-step budget from the planner (``token_budget``) the budget replaces the chunk
and there is no hold-back. How prompt work is spread over steps decides when each task's first
token comes; the simulated engine predicts a llama.cpp run only if it spreads it the same way, so
both call :func:`prompt_takes` (see :class:`~timely_llm_ros.engines.sim.SimEngine`'s ``prompt_rule``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class PromptRule:
    """The engine-side prompt schedule (the llama.cpp options of the same names).

    ``chunk``: at most this many prompt tokens per step (None: whole prompts); ``fast``: a prompt with
    at least this many tokens left is fed this many at once instead, as the whole step's prompt work
    (None: off)."""

    chunk: int | None = None
    fast: int | None = None

    def __post_init__(self) -> None:
        for name in ("chunk", "fast"):
            v = getattr(self, name)
            if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < 1):
                raise ValueError(f"prompt rule: {name} must be a positive integer or None, got {v!r}")


def prompt_takes(
    rule: PromptRule,
    decoding: Iterable[float],
    pending: list[tuple[float, int, int]],
    planned: int | None = None,
    *,
    planner_budget: bool = False,
) -> list[tuple[int, int]]:
    """This step's prompt work: ``(index into pending, tokens to feed)`` in feeding order.

    ``decoding``: priorities of the generations that decode one token this step; ``pending``:
    ``(priority, admission order, prompt tokens left)`` of each generation with prompt work;
    ``planned``/``planner_budget``: the planner's per-step budget once it drives one (module
    docstring). Smaller priority first, then admission order. A prompt ranked strictly after a
    decoding generation, or after a prompt that completes in this step, waits (it decodes from the
    next step on, and a longer step would only delay its first token)."""
    top = min(decoding, default=math.inf)
    budget = planned if planner_budget else rule.chunk
    out: list[tuple[int, int]] = []
    for i in sorted(range(len(pending)), key=lambda j: (pending[j][0], pending[j][1])):
        prio, _order, rest = pending[i]
        if (prio > top and not planner_budget) or (budget is not None and budget <= 0):
            break
        fast = rule.fast
        if (
            not planner_budget
            and budget is not None
            and fast is not None
            and rest >= fast
            and budget == rule.chunk
        ):
            take, budget = fast, 0  # one efficient batch is the whole step
        else:
            take = rest if budget is None else min(rest, budget)
            if budget is not None:
                budget -= take
        out.append((i, take))
        if take == rest and not planner_budget:  # decoding from the next step on: only equal ranks may share
            top = min(top, prio)
    return out
