"""GBNF grammars (llama.cpp format) for constrained decoding of plans, built from a skill set.

A real engine can pass :func:`build_gbnf` output to llama.cpp (``LlamaGrammar.from_string``) so the
model can only emit plans in the skill set's language, with known skill names, the right number of
arguments of the right kind, and integer literals inside the skills' ranges.

What the grammar enforces, and what it cannot (``SkillSet.parse`` stays the final gate):

* Integer ranges are enforced exactly (``[20, 500]`` becomes digit-class alternatives such as
  ``"2" [0-9] | [3-9] [0-9] | [1-4] [0-9] [0-9] | "500"``; no leading zeros, no sign). Ranges with a
  negative bound fall back to any integer.
* Float ranges are enforced only for whole-number bounds ``0 <= lo <= hi``: integer part in
  ``[lo, hi-1]`` with any fraction, or ``hi`` with an optional all-zero fraction. Other float
  ranges only bound nothing (any non-negative decimal); ``parse()`` rejects out-of-range values.
* Non-empty strings (object names, questions) must contain a character other than space, tab,
  CR or LF — the same test ``parse()`` applies; strings are single-quoted and single-line.
* A run-time variable (``_1``) is accepted for any MiniSpec argument; its value is not checkable.
* The grammar is a **subset** of what ``parse()`` accepts: it allows whitespace only after ``;``
  and ``,``, single quotes only, and no ``100.``/``.5`` number forms, so every constrained output
  parses. The comma form ``mf,100`` is not derivable.
* A plan holds at least one statement (an empty plan would let the model stop at once); blocks
  may be empty, as in ``parse()``.
* The chatbot language is free text: it has no grammar (:class:`GrammarError`).
* Constrained decoding across a suspension: the engine must replay the grammar over the token ids
  generated so far when it resumes; segments are pieces of one derivation, not derivations.

:class:`Gbnf` is a small recogniser for GBNF text (the subset this module emits plus ``+``/``?``
repetition) used to check well-formedness (every referenced rule is defined) and that reference
plans are derivable, without needing llama.cpp.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import cast

from timely_llm_ros.core.skills.model import ArgSpec
from timely_llm_ros.core.skills.skillset import SkillSet


class GrammarError(ValueError):
    """A grammar that cannot be built or GBNF text that is not well-formed."""


# ---------------------------------------------------------------------------- integer ranges
def _same_len(a: str, b: str) -> list[str]:
    """GBNF sequences matching every decimal string of len(a) between a and b inclusive."""
    if a == b:
        return [f'"{a}"']
    if len(a) == 1:
        return [f"[{a}-{b}]"]
    if a[0] == b[0]:
        return [f'"{a[0]}" {rest}' for rest in _same_len(a[1:], b[1:])]
    n = len(a) - 1
    out = []
    lo_first = int(a[0])
    if a[1:] == "0" * n:
        lo_first -= 1  # the whole a[0]xxx decade is covered by the middle part
    else:
        out += [f'"{a[0]}" {rest}' for rest in _same_len(a[1:], "9" * n)]
    hi_first = int(b[0])
    tail_full = b[1:] == "9" * n
    mid_lo, mid_hi = lo_first + 1, hi_first - 1 + (1 if tail_full else 0)
    if mid_lo <= mid_hi:
        first = f'"{mid_lo}"' if mid_lo == mid_hi else f"[{mid_lo}-{mid_hi}]"
        out.append(" ".join([first] + ["[0-9]"] * n))
    if not tail_full:
        out += [f'"{b[0]}" {rest}' for rest in _same_len("0" * n, b[1:])]
    return out


def int_range_alternatives(lo: int, hi: int) -> list[str]:
    """Alternatives matching the decimal form (no leading zeros) of every integer in [lo, hi]."""
    if lo < 0 or lo > hi:
        raise GrammarError(f"integer range [{lo}, {hi}] cannot be expressed (need 0 <= lo <= hi)")
    out: list[str] = []
    for digits in range(len(str(lo)), len(str(hi)) + 1):
        start = max(lo, 10 ** (digits - 1) if digits > 1 else 0)
        end = min(hi, 10**digits - 1)
        if start <= end:
            out += _same_len(str(start), str(end))
    return out


# ---------------------------------------------------------------------------- grammar builder
def _rule_name(*parts: str) -> str:
    # llama.cpp rule names allow [a-zA-Z0-9-] only
    return "-".join(re.sub(r"[^A-Za-z0-9]", "-", p) for p in parts).lower()


def _arg_expr(a: ArgSpec, rules: dict[str, str], allow_var: bool) -> str:
    var = " | var" if allow_var else ""
    if a.type == "str":
        base = "nonempty-string" if a.nonempty else "string"
    elif a.type == "bool":
        base = "boolean"
    elif a.type == "int":
        if a.min is not None and a.max is not None and a.min >= 0:
            name = _rule_name("int", str(int(a.min)), "to", str(int(a.max)))
            rules[name] = " | ".join(int_range_alternatives(int(a.min), int(a.max)))
            base = name
        else:
            base = "integer"
    else:
        lo, hi = a.min, a.max
        if (
            lo is not None
            and hi is not None
            and 0 <= lo <= hi
            and float(lo).is_integer()
            and float(hi).is_integer()
        ):
            lo, hi = int(lo), int(hi)
            name = _rule_name("float", str(lo), "to", str(hi))
            parts = []
            if lo <= hi - 1:
                parts.append(f"({' | '.join(int_range_alternatives(lo, hi - 1))}) fraction?")
            parts.append(f'"{hi}" ("." "0"+)?')
            rules[name] = " | ".join(parts)
            base = name
        else:
            base = "decimal"
    return f"({base}{var})" if var else base


def build_gbnf(sset: SkillSet) -> str:
    """The GBNF grammar of whole plans in ``sset``'s language (root rule ``root``)."""
    if sset.language == "chatbot":
        raise GrammarError(f"skill set {sset.name!r} is free text (chatbot): no grammar to build")
    minispec = sset.language == "minispec"
    rules: dict[str, str] = {}
    call_names = []
    for spec in sset.skills.values():
        name = _rule_name("call", spec.abbr)
        call_names.append(name)
        args = [_arg_expr(a, rules, allow_var=minispec) for a in spec.args]
        if not args:
            rules[name] = f'"{spec.abbr}" ("()")?' if minispec else f'"{spec.abbr}()"'
        else:
            inner = ' "," ws '.join(args)
            rules[name] = f'"{spec.abbr}(" {inner} ")"'
    head: dict[str, str] = {}
    if minispec:
        # root needs at least one statement so the model cannot end the plan before it starts
        head["root"] = "unit+ | unit* stmt"
        head["body"] = "unit* stmt?"
        head["unit"] = 'block ";"? ws | stmt ";" ws'
        head["block"] = "cond-block | loop-block"
        head["cond-block"] = '"?" condition "{" body "}"'
        head["loop-block"] = 'loop-count "{" body "}"'
        head["loop-count"] = " | ".join(int_range_alternatives(1, sset.max_loop_count))
        head["condition"] = 'comparison (("&" | "|") comparison)*'
        head["comparison"] = "operand comparator operand"
        head["comparator"] = '"==" | "!=" | "<" | ">"'
        head["operand"] = "call | var | literal"
        head["stmt"] = 'call | var "=" call | "->" operand'
        head["literal"] = "decimal | string | boolean"
        head["var"] = '"_" [0-9]+'
    else:
        head["root"] = '(call ";" ws)* call (";" ws)?'
    head["call"] = " | ".join(call_names)
    common = {
        "ws": "[ \\t\\n]*",
        "integer": '"0" | [1-9] [0-9]*',
        "fraction": '"." [0-9]+',
        "decimal": "integer fraction?",
        "boolean": '"True" | "False"',
        "string": '"\'" strchar* "\'"',
        "nonempty-string": '"\'" " "* strsolid strchar* "\'"',
        "strchar": '[^\'\\\\\\n] | "\\\\" [^\\n]',
        "strsolid": '[^\'\\\\\\n\\t\\r ] | "\\\\" [^\\n\\t\\r ]',
    }
    all_rules = {**head, **rules, **common}
    text = "\n".join(f"{k} ::= {v}" for k, v in all_rules.items()) + "\n"
    Gbnf(text)  # self-check: well-formed and every referenced rule defined
    return text


# ---------------------------------------------------------------------------- GBNF recogniser
@dataclass(frozen=True)
class _Node:
    kind: str  # lit | cls | ref | seq | alt | rep
    value: object = None
    lo: int = 0
    hi: int = -1  # -1 = unbounded (rep)


_GBNF_TOKEN = re.compile(r'\s+|#[^\n]*|"(?:[^"\\]|\\.)*"|\[(?:[^\]\\]|\\.)*\]|[A-Za-z0-9-]+|[()|*+?]|\.')


def _unescape(s: str) -> str:
    out = []
    i = 0
    while i < len(s):
        c = s[i]
        if c == "\\" and i + 1 < len(s):
            n = s[i + 1]
            out.append({"n": "\n", "t": "\t", "r": "\r"}.get(n, n))
            i += 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _parse_class(body: str) -> tuple[bool, list[tuple[str, str]]]:
    neg = body.startswith("^")
    if neg:
        body = body[1:]
    chars = []
    i = 0
    while i < len(body):
        if body[i] == "\\":
            chars.append(_unescape(body[i : i + 2]))
            i += 2
        else:
            chars.append(body[i])
            i += 1
    ranges = []
    j = 0
    while j < len(chars):
        if j + 2 < len(chars) and chars[j + 1] == "-":
            ranges.append((chars[j], chars[j + 2]))
            j += 3
        else:
            ranges.append((chars[j], chars[j]))
            j += 1
    return neg, ranges


class Gbnf:
    """A parsed GBNF grammar that can tell whether a string is derivable from a rule.

    Matching computes, for each (node, position), the set of end positions (memoised), which is
    exact for grammars without left recursion — the grammars built here have none.
    """

    def __init__(self, text: str) -> None:
        self.rules: dict[str, _Node] = {}
        for lineno, line in enumerate(self._logical_lines(text), 1):
            if "::=" not in line:
                raise GrammarError(f"GBNF line {lineno}: expected 'name ::= ...', got {line!r}")
            name, body = line.split("::=", 1)
            name = name.strip()
            if not re.fullmatch(r"[A-Za-z0-9-]+", name):
                raise GrammarError(f"GBNF line {lineno}: bad rule name {name!r}")
            if name in self.rules:
                raise GrammarError(f"GBNF rule {name!r} is defined twice")
            toks = self._tokenise(body, name)
            node, pos = self._alt(toks, 0, name)
            if pos != len(toks):
                raise GrammarError(f"GBNF rule {name!r}: unexpected {toks[pos]!r}")
            self.rules[name] = node
        if "root" not in self.rules:
            raise GrammarError("GBNF grammar has no 'root' rule")
        missing = sorted(self._refs() - set(self.rules))
        if missing:
            raise GrammarError(f"GBNF grammar references undefined rule(s): {', '.join(missing)}")

    @staticmethod
    def _tokenise(body: str, rule: str) -> list[str]:
        toks = []
        pos = 0
        while pos < len(body):
            m = _GBNF_TOKEN.match(body, pos)
            if m is None:
                raise GrammarError(f"GBNF rule {rule!r}: cannot read {body[pos : pos + 20]!r}")
            tok = m.group()
            pos = m.end()
            if tok.strip() and not tok.startswith("#"):
                toks.append(tok)
        if not toks:
            raise GrammarError(f"GBNF rule {rule!r} is empty")
        return toks

    @staticmethod
    def _logical_lines(text: str) -> list[str]:
        lines: list[str] = []
        for raw in text.splitlines():
            if not raw.strip() or raw.lstrip().startswith("#"):
                continue
            if "::=" in raw or not lines:
                lines.append(raw)
            else:
                lines[-1] += " " + raw  # continuation line
        return lines

    def _alt(self, toks: list[str], i: int, rule: str) -> tuple[_Node, int]:
        options = []
        seq, i = self._seq(toks, i, rule)
        options.append(seq)
        while i < len(toks) and toks[i] == "|":
            seq, i = self._seq(toks, i + 1, rule)
            options.append(seq)
        return (options[0] if len(options) == 1 else _Node("alt", tuple(options))), i

    def _seq(self, toks: list[str], i: int, rule: str) -> tuple[_Node, int]:
        items = []
        while i < len(toks) and toks[i] not in ("|", ")"):
            t = toks[i]
            if t == "(":
                node, i = self._alt(toks, i + 1, rule)
                if i >= len(toks) or toks[i] != ")":
                    raise GrammarError(f"GBNF rule {rule!r}: unbalanced '('")
                i += 1
            elif t.startswith('"'):
                node = _Node("lit", _unescape(t[1:-1]))
                i += 1
            elif t.startswith("["):
                node = _Node("cls", _parse_class(t[1:-1]))
                i += 1
            elif t == ".":
                node = _Node("cls", (True, []))
                i += 1
            elif t in "*+?":
                raise GrammarError(f"GBNF rule {rule!r}: {t!r} without an operand")
            else:
                node = _Node("ref", t)
                i += 1
            while i < len(toks) and toks[i] in ("*", "+", "?"):
                lo, hi = {"*": (0, -1), "+": (1, -1), "?": (0, 1)}[toks[i]]
                node = _Node("rep", node, lo, hi)
                i += 1
            items.append(node)
        if not items:
            raise GrammarError(f"GBNF rule {rule!r}: empty alternative")
        return (items[0] if len(items) == 1 else _Node("seq", tuple(items))), i

    def _refs(self) -> set[str]:
        out: set[str] = set()

        def walk(n: _Node) -> None:
            if n.kind == "ref":
                out.add(str(n.value))
            elif n.kind in ("seq", "alt"):
                for c in cast("tuple[_Node, ...]", n.value):
                    walk(c)
            elif n.kind == "rep":
                walk(cast(_Node, n.value))

        for node in self.rules.values():
            walk(node)
        return out

    def matches(self, text: str, rule: str = "root") -> bool:
        """True when the whole of ``text`` is derivable from ``rule``."""
        if rule not in self.rules:
            raise GrammarError(f"no rule {rule!r}")
        memo: dict[tuple[int, int], frozenset[int]] = {}

        def ends(n: _Node, pos: int) -> frozenset[int]:
            key = (id(n), pos)
            if key in memo:
                return memo[key]
            memo[key] = frozenset()  # guards against left recursion (treated as no match)
            k = n.kind
            if k == "lit":
                s = str(n.value)
                res = frozenset([pos + len(s)]) if text.startswith(s, pos) else frozenset()
            elif k == "cls":
                neg, ranges = cast("tuple[bool, list[tuple[str, str]]]", n.value)
                if pos < len(text):
                    inside = any(a <= text[pos] <= b for a, b in ranges)
                    res = frozenset([pos + 1]) if inside != neg else frozenset()
                else:
                    res = frozenset()
            elif k == "ref":
                res = ends(self.rules[str(n.value)], pos)
            elif k == "alt":
                res = frozenset().union(*(ends(c, pos) for c in cast("tuple[_Node, ...]", n.value)))
            elif k == "seq":
                cur = frozenset([pos])
                for c in cast("tuple[_Node, ...]", n.value):
                    cur = frozenset().union(*(ends(c, p) for p in cur)) if cur else cur
                res = cur
            else:  # rep
                child = cast(_Node, n.value)
                res_set = {pos} if n.lo == 0 else set()
                frontier = {pos}
                count = 0
                seen = {pos}
                while frontier and (n.hi < 0 or count < n.hi):
                    count += 1
                    nxt: set[int] = set()
                    for p in frontier:
                        nxt |= ends(child, p)
                    if count >= n.lo:
                        res_set |= nxt
                    frontier = nxt - seen if n.hi < 0 else nxt
                    seen |= nxt
                res = frozenset(res_set)
            memo[key] = res
            return res

        return len(text) in ends(self.rules[rule], 0)
