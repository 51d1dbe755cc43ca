"""Replay mode (``plan_source: reference``): a real engine writes a task's reference plan exactly.

Why: a real model writes its own plans — different per model, dtype and engine, random with dummy
weights — so its runs cannot be compared with the simulator's, the paper's or each other's. In
replay mode the task's reference plan (its LRTrace record's plan, or the simulated engine's choice
from ``sim_plans``) becomes the structured-output constraint of its generation: the exact literal.
The engine still computes every token (prefill, decode steps, batching, suspension and resumption
are real), the segmenter cuts the literal into segments as always, and the robots execute them; only
the choice of the text is taken away from the model. Timing is then comparable across engines, models
(even dummy weights) and the simulator, which emits the same plan.

The engine-independent part lives here, behind the engine port (``Engine.admit(..., plan=...)`` on
engines with ``replays_plans``):

* :func:`reference_literal` — which text a task replays (the rest after a journal seed);
* :class:`PlanLiteral` — how much of the literal a generation has written, so that an engine that
  starts a *new* request on resumption (vLLM, HTTP servers) constrains it to the rest of the literal
  only; an engine whose grammar state survives the suspension (llama.cpp) needs none of it;
* :func:`gbnf_literal` / :func:`regex_literal` — the literal as a GBNF grammar (llama.cpp, xgrammar)
  or a regular expression (vLLM's ``regex`` structured output).

The model still chooses *how* to spell the literal in tokens (``"mf"`` may be one token or two):
greedy decoding under the constraint picks the model's most likely tokenization, which may differ
from the tokenizer's own. :func:`token_counts` compares the two (realbench reports it per task).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "MODEL",
    "PLAN_SOURCES",
    "REFERENCE",
    "PlanLiteral",
    "ReplayError",
    "check_plan_source",
    "gbnf_literal",
    "reference_literal",
    "regex_literal",
    "replay_budget",
    "token_counts",
]

MODEL, REFERENCE = "model", "reference"
#: ``model``: the model writes its own plan under the skill set's grammar (default);
#: ``reference``: tasks with a reference plan replay it (this module's docstring).
PLAN_SOURCES = (MODEL, REFERENCE)


class ReplayError(ValueError):
    """A replayed generation left its literal, or a bad plan source."""


def check_plan_source(value: object) -> str:
    """``value`` if it names a plan source, else :class:`ReplayError` listing them."""
    if value not in PLAN_SOURCES:
        raise ReplayError(f"plan_source must be one of {', '.join(PLAN_SOURCES)}, got {value!r}")
    return str(value)


def reference_literal(reference_plan: str | None, seed: str = "") -> str | None:
    """The text a replayed generation must write: the reference plan after ``seed`` (the plan text a
    robot received before a planner restart, already in the prompt). None when the task has no
    reference plan (it keeps the skill grammar) or nothing is left of it; :class:`ReplayError` when
    the seed is not the start of the reference plan (the robot got another plan)."""
    if not reference_plan:
        return None
    if not reference_plan.startswith(seed):
        raise ReplayError("the plan sent before the restart is not the start of the reference plan")
    return reference_plan[len(seed) :] or None


def replay_budget(literal: str, max_tokens: int) -> int:
    """Token budget of a replayed generation: at least one token per UTF-8 byte of the literal plus the
    end, since a model may spell it byte by byte — a replay must never be cut by ``max_tokens``."""
    return max(max_tokens, len(literal.encode("utf-8")) + 1)


@dataclass(slots=True)
class PlanLiteral:
    """A generation's literal and how many of its characters were generated (``done``)."""

    text: str
    done: int = 0

    def feed(self, piece: str) -> None:
        """Advance past ``piece``, the text of generated tokens; :class:`ReplayError` when it is not
        the literal's next text (an engine that ignored the constraint: never a silently other plan)."""
        if not piece:
            return
        if not self.text.startswith(piece, self.done):
            raise ReplayError(
                f"replayed generation left its reference plan at character {self.done}: wrote "
                f"{piece[:40]!r}, expected {self.text[self.done : self.done + 40]!r}"
            )
        self.done += len(piece)

    def rest(self) -> str:
        """What is left to write (the constraint of a request that starts now)."""
        return self.text[self.done :]

    @property
    def complete(self) -> bool:
        return self.done >= len(self.text)

    def at(self, done: int) -> PlanLiteral:
        """A copy positioned ``done`` characters in (a generation restarted at a segment boundary)."""
        if not 0 <= done <= len(self.text):
            raise ReplayError(f"position {done} outside a literal of {len(self.text)} characters")
        return PlanLiteral(self.text, done)


# llama.cpp's GBNF string escapes (grammar-parser.cpp: \x \u \U \t \r \n \\ \" \[ \]); xgrammar's
# EBNF parser reads the same. Everything else, non-ASCII included, is written as itself.
_GBNF_ESCAPES = {"\\": "\\\\", '"': '\\"', "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def gbnf_literal(text: str) -> str:
    """A GBNF grammar whose only sentence is ``text`` (root rule ``root``); ``""`` allows only the end."""
    out = []
    for ch in text:
        esc = _GBNF_ESCAPES.get(ch)
        if esc is None and (ord(ch) < 0x20 or ord(ch) == 0x7F):
            esc = f"\\x{ord(ch):02X}"
        out.append(esc or ch)
    return f'root ::= "{"".join(out)}"\n'


_REGEX_SPECIAL = set("\\.^$*+?()[]{}|/-")
_REGEX_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def regex_literal(text: str) -> str:
    """A regular expression matching exactly ``text`` (vLLM ``StructuredOutputsParams(regex=...)``).

    Why not ``re.escape``: it escapes spaces and other characters with backslashes that JSON-schema
    style regex dialects (xgrammar, outlines) do not all accept; only the metacharacters are escaped."""
    out = []
    for ch in text:
        if ch in _REGEX_SPECIAL:
            out.append("\\" + ch)
        elif ch in _REGEX_ESCAPES:
            out.append(_REGEX_ESCAPES[ch])
        elif ord(ch) < 0x20 or ord(ch) == 0x7F:
            out.append(f"\\x{ord(ch):02x}")
        else:
            out.append(ch)
    return "".join(out)


def token_counts(replayed: int, own: int) -> dict[str, float | int]:
    """Tokens a replayed plan took vs the model tokenizer's own tokenization of the same text."""
    return {
        "replayed_tokens": replayed,
        "own_tokens": own,
        "extra_tokens": replayed - own,
        "ratio": replayed / own if own else float("nan"),
    }
