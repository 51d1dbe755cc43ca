"""Skill sets as data: loading/validation of the YAML files and plan parsing/validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from timely_llm_ros.core.paths import config_path
from timely_llm_ros.core.skills import (
    SkillCall,
    SkillParseError,
    SkillSetError,
    UnknownSkillSet,
    Var,
    available_skill_sets,
    load_skill_set,
    load_skill_set_file,
)

SETS = ["arm_fltrnn", "chatbot_paragraph", "chatbot_sentence", "robot_arm", "tello_minispec"]
TELLO = load_skill_set("tello_minispec")
ARM = load_skill_set("robot_arm")
FLTRNN = load_skill_set("arm_fltrnn")


def test_shipped_sets():
    assert set(SETS) <= set(available_skill_sets())
    expect = {  # name: (robot_type, language, max_segment_tokens, G estimate) — TimelyLLM paper §7.1
        "tello_minispec": ("drone", "minispec", 10, 0.09),
        "robot_arm": ("arm", "call", 20, 0.16),
        "arm_fltrnn": ("arm", "call", 20, 0.16),
        "chatbot_sentence": ("chatbot", "chatbot", 20, 0.16),
        "chatbot_paragraph": ("chatbot", "chatbot", 20, 0.16),
    }
    for name, (rt, lang, mst, gen) in expect.items():
        s = load_skill_set(name)
        assert (s.name, s.robot_type, s.language, s.max_segment_tokens, s.segment_gen_estimate_s) == (
            name,
            rt,
            lang,
            mst,
            gen,
        )
    assert load_skill_set("tello_minispec") is TELLO  # cached


def test_skill_names():
    assert {
        "mf",
        "mb",
        "ml",
        "mr",
        "mu",
        "md",
        "tc",
        "tu",
        "d",
        "iv",
        "ox",
        "oy",
        "ow",
        "oh",
        "od",
        "p",
        "l",
        "tp",
        "rp",
        "g",
        "t",
        "s",
        "sa",
    } == TELLO.skill_names()
    assert ARM.skill_names() == {"sc", "gt", "pi", "dr"}
    assert FLTRNN.skill_names() == {"move_to", "take", "drop"}
    assert TELLO.skills["iv"].query and not TELLO.skills["mf"].query
    mf = TELLO.skills["mf"].args[0]
    assert (mf.type, mf.min, mf.max) == ("int", 20, 500)
    assert (TELLO.skills["tc"].args[0].min, TELLO.skills["tc"].args[0].max) == (1, 360)


def test_unknown_skill_set_lists_available():
    with pytest.raises(UnknownSkillSet) as err:
        load_skill_set("tello_minispek")
    assert isinstance(err.value, KeyError)
    msg = str(err.value)
    assert msg.startswith("unknown skill set 'tello_minispek'")
    for name in SETS:
        assert name in msg


def test_prompt_is_complete():
    for name in SETS:
        s = load_skill_set(name)
        assert "<<SKILLS>>" not in s.prompt
        if s.language == "chatbot":
            continue
        for abbr, spec in s.skills.items():
            assert f"{abbr}:{spec.name}(" in s.prompt
        for ex in s.examples:
            assert ex["plan"] in s.prompt
        assert len(s.examples) >= 2
    assert "mf:move_forward(distance:int[20-500])" in TELLO.prompt


def test_format_request():
    req = TELLO.format_request("Scene: [] Task: [A] Could you find the cat? If so, go to it.")
    assert req.startswith(TELLO.prompt)
    assert req.endswith("Scene: [] Task: [A] Could you find the cat? If so, go to it.\nResponse: ")
    assert TELLO.format_request("[A] Go up.", scene="[cup x:0.1]").endswith(
        "Scene: [cup x:0.1] Task: [A] Go up.\nResponse: "
    )
    with pytest.raises(SkillParseError, match="empty"):
        TELLO.format_request("   ")


# ------------------------------------------------------------------------------------- parsing
def test_parse_minispec_forms():
    calls = TELLO.parse_plan(
        "?s('bottle')==True{g('bottle');_2=oh('bottle');l(_2);tp};d(1.5);l(\"say \\\"hi\\\"; ok\");rp()"
    )
    assert [c.name for c in calls] == ["s", "g", "oh", "l", "tp", "d", "l", "rp"]
    assert calls[0] == SkillCall("s", ("bottle",), "s('bottle')")
    assert calls[1].guarded and not calls[0].guarded
    assert calls[3].args == (Var("_2"),)
    assert calls[5].args == (1.5,)
    assert calls[6].args == ('say "hi"; ok',)
    assert calls[7].source == "rp()"


def test_parse_whitespace_and_conditions():
    calls = TELLO.parse_plan("mf(100); ?iv('a')==True & ox('a')>0.5 | od('a')!=_1 {tc(45)} ;\n tp")
    assert [c.name for c in calls] == ["mf", "iv", "ox", "od", "tc", "tp"]


def test_parse_loops_repeat():
    calls = TELLO.parse_plan("2{mf(50);3{tc(10)}};tp")
    assert [(c.name, c.repeat) for c in calls] == [("mf", 2), ("tc", 6), ("tp", 1)]


def test_parse_segments_carries_blocks():
    segs = ["2{mf(50)", ";3{tc(10)", "}}", ";tp"]
    per = TELLO.parse_segments(segs)
    assert [[(c.name, c.repeat) for c in calls] for calls in per] == [
        [("mf", 2)],
        [("tc", 6)],
        [],
        [("tp", 1)],
    ]
    # a standalone segment does not know the enclosing loops
    assert TELLO.parse(";tc(10)")[0].repeat == 1
    with pytest.raises(SkillParseError, match="closes no open block"):
        TELLO.parse_segments(["tp}", "mf(20)"])


def test_partial_segments_parse():
    assert [c.name for c in TELLO.parse("?s('cat')==True{")] == ["s"]
    assert TELLO.parse("}->False") == []
    assert TELLO.parse("") == []
    assert TELLO.parse(";") == []
    with pytest.raises(SkillParseError, match="never closed"):
        TELLO.parse_plan("?s('cat')==True{")
    with pytest.raises(SkillParseError, match="closes no open block"):
        TELLO.parse_plan("tp}")


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("mf(800)", "'distance' of mf (move_forward) = 800 is above the maximum 500"),
        ("mf(19)", "below the minimum 20"),
        ("tc(361)", "above the maximum 360"),
        ("tc(0)", "below the minimum 1"),
        ("d(11.0)", "above the maximum 10"),
        ("mf(100.5)", "must be an int"),
        ("mf('far')", "must be an int"),
        ("iv('')", "must not be empty"),
        ("iv('  ')", "must not be empty"),
        ("iv(5)", "must be a quoted string"),
        ("mf()", "takes 1 argument(s) (distance:int), got 0"),
        ("mf(1,2)", "takes 1 argument(s)"),
        ("tp(1)", "takes 0 argument(s) (no arguments), got 1"),
        ("fly(100)", "unknown skill 'fly'"),
        ("mf,100", "old comma form 'mf,100' is not accepted; write mf(100)"),
        ("mf (100)", "no space allowed"),
        ("l(oh('x'))", "must be a literal or a variable"),
        ("?iv('x'){tp}", "expected a comparator"),
        ("?iv('x')>=1{tp}", "comparator '>=' is not in MiniSpec"),
        ("?iv('x')==True tp", "expected '{' after the condition"),
        ("{tp}", "'{' must follow a condition"),
        ("0{tp}", "loop count 0 is outside 1..20"),
        ("21{tp}", "loop count 21"),
        ("tp tp", "expected ';' before 'tp'"),
        ("l('open", "unterminated string"),
        ("mf(100)$", "unexpected character '$'"),
        ("_1=5", "needs a skill call"),
        ("mf(100", "expected ',' or ')'"),
    ],
)
def test_parse_errors_name_statement(text, fragment):
    with pytest.raises(SkillParseError) as err:
        TELLO.parse_plan(text)
    assert fragment in str(err.value)
    assert err.value.reason and fragment in str(err.value.reason) + str(err.value)


def test_error_names_the_failing_statement():
    with pytest.raises(SkillParseError) as err:
        TELLO.parse_plan("mu(50);?iv('x')==True{mf(800);tp}")
    assert err.value.statement == "mf(800)"
    assert "(in statement 'mf(800)')" in str(err.value)
    with pytest.raises(SkillParseError) as err:
        TELLO.parse_plan("mu(50);?iv('book')==True{tp")
    assert err.value.statement == "?iv('book')==True{"


def test_call_language():
    calls = ARM.parse_plan("sc('red_box'); gt('red_box'); pi('red_box'); dr();")
    assert [(c.name, c.args) for c in calls] == [
        ("sc", ("red_box",)),
        ("gt", ("red_box",)),
        ("pi", ("red_box",)),
        ("dr", ()),
    ]
    assert [c.name for c in ARM.parse_plan("sc('a')\ngt('a')\n")] == ["sc", "gt"]  # newline separates
    calls = FLTRNN.parse_plan("move_to(0.5, 0.2); take('red_box'); move_to(1, 0); drop('red_box');")
    assert calls[0].args == (0.5, 0.2) and calls[2].args == (1, 0)


@pytest.mark.parametrize(
    "sset,text,fragment",
    [
        (ARM, "dr;", "needs parentheses"),
        (ARM, "?sc('a')==True{dr()}", "has only calls"),
        (ARM, "sc('a') gt('a')", "expected ';'"),
        (ARM, "pi()", "takes 1 argument(s)"),
        (ARM, "sc(_1)", "variables like '_1' exist only in MiniSpec"),
        (FLTRNN, "move_to(1.5, 0.2)", "'x' of move_to (move_to) = 1.5 is above the maximum 1"),
        (FLTRNN, "move_to(0.5, -0.1)", "below the minimum 0"),
        (FLTRNN, "move_to('a', 0.2)", "must be a number"),
        (FLTRNN, "drop()", "takes 1 argument(s)"),
        (FLTRNN, "mf(100)", "unknown skill 'mf' for skill set 'arm_fltrnn'"),
    ],
)
def test_call_language_errors(sset, text, fragment):
    with pytest.raises(SkillParseError) as err:
        sset.parse_plan(text)
    assert fragment in str(err.value)


def test_chatbot_parse():
    s = load_skill_set("chatbot_sentence")
    assert s.parse("Hello there, how are you?") == [
        SkillCall("say", ("Hello there, how are you?",), "Hello there, how are you?")
    ]
    assert s.parse("  \n") == []


def test_parse_rejects_non_text():
    with pytest.raises(SkillParseError):
        TELLO.parse(None)  # type: ignore[arg-type]


# -------------------------------------------------------------------------------- bad YAML files
def _write(tmp_path: Path, data: dict | str, name: str = "x.yaml") -> Path:
    p = tmp_path / name
    p.write_text(data if isinstance(data, str) else yaml.safe_dump(data), encoding="utf-8")
    return p


def _base() -> dict:
    return yaml.safe_load(config_path("skills", "robot_arm.yaml").read_text(encoding="utf-8"))


@pytest.mark.parametrize(
    "mutate,fragment",
    [
        (lambda d: d.pop("robot_type"), "missing field 'robot_type'"),
        (lambda d: d.update(max_segment_tokens="ten"), "max_segment_tokens: must be int"),
        (lambda d: d.update(max_segment_tokens=0), "max_segment_tokens: must be >= 1, got 0"),
        (lambda d: d.update(segment_gen_estimate_s=-1), "segment_gen_estimate_s: must be > 0"),
        (lambda d: d.update(language="lisp"), "language: must be one of minispec, call, chatbot"),
        (lambda d: d["skills"][0].pop("abbr"), "skills[0]: missing field 'abbr'"),
        (lambda d: d["skills"][1].update(abbr="g t"), "skills[1].abbr: 'g t' is not valid here"),
        (
            lambda d: d["skills"][0]["args"][0].update(type="text"),
            "skills[0].args[0].type: must be one of int, float, str, bool",
        ),
        (
            lambda d: d["skills"][0]["args"][0].update(type="int", min=5, max=1),
            "skills[0].args[0].min 5 is above max 1",
        ),
        (lambda d: d["skills"][0]["args"][0].update(min=1), "skills[0].args[0].'min' only applies"),
        (lambda d: d["skills"].append(dict(d["skills"][0])), "'sc' is defined twice"),
        (lambda d: d["skills"][0].update(query="yes"), "skills[0].query: must be bool"),
        (lambda d: d.update(skills=[]), "skills: must not be empty"),
        (lambda d: d["examples"][0].update(plan="sc('a'); fly()"), "examples[0].plan does not parse"),
        (lambda d: d.update(segment={"mode": "sentence"}), "field 'segment.mode' must be statement"),
        (
            lambda d: d.update(request_template="no placeholder"),
            "request_template: 'no placeholder' is not valid here",
        ),
        (lambda d: d.update(colour="red"), "unknown field(s) 'colour'; known: backends, examples"),
        (
            lambda d: d.update(backends={"ros": {"skills": {"sc": {"name": "x"}}}}),
            "backends.ros.skills.sc: give exactly one of 'action', 'service' or 'topic'",
        ),
    ],
)
def test_bad_yaml_names_file_and_field(tmp_path, mutate, fragment):
    data = _base()
    mutate(data)
    path = _write(tmp_path, data)
    with pytest.raises(SkillSetError) as err:
        load_skill_set_file(path)
    assert str(path) in str(err.value)
    assert fragment in str(err.value)


def test_unreadable_yaml(tmp_path):
    path = _write(tmp_path, "name: [unclosed\n")
    with pytest.raises(SkillSetError, match="not valid YAML"):
        load_skill_set_file(path)
    with pytest.raises(SkillSetError, match="top level must be a mapping"):
        load_skill_set_file(_write(tmp_path, "- a\n- b\n", "y.yaml"))
    with pytest.raises(SkillSetError, match="cannot read"):
        load_skill_set_file(tmp_path / "missing.yaml")


def test_config_overlay_adds_and_overrides_and_checks_names(tmp_path, monkeypatch):
    (tmp_path / "skills").mkdir()
    data = _base()
    _write(tmp_path / "skills", data, "my_arm.yaml")  # name field says robot_arm
    monkeypatch.setenv("TIMELY_LLM_CONFIG", str(tmp_path))
    # the overlay adds to the shipped skill sets instead of replacing them
    assert "my_arm" in available_skill_sets() and "tello_minispec" in available_skill_sets()
    with pytest.raises(SkillSetError, match="expected 'my_arm'"):
        load_skill_set("my_arm")
    assert load_skill_set("tello_minispec").robot_type == "drone"
    # a file of the same name overrides the shipped one
    data["examples"] = data["examples"][:1]
    _write(tmp_path / "skills", data, "robot_arm.yaml")
    sset = load_skill_set("robot_arm")
    assert sset.source_path == str(tmp_path / "skills" / "robot_arm.yaml") and len(sset.examples) == 1
    with pytest.raises(UnknownSkillSet, match="available: .*my_arm"):
        load_skill_set("nonexistent")
    monkeypatch.setenv("TIMELY_LLM_CONFIG", str(tmp_path / "typo"))
    with pytest.raises(FileNotFoundError, match="typo.*TIMELY_LLM_CONFIG"):
        available_skill_sets()
