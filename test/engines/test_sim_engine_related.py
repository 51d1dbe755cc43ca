"""Simulated engine: KV policies at suspension, eviction order and destination, chunked prefill with
a per-step token budget — timings computed by hand from the profile below."""

import pytest

from timely_llm_ros.core.options.kv_policy import KVOptions
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.engines.base import EngineError, EngineOutOfMemory
from timely_llm_ros.engines.sim import SimEngine

# prefill(N) = 0.001 N + 0.01 ; decode = 0.02 + 0.001 B ; dev->host 0.5 ms/token, host->dev 1 ms/token
BASE = dict(
    name="t",
    prefill_a=0.0,
    prefill_b=0.001,
    prefill_c=0.01,
    decode_q=0.02,
    decode_p=0.0,
    decode_r=0.001,
    kv_bytes_per_token=1000,
    host_to_device_bytes_per_s=1e6,
    device_to_host_bytes_per_s=2e6,
    context_limit=200,
    speed_window=2,
    kv_capacity_tokens=1000,
    host_kv_capacity_tokens=1000,
)
PROMPT = list(range(1000, 1020))  # 20 ids, the first 15 a shared prefix


def engine(kv=None, chunked=False, **kw):
    return SimEngine(EngineProfile(**{**BASE, **kw}), kv=kv, chunked_prefill=chunked)


def admit(e, gid, prompt=PROMPT, prefix_len=15, text="mf(100);tp;"):
    e.admit(
        gid,
        prompt,
        max_tokens=30,
        prefix_key="p" if prefix_len else None,
        prefix_len=prefix_len,
        script=e.tokenize(text),
    )


def suspended(e, gid, hint=None):
    """Admit, run two steps (7 private tokens: 5 prompt + 2 generated), suspend."""
    admit(e, gid)
    e.step()
    e.step()
    return e.suspend(gid, resume_hint=hint)


def test_discard_at_suspension_reprefills_on_resume():
    e = engine(KVOptions("discard"))
    ctx = suspended(e, 1)
    assert ctx.location == "discarded"
    assert e.memory().suspended_device == 0 and e.stats["discard"] == 1
    t0 = e.now()
    e.resume(1, ctx, max_tokens=30)
    out = e.step()  # re-prefill of the 7 private tokens in one pass (yields the next token)
    assert e.now() - t0 == pytest.approx(0.01 + 0.007)
    assert out[0].text == "100"
    assert (e.stats["reprefill"], e.stats["reprefill_tokens"]) == (1, 7)


def test_swap_at_suspension_is_charged_to_the_next_step():
    e = engine(KVOptions("swap"))
    ctx = suspended(e, 1)
    assert ctx.location == "host" and e.memory().suspended_host == 7
    t0 = e.now()
    e.resume(1, ctx, max_tokens=30)
    e.step()  # owed swap-out 7·0.5 ms + swap-in 7·1 ms + decode 0.021
    assert e.now() - t0 == pytest.approx(0.0035 + 0.007 + 0.021)
    assert (e.stats["swap_out"], e.stats["swap_in"]) == (1, 1)


def test_lamps_keeps_short_pauses_and_swaps_long_ones():
    e = engine(KVOptions("lamps"))
    # now = 0.041; pause 0.001 s: keep 7·0.001 = 0.007 < host (0.0105)·7 = 0.0735
    assert suspended(e, 1, hint=0.042).location == "device"
    e.release(1)
    # pause ~10 s: keep 70 > host 0.0735 -> host
    assert suspended(e, 2, hint=10.0).location == "host"


def test_keep_pins_suspended_contexts():
    e = engine(KVOptions("keep"), kv_capacity_tokens=25)
    suspended(e, 1)
    m = e.memory()
    assert m.pinned == 7 and m.free == 25 - 15 - 7
    admit(e, 2)  # would need room: nothing may be evicted
    with pytest.raises(EngineOutOfMemory, match="kv_policy keep"):
        e.step()


def test_priority_eviction_drops_the_least_important_first():
    e = engine(KVOptions(eviction="priority"), kv_capacity_tokens=34)
    suspended(e, 1, hint=5.0)
    e.set_importance(1, 2.0)
    suspended(e, 2, hint=3.0)
    e.set_importance(2, 1.0)  # nearer resume but less important
    admit(e, 3)  # prefix 15 + private 5 + 1 new token + 2 suspended × 7 = 35 > 34: evict one
    e.step()
    assert e._seqs[2].location == "host" and e._seqs[1].location == "device"
    e2 = engine(kv_capacity_tokens=34)  # default furthest: the later resume goes
    suspended(e2, 1, hint=5.0)
    suspended(e2, 2, hint=3.0)
    admit(e2, 3)
    e2.step()
    assert e2._seqs[1].location == "host" and e2._seqs[2].location == "device"


def test_threshold_reload_drops_contexts_cheaper_to_recompute():
    # 7 tokens: restore 0.0035 + 0.007 = 0.0105 s < re-prefill 0.017 s -> host
    e = engine(KVOptions(reload="threshold"), kv_capacity_tokens=25)
    suspended(e, 1)
    admit(e, 2)
    e.step()
    assert e._seqs[1].location == "host"
    # with a slow host link (10 ms/token in) restoring 7 tokens costs 0.0735 s > 0.017 s: drop
    e = engine(KVOptions(reload="threshold"), kv_capacity_tokens=25, host_to_device_bytes_per_s=1e5)
    suspended(e, 1)
    admit(e, 2)
    e.step()
    assert e._seqs[1].location == "discarded"


def test_chunked_prefill_follows_the_budget():
    e = engine(chunked=True)
    admit(e, 1, prefix_len=0)  # 20 prompt tokens, no shared prefix
    e.set_prefill_budget(8)
    times = []
    outs = []
    for _ in range(3):
        t0 = e.now()
        outs.append(e.step())
        times.append(e.now() - t0)
    # no decoder: each chunk is its own pass (constant 0.01) + 8, 8, 4 tokens
    assert times == pytest.approx([0.018, 0.018, 0.014])
    assert outs[0] == [] and outs[1] == [] and [o.gen_id for o in outs[2]] == [1]
    assert e.stats["prefill_tokens"] == 20


def test_chunks_go_to_the_most_urgent_prompt_and_fuse_with_decode():
    e = engine(chunked=True)
    admit(e, 1, prefix_len=0)
    e.step()  # whole prompt (budget None): 0.01 + 0.02
    admit(e, 2, prefix_len=0)
    admit(e, 3, prefix_len=0)
    e.set_priority(2, 5.0)
    e.set_priority(3, 1.0)  # earlier deadline: fed first
    e.set_prefill_budget(10)
    t0 = e.now()
    out = e.step()
    # fused: decode of gen 1 (0.021) + 10 prompt tokens of gen 3 (0.010), no extra pass constant
    assert e.now() - t0 == pytest.approx(0.031)
    assert [o.gen_id for o in out] == [1]
    assert e._seqs[3].done == 10 and e._seqs[2].done == 0
    e.set_prefill_budget(None)
    out = e.step()  # rest of 3 (10) and all of 2 (20): both emit their first token
    assert sorted(o.gen_id for o in out) == [1, 2, 3]
    with pytest.raises(EngineError, match="prefill budget"):
        e.set_prefill_budget(0)


def test_unchunked_engine_ignores_the_budget():
    e = engine()
    admit(e, 1, prefix_len=0)
    e.set_prefill_budget(4)
    e.step()
    assert e.now() == pytest.approx(0.03)
