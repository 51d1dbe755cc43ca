"""The GBNF text that constrains a generation: a skill set's grammar, and the grammar of what may
follow a segment boundary (for engines whose resumed request starts a new derivation).

Why one module: the llama.cpp, vLLM and HTTP engines all take the same ``grammar`` option —
``"auto"`` (the grammar built from the skill set the prefix key names), ``None`` (off) or a mapping
key → GBNF — and the vLLM and HTTP engines both give a resumed request :func:`continuation_gbnf`.
"""

from __future__ import annotations

import re

from timely_llm_ros.core.engine import EngineError

__all__ = ["GrammarSpec", "GrammarTexts", "check_grammar_spec", "continuation_gbnf", "grammar_text"]

#: ``"auto"``, ``None`` or a mapping prefix key → GBNF text (None: that key unconstrained)
GrammarSpec = str | dict[str, str | None] | None


def check_grammar_spec(spec: object) -> None:
    if not (spec is None or spec == "auto" or isinstance(spec, dict)):
        raise EngineError(f"grammar must be 'auto', None or a mapping, got {spec!r}")


def grammar_text(spec: GrammarSpec, key: str | None) -> str | None:
    """The GBNF of prefix key ``key`` under ``spec`` (None: unconstrained)."""
    if key is None or spec is None:
        return None
    if isinstance(spec, dict):
        return spec.get(key)
    from timely_llm_ros.core.grammar import GrammarError, build_gbnf
    from timely_llm_ros.core.skills.loader import load_skill_set

    try:
        return build_gbnf(load_skill_set(key))
    except (KeyError, GrammarError):  # not a skill set, or free text (chatbot)
        return None


def continuation_gbnf(gbnf: str) -> str:
    """Grammar of the rest of a plan after a segment boundary.

    A segment ends after a complete statement, a ``;``, a ``}`` or a block-opening ``{``. What
    follows is: an optional ``;`` + whitespace, then plan text in which a ``}`` may close a block
    opened before the boundary. For the flat call language (no ``body`` rule) only the leading
    ``;`` is added. The result is GBNF for llama.cpp / xgrammar with the same rule names: a
    superset that keeps random or weak models inside the language; ``SkillSet.parse`` remains the
    gate on every segment.
    """
    lines = gbnf.splitlines()
    root_i = next((i for i, ln in enumerate(lines) if re.match(r"\s*root\s*::=", ln)), None)
    if root_i is None:
        raise EngineError("grammar has no root rule")
    rules = {ln.split("::=", 1)[0].strip() for ln in lines if "::=" in ln}
    if "body" in rules:  # MiniSpec: blocks nest, earlier segments may have left some open
        new_root = 'root ::= (";" ws)? body ("}" ";"? ws body)*'
    else:
        old = lines[root_i].split("::=", 1)[1].strip()
        new_root = f'root ::= (";" ws)? ({old})?'  # the rest may be just the final ";"
    lines[root_i] = new_root
    return "\n".join(lines) + "\n"


class GrammarTexts:
    """GBNF texts by (prefix key, resumed), built once each: the skill grammar for a first
    submission, its continuation for a resumed one."""

    def __init__(self, spec: GrammarSpec) -> None:
        check_grammar_spec(spec)
        self.spec = spec
        self._texts: dict[tuple[str, bool], str | None] = {}

    def get(self, key: str | None, resumed: bool) -> str | None:
        if key is None or self.spec is None:
            return None
        if (key, resumed) not in self._texts:
            text = grammar_text(self.spec, key)
            self._texts[(key, resumed)] = continuation_gbnf(text) if text and resumed else text
        return self._texts[(key, resumed)]
