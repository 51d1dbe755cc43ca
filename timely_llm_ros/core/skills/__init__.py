"""Robot skill sets as data, and the parser that turns plan text into validated skill calls.

A skill set (``config/skills/<name>.yaml``) is what TimelyLLM assumes users pre-store on the server
(paper §4.1): the fixed part of the planning prompt (language rules, skill list, worked examples),
the skills with their argument types and ranges, and the rule that says when generated text holds an
executable segment. The planner uses the prompt as the shared prefix, feeds generated text to
:meth:`SkillSet.new_checker` and dispatches each segment after :meth:`SkillSet.parse` validated it.

Languages (``language`` field):

* ``minispec`` — TypeFly's drone plan language (grammar as published with TypeFly, Chen et al., 2024):
  statements separated by ``;``, conditionals ``?cond{...}``, loops ``N{...}``, assignments
  ``_1=call``, returns ``->value``, conditions joined with ``&``/``|``, comparators ``> < == !=``,
  single- or double-quoted strings, and no-argument skills without parentheses (``tp``).
  The older 2023 comma form (``mf,100``) is **rejected** with a reason that shows the modern form:
  a comma call has no closing token, so a streaming checker could only end it at the next ``;`` and
  could not tell ``mf,10`` from a half-generated ``mf,100``; TypeFly replaced it in 2024 and the
  public traces only quote it inside task texts, never as generated output.
* ``call`` — flat sequences of parenthesised calls separated by ``;`` or newlines, as in the
  TimelyLLM arm prompts (``sc('red_box'); gt('red_box'); pi('red_box'); dr();``) and FLTRNN
  (``move_to(0.5, 0.2); take('red_box'); drop('red_box');``). No blocks or variables.
* ``chatbot`` — free text; every non-blank segment is one ``say(text)`` call, executed as reading
  time by the execution-time model.

A segment is usually a *partial* program: ``?s('cat')==True{`` opens a block that a later segment
closes. :meth:`SkillSet.parse` accepts such pieces (unclosed blocks at the end, closing braces of
earlier blocks at the start); :meth:`SkillSet.parse_plan` demands a complete, balanced plan;
:meth:`SkillSet.parse_segments` parses a plan's segments in order and carries the open blocks
across them (so calls inside a loop opened in an earlier segment get the right repeat count).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.paths import config_files
from timely_llm_ros.core.schema import SchemaError
from timely_llm_ros.core.schema import validate as validate_schema
from timely_llm_ros.core.segmenter import SegmentChecker, SegmentRule, split_segments

LANGUAGES = ("minispec", "call", "chatbot")
ARG_TYPES = ("int", "float", "str", "bool")
CHATBOT_SKILL = "say"


# ---------------------------------------------------------------------------------------- errors
class UnknownSkillSet(KeyError):
    """A skill set name with no ``config/skills/<name>.yaml``; the message lists the known sets."""

    def __init__(self, name: str, available: list[str]) -> None:
        self.name = name
        self.available = available
        self.message = f"unknown skill set {name!r}; available: {', '.join(available) or '(none)'}"
        super().__init__(self.message)

    def __str__(self) -> str:  # KeyError would repr() the message
        return self.message


class SkillSetError(ValueError):
    """A skill-set YAML file that is malformed; the message names the file and the field."""


class SkillParseError(ValueError):
    """Plan text that is not a valid program of the skill set.

    ``reason`` says what is wrong; ``statement`` is the offending statement's source text.
    """

    def __init__(self, reason: str, statement: str = "") -> None:
        self.reason = reason
        self.statement = statement
        msg = f"{reason} (in statement {statement!r})" if statement else reason
        super().__init__(msg)


# ----------------------------------------------------------------------------------- data model
@dataclass(frozen=True)
class Var:
    """A MiniSpec variable used as an argument (``_2``); its value is only known at run time."""

    name: str


@dataclass(frozen=True)
class SkillCall:
    """One skill invocation found in plan text.

    ``source`` is the exact call text. ``repeat`` is the product of the counts of the enclosing
    loops known to the parser (``3{mf(50)}`` → 3); ``guarded`` is True inside a conditional body.
    Both only inform execution-time estimates; the robot interprets the plan text itself.
    """

    name: str
    args: tuple
    source: str
    repeat: int = 1
    guarded: bool = False


@dataclass(frozen=True)
class Step:
    """One structural element of a segment, in source order (:meth:`SkillSet.steps`).

    ``kind``: ``call`` (``call`` set; a condition's calls come before its ``open_cond``),
    ``open_loop`` (``count`` = N of ``N{``), ``open_cond`` (``?...{``) or ``close`` (``}``).
    """

    kind: str
    call: SkillCall | None = None
    count: int = 0


@dataclass(frozen=True)
class ArgSpec:
    """One skill argument: type and (inclusive) range where the robot has one."""

    name: str
    type: str
    min: float | None = None
    max: float | None = None
    nonempty: bool = False  # strings: object names and questions must not be empty


@dataclass(frozen=True)
class SkillSpec:
    """One skill of a set: call name (abbreviation), full name, arguments, return type."""

    abbr: str
    name: str
    args: tuple[ArgSpec, ...]
    returns: str
    query: bool  # perception/query skill: returns information instead of moving the robot
    description: str


@dataclass
class SkillSet:
    """A robot's skill set, plan language, fixed prompt and segment rule (one YAML file)."""

    name: str
    robot_type: str
    language: str
    prompt: str
    max_segment_tokens: int
    segment_gen_estimate_s: float
    skills: dict[str, SkillSpec] = field(default_factory=dict)
    segment_rule: SegmentRule = field(default_factory=lambda: SegmentRule("sentence"))
    request_template: str = "{request}\nResponse: "
    max_loop_count: int = 100
    examples: list[dict[str, str]] = field(default_factory=list)
    source_path: str = ""
    backends: dict[str, Any] = field(default_factory=dict)  # per-backend config (e.g. ros: mapping)

    def new_checker(self) -> SegmentChecker:
        """A fresh stop checker for one generation with this skill set."""
        return SegmentChecker(self.segment_rule)

    def split(self, text: str) -> list[str]:
        """Segments of a whole plan text as the stop checker would cut them (see ``split_segments``)."""
        return split_segments(self.segment_rule, text)

    def skill_names(self) -> set[str]:
        """Call names (abbreviations) of the skills."""
        return set(self.skills)

    def parse(self, text: str) -> list[SkillCall]:
        """Parse one segment (a possibly partial program) into validated skill calls."""
        return _parse(self, text, stack=None)[0]

    def parse_plan(self, text: str) -> list[SkillCall]:
        """Parse a complete plan; unclosed or unopened blocks are errors."""
        calls, stack = _parse(self, text, stack=[])
        if stack:
            raise SkillParseError(
                f"block opened by {stack[-1][2]!r} is never closed ('}}' missing)", stack[-1][2]
            )
        return calls

    def steps(self, text: str) -> list[Step]:
        """One segment's calls and block boundaries in source order (validated like :meth:`parse`).

        What a streaming interpreter runs when the segment arrives depends on blocks opened or closed
        in other segments; :func:`timely_llm_ros.core.exectime.executed_calls` replays these steps.
        """
        p = _Parser(self, text, stack=None)
        p.run()
        return p.steps

    def parse_segments(self, segments: list[str]) -> list[list[SkillCall]]:
        """Parse a plan's segments in order, carrying open blocks from one segment to the next."""
        stack: list[tuple[str, int, str]] = []
        out = []
        for seg in segments:
            calls, stack = _parse(self, seg, stack=stack)
            out.append(calls)
        return out

    def format_request(self, task: str, scene: str = "") -> str:
        """The full prompt for one task: the fixed prefix (:attr:`prompt`) + the task-specific part.

        The public TimelyLLM workloads put scene and task in one string (``"Scene: [...] Task: [A]
        ..."``); such a task is used verbatim, otherwise the two are combined in that same form.
        """
        if not isinstance(task, str) or not task.strip():
            raise SkillParseError("task instruction is empty")
        task = task.strip()
        request = task if task.startswith("Scene:") else f"Scene: {scene.strip() or '[]'} Task: {task}"
        return self.prompt + self.request_template.format(request=request)


# --------------------------------------------------------------------------------------- parser
# The MiniSpec lexer; the robot-side interpreter (robots/minispec.py) tokenises with the same rules.
TOKEN_RE = re.compile(
    r"""(?P<ws>\s+)
      |(?P<str>'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*")
      |(?P<arrow>->)
      |(?P<num>-?(?:\d+\.\d*|\.\d+|\d+))
      |(?P<ident>[A-Za-z_][A-Za-z0-9_]*)
      |(?P<op>==|!=|[(){};,?&|<>=])""",
    re.VERBOSE,
)
VAR_RE = re.compile(r"_\d+$")
_COMPARATORS = ("==", "!=", "<", ">")
_BLANK = " \t\r\n"  # a non-empty string needs another character (grammar.py's strsolid agrees)


@dataclass
class _Tok:
    kind: str  # str | arrow | num | ident | op | eof
    value: str
    start: int
    end: int


def _tokenize(text: str) -> list[_Tok]:
    toks: list[_Tok] = []
    pos = 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if m is None:
            ch = text[pos]
            if ch in "'\"":
                raise SkillParseError(f"unterminated string starting at offset {pos}", text[pos : pos + 40])
            raise SkillParseError(
                f"unexpected character {ch!r} at offset {pos}", text[max(0, pos - 20) : pos + 20]
            )
        kind = m.lastgroup or ""
        if kind != "ws":
            toks.append(_Tok(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    toks.append(_Tok("eof", "", len(text), len(text)))
    return toks


def _unquote(tok: str) -> str:
    body = tok[1:-1]
    return re.sub(r"\\(.)", r"\1", body)


class _Parser:
    """Recursive-descent parser over one text; blocks tracked on an explicit stack."""

    def __init__(self, sset: SkillSet, text: str, stack: list[tuple[str, int, str]] | None) -> None:
        self.s = sset
        self.text = text
        self.toks = _tokenize(text) if sset.language != "chatbot" else [_Tok("eof", "", len(text), len(text))]
        self.i = 0
        self.strict = stack is not None  # parse_plan / parse_segments know the outer blocks
        self.stack: list[tuple[str, int, str]] = list(stack or [])
        self.calls: list[SkillCall] = []
        self.steps: list[Step] = []  # calls and block boundaries in source order
        self.stmt_start = 0

    # helpers
    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
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

    def expect(self, value: str, what: str) -> _Tok:
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
        prev: _Tok | None = None  # last token of the previous statement when it needs a separator
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

    def _separated(self, prev: _Tok, tok: _Tok) -> bool:
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

    def _call_statement(self, tok: _Tok) -> bool:
        if tok.kind != "ident":
            raise self.fail(
                f"expected a skill call, got {tok.value!r} (the {self.s.language!r} language "
                "has only calls separated by ';')"
            )
        self._call(bare_ok=False)
        return True

    def _statement(self, tok: _Tok) -> bool:
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
            if op.kind != "op" or op.value not in _COMPARATORS:
                got = "end of text" if op.kind == "eof" else repr(op.value)
                raise self.fail(
                    f"expected a comparator ({' '.join(_COMPARATORS)}) in the condition, got {got}"
                )
            self.next()
            after = self.peek()
            if op.value in "<>" and after.value == "=" and after.start == op.end:
                raise self.fail(
                    f"comparator '{op.value}=' is not in MiniSpec (use one of {' '.join(_COMPARATORS)})"
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
                args.append(_unquote(tok.value))
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
        if a.nonempty and not v.strip(_BLANK):
            return f"{label} must not be empty"
        return ""
    elif a.type == "bool":
        if not isinstance(v, bool):
            return f"{label} must be True or False, got {v!r}"
        return ""
    if a.min is not None and v < a.min:
        return f"{label} = {v} is below the minimum {_fmt(a.min)}"
    if a.max is not None and v > a.max:
        return f"{label} = {v} is above the maximum {_fmt(a.max)}"
    return ""


def _fmt(x: float) -> str:
    return str(int(x)) if float(x).is_integer() else str(x)


def _parse(
    sset: SkillSet, text: str, stack: list[tuple[str, int, str]] | None
) -> tuple[list[SkillCall], list]:
    if not isinstance(text, str):
        raise SkillParseError(f"plan text must be str, got {type(text).__name__}")
    p = _Parser(sset, text, stack)
    calls = p.run()
    return calls, p.stack


# --------------------------------------------------------------------------------------- loading
_SKILL_PLACEHOLDER = "<<SKILLS>>"


def _field(data: dict, key: str, path: str, kind: type | tuple, where: str = "") -> Any:
    if key not in data:
        raise SkillSetError(f"{path}: missing field {where}{key!r}")
    value = data[key]
    if isinstance(value, bool) and kind is not bool:
        raise SkillSetError(f"{path}: field {where}{key!r} must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise SkillSetError(f"{path}: field {where}{key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _load_arg(raw: Any, path: str, where: str) -> ArgSpec:
    if not isinstance(raw, dict):
        raise SkillSetError(f"{path}: {where} must be a mapping, got {raw!r}")
    name = _field(raw, "name", path, str, where)
    typ = _field(raw, "type", path, str, where)
    if typ not in ARG_TYPES:
        raise SkillSetError(f"{path}: field {where}'type' must be one of {', '.join(ARG_TYPES)}, got {typ!r}")
    lo, hi = raw.get("min"), raw.get("max")
    for key, val in (("min", lo), ("max", hi)):
        if val is None:
            continue
        if typ not in ("int", "float"):
            raise SkillSetError(f"{path}: field {where}{key!r} only applies to int/float arguments")
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
            raise SkillSetError(f"{path}: field {where}{key!r} must be a finite number, got {val!r}")
    if lo is not None and hi is not None and lo > hi:
        raise SkillSetError(f"{path}: {where}min {lo} is above max {hi}")
    nonempty = raw.get("nonempty", False)
    if not isinstance(nonempty, bool):
        raise SkillSetError(f"{path}: field {where}'nonempty' must be true or false")
    return ArgSpec(name, typ, lo, hi, nonempty)


def _load_skill(raw: Any, path: str, idx: int) -> SkillSpec:
    where = f"skills[{idx}]."
    if not isinstance(raw, dict):
        raise SkillSetError(f"{path}: skills[{idx}] must be a mapping, got {raw!r}")
    abbr = _field(raw, "abbr", path, str, where)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", abbr):
        raise SkillSetError(f"{path}: field {where}'abbr' {abbr!r} is not an identifier")
    name = _field(raw, "name", path, str, where)
    raw_args = raw.get("args", [])
    if not isinstance(raw_args, list):
        raise SkillSetError(f"{path}: field {where}'args' must be a list")
    args = tuple(_load_arg(a, path, f"{where}args[{j}].") for j, a in enumerate(raw_args))
    returns = _field(raw, "returns", path, str, where)
    query = _field(raw, "query", path, bool, where)
    desc = _field(raw, "description", path, str, where)
    return SkillSpec(abbr, name, args, returns, query, desc.strip())


def skill_list_text(skills: dict[str, SkillSpec]) -> str:
    """The skill list as it appears in the prompt: ``abbr:name(arg:type[min-max]) -> ret: meaning``."""
    lines = []
    for s in skills.values():
        parts = []
        for a in s.args:
            rng = ""
            if a.min is not None or a.max is not None:
                rng = (
                    f"[{_fmt(a.min) if a.min is not None else ''}-{_fmt(a.max) if a.max is not None else ''}]"
                )
            parts.append(f"{a.name}:{a.type}{rng}")
        ret = f" -> {s.returns}" if s.returns != "none" else ""
        lines.append(f"{s.abbr}:{s.name}({', '.join(parts)}){ret}: {s.description}")
    return "\n".join(lines)


def load_skill_set_file(path: str | Path) -> SkillSet:
    """Load and validate one skill-set YAML file (not cached)."""
    path = Path(path)
    p = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SkillSetError(f"{p}: not valid YAML: {exc}") from exc
    except OSError as exc:
        raise SkillSetError(f"{p}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise SkillSetError(f"{p}: top level must be a mapping")
    try:  # structure first (config/schema/skill_set.schema.json): file, field path, reason
        validate_schema(data, "skill_set", p)
    except SchemaError as exc:
        raise SkillSetError(str(exc)) from None
    name = _field(data, "name", p, str)
    robot_type = _field(data, "robot_type", p, str)
    language = _field(data, "language", p, str)
    if language not in LANGUAGES:
        raise SkillSetError(f"{p}: field 'language' must be one of {', '.join(LANGUAGES)}, got {language!r}")
    prompt = _field(data, "prompt", p, str)
    mst = _field(data, "max_segment_tokens", p, int)
    if mst <= 0:
        raise SkillSetError(f"{p}: field 'max_segment_tokens' must be positive, got {mst}")
    gen = _field(data, "segment_gen_estimate_s", p, (int, float))
    if not math.isfinite(gen) or gen <= 0:
        raise SkillSetError(f"{p}: field 'segment_gen_estimate_s' must be a positive number, got {gen}")
    raw_skills = _field(data, "skills", p, list)
    skills: dict[str, SkillSpec] = {}
    for i, raw in enumerate(raw_skills):
        spec = _load_skill(raw, p, i)
        if spec.abbr in skills:
            raise SkillSetError(f"{p}: skills[{i}].abbr {spec.abbr!r} is defined twice")
        skills[spec.abbr] = spec
    if not skills:
        raise SkillSetError(f"{p}: field 'skills' is empty")
    if language == "chatbot" and set(skills) != {CHATBOT_SKILL}:
        raise SkillSetError(f"{p}: a chatbot skill set has exactly one skill, {CHATBOT_SKILL!r}")
    seg = data.get("segment", {})
    if not isinstance(seg, dict):
        raise SkillSetError(f"{p}: field 'segment' must be a mapping")
    mode = seg.get("mode", "statement" if language != "chatbot" else "sentence")
    min_chars = seg.get("min_chars", 0)
    if isinstance(min_chars, bool) or not isinstance(min_chars, int) or min_chars < 0:
        raise SkillSetError(f"{p}: field 'segment.min_chars' must be a non-negative int, got {min_chars!r}")
    expected_modes = ("statement",) if language != "chatbot" else ("sentence", "paragraph")
    if mode not in expected_modes:
        raise SkillSetError(
            f"{p}: field 'segment.mode' must be {' or '.join(expected_modes)} "
            f"for language {language!r}, got {mode!r}"
        )
    rule = SegmentRule(mode, frozenset(skills), bare_calls=language == "minispec", min_chars=min_chars)
    template = data.get("request_template", "{request}\nResponse: ")
    if not isinstance(template, str) or "{request}" not in template:
        raise SkillSetError(f"{p}: field 'request_template' must be a string containing '{{request}}'")
    try:
        template.format(request="")
    except (KeyError, IndexError, ValueError) as exc:
        raise SkillSetError(f"{p}: field 'request_template' has a bad placeholder: {exc}") from exc
    max_loop = data.get("max_loop_count", 100)
    if isinstance(max_loop, bool) or not isinstance(max_loop, int) or max_loop < 1:
        raise SkillSetError(f"{p}: field 'max_loop_count' must be a positive int, got {max_loop!r}")
    examples = data.get("examples", [])
    if not isinstance(examples, list) or not all(
        isinstance(e, dict) and isinstance(e.get("task"), str) and isinstance(e.get("plan"), str)
        for e in examples
    ):
        raise SkillSetError(f"{p}: field 'examples' must be a list of {{task: str, plan: str}}")
    if _SKILL_PLACEHOLDER in prompt:
        prompt = prompt.replace(_SKILL_PLACEHOLDER, skill_list_text(skills))
    sset = SkillSet(
        name,
        robot_type,
        language,
        prompt,
        mst,
        float(gen),
        skills,
        rule,
        template,
        max_loop,
        [dict(e) for e in examples],
        p,
        dict(data.get("backends") or {}),
    )
    for i, ex in enumerate(sset.examples):
        try:
            sset.parse_plan(ex["plan"])
        except SkillParseError as exc:
            raise SkillSetError(f"{p}: examples[{i}].plan does not parse: {exc}") from exc
    return sset


def available_skill_sets() -> list[str]:
    """Names of the skill sets on the config search path (shipped ones and users' overlays)."""
    return sorted(config_files("skills"))


@cache
def _load_cached(path: str, mtime_ns: int) -> SkillSet:
    return load_skill_set_file(path)


def load_skill_set(name: str) -> SkillSet:
    """The skill set ``skills/<name>.yaml`` found first on the config search path (cached per file)."""
    files = config_files("skills")
    if not isinstance(name, str) or name not in files:
        raise UnknownSkillSet(str(name), sorted(files))
    path = files[name]
    sset = _load_cached(str(path), path.stat().st_mtime_ns)
    if sset.name != name:
        raise SkillSetError(
            f"{sset.source_path}: field 'name' is {sset.name!r}, expected {name!r} (file name)"
        )
    return sset
