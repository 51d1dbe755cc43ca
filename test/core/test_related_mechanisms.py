"""Decisions of the related papers' mechanisms on hand-computed cases (pure functions, no engine).

KV policy (LAMPS waste, 001's cache-vs-recompute rule, eviction order), the slack-driven token
budget, the online segment-length predictor and the semantic-urgency classifiers.
"""

import math

import pytest

from timely_llm_ros.core.options.kv_policy import (
    KVOptions,
    KVPolicyError,
    at_suspension,
    cache_beats_recompute,
    evict_destination,
    lamps_waste,
    victim_key,
)
from timely_llm_ros.core.options.length_predictor import LengthPredictor, segment_time
from timely_llm_ros.core.options.token_budget import BudgetOptions, Running, choose_budget, largest_chunk
from timely_llm_ros.core.options.urgency import (
    LexicalClassifier,
    LLMClassifier,
    ProbeBook,
    UrgencyConfigError,
    grammar_gbnf,
    load_urgency_config,
    parse_config,
)
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.tuf import TUF

# prefill(N) = 0.001 N + 0.01 s; swap out 0.5 ms/token, swap in 1 ms/token
COSTS = EngineProfile(
    name="t",
    prefill_a=0.0,
    prefill_b=0.001,
    prefill_c=0.01,
    kv_bytes_per_token=1000,
    host_to_device_bytes_per_s=1e6,
    device_to_host_bytes_per_s=2e6,
)


# ------------------------------------------------------------------------------------ KV policy
def test_lamps_waste_hand_computed():
    # C_i = 10, C_other = 30, pause 1 s: keep 1·10 = 10; drop (0.01 + 0.01)·40 = 0.8;
    # host (0.005 + 0.01)·40 = 0.6 -> swap to host
    w = lamps_waste(10, 30, 1.0, COSTS, host_room=True)
    assert (w.keep, w.drop, w.host) == pytest.approx((10.0, 0.8, 0.6))
    assert w.choice == "host"
    # a 10 ms pause: keep 0.1 < 0.6 -> preserve
    assert lamps_waste(10, 30, 0.01, COSTS, True).choice == "keep"
    # no host room: swap impossible, drop (0.8) beats keep (10)
    w = lamps_waste(10, 30, 1.0, COSTS, host_room=False)
    assert w.host == math.inf and w.choice == "drop"
    # no resume hint (infinite pause) never keeps
    assert lamps_waste(10, 0, math.inf, COSTS, True).choice == "host"


def test_cache_vs_recompute_threshold():
    # 10 tokens: restore 0.005 + 0.010 = 0.015 s < re-prefill 0.020 s -> cache
    assert cache_beats_recompute(10, COSTS)
    # 30 tokens: restore 0.045 s > re-prefill 0.040 s -> recompute
    assert not cache_beats_recompute(30, COSTS)
    thr = KVOptions(reload="threshold")
    assert evict_destination(10, True, thr, COSTS) == "host"
    assert evict_destination(30, True, thr, COSTS) == "drop"
    assert evict_destination(30, True, KVOptions(), COSTS) == "host"  # host-first ignores the costs
    assert evict_destination(10, False, KVOptions(), COSTS) == "drop"


def test_eviction_orders():
    # (hint, suspended_at, order, importance) of three suspended contexts
    ctx = {
        "near-important": (5.0, 0.0, 1, 2.0),
        "far-important": (9.0, 1.0, 2, 2.0),
        "near-unimportant": (6.0, 2.0, 3, 1.0),
    }

    def order(opts):
        return sorted(ctx, key=lambda k: victim_key(opts, *ctx[k]))

    assert order(KVOptions(eviction="furthest"))[0] == "far-important"
    assert order(KVOptions(eviction="lru"))[0] == "near-important"  # suspended first
    # 001: lowest importance first, then furthest resume
    assert order(KVOptions(eviction="priority")) == ["near-unimportant", "far-important", "near-important"]


def test_at_suspension_per_policy():
    args = (10, 30, 1.0, COSTS)
    assert at_suspension(KVOptions("evict"), *args, True) == "keep"
    assert at_suspension(KVOptions("keep"), *args, True) == "keep"
    assert at_suspension(KVOptions("discard"), *args, True) == "drop"
    assert at_suspension(KVOptions("swap"), *args, True) == "host"
    assert at_suspension(KVOptions("swap"), *args, False) == "drop"
    assert at_suspension(KVOptions("lamps"), *args, True) == "host"
    with pytest.raises(KVPolicyError, match="kv_policy must be one of"):
        KVOptions("sometimes")
    with pytest.raises(KVPolicyError, match="eviction"):
        KVOptions(eviction="random")


# --------------------------------------------------------------------------------- token budget
def _cost(c):  # 4 ms per prompt token
    return 0.004 * c


def test_slack_budget_hand_computed():
    opts = BudgetOptions(mode="slack", min_chunk=4)
    r = Running(deadline=0.98, tokens_left=5, decoding=True, decays=True)
    # slack 0.98 - (0.5 + 0.25) = 0.23 s over 5 steps = 0.046 s per step -> 11 tokens (0.044 s)
    assert choose_budget(opts, 0.5, [r], 0.05, _cost) == 11
    # a tardy generation (negative slack) cannot be saved by holding prompts back: ignored by default,
    # the minimum chunk (progress) with protect_tardy
    late = Running(deadline=0.6, tokens_left=5, decoding=True, decays=True)
    assert choose_budget(opts, 0.5, [r, late], 0.05, _cost) == 11
    assert (
        choose_budget(
            BudgetOptions(mode="slack", min_chunk=4, protect_tardy=True), 0.5, [r, late], 0.05, _cost
        )
        == 4
    )
    # flat TUF and generations still in their prefill impose nothing -> unlimited
    flat = Running(deadline=0.6, tokens_left=5, decoding=True, decays=False)
    assert choose_budget(opts, 0.5, [flat], 0.05, _cost) is None
    # a prompt with an earlier deadline than every decoder is the most urgent work (001 stage-aware)
    urgent_prompt = Running(deadline=0.55, tokens_left=4, decoding=False, decays=True)
    assert choose_budget(opts, 0.5, [r, urgent_prompt], 0.05, _cost) is None
    # ... but a decoder more urgent than the prompt still limits it
    assert choose_budget(opts, 0.5, [r, Running(1.5, 4, False, True)], 0.05, _cost) == 11
    assert choose_budget(BudgetOptions(mode="slack", min_chunk=4, max_chunk=8), 0.5, [r], 0.05, _cost) == 8
    # no step time measured yet: no limit
    assert choose_budget(opts, 0.5, [r], None, _cost) is None


def test_whole_and_fixed_budgets_and_search():
    assert choose_budget(BudgetOptions("whole"), 0.0, [], 0.05, _cost) is None
    assert choose_budget(BudgetOptions("fixed", chunk=32), 0.0, [], None, None) == 32
    assert largest_chunk(0.0399, _cost, 100) == 9
    assert largest_chunk(0.001, _cost, 100) == 0
    assert largest_chunk(10.0, _cost, 100) == 100
    with pytest.raises(ValueError, match="token_budget"):
        BudgetOptions(mode="dynamic")
    with pytest.raises(ValueError, match="max_chunk"):
        BudgetOptions(mode="slack", min_chunk=16, max_chunk=8)


# ---------------------------------------------------------------------------- length predictor
def test_length_predictor_learns_scores_and_bounds():
    p = LengthPredictor(k=1.5, min_obs=3)
    for _ in range(3):
        assert p.predict("tello", "urgent", 0) is None  # fewer than min_obs segments seen
        p.observe("tello", "urgent", 0, 4)
    assert p.predict("tello", "urgent", 0) == 4.0
    assert p.predict("tello", "urgent", 1) is None  # later segments are their own key
    assert p.pessimistic("tello", "urgent", 0, n_max=10) == 6.0  # min(1.5·4, 10)
    assert p.pessimistic("tello", "urgent", 0, n_max=5) == 5.0
    p.observe("tello", "urgent", 0, 6)  # predicted 4: error 2, not above 1.5·4 = 6
    p.observe("tello", "urgent", 0, 8)  # predicted 4.5: error 3.5, above 6.75
    e = p.error.as_dict()
    assert e["n"] == 2 and e["mae_tokens"] == pytest.approx(2.75)
    assert e["bias_tokens"] == pytest.approx(-2.75) and e["over_bound_pct"] == pytest.approx(50.0)
    assert p.table()["tello/urgent/first"] == {"n": 5, "mean": pytest.approx(5.2)}
    p.observe("tello", "urgent", 0, 0)  # not a segment: ignored
    assert p.error.n == 2
    with pytest.raises(ValueError, match="k must be"):
        LengthPredictor(k=0.5)


def test_segment_time():
    assert segment_time(4, 50.0, prefill_s=0.03) == pytest.approx(0.11)
    assert segment_time(4, None) is None and segment_time(4, 0.0) is None


# ------------------------------------------------------------------------------------- urgency
CFG = {
    "classes": {"urgent": {"tuf": [2, 0.2, 0.5]}, "normal": {"tuf": [1, 1, 1.5]}},
    "default": "normal",
    "lexical": {
        "threshold": 1.0,
        "cues": [
            {"pattern": r"\bdog\b", "weight": 0.5},
            {"pattern": r"\bchas(e|ing)\b", "weight": 1.0},
            {"pattern": r"\bplease\b", "weight": -1.0},
        ],
    },
    "llm": {"prompt": "Triage.", "request": "Request: {text}\nAnswer:"},
}


def test_lexical_scores_hand_computed():
    clf = LexicalClassifier(parse_config(CFG))
    assert clf.score("A dog is chasing me") == 1.5
    r = clf.classify("A dog is chasing me")
    assert (r.label, r.source) == ("urgent", "lexical")
    assert r.tuf == TUF.from_public(2, 0.2, 0.5)
    assert clf.classify("please, the dog is chasing the ball").label == "normal"  # 1.5 - 1.0 < 1.0
    assert clf.classify("").label == "normal"


def test_shipped_lexical_model_on_lrtrace_texts():
    clf = LexicalClassifier(load_urgency_config())
    assert (
        clf.classify(
            "[E] You provided me with plan mf,100, but I encountered a failure because a boy "
            "is passing by. Execution history: mf(50)"
        ).label
        == "urgent"
    )
    assert clf.classify("[A] Could you find the cat? If so, go to it.").label == "normal"
    assert clf.classify("Stop! There is a toddler right in front of the gripper.").label == "urgent"
    assert clf.classify("When you have time, count the chairs in the meeting room.").label == "normal"


def test_llm_answer_is_decided_by_its_first_letters():
    clf = LLMClassifier(parse_config(CFG))
    assert clf.decide("ur") == "urgent" and clf.decide(" n") == "normal"
    assert clf.decide("") is None and clf.decide("maybe") is None
    assert clf.request_text("a  dog\nchasing") == "Request: a dog chasing\nAnswer:"
    assert grammar_gbnf(["urgent", "normal"]) == 'root ::= "urgent" | "normal"\n'


def test_probe_book_lifecycle():
    book = ProbeBook(LLMClassifier(parse_config(CFG)))
    book.start("t1", 7, 1.0)
    book.start("t2", 8, 1.0)
    assert book.owns(7) and book.task_of(8) == "t2" and len(book) == 2
    assert book.on_token(7, "ur", False, 1.3).label == "urgent"  # decided: forgotten
    assert not book.owns(7)
    res = book.on_token(8, "x", True, 1.5)  # ended undecided: the default class
    assert (res.label, res.source, res.latency_s) == ("normal", "default", pytest.approx(0.5))
    assert book.on_token(99, "u", True, 2.0) is None
    book.start("t3", 9, 2.0)
    assert book.drop(9) == "t3" and book.drop(9) is None


def test_bad_urgency_configs():
    with pytest.raises(UrgencyConfigError, match="at least two"):
        parse_config({"classes": {"urgent": {"tuf": [2, 0.2, 0.5]}}})
    with pytest.raises(UrgencyConfigError, match="t_zero"):
        parse_config({**CFG, "classes": {"a": {"tuf": [1, 1, 0.5]}, "b": {"tuf": [1, 1, 1.5]}}})
    with pytest.raises(UrgencyConfigError, match="default"):
        parse_config({**CFG, "default": "meh"})
    with pytest.raises(UrgencyConfigError, match="lexical cue 0"):
        parse_config({**CFG, "lexical": {"cues": [{"pattern": "(", "weight": 1}]}})
