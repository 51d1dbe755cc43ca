"""GBNF grammars from skill sets: well-formed, derive the reference plans, exclude bad ones, and
only derive text that parse() accepts."""

from __future__ import annotations

import functools
import random

import pytest

from timely_llm_ros.core.grammar import (
    Gbnf,
    GrammarError,
    build_gbnf,
    int_range_alternatives,
)
from timely_llm_ros.core.skills import SkillSet, load_skill_set


@functools.cache
def _parsed(text: str) -> Gbnf:
    return Gbnf(text)


def plan_matches_grammar(sset: SkillSet, plan: str) -> bool:
    """True when ``plan`` is derivable from ``sset``'s grammar (a test helper: the product only
    hands the GBNF text to the engines)."""
    return _parsed(build_gbnf(sset)).matches(plan)


TELLO = load_skill_set("tello_minispec")
ARM = load_skill_set("robot_arm")
FLTRNN = load_skill_set("arm_fltrnn")
PLAN_SETS = [TELLO, ARM, FLTRNN]

REFERENCE = {
    "tello_minispec": [
        "?s('cat')==True{g('cat')}->False",
        "?iv('keys')==True&iv('wallet')==True{l('Yes');->True};l('No');->False",
        "mu(50);?iv('book')==True{tp}",
        "md(50);?iv('toy')==True{g('toy')}",
        "mr(100);mf(100)",
        "d(3);mf(100)",
        "8{?iv('dog')==True{->True}tc(45)}->False",
        "2{?iv('cup')==True&ox('cup')>0.5|od('cup')<100{mr(30);3{tu(10)}}}",
        "l('a;b) c{d}');tp",
        r"l('don\'t;stop');mf(100)",
        "_1=p('is it red?');l(_1)",
        "?t>5{tp};tc(30)",
        "_1=ox('cup');?_1>0.5{mr(20)}",
        "mf(20);mf(500);tc(1);tc(360);d(0.5);d(10)",
    ],
    "robot_arm": ["sc('red_box'); gt('red_box'); pi('red_box'); dr();", "sc('a'); dr()"],
    "arm_fltrnn": [
        "move_to(0.5, 0.2); take('red_box'); drop('red_box');",
        "move_to(1, 0); move_to(0.999, 1.0)",
    ],
}

NOT_DERIVABLE = {
    "tello_minispec": [
        "",
        ";",
        "mf(800)",
        "mf(19)",
        "mf(020)",
        "tc(361)",
        "tc(0)",
        "d(10.5)",
        "d(11)",
        "mf,100",
        "fly(100)",
        "iv('')",
        "iv(' ')",
        "?iv('x'){tp}",
        "{tp}",
        "0{tp}",
        "21{tp}",
        "tp tp",
        "mf(100.0)",
        "l('x)",
    ],
    "robot_arm": ["", "dr", "sc('a') gt('a')", "?sc('a')==True{dr()}", "pi()"],
    "arm_fltrnn": ["move_to(1.5, 0.2)", "move_to(0.5)", "take(_1)", "drop()"],
}


@pytest.mark.parametrize("sset", PLAN_SETS, ids=lambda s: s.name)
def test_grammar_well_formed(sset):
    text = build_gbnf(sset)
    g = Gbnf(text)  # raises on undefined rules, unbalanced groups, duplicate rules
    assert "root" in g.rules
    for line in text.splitlines():
        name, body = line.split(" ::= ", 1)
        assert name and body
        assert "_" not in name  # llama.cpp rule names: letters, digits and '-' only


@pytest.mark.parametrize("sset", PLAN_SETS, ids=lambda s: s.name)
def test_reference_plans_derivable(sset):
    plans = REFERENCE[sset.name] + [ex["plan"] for ex in sset.examples]
    for plan in plans:
        sset.parse_plan(plan)
        assert plan_matches_grammar(sset, plan), plan


@pytest.mark.parametrize("sset", PLAN_SETS, ids=lambda s: s.name)
def test_bad_plans_not_derivable(sset):
    for plan in NOT_DERIVABLE[sset.name]:
        assert not plan_matches_grammar(sset, plan), plan


@pytest.mark.parametrize(
    "lo,hi",
    [(20, 500), (1, 360), (0, 9), (0, 0), (1, 20), (7, 1234), (10, 10), (99, 100), (100, 199), (0, 1000)],
)
def test_int_ranges_exact(lo, hi):
    g = Gbnf("root ::= " + " | ".join(int_range_alternatives(lo, hi)))
    derivable = [v for v in range(0, 1300) if g.matches(str(v))]
    assert derivable == list(range(lo, min(hi, 1299) + 1))
    assert not g.matches("0" + str(lo))  # no leading zeros
    with pytest.raises(GrammarError):
        int_range_alternatives(5, 1)


def test_chatbot_has_no_grammar():
    with pytest.raises(GrammarError, match="free text"):
        build_gbnf(load_skill_set("chatbot_sentence"))


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("root ::= a\n", "undefined rule(s): a"),
        ('root ::= ("x"\n', "unbalanced '('"),
        ('root ::= "x"\nroot ::= "y"\n', "defined twice"),
        ('item ::= "x"\n', "no 'root' rule"),
        ('root ::= "x" )\n', "unexpected ')'"),
        ('root = "x"\n', "expected 'name ::= ...'"),
        ('root ::= * "x"\n', "without an operand"),
        ('root ::= "x" | \n', "empty alternative"),
    ],
)
def test_malformed_gbnf(text, fragment):
    with pytest.raises(GrammarError, match=None) as err:
        Gbnf(text)
    assert fragment in str(err.value)


# ----------------------------------------------------------- random derivations parse (subset)
_ALPHABET = "abcxyz _;'{}()\\?=<>&|.-019"


def _generate(g: Gbnf, rng: random.Random) -> str:
    """A random string derived from ``root``; recursion is cut by preferring short options deep down."""
    out: list[str] = []

    def gen(node, depth: int) -> None:
        k = node.kind
        if k == "lit":
            out.append(node.value)
        elif k == "cls":
            neg, ranges = node.value
            pool = [c for c in _ALPHABET if any(a <= c <= b for a, b in ranges) != neg]
            if not neg:
                pool = [chr(o) for a, b in ranges for o in range(ord(a), ord(b) + 1)]
            out.append(rng.choice(pool))
        elif k == "ref":
            gen(g.rules[node.value], depth + 1)
        elif k == "seq":
            for child in node.value:
                gen(child, depth)
        elif k == "alt":
            options = list(node.value)
            gen(options[0] if depth > 12 else rng.choice(options), depth)
        else:  # rep
            hi = 0 if depth > 12 else (3 if node.hi < 0 else node.hi)
            for _ in range(max(node.lo, rng.randint(node.lo, max(node.lo, hi)))):
                gen(node.value, depth + 1)

    gen(g.rules["root"], 0)
    return "".join(out)


@pytest.mark.parametrize("sset", PLAN_SETS, ids=lambda s: s.name)
def test_random_derivations_parse_and_segment(sset):
    g = Gbnf(build_gbnf(sset))
    rng = random.Random(11)
    produced = 0
    for _ in range(200):
        text = _generate(g, rng)
        assert g.matches(text), text
        calls = sset.parse_plan(text)  # everything the grammar allows must pass the final gate
        produced += bool(calls)
        # ... and the stop checker cuts it into segments that each parse, with the same calls
        segments = sset.split(text)
        assert "".join(segments) == text
        for seg in segments:
            sset.parse(seg)
        per_segment = [c for seg_calls in sset.parse_segments(segments) for c in seg_calls]
        assert [(c.name, c.args, c.repeat, c.guarded) for c in per_segment] == [
            (c.name, c.args, c.repeat, c.guarded) for c in calls
        ], text
    assert produced > 80  # most derivations contain calls
