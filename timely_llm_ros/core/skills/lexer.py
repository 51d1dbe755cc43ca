"""The MiniSpec/call lexer: plan text → tokens.

The robot-side interpreter (``timely_llm_ros.robots.minispec``) tokenises with the same rules
(:data:`TOKEN_RE`, :data:`VAR_RE`), so what the planner accepted is what the robot runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from timely_llm_ros.core.skills.model import SkillParseError

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
COMPARATORS = ("==", "!=", "<", ">")
BLANK = " \t\r\n"  # a non-empty string needs another character (grammar.py's strsolid agrees)


@dataclass
class Tok:
    kind: str  # str | arrow | num | ident | op | eof
    value: str
    start: int
    end: int


def tokenize(text: str) -> list[Tok]:
    toks: list[Tok] = []
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
            toks.append(Tok(kind, m.group(), m.start(), m.end()))
        pos = m.end()
    toks.append(Tok("eof", "", len(text), len(text)))
    return toks


def unquote(tok: str) -> str:
    body = tok[1:-1]
    return re.sub(r"\\(.)", r"\1", body)
