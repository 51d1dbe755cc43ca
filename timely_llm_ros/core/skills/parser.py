"""The recursive-descent parser of plan text: tokens → validated skill calls and block steps.

What it needs of a skill set is only :class:`ParseRules` (language, skills, loop limit, name), so
the parser does not depend on :class:`~.skillset.SkillSet`, which calls it.
"""

from __future__ import annotations

import re
from typing import Any, Protocol

from timely_llm_ros.core.skills.lexer import BLANK, COMPARATORS, VAR_RE, Tok, tokenize, unquote
from timely_llm_ros.core.skills.model import (
    CHATBOT_SKILL,
    ArgSpec,
    SkillCall,
    SkillParseError,
    SkillSpec,
    Step,
    Var,
    fmt_number,
)


class ParseRules(Protocol):
    """The parts of a skill set the parser reads."""

    name: str
    language: str
    skills: dict[str, SkillSpec]
    max_loop_count: int


class Parser:
    """Recursive-descent parser over one text; blocks tracked on an explicit stack."""

    def __init__(self, sset: ParseRules, text: str, stack: list[tuple[str, int, str]] | None) -> None:
        self.s = sset
        self.text = text
        self.toks = tokenize(text) if sset.language != "chatbot" else [Tok("eof", "", len(text), len(text))]
        self.i = 0
        self.strict = stack is not None  # parse_plan / parse_segments know the outer blocks
        self.stack: list[tuple[str, int, str]] = list(stack or [])
        self.calls: list[SkillCall] = []
        self.steps: list[Step] = []  # calls and block boundaries in source order
        self.stmt_start = 0

    # helpers
    def peek(self, k: int = 0) -> Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> Tok:
        tok = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def stmt(self) -> str:
        """Source of the statement being parsed, up to its end (for error messages)."""
        depth = 0
        end = len(self.text)
        for tok in self.toks[self.i :]:
            if tok.kind == "op" and tok.value == "(":
                depth += 1
            elif tok.kind == "op" and tok.value == ")":
                depth -= 1
            elif tok.kind == "eof" or (depth <= 0 and tok.kind == "op" and tok.value in ";{}"):
                end = tok.end if tok.value == "{" else tok.start
                break
        return self.text[self.stmt_start : max(end, self.toks[max(self.i - 1, 0)].end)].strip()

    def fail(self, reason: str) -> SkillParseError:
        return SkillParseError(reason, self.stmt())

    def expect(self, value: str, what: str) -> Tok:
        tok = self.peek()
        if tok.value != value or tok.kind not in ("op", "arrow"):
            got = "end of text" if tok.kind == "eof" else repr(tok.value)
            raise self.fail(f"expected {value!r} {what}, got {got}")
        return self.next()

    def repeat_guard(self) -> tuple[int, bool]:
        rep = 1
        guarded = False
        for kind, n, _src in self.stack:
            if kind == "loop":
                rep *= n
            else:
                guarded = True
        return rep, guarded

    # programs
    def run(self) -> list[SkillCall]:
        """Parse the whole text statement by statement; returns the calls in source order."""
        lang = self.s.language
        if lang == "chatbot":
            return self._chatbot()
        prev: Tok | None = None  # last token of the previous statement when it needs a separator
        prev_start = 0
        while True:
            tok = self.peek()
            self.stmt_start = tok.start
            if tok.kind == "eof":
                return self.calls
            if tok.kind == "op" and tok.value == ";":
                self.next()
                prev = None
                continue
            if prev is not None and not self._separated(prev, tok):
                raise SkillParseError(
                    f"expected ';' before {tok.value!r}", self.text[prev_start : tok.end].strip()
                )
            prev_start = tok.start
            needs_sep = self._statement(tok) if lang == "minispec" else self._call_statement(tok)
            prev = self.toks[self.i - 1] if needs_sep else None

    def _separated(self, prev: Tok, tok: Tok) -> bool:
        """May ``tok`` follow a statement ending at ``prev`` without a ';'?

        MiniSpec: only a block's closing brace (``{g('cat')}``). Call language: a newline.
        """
        if self.s.language == "minispec":
            return tok.kind == "op" and tok.value == "}"
        return "\n" in self.text[prev.end : tok.start]

    def _chatbot(self) -> list[SkillCall]:
        if not self.text.strip():
            return []
        call = SkillCall(CHATBOT_SKILL, (self.text,), self.text)
        self.steps.append(Step("call", call))
        return [call]

    def _call_statement(self, tok: Tok) -> bool:
        if tok.kind != "ident":
            raise self.fail(
                f"expected a skill call, got {tok.value!r} (the {self.s.language!r} language "
                "has only calls separated by ';')"
            )
        self._call(bare_ok=False)
        return True

    def _statement(self, tok: Tok) -> bool:
        """Parse one MiniSpec statement; return True when a separator must follow."""
        if tok.kind == "op" and tok.value == "}":
            self.next()
            if self.stack:
                self.stack.pop()
            elif self.strict:
                raise self.fail("'}' closes no open block")
            self.steps.append(Step("close"))
            return False
        if tok.kind == "op" and tok.value == "?":
            self.next()
            self._condition()
            brace = self.expect("{", "after the condition")
            self.stack.append(("cond", 0, self.text[tok.start : brace.end]))
            self.steps.append(Step("open_cond"))
            return False
        if tok.kind == "num" and self.peek(1).value == "{":
            if not re.fullmatch(r"\d+", tok.value):
                raise self.fail(f"loop count {tok.value} must be a positive integer")
            n = int(tok.value)
            if not 1 <= n <= self.s.max_loop_count:
                raise self.fail(f"loop count {n} is outside 1..{self.s.max_loop_count}")
            self.next()
            brace = self.next()
            self.stack.append(("loop", n, self.text[tok.start : brace.end]))
            self.steps.append(Step("open_loop", count=n))
            return False
        if tok.kind == "arrow":
            self.next()
            self._operand()
            return True
        if tok.kind == "ident" and VAR_RE.match(tok.value) and self.peek(1).value == "=":
            self.next()
            self.next()
            if self.peek().kind != "ident":
                raise self.fail(f"assignment to {tok.value} needs a skill call on the right")
            self._call(bare_ok=True)
            return True
        if tok.kind == "ident":
            self._call(bare_ok=True)
            return True
        if tok.kind == "op" and tok.value == "{":
            raise self.fail("'{' must follow a condition '?...' or a loop count")
        raise self.fail(f"unexpected {tok.value!r} at the start of a statement")

    def _condition(self) -> None:
        while True:
            self._operand()
            op = self.peek()
            if op.kind != "op" or op.value not in COMPARATORS:
                got = "end of text" if op.kind == "eof" else repr(op.value)
                raise self.fail(
                    f"expected a comparator ({' '.join(COMPARATORS)}) in the condition, got {got}"
                )
            self.next()
            after = self.peek()
            if op.value in "<>" and after.value == "=" and after.start == op.end:
                raise self.fail(
                    f"comparator '{op.value}=' is not in MiniSpec (use one of {' '.join(COMPARATORS)})"
                )
            self._operand()
            if self.peek().kind == "op" and self.peek().value in ("&", "|"):
                self.next()
                continue
            return

    def _operand(self) -> None:
        tok = self.peek()
        if tok.kind in ("num", "str"):
            self.next()
            return
        if tok.kind == "ident":
            if tok.value in ("True", "False") or VAR_RE.match(tok.value):
                self.next()
                return
            self._call(bare_ok=True)
            return
        got = "end of text" if tok.kind == "eof" else repr(tok.value)
        raise self.fail(f"expected a value, variable or skill call, got {got}")

    def _call(self, bare_ok: bool) -> None:
        name_tok = self.next()
        name = name_tok.value
        spec = self.s.skills.get(name)
        if spec is None:
            known = ", ".join(sorted(self.s.skills))
            raise self.fail(f"unknown skill {name!r} for skill set {self.s.name!r} (known: {known})")
        nxt = self.peek()
        args: list[Any] = []
        if nxt.kind == "op" and nxt.value == "(" and nxt.start == name_tok.end:
            self.next()
            args = self._args(spec)
            end = self.toks[self.i - 1].end
        elif nxt.kind == "op" and nxt.value == "(":
            raise self.fail(f"no space allowed between {name!r} and '('")
        elif nxt.kind == "op" and nxt.value == "," and nxt.start == name_tok.end:
            arg = self.peek(1).value
            raise self.fail(f"the old comma form '{name},{arg}' is not accepted; write {name}({arg})")
        elif not bare_ok:
            raise self.fail(f"call {name!r} needs parentheses in the {self.s.language!r} language")
        else:
            end = name_tok.end
        self._check_args(spec, args)
        rep, guarded = self.repeat_guard()
        call = SkillCall(name, tuple(args), self.text[name_tok.start : end], rep, guarded)
        self.calls.append(call)
        self.steps.append(Step("call", call))

    def _args(self, spec: SkillSpec) -> list[Any]:
        args: list[Any] = []
        if self.peek().value == ")" and self.peek().kind == "op":
            self.next()
            return args
        while True:
            tok = self.next()
            if tok.kind == "str":
                args.append(unquote(tok.value))
            elif tok.kind == "num":
                args.append(float(tok.value) if any(c in tok.value for c in ".") else int(tok.value))
            elif tok.kind == "ident" and tok.value in ("True", "False"):
                args.append(tok.value == "True")
            elif tok.kind == "ident" and VAR_RE.match(tok.value):
                if self.s.language != "minispec":
                    raise self.fail(
                        f"variables like {tok.value!r} exist only in MiniSpec, not in the "
                        f"{self.s.language!r} language"
                    )
                args.append(Var(tok.value))
            elif tok.kind == "ident":
                raise self.fail(
                    f"argument {len(args) + 1} of {spec.abbr} must be a literal or a variable, "
                    f"not {tok.value!r}"
                )
            else:
                got = "end of text" if tok.kind == "eof" else repr(tok.value)
                raise self.fail(f"expected an argument of {spec.abbr}, got {got}")
            sep = self.next()
            if sep.kind == "op" and sep.value == ")":
                return args
            if not (sep.kind == "op" and sep.value == ","):
                got = "end of text" if sep.kind == "eof" else repr(sep.value)
                raise self.fail(f"expected ',' or ')' in the arguments of {spec.abbr}, got {got}")

    def _check_args(self, spec: SkillSpec, args: list[Any]) -> None:
        if len(args) != len(spec.args):
            want = ", ".join(f"{a.name}:{a.type}" for a in spec.args) or "no arguments"
            raise self.fail(
                f"{spec.abbr} ({spec.name}) takes {len(spec.args)} argument(s) ({want}), got {len(args)}"
            )
        for a, v in zip(spec.args, args, strict=True):
            reason = check_arg(spec, a, v)
            if reason:
                raise self.fail(reason)


def check_arg(spec: SkillSpec, a: ArgSpec, v: Any) -> str:
    """Return why value ``v`` is not valid for argument ``a`` of ``spec`` ("" when it is)."""
    if isinstance(v, Var):
        return ""  # run-time value: the robot checks it
    label = f"argument {a.name!r} of {spec.abbr} ({spec.name})"
    if a.type == "int":
        if isinstance(v, bool) or not isinstance(v, int):
            return f"{label} must be an int, got {v!r}"
    elif a.type == "float":
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return f"{label} must be a number, got {v!r}"
    elif a.type == "str":
        if not isinstance(v, str):
            return f"{label} must be a quoted string, got {v!r}"
        if a.nonempty and not v.strip(BLANK):
            return f"{label} must not be empty"
        return ""
    elif a.type == "bool":
        if not isinstance(v, bool):
            return f"{label} must be True or False, got {v!r}"
        return ""
    if a.min is not None and v < a.min:
        return f"{label} = {v} is below the minimum {fmt_number(a.min)}"
    if a.max is not None and v > a.max:
        return f"{label} = {v} is above the maximum {fmt_number(a.max)}"
    return ""


def parse_text(
    sset: ParseRules, text: str, stack: list[tuple[str, int, str]] | None
) -> tuple[list[SkillCall], list[Any]]:
    """The validated calls of ``text`` and the blocks still open after it (``stack``: the blocks
    open before it, None when unknown: a lone segment)."""
    if not isinstance(text, str):
        raise SkillParseError(f"plan text must be str, got {type(text).__name__}")
    p = Parser(sset, text, stack)
    calls = p.run()
    return calls, p.stack
