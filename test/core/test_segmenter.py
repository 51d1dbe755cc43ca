"""Stop checker (segmented generation, TimelyLLM §4.1): boundaries on tricky plans, and the same
segments whatever way the text is split into deltas."""

from __future__ import annotations

import random
import re

import pytest

from timely_llm_ros.core.segmenter import SegmentChecker, SegmentRule, SegmentRuleError, split_segments
from timely_llm_ros.core.skills import load_skill_set


def run_deltas(rule_or_set, deltas: list[str]) -> list[str]:
    """Feed deltas one by one as a generation loop would; cut every ready segment."""
    checker = (
        rule_or_set.new_checker() if hasattr(rule_or_set, "new_checker") else SegmentChecker(rule_or_set)
    )
    out = []
    for d in deltas:
        if checker.feed(d):
            while checker.ready:
                out.append(checker.cut())
    rest = checker.finish()
    if rest:
        out.append(rest)
    return out


def token_like(text: str, seed: int) -> list[str]:
    """BPE-ish chunks: words/numbers, punctuation runs (``')``, ``==``, ``);``), spaces, then random
    merges and splits of neighbours so chunks straddle statement ends."""
    pieces = re.findall(r"\w+|\s+|[^\w\s]{1,3}", text)
    rng = random.Random(seed)
    out: list[str] = []
    for p in pieces:
        if out and rng.random() < 0.3:
            out[-1] += p
        elif len(p) > 1 and rng.random() < 0.3:
            k = rng.randint(1, len(p) - 1)
            out += [p[:k], p[k:]]
        else:
            out.append(p)
    assert "".join(out) == text
    return out


TELLO = load_skill_set("tello_minispec")
ARM = load_skill_set("robot_arm")
FLTRNN = load_skill_set("arm_fltrnn")
SENT = load_skill_set("chatbot_sentence")
PARA = load_skill_set("chatbot_paragraph")

# (skill set, plan, expected segments)
CASES = [
    (TELLO, "?s('cat')==True{g('cat')}->False", ["?s('cat')==True{", "g('cat')", "}->False"]),
    (TELLO, "?iv('book')==True{tp}", ["?iv('book')==True{", "tp}"]),
    (TELLO, "mu(50);?iv('book')==True{tp}", ["mu(50)", ";?iv('book')==True{", "tp}"]),
    (
        TELLO,
        "?s('bottle')==True{g('bottle');_2=oh('bottle');l(_2);tp};",
        ["?s('bottle')==True{", "g('bottle')", ";_2=oh('bottle')", ";l(_2)", ";tp}", ";"],
    ),
    # loop header has no skill: it joins the first body statement
    (TELLO, "4{tc(90);tp}", ["4{tc(90)", ";tp}"]),
    # nested blocks, the scan expansion from the notes
    (TELLO, "8{?iv('dog')==True{->True}tc(45)}->False", ["8{?iv('dog')==True{", "->True}tc(45)", "}->False"]),
    (
        TELLO,
        "2{?iv('cup')==True&ox('cup')>0.5|od('cup')<100{mr(30);3{tu(10)}}}",
        ["2{?iv('cup')==True&ox('cup')>0.5|od('cup')<100{", "mr(30)", ";3{tu(10)", "}}}"],
    ),
    # ; ) { } and quotes inside strings do not end anything
    (TELLO, "l('a;b) c{d}');l(\"it's ok; )\");tp", ["l('a;b) c{d}')", ';l("it\'s ok; )")', ";tp"]),
    (TELLO, r"l('don\'t;stop');mf(100)", [r"l('don\'t;stop')", ";mf(100)"]),
    # a question mark inside a string is not a condition
    (TELLO, "_1=p('is it red?');l(_1)", ["_1=p('is it red?')", ";l(_1)"]),
    # `t` (time) must not be found inside `tp`/`tc`; bare `t` in a condition
    (TELLO, "?t>5{tp};tc(30)", ["?t>5{", "tp}", ";tc(30)"]),
    # a condition without skills: the block opens inside the next segment
    (TELLO, "_1=ox('cup');?_1>0.5{mr(20)}", ["_1=ox('cup')", ";?_1>0.5{mr(20)", "}"]),
    # emergency re-plans from the public workloads (urgent traces)
    (TELLO, "mr(100);mf(100)", ["mr(100)", ";mf(100)"]),
    (TELLO, "d(3);mf(100)", ["d(3)", ";mf(100)"]),
    (
        ARM,
        "sc('red_box'); gt('red_box'); pi('red_box'); dr();",
        ["sc('red_box')", "; gt('red_box')", "; pi('red_box')", "; dr()", ";"],
    ),
    (ARM, "sc('a;b)'); dr()", ["sc('a;b)')", "; dr()"]),
    (
        FLTRNN,
        "move_to(0.5, 0.2); take('red_box'); drop('red_box');",
        ["move_to(0.5, 0.2)", "; take('red_box')", "; drop('red_box')", ";"],
    ),
    (
        SENT,
        "Paris is the capital and the largest city of France. It has 2.1 million people! Why? "
        "Because it is old.",
        [
            "Paris is the capital and the largest city of France.",
            " It has 2.1 million people! Why? Because it is old.",
        ],
    ),
    (
        PARA,
        "First paragraph, line one.\nLine two.\n\nSecond one.\n \n\n\nThird.",
        ["First paragraph, line one.\nLine two.\n\n", "Second one.\n \n", "\n\nThird."],
    ),
]


@pytest.mark.parametrize("sset,plan,expected", CASES)
def test_whole_text_segments(sset, plan, expected):
    assert split_segments(sset.segment_rule, plan) == expected
    assert "".join(expected) == plan


@pytest.mark.parametrize("sset,plan,expected", CASES)
def test_every_split_gives_same_segments(sset, plan, expected):
    assert run_deltas(sset, list(plan)) == expected  # one character per token
    for i in range(len(plan) + 1):  # every two-part split, including empty deltas
        assert run_deltas(sset, [plan[:i], plan[i:]]) == expected, i
    for seed in range(8):
        assert run_deltas(sset, token_like(plan, seed)) == expected, seed


@pytest.mark.parametrize("sset,plan,expected", [c for c in CASES if c[0].language != "chatbot"])
def test_every_segment_parses(sset, plan, expected):
    for seg in expected:
        sset.parse(seg)
    calls = [c.name for seg in sset.parse_segments(expected) for c in seg]
    assert calls == [c.name for c in sset.parse_plan(plan)]


def test_condition_header_waits_for_brace():
    ch = TELLO.new_checker()
    assert not ch.feed("?iv('x')")
    assert not ch.feed("==True")
    assert ch.feed("{")
    assert ch.cut() == "?iv('x')==True{"


def test_partial_tokens():
    ch = TELLO.new_checker()
    assert not ch.feed("mf(1")
    assert ch.pending == "mf(1"
    assert ch.feed("00);m")
    assert ch.cut() == "mf(100)"
    assert ch.pending == ";m"
    assert not ch.ready
    assert not ch.feed("u(5")
    assert ch.feed("0)")
    assert ch.cut() == ";mu(50)"
    assert ch.finish() == ""


def test_two_boundaries_in_one_delta():
    ch = TELLO.new_checker()
    assert ch.feed("tp;tp;mf(20")
    assert ch.cut() == "tp;"
    assert ch.ready
    assert ch.cut() == "tp;"
    assert not ch.ready
    assert ch.pending == "mf(20"


def test_skill_name_must_be_whole_identifier():
    # `stp` and `tpx` are not skills; `mf` inside a string is not a call
    rule = TELLO.segment_rule
    assert split_segments(rule, "stp;tpx;l") == ["stp;tpx;l"]
    assert split_segments(rule, "_1='mf(100)';") == ["_1='mf(100)';"]


def test_unknown_call_is_not_executable():
    assert split_segments(ARM.segment_rule, "foo('x'); bar(); sc('x')") == ["foo('x'); bar(); sc('x')"]


def test_arm_calls_need_parentheses():
    # the call language has no bare skills: `dr` alone never makes a segment executable
    assert split_segments(ARM.segment_rule, "dr;dr;") == ["dr;dr;"]


def test_forced_cut_returns_everything():
    ch = TELLO.new_checker()
    ch.feed("mf(10")
    assert ch.cut() == "mf(10"
    assert ch.pending == ""


def test_finish_closes_checker():
    ch = TELLO.new_checker()
    ch.feed("tp")
    assert ch.finish() == "tp"
    with pytest.raises(RuntimeError):
        ch.feed("x")


def test_feed_rejects_non_text():
    with pytest.raises(TypeError):
        TELLO.new_checker().feed(b"mf(100)")  # type: ignore[arg-type]


def test_sentence_mode_needs_min_chars():
    rule = SegmentRule("sentence", min_chars=40)
    assert split_segments(rule, "Yes. No. Maybe.") == ["Yes. No. Maybe."]
    assert split_segments(rule, "x" * 41 + ". Next") == ["x" * 41 + ".", " Next"]
    assert split_segments(rule, "x" * 39 + ". Next") == ["x" * 39 + ". Next"]


def test_paragraph_needs_text():
    assert split_segments(PARA.segment_rule, "\n\n\nHello.\n\n") == ["\n\n\nHello.\n\n"]


def test_feed_does_not_rescan_pending(monkeypatch):
    """feed() is O(delta): it must never join or rescan the pending text."""
    ch = TELLO.new_checker()
    ch.feed("l('" + "x" * 5000)

    def boom(self):
        raise AssertionError("feed() read the whole pending text")

    monkeypatch.setattr(SegmentChecker, "pending", property(boom))
    for c in "yz')":
        ch.feed(c)
    assert ch.ready


def test_bad_rules():
    with pytest.raises(SegmentRuleError):
        SegmentRule("word")
    with pytest.raises(SegmentRuleError):
        SegmentRule("statement")
    with pytest.raises(SegmentRuleError):
        SegmentRule("sentence", min_chars=-1)


def test_public_workload_plans_one_segment_per_skill():
    """The drone traces' exe_time_detail lists one entry per executed skill; a reference plan for
    each public trace cuts into one skill-bearing segment per statement, in that order. A condition
    header is one statement: both calls of ``?iv('keys')==True&iv('wallet')==True{`` are evaluated
    before the block can start."""
    plans = {  # public trace id: (plan, expected skills per skill-bearing segment, exe_time_detail)
        0: ("?s('cat')==True{g('cat')}->False", [["s"], ["g"]], ["s(", "g("]),
        1: (
            "?iv('keys')==True&iv('wallet')==True{l('Yes');->True};l('No');->False",
            [["iv", "iv"], ["l"], ["l"]],
            ["iv", "iv", "l", "l"],
        ),
        2: ("mu(50);?iv('book')==True{tp}", [["mu"], ["iv"], ["tp"]], ["mu", "iv", "tp"]),
        3: ("md(50);?iv('toy')==True{g('toy')}", [["md"], ["iv"], ["g"]], ["md", "iv", "g("]),
        4: ("?s('scissors')==True{g('scissors')}", [["s"], ["g"]], ["s(", "g("]),
        5: ("mr(100);mf(100)", [["mr"], ["mf"]], ["mr", "mf"]),
        6: ("mu(100);ml(100)", [["mu"], ["ml"]], ["mu", "ml"]),
        7: ("d(3);mf(100)", [["d"], ["mf"]], ["d", "mf"]),
    }
    for trace, (plan, expected, tokens) in plans.items():
        segs = TELLO.split(plan)
        per_seg = [[c.name for c in calls] for calls in TELLO.parse_segments(segs)]
        assert [names for names in per_seg if names] == expected, trace
        assert [n for names in expected for n in names] == [t.rstrip("(") for t in tokens], trace


def test_fltrnn_public_plan_segments():
    plan = (
        "move_to(0.48, 0.55); take('red_box'); move_to(0.2, 0.3); drop('red_box'); "
        "move_to(0.7, 0.6); take('green_box'); move_to(0.48, 0.55); drop('green_box');"
    )
    segs = FLTRNN.split(plan)
    names = [[c.name for c in calls] for calls in FLTRNN.parse_segments(segs)]
    assert [n for n in names if n] == [[t] for t in ["move_to", "take", "move_to", "drop"] * 2]
