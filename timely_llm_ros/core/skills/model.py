"""The data of skill sets and plans: skills, their arguments, the calls found in plan text, errors.

Pure data (frozen dataclasses) shared by the lexer, the parser, :class:`~.skillset.SkillSet` and the
loader, so that none of them needs another to describe what it produces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

LANGUAGES = ("minispec", "call", "chatbot")
ARG_TYPES = ("int", "float", "str", "bool")
CHATBOT_SKILL = "say"


# ---------------------------------------------------------------------------------------- errors
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
    args: tuple[Any, ...]
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


def fmt_number(x: float) -> str:
    """A range bound as users write it (``100``, not ``100.0``) in messages and the prompt."""
    return str(int(x)) if float(x).is_integer() else str(x)
