"""What the HTTP engine keeps per generation, and the records it hands out.

The life cycle of a generation (pending, running, suspended, ...) is the engine-independent
:class:`~timely_llm_ros.engines.sequences.Sequence`; a generation on a server adds its stream and
submission number, the tokens that arrived but were not delivered yet, its llama.cpp slot, the
segment boundary of its current submission and, after a failover, what it must regenerate and verify
(:meth:`~.openai_endpoint.OpenAIEndpointEngine.adopt`).
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from timely_llm_ros.core.engine import Context
from timely_llm_ros.core.options.replay import PlanLiteral
from timely_llm_ros.engines.openai_http import HttpFailure, Stream
from timely_llm_ros.engines.sequences import Sequence

__all__ = ["Detached", "Fault", "ResumeRecord", "ServerGen"]


@dataclass
class ResumeRecord:
    """Prefix-cache hit of one resumed submission, as the server counted it."""

    gen_id: int
    prompt_tokens: int  # ids re-submitted (prompt + generated)
    cached_tokens: int | None = None  # from the server's first chunk with a count


@dataclass
class Detached:
    """A generation taken off a server: its ids, budget, prefix key, and the segment boundary where
    its interrupted submission began with the text delivered since (for a verified replay); in replay
    mode its literal, positioned at that boundary."""

    context: Context
    max_tokens: int
    key: str | None
    boundary: int
    text: str
    plan: PlanLiteral | None = None


@dataclass
class Fault:
    """A generation whose stream failed; ``transport`` = the server is at fault (re-place it)."""

    gen_id: int
    message: str
    transport: bool


class ServerGen(Sequence):
    """A generation on this server: its stream and submission number, tokens arrived but not yet
    delivered, the prefix-cache record, the llama.cpp slot, the segment boundary of the current
    submission and, after a failover, what it still has to regenerate and verify."""

    __slots__ = (
        "key",
        "sub",
        "stream",
        "buf",
        "fault",
        "record",
        "last_t",
        "sent_at",
        "uncached",
        "text_carry",
        "slot",
        "sub_start",
        "sub_text",
        "replay_ids",
        "replay_text",
        "replay_seen",
        "plan",
        "plan_start",
    )

    def __init__(
        self, gen_id: int, ids: list[int], n_prompt: int, max_tokens: int, key: str | None, order: int
    ) -> None:
        super().__init__(gen_id, ids, max_tokens, order)  # template-wrapped prompt + generated ids
        self.n_prompt = n_prompt
        self.n_gen = len(ids) - n_prompt
        self.key = key
        self.sub = 0  # submission number; events of older submissions are stale
        self.stream: Stream | None = None
        self.buf: deque[list] = deque()  # [id | None, text, t, finish reason] not yet delivered
        self.fault: HttpFailure | None = None
        self.record: ResumeRecord | None = None
        self.last_t = math.nan
        self.sent_at = math.nan
        self.uncached = 0
        self.text_carry = ""
        self.slot: int | None = None  # llama.cpp slot of the last submission
        self.sub_start = len(ids)  # ids at the start of the current submission (a segment boundary)
        self.sub_text: list[str] = []  # text delivered since then
        # failover replay (see adopt): ids and text the planner already has, to regenerate and verify
        self.replay_ids: deque[int] = deque()
        self.replay_text = ""
        self.replay_seen = ""
        self.plan: PlanLiteral | None = None  # replay mode: the literal and how much was delivered
        self.plan_start = 0  # the literal's position at the start of the current submission

    def push(self, tok: int) -> None:
        """One more generated id the planner has."""
        self.ids.append(tok)
        self.n_gen += 1
