"""Deterministic simulator tokenizer: exact decoding, stable ids, collision handling, plan lengths."""

import pytest

from timely_llm_ros.engines.sim_tokenizer import EOS_ID, N_SPECIAL, SimTokenizer, TokenizerError

TEXTS = [
    "?s('cat')==True{g('cat')}->False",
    "mu(40);?iv('book')==True{tp;->True}->False",
    "move_to(0.48, 0.55); take('red_box'); drop('red_box');",
    "Hello, it's a cat.  Then  go\n\nnext 12345 _2=oh('x') ünïcödé\t\r\n",
    "",
]


@pytest.mark.parametrize("text", TEXTS)
def test_decode_is_exact(text):
    tok = SimTokenizer()
    assert tok.decode(tok.encode(text)) == text
    assert "".join(tok.pieces(text)) == text


def test_ids_are_stable_across_instances_and_order():
    a, b = SimTokenizer(), SimTokenizer()
    a.encode("alpha beta")
    ids_b = b.encode("gamma beta alpha")
    assert a.encode("beta")[0] == b.encode("beta")[0]
    assert all(i >= N_SPECIAL for i in ids_b)


def test_gpt_like_pieces():
    assert SimTokenizer.pieces("mf(100);") == ["mf", "(", "100", ");"]
    assert SimTokenizer.pieces("12345") == ["123", "45"]
    assert SimTokenizer.pieces("it's a cat") == ["it", "'s", " a", " cat"]


def test_collisions_are_resolved_and_decoding_stays_exact():
    tok = SimTokenizer(bits=4)  # 64 ids only: collisions are certain
    words = [f"w{chr(97 + i)}" for i in range(26)]
    text = " ".join(words)
    ids = tok.encode(text)
    assert len(set(ids)) == len(set(tok.pieces(text)))
    assert tok.decode(ids) == text


def test_unknown_ids_and_bad_input():
    tok = SimTokenizer()
    assert tok.token_text(EOS_ID) == ""
    with pytest.raises(TokenizerError):
        tok.token_text(123456789)
    with pytest.raises(TokenizerError):
        tok.encode(None)  # type: ignore[arg-type]


def test_plan_lengths_match_the_paper():
    # §6: drone plans ≈ 20 tokens, arm plans ≈ 100 (the catalogue's reference plans)
    import yaml

    from timely_llm_ros.core.paths import config_path

    tasks = yaml.safe_load(config_path("tasks", "lrtrace_tasks.yaml").read_text())["tasks"]
    tok = SimTokenizer()
    drone = [len(tok.encode(t["plan"])) for t in tasks if t["robot_type"] == "drone"]
    arm = [len(tok.encode(t["plan"])) for t in tasks if t["robot_type"] == "arm"]
    assert len(drone) == 8 and len(arm) == 3
    assert 10 <= sum(drone) / len(drone) <= 30
    assert 70 <= sum(arm) / len(arm) <= 130
