"""Streaming MiniSpec interpreter: executes a plan segment by segment as the planner sends them.

TimelyLLM dispatches a plan in *segments* (paper §4.1) while the rest is still being generated, so
the robot must run a program whose text arrives in pieces: ``?s('cat')==True{`` may be one segment
and ``g('cat')`` / ``}->False`` later ones. The language is TypeFly's MiniSpec
(Chen et al., 2024); one :class:`MiniSpecProgram` holds one task's
state across its segments.

Semantics (decided here; the planner and the tests rely on them):

* Statements run in text order as soon as their segment arrives. A skill is called through a
  :class:`Runtime` (the robot backend), which performs it and returns its value.
* ``?cond{`` — the condition is evaluated **when the header arrives** (its skill calls run then,
  e.g. a scan turns the drone). The body runs only if it is true; a false condition skips every
  statement up to the matching ``}``, also across segments.
* ``N{`` — the body runs live once as it arrives; at the closing ``}`` the recorded body (nested
  blocks included) runs the remaining N−1 times. So the robot never waits for a whole loop to be
  generated before moving, and the repeat count is still exact.
* Conditions: ``&`` binds tighter than ``|`` (as *and*/*or* usually do — the MiniSpec grammar leaves
  it open); evaluation is left to right and short-circuits, so a skill in a later operand is not
  called when the result is already known. ``==``/``!=`` compare numbers numerically, booleans with
  booleans (``True``/``'True'`` alike), strings exactly; ``<``/``>`` need two numbers.
* ``_N=call`` stores the call's value; variables live for the whole task (across segments). Using
  an unset variable fails the segment.
* ``rp`` (re_plan) ends the plan like a return (the rest is skipped; the user/planner re-plans).
* ``->value`` ends the plan with a result: everything after it (in later segments too) is skipped,
  and replays of enclosing loops stop.
* A variable used as an argument is checked against the skill's type and range when it is used
  (the planner can only check literals); an int argument given a measured float is rounded, a
  text argument given a number or boolean gets its text (``_2=oh('bottle');l(_2)``).

Anything the runtime cannot do raises :class:`SkillFailure`; the segment then fails with its reason.

Motion budget: given a :class:`~timely_llm_ros.core.motion_budget.MotionBudget`, a program charges
each segment to it *before* running any of it; a segment that would take the plan over the robot
type's per-plan limits (distance, rotation, time, calls, loop nesting) fails without moving — the
robot's own check, whatever the planner let through.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from timely_llm_ros.core.motion_budget import BudgetExceeded, MotionBudget
from timely_llm_ros.core.skills.lexer import TOKEN_RE, VAR_RE
from timely_llm_ros.core.skills.model import SkillParseError, Var
from timely_llm_ros.core.skills.parser import check_arg
from timely_llm_ros.core.skills.skillset import SkillSet


class SkillFailure(RuntimeError):
    """A skill (or statement) could not be executed; ``reason`` is meant for the planner/user."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True)
class Call:
    """A skill call ready to execute: ``args`` hold literal values and :class:`Var` references."""

    name: str
    args: tuple
    source: str


class Runtime(Protocol):
    """What executes skills: the robot backend (sim or real)."""

    def execute(self, call: Call, args: tuple) -> Any:
        """Perform ``call`` with its resolved ``args``; return its value (None for actions)."""
        ...


# ------------------------------------------------------------------------------------ lexing


@dataclass
class _Tok:
    kind: str
    value: str
    start: int
    end: int


def _lex(text: str) -> list[_Tok]:
    out = []
    pos = 0
    while pos < len(text):
        m = TOKEN_RE.match(text, pos)
        if m is None:
            raise SkillFailure(f"cannot read {text[pos : pos + 20]!r} at offset {pos}")
        if m.lastgroup != "ws":
            out.append(_Tok(m.lastgroup or "", m.group(), m.start(), m.end()))
        pos = m.end()
    out.append(_Tok("eof", "", len(text), len(text)))
    return out


def _unquote(tok: str) -> str:
    return re.sub(r"\\(.)", r"\1", tok[1:-1])


# ------------------------------------------------------------------------------------ program items
@dataclass(frozen=True)
class Operand:
    kind: str  # lit | var | call
    value: Any


@dataclass(frozen=True)
class Comparison:
    left: Operand
    op: str
    right: Operand


Condition = list  # list (or-terms) of lists (and-terms) of Comparison


@dataclass
class Node:
    """One statement or block. kind: call | assign | return | if | loop | open_if | open_loop | close."""

    kind: str
    call: Call | None = None
    var: str = ""
    operand: Operand | None = None
    cond: Condition | None = None
    count: int = 0
    body: list[Node] = field(default_factory=list)
    source: str = ""


class _ItemParser:
    """Turns one segment's text into a flat list of items (statements, block opens and closes)."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.toks = _lex(text)
        self.i = 0

    def peek(self, k: int = 0) -> _Tok:
        return self.toks[min(self.i + k, len(self.toks) - 1)]

    def next(self) -> _Tok:
        tok = self.toks[self.i]
        self.i = min(self.i + 1, len(self.toks) - 1)
        return tok

    def items(self) -> list[Node]:
        out: list[Node] = []
        while True:
            tok = self.peek()
            if tok.kind == "eof":
                return out
            if tok.kind == "op" and tok.value == ";":
                self.next()
            elif tok.kind == "op" and tok.value == "}":
                self.next()
                out.append(Node("close", source="}"))
            elif tok.kind == "op" and tok.value == "?":
                self.next()
                cond = self.condition()
                brace = self.next()
                out.append(Node("open_if", cond=cond, source=self.text[tok.start : brace.end]))
            elif tok.kind == "num" and self.peek(1).value == "{":
                self.next()
                brace = self.next()
                out.append(Node("open_loop", count=int(tok.value), source=self.text[tok.start : brace.end]))
            elif tok.kind == "arrow":
                self.next()
                out.append(
                    Node(
                        "return",
                        operand=self.operand(),
                        source=self.text[tok.start : self.toks[self.i - 1].end],
                    )
                )
            elif tok.kind == "ident" and VAR_RE.match(tok.value) and self.peek(1).value == "=":
                self.next()
                self.next()
                call = self.call()
                out.append(Node("assign", var=tok.value, call=call, source=f"{tok.value}={call.source}"))
            elif tok.kind == "ident":
                call = self.call()
                out.append(Node("call", call=call, source=call.source))
            else:
                raise SkillFailure(f"unexpected {tok.value!r} at offset {tok.start} of {self.text!r}")

    def condition(self) -> Condition:
        ors: Condition = [[]]
        while True:
            left = self.operand()
            op = self.next()
            right = self.operand()
            ors[-1].append(Comparison(left, op.value, right))
            nxt = self.peek()
            if nxt.kind == "op" and nxt.value == "&":
                self.next()
            elif nxt.kind == "op" and nxt.value == "|":
                self.next()
                ors.append([])
            else:
                if not (nxt.kind == "op" and nxt.value == "{"):
                    raise SkillFailure(f"condition not followed by '{{' in {self.text!r}")
                return ors

    def operand(self) -> Operand:
        tok = self.peek()
        if tok.kind == "str":
            self.next()
            return Operand("lit", _unquote(tok.value))
        if tok.kind == "num":
            self.next()
            return Operand("lit", float(tok.value) if "." in tok.value else int(tok.value))
        if tok.kind == "ident" and tok.value in ("True", "False"):
            self.next()
            return Operand("lit", tok.value == "True")
        if tok.kind == "ident" and VAR_RE.match(tok.value):
            self.next()
            return Operand("var", tok.value)
        if tok.kind == "ident":
            return Operand("call", self.call())
        raise SkillFailure(f"expected a value at offset {tok.start} of {self.text!r}")

    def call(self) -> Call:
        name = self.next()
        args: list[Any] = []
        end = name.end
        if self.peek().kind == "op" and self.peek().value == "(":
            self.next()
            while not (self.peek().kind == "op" and self.peek().value == ")"):
                tok = self.next()
                if tok.kind == "str":
                    args.append(_unquote(tok.value))
                elif tok.kind == "num":
                    args.append(float(tok.value) if "." in tok.value else int(tok.value))
                elif tok.kind == "ident" and tok.value in ("True", "False"):
                    args.append(tok.value == "True")
                elif tok.kind == "ident" and VAR_RE.match(tok.value):
                    args.append(Var(tok.value))
                elif tok.kind == "op" and tok.value == ",":
                    continue
                else:
                    raise SkillFailure(f"bad argument {tok.value!r} in {self.text!r}")
            end = self.next().end
        return Call(name.value, tuple(args), self.text[name.start : end])


# ------------------------------------------------------------------------------------ execution
def fmt_value(v: Any) -> str:
    """Compact text of a skill value for feedback details."""
    if isinstance(v, float):
        return f"{v:.3g}"
    if isinstance(v, str):
        return repr(v)
    return str(v)


@dataclass
class _Frame:
    node: Node  # an if/loop node whose body is being recorded
    runs: bool  # statements inside execute now


class Halt(Exception):
    """Internal: a ``->`` return ended the plan."""


T = TypeVar("T")


def _given(x: T | None) -> T:
    """A field the parser always sets for this node kind (``cond`` of an if, ``call`` of a call...)."""
    assert x is not None
    return x


class MiniSpecProgram:
    """One task's MiniSpec plan, executed incrementally (see the module docstring)."""

    def __init__(self, skill_set: SkillSet, runtime: Runtime, budget: MotionBudget | None = None) -> None:
        if skill_set.language != "minispec":
            raise ValueError(
                f"skill set {skill_set.name!r} is not MiniSpec (language {skill_set.language!r})"
            )
        self.skill_set = skill_set
        self.runtime = runtime
        self.budget = budget
        self.vars: dict[str, Any] = {}
        self.stack: list[_Frame] = []
        self.returned = False
        self.result: Any = None
        self.notes: list[str] = []  # per segment: what the calls returned / logged
        self.skipped = 0

    @property
    def open_blocks(self) -> int:
        return len(self.stack)

    def run_segment(self, text: str) -> list[str]:
        """Execute one segment's text; returns notes for the feedback detail.

        Raises :class:`SkillFailure` (parse errors included, with the parser's reason).
        """
        try:
            self.skill_set.parse(text)  # validation with the planner's own rules and messages
        except SkillParseError as exc:
            raise SkillFailure(f"segment does not parse: {exc}") from None
        charge(self.budget, text)
        items = _ItemParser(text).items()
        self.notes = []
        self.skipped = 0
        for item in items:
            self._feed(item)
        if self.skipped:
            why = "plan already returned" if self.returned else "condition false"
            self.notes.append(f"skipped {self.skipped} statement(s) ({why})")
        return self.notes

    # -- incremental structure
    def _active(self) -> bool:
        return not self.returned and (self.stack[-1].runs if self.stack else True)

    def _feed(self, item: Node) -> None:
        if item.kind == "close":
            if not self.stack:
                raise SkillFailure("'}' closes no open block of this task")
            frame = self.stack.pop()
            node = frame.node
            if self.stack:
                self.stack[-1].node.body.append(node)
            if node.kind == "loop" and frame.runs and not self.returned:
                try:
                    for _ in range(node.count - 1):
                        self._run_nodes(node.body)
                except Halt:
                    pass
            return
        if item.kind in ("open_if", "open_loop"):
            active = self._active()
            if item.kind == "open_if":
                node = Node("if", cond=item.cond, source=item.source)
                runs = active and self._eval_condition(_given(item.cond))
                if active and not runs:
                    self.notes.append(f"{item.source} false")
            else:
                node = Node("loop", count=item.count, source=item.source)
                runs = active
            if not active:
                self.skipped += 1
            self.stack.append(_Frame(node, runs))
            return
        if self.stack:
            self.stack[-1].node.body.append(item)
        if not self._active():
            self.skipped += 1
            return
        try:
            self._run_stmt(item)
        except Halt:
            pass

    # -- full-tree execution (loop replays)
    def _run_nodes(self, nodes: list[Node]) -> None:
        for node in nodes:
            if node.kind == "if":
                if self._eval_condition(_given(node.cond)):
                    self._run_nodes(node.body)
            elif node.kind == "loop":
                for _ in range(node.count):
                    self._run_nodes(node.body)
            else:
                self._run_stmt(node)

    def _run_stmt(self, node: Node) -> None:
        if node.kind == "call":
            call = _given(node.call)
            self._call(call)
            if call.name == "rp":  # re_plan: this plan ends here; the planner is asked anew
                self.returned = True
                self.result = "re_plan"
                self.notes.append("re-plan requested: the rest of this plan is skipped")
                raise Halt()
        elif node.kind == "assign":
            self.vars[node.var] = self._call(_given(node.call))
        elif node.kind == "return":
            self.result = self._operand(_given(node.operand))
            self.returned = True
            self.notes.append(f"->{fmt_value(self.result)}")
            raise Halt()

    # -- values
    def _call(self, call: Call) -> Any:
        spec = self.skill_set.skills.get(call.name)
        if spec is None:
            raise SkillFailure(f"unknown skill {call.name!r}")
        args = []
        for a, arg_spec in zip(call.args, spec.args, strict=False):
            if isinstance(a, Var):
                if a.name not in self.vars:
                    raise SkillFailure(f"{call.source}: variable {a.name} is used before it is set")
                v = self.vars[a.name]
                if arg_spec.type == "int" and isinstance(v, float) and not isinstance(v, bool):
                    v = int(round(v))
                elif arg_spec.type == "str" and not isinstance(v, str):
                    v = fmt_value(v)  # l(_2) reports a measured number as text
                reason = check_arg(spec, arg_spec, v)
                if reason:
                    raise SkillFailure(f"{call.source}: {reason} (value of {a.name})")
                args.append(v)
            else:
                args.append(a)
        value = self.runtime.execute(call, tuple(args))
        if call.name == "l":
            self.notes.append(f"log: {args[0] if args else ''}")
        elif spec.returns != "none":
            self.notes.append(f"{call.source}={fmt_value(value)}")
        return value

    def _operand(self, op: Operand) -> Any:
        if op.kind == "lit":
            return op.value
        if op.kind == "var":
            if op.value not in self.vars:
                raise SkillFailure(f"variable {op.value} is used before it is set")
            return self.vars[op.value]
        value = self._call(op.value)
        if value is None:
            raise SkillFailure(f"{op.value.source} returns no value and cannot be compared")
        return value

    def _eval_condition(self, cond: Condition) -> bool:
        for and_terms in cond:
            if all(self._compare(c) for c in and_terms):  # all()/any() short-circuit
                return True
        return False

    def _compare(self, c: Comparison) -> bool:
        a = self._operand(c.left)
        b = self._operand(c.right)
        if c.op in ("==", "!="):
            eq = values_equal(a, b)
            return eq if c.op == "==" else not eq
        if _is_num(a) and _is_num(b):
            return a < b if c.op == "<" else a > b
        raise SkillFailure(f"cannot compare {fmt_value(a)} {c.op} {fmt_value(b)}: both must be numbers")


def _is_num(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def values_equal(a: Any, b: Any) -> bool:
    """MiniSpec equality: numbers numerically, booleans with booleans or 'True'/'False', strings exactly."""
    if isinstance(a, bool) or isinstance(b, bool):
        na, nb = (str(x) if isinstance(x, bool) else x for x in (a, b))
        return isinstance(na, str) and isinstance(nb, str) and na == nb
    if _is_num(a) and _is_num(b):
        return float(a) == float(b)
    return a == b


class CallProgram:
    """A plan in the flat ``call`` language (arm skill sets): each segment's calls run in order."""

    def __init__(self, skill_set: SkillSet, runtime: Runtime, budget: MotionBudget | None = None) -> None:
        if skill_set.language != "call":
            raise ValueError(f"skill set {skill_set.name!r} is not a call-language set")
        self.skill_set = skill_set
        self.runtime = runtime
        self.budget = budget
        self.returned = False
        self.open_blocks = 0

    def run_segment(self, text: str) -> list[str]:
        try:
            calls = self.skill_set.parse(text)
        except SkillParseError as exc:
            raise SkillFailure(f"segment does not parse: {exc}") from None
        charge(self.budget, text)
        notes = []
        for c in calls:
            spec = self.skill_set.skills[c.name]
            value = self.runtime.execute(Call(c.name, tuple(c.args), c.source), tuple(c.args))
            if spec.returns != "none":
                notes.append(f"{c.source}={fmt_value(value)}")
        return notes


def charge(budget: MotionBudget | None, text: str) -> None:
    """Charge a segment to the plan's motion budget before any of it runs (SkillFailure if over)."""
    if budget is None:
        return
    try:
        budget.charge(text)
    except BudgetExceeded as exc:
        raise SkillFailure(f"motion budget: {exc.reason}; nothing of this segment was executed") from None
    except SkillParseError as exc:
        raise SkillFailure(f"segment does not continue the plan: {exc}") from None


def new_program(
    skill_set: SkillSet, runtime: Runtime, budget: MotionBudget | None = None
) -> MiniSpecProgram | CallProgram:
    """The interpreter for the skill set's language (chatbot sets have no robot)."""
    if skill_set.language == "minispec":
        return MiniSpecProgram(skill_set, runtime, budget)
    if skill_set.language == "call":
        return CallProgram(skill_set, runtime, budget)
    raise ValueError(
        f"skill set {skill_set.name!r} (language {skill_set.language!r}) has no robot interpreter"
    )
