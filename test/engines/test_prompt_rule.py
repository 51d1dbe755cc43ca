"""The engine-side prompt schedule shared by the llama.cpp engine and the simulated engine, and the
simulated engine's llama.cpp mode (``prompt_rule``, ``template_tokens``, the profile's planner-run
terms) on its virtual clock: exact times, no wall clock."""

import pytest

from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.engines.base import EngineError
from timely_llm_ros.engines.prompt_rule import PromptRule, prompt_takes
from timely_llm_ros.engines.sim import SimEngine

RULE = PromptRule(chunk=16, fast=64)


def test_chunk_fast_batch_and_priority_order():
    # two pending prompts, nobody decoding: the most urgent gets the chunk
    assert prompt_takes(RULE, [], [(5.0, 1, 40), (1.0, 2, 40)]) == [(1, 16)]
    # a long prompt is fed as one fast batch, which is the whole step's prompt work
    assert prompt_takes(RULE, [], [(1.0, 1, 100), (1.0, 2, 10)]) == [(0, 64)]
    # a prompt that completes within the chunk leaves the rest to equal ranks only
    assert prompt_takes(RULE, [], [(1.0, 1, 5), (1.0, 2, 30)]) == [(0, 5), (1, 11)]
    assert prompt_takes(RULE, [], [(1.0, 1, 5), (2.0, 2, 30)]) == [(0, 5)]
    # whole prompts without a chunk
    assert prompt_takes(PromptRule(), [], [(1.0, 1, 300), (1.0, 2, 30)]) == [(0, 300), (1, 30)]


def test_hold_back_behind_a_more_urgent_decoding_generation_unless_the_planner_budgets():
    assert prompt_takes(RULE, [0.5], [(1.0, 1, 40)]) == []
    assert prompt_takes(RULE, [1.0], [(1.0, 1, 40)]) == [(0, 16)]
    # the planner's budget replaces the chunk (no fast batch) and the hold-back
    assert prompt_takes(RULE, [0.5], [(1.0, 1, 100)], 24, planner_budget=True) == [(0, 24)]


def test_rule_rejects_bad_sizes():
    with pytest.raises(ValueError):
        PromptRule(chunk=0)
    with pytest.raises(ValueError):
        PromptRule(fast=True)


BASE = dict(
    name="cpu",
    prefill_a=0.0,
    prefill_b=0.01,
    prefill_c=0.1,
    decode_q=0.0,
    decode_p=0.0,
    decode_r=0.05,
    context_limit=4000,
    kv_capacity_tokens=4000,
)
PREFIX = list(range(1000, 1100))  # 100 shared ids


def prompt(n):
    return PREFIX + list(range(2000, 2000 + n))


def admit(e, gid, n):
    script = e.tokenize("mf(100);tp;cw(90);")
    e.admit(gid, prompt(n), max_tokens=10, prefix_key="p", prefix_len=len(PREFIX), script=script)


def test_sim_feeds_prompts_by_the_llamacpp_rule():
    e = SimEngine(EngineProfile(**BASE), prompt_rule=RULE)
    admit(e, 1, 1)  # first admission: prefix + 1 id = 101 to feed: one fast batch of 64, then 16, 16, 5
    steps = 0
    while not e.step():
        steps += 1
    assert steps == 3 and e.stats["prefill_tokens"] == 101
    e.set_priority(1, 0.5)
    admit(e, 2, 40)  # 40 private ids behind the cached prefix
    e.set_priority(2, 1.0)
    t0 = e.now()
    out = e.step()  # gen 1 (more urgent) decodes; gen 2's prompt is held back
    assert [o.gen_id for o in out] == [1]
    assert e.now() - t0 == pytest.approx(0.05)
    e.set_priority(1, 2.0)  # now gen 2 ranks first: 16-token chunks, priced with the pass constant
    t0 = e.now()
    e.step()
    assert e.now() - t0 == pytest.approx(0.05 + 0.1 + 16 * 0.01)


def test_sim_prefill_kv_token_and_step_overheads_are_priced():
    prof = EngineProfile(**BASE, prefill_kv=1e-4, token_overhead=0.002, step_overhead=0.003)
    e = SimEngine(prof, prompt_rule=PromptRule(chunk=None, fast=None))
    admit(e, 9, 1)  # the prefix is cached from here on
    e.step()
    e.release(9)
    admit(e, 1, 10)
    t0 = e.now()
    out = e.step()  # 10 ids behind 100 cached ones, one token out
    assert len(out) == 1
    assert e.now() - t0 == pytest.approx(0.1 + 10 * 0.01 + 1e-4 * 100 + 0.003 + 0.002)
    t0 = e.now()
    e.step()  # a decode step
    assert e.now() - t0 == pytest.approx(0.05 + 0.003 + 0.002)


def test_the_gpu_profile_prices_as_before():
    """The new terms are 0 unless a profile sets them: whole-prompt pricing is unchanged."""
    prof = EngineProfile(**BASE)
    e = SimEngine(prof)
    admit(e, 1, 10)
    e.step()
    assert e.now() == pytest.approx(prof.prefill_time(110))
    assert prof.prefill_time(10, front=100) == prof.prefill_time(10)


def test_template_tokens_lengthen_prompts_like_a_chat_template():
    e = SimEngine(EngineProfile(**BASE), template_tokens=(3, 5))
    admit(e, 1, 10)
    e.step()
    assert e.stats["prefill_tokens"] == 3 + 100 + 10 + 5
    assert e.memory().prefix == 103
    e.release(1)
    admit(e, 2, 10)
    e.step()
    assert e.stats["prefill_tokens"] == 118 + 15  # private part + template tail
    with pytest.raises(EngineError):
        SimEngine(EngineProfile(**BASE), template_tokens=(-1, 0))
