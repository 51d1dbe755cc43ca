"""The related papers' KV and prefill mechanisms on the real llama.cpp engine (SmolLM2-135M, CPU).

What is asserted is what the engine did (where a suspended context's KV went, what each step
submitted, the greedy tokens), never wall time.
"""

from __future__ import annotations

import os

import pytest
from llamacpp_guard import require_llamacpp

from timely_llm_ros.core.options.kv_policy import KVOptions
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.engines.base import EngineError, EngineOutOfMemory

require_llamacpp()

from timely_llm_ros.engines.llamacpp import LlamaCppEngine  # noqa: E402
from timely_llm_ros.engines.llamacpp_config import LlamaCppConfig  # noqa: E402

pytestmark = pytest.mark.slow
THREADS = int(os.environ.get("TIMELY_LLM_TEST_THREADS", "1"))
SSET = load_skill_set("tello_minispec")
TASK = "[A] Could you find the cat? If so, go to it."
OTHER = "[A] Take a picture of the door."


@pytest.fixture(scope="module")
def engine():
    eng = LlamaCppEngine(n_ctx=2048, n_seq_max=16, n_threads=THREADS)
    yield eng
    eng.close()


@pytest.fixture
def kv(engine):
    """Set the engine's KV options for one test (one engine serves the module: the skill prompt is
    prefilled once)."""
    saved = engine.kv

    def use(**kw):
        engine.kv = KVOptions(**kw)

    yield use
    engine.kv = saved


def admit(eng, gid, task=TASK, max_tokens=40):
    pre = eng.tokenize(SSET.prompt)
    ids = pre + eng.tokenize(SSET.format_request(task)[len(SSET.prompt) :])
    eng.admit(gid, ids, max_tokens=max_tokens, prefix_key=SSET.name, prefix_len=len(pre))
    return ids, len(pre)


def finish(eng, gid):
    got = []
    while True:
        (out,) = [o for o in eng.step() if o.gen_id == gid]
        got.append(out.token_id)
        if out.finished:
            return got


def first_segment(eng, gid):
    chk = SSET.new_checker()
    ids = []
    while True:
        (out,) = [o for o in eng.step() if o.gen_id == gid]
        ids.append(out.token_id)
        assert not out.finished
        if chk.feed(out.text):
            return ids


@pytest.fixture(scope="module")
def reference(engine):
    admit(engine, 900)
    ref = finish(engine, 900)
    engine.release(900)
    return ref


@pytest.mark.parametrize("policy,where", [("discard", "discarded"), ("swap", "host")])
def test_kv_policy_at_suspension_moves_the_context_and_the_plan_is_unchanged(
    engine, kv, reference, policy, where
):
    kv(policy=policy)
    admit(engine, 1)
    before = first_segment(engine, 1)
    ctx = engine.suspend(1, resume_hint=engine.now() + 5.0)
    assert ctx.location == where and engine.memory().suspended_device == 0
    engine.resume(1, ctx, max_tokens=40)
    outs = engine.step()
    st = engine.last_step
    assert (st.reprefilled, st.restored) == (([1], []) if policy == "discard" else ([], [1]))
    after = [outs[0].token_id] + ([] if outs[0].finished else finish(engine, 1))
    assert before + after == reference
    engine.release(1)


def test_lamps_keeps_a_short_pause_and_spills_a_long_one(engine, kv):
    kv(policy="lamps")
    admit(engine, 2)
    first_segment(engine, 2)
    # a pause of 0.1 ms: preserving ~20 tokens for 1e-4 s wastes less than moving them twice
    assert engine.suspend(2, resume_hint=engine.now() + 1e-4).location == "device"
    engine.release(2)
    admit(engine, 3)
    first_segment(engine, 3)
    # a 10-minute pause: preserving wastes far more than one save + restore (shipped CPU profile)
    assert engine.suspend(3, resume_hint=engine.now() + 600.0).location == "host"
    engine.release(3)


def test_keep_never_evicts_and_pins_the_memory(engine, kv):
    kv(policy="keep")
    admit(engine, 4)
    first_segment(engine, 4)
    ctx = engine.suspend(4)
    mem = engine.memory()
    assert mem.pinned == mem.suspended_device > 0 and mem.free == mem.capacity - mem.prefix - mem.pinned
    saved = engine.kv_budget
    try:
        engine.kv_budget = mem.prefix + mem.suspended_device + 5  # the newcomer needs more than 5 cells
        admit(engine, 5, OTHER)
        with pytest.raises(EngineOutOfMemory):
            engine.step()
    finally:
        engine.kv_budget = saved
        engine.release(5)
    assert engine._seqs[4].location == "device"
    engine.resume(4, ctx, max_tokens=40)
    engine.step()
    engine.release(4)


def test_priority_eviction_spills_the_least_important_context(engine, kv):
    kv(eviction="priority")
    for gid, importance, hint in ((6, 2.0, 5.0), (7, 1.0, 3.0)):  # 7: nearer resume, less important
        admit(engine, gid)
        first_segment(engine, gid)
        engine.suspend(gid, resume_hint=engine.now() + hint)
        engine.set_importance(gid, importance)
    mem = engine.memory()
    saved = engine.kv_budget
    try:
        ids, plen = admit(engine, 8, OTHER)
        wrapped, shared = engine.wrapped_prompt(ids, plen)
        engine.kv_budget = mem.prefix + mem.suspended_device + len(wrapped) - shared - 1  # one must go
        engine.step()
        assert engine.last_step.evicted == [7]
    finally:
        engine.kv_budget = saved
    for gid in (6, 7, 8):
        engine.release(gid)


def test_planner_budget_replaces_the_fixed_chunk_and_the_hold_back(engine, reference):
    ids, plen = admit(engine, 10)
    wrapped, shared = engine.wrapped_prompt(ids, plen)
    private = len(wrapped) - shared
    try:
        engine.set_prefill_budget(8)
        fed = []
        while True:
            outs = engine.step()
            fed.append(engine.last_step.tokens_by_gen[10])
            if outs:
                break
        assert fed == [8] * (private // 8) + ([private % 8] if private % 8 else [])
        assert [outs[0].token_id] + finish(engine, 10) == reference
        engine.release(10)
        # an urgent generation decodes; a less urgent prompt is still fed within the budget
        admit(engine, 11)
        engine.set_priority(11, 1.0)
        engine.set_prefill_budget(None)  # no planner limit: the engine's own rule (here: whole prompts)
        assert engine.prefill_chunk is None and not engine._planner_budget
        engine.step()  # whole prompt of 11
        admit(engine, 12, OTHER)
        engine.set_priority(12, 10.0)
        engine.set_prefill_budget(4)
        engine.step()
        assert engine.last_step.tokens_by_gen == {11: 1, 12: 4}
        with pytest.raises(EngineError, match="prefill budget"):
            engine.set_prefill_budget(0)
    finally:
        engine._planner_budget = False
        engine._step_budget = None
        for gid in (10, 11, 12):
            engine.release(gid)


def test_no_planner_limit_leaves_the_engines_own_chunks(engine):
    """set_prefill_budget(None) (token_budget=slack when no decoding generation needs protecting)
    keeps the engine's own ``prefill_chunk``: an urgent prompt arriving during a long prefill takes
    over at the next chunk instead of waiting behind the whole prompt."""
    saved = (engine.prefill_chunk, engine.prefill_fast_batch)
    engine.prefill_chunk, engine.prefill_fast_batch = 5, None
    try:
        engine.set_prefill_budget(7)
        engine.set_prefill_budget(None)
        admit(engine, 20)
        engine.step()
        assert engine.last_step.tokens_by_gen == {20: 5}
    finally:
        engine.prefill_chunk, engine.prefill_fast_batch = saved
        engine.set_prefill_budget(None)
        engine._planner_budget = False
        engine.release(20)


def test_cost_profile_and_its_requirement():
    assert LlamaCppConfig().kv_policy == "evict"  # the default the engine gets without the option
    with pytest.raises(EngineError, match="kv_policy must be one of"):
        LlamaCppEngine(kv_policy="sometimes", n_ctx=256)


def test_planner_options_on_the_real_engine(engine):
    """The LLM probe classifies a task sent without a TUF on the real model (one word, decided by its
    first letters), overrun ``kill`` expires a task whose horizon has passed before anything of it is
    sent, and the length predictor and slack budget run alongside (what is asserted: outcomes)."""
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.core.options.planner_options import PlannerOptions
    from timely_llm_ros.core.options.urgency import load_urgency_config
    from timely_llm_ros.core.planner import PlannerCore
    from timely_llm_ros.core.task import TaskSpec
    from timely_llm_ros.core.tuf import TUF

    sent, states = [], []
    opts = PlannerOptions(urgency="llm", overrun="kill", length_predictor=True, token_budget="slack")
    p = PlannerCore(
        engine, "timely", dispatch=sent.append, on_state=lambda *a: states.append(a), options=opts
    )
    base = dict(robot_type="drone", skill_set="tello_minispec", max_tokens=24)
    # per-task "continue": on this CPU the skill prompt's prefill alone outlasts any class's horizon
    p.submit(
        TaskSpec(
            "llm-u",
            "ag-u",
            instruction="A dog is attacking me, get away now!",
            tuf=None,
            arrival=p.clock(),
            overrun="continue",
            **base,
        )
    )
    doomed = p.submit(
        TaskSpec("llm-d", "ag-d", instruction=OTHER, tuf=TUF(0.0, -1e3, 1e-3), arrival=p.clock(), **base)
    )
    for _ in range(400):
        if not p.has_work():
            break
        p.step()
    assert not p.has_work()
    cfg = load_urgency_config()
    answered = [s for s in states if s[0] == "llm-u" and s[1] == ev.QUEUED and s[2].startswith("urgency ")]
    assert len(answered) == 1 and answered[0][2].split()[1] in cfg.classes
    u = next(r for r in p.records if r.task_id == "llm-u")
    assert u.tuf in cfg.classes.values() and u.n_tokens > 0
    assert doomed.state == ev.EXPIRED and doomed.reason.startswith("overrun (kill)")
    assert not [d for d in sent if d.task_id == "llm-d"]
    assert p.extras.classified == {"llm": 1}
