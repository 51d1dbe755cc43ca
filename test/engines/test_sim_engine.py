"""Simulated engine: exact timing (prefill / decode / swap), prefix cache, suspension, eviction, speed."""

import pytest

from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.engines.base import Context, EngineError, EngineOutOfMemory
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.engines.sim_tokenizer import EOS_ID

# prefill(N) = 0.001 N + 0.01 ; decode = 0.02 + 0.001 B ; 1000 B/token, host->dev 1 ms/token,
# dev->host 0.5 ms/token
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
    context_limit=100,
    speed_window=2,
    kv_capacity_tokens=1000,
    host_kv_capacity_tokens=1000,
)
PROMPT = list(range(1000, 1020))  # 20 ids, the first 15 a shared prefix


def engine(**kw):
    return SimEngine(EngineProfile(**{**BASE, **kw}))


def admit(e, gid, script_text="mf(100);tp;", max_tokens=30, prompt=PROMPT):
    e.admit(gid, prompt, max_tokens=max_tokens, prefix_key="p", prefix_len=15, script=e.tokenize(script_text))


def test_prefill_decode_and_prefix_cache_timing():
    e = engine()
    admit(e, 1)
    out = e.step()  # full prompt prefill: 0.001 * 20 + 0.01
    assert e.now() == pytest.approx(0.03)
    assert [(o.gen_id, o.text, o.finished) for o in out] == [(1, "mf", False)]
    assert out[0].t == e.now()
    m = e.memory()
    assert (m.prefix, m.running) == (15, 6)  # prefix pinned; 5 private prompt tokens + 1 generated
    e.step()  # one decode: 0.02 + 0.001
    assert e.now() == pytest.approx(0.051)
    assert e.speed() == pytest.approx(1 / 0.021)
    admit(e, 2)
    out = e.step()  # prefix cached: prefill(5) = 0.015, plus decode of the old sequence (B = 1)
    assert e.now() == pytest.approx(0.051 + 0.015 + 0.021)
    assert [o.gen_id for o in out] == [1, 2]
    assert e.speed() == pytest.approx(1 / 0.021)  # the prefill step is not a speed sample
    e.step()  # B = 2
    assert e.speed() == pytest.approx(2 / (0.021 + 0.022))
    assert e.stats["prefill_tokens"] == 25


def test_batched_prefill_pays_the_constant_once():
    e = engine()
    admit(e, 1)
    admit(e, 2)  # same prefix key in the same step: the second one is already cached
    e.step()
    assert e.now() == pytest.approx(0.01 + 0.001 * 20 + 0.001 * 5)
    assert e.profile.prefill_batch_time([20, 5]) == pytest.approx(0.035)
    assert e.profile.prefill_batch_time([]) == 0.0


def test_script_then_eos_and_token_limit():
    e = engine()
    admit(e, 1, "mf(1)", max_tokens=30)  # pieces: mf ( 1 )
    texts = []
    while e.running():
        for o in e.step():
            texts.append((o.text, o.finished, o.reason, o.token_id == EOS_ID))
    assert texts[-1] == ("", True, "eos", True)
    assert "".join(t[0] for t in texts) == "mf(1)"
    e2 = engine()
    admit(e2, 1, "mf(1)", max_tokens=2)
    outs = [e2.step()[0], e2.step()[0]]
    assert (outs[1].finished, outs[1].reason, outs[1].text) == (True, "length", "(")
    assert e2.running() == 0 and e2.step() == []


def test_suspend_resume_on_device_is_free():
    e = engine()
    admit(e, 1)
    e.step()
    e.step()
    ctx = e.suspend(1, resume_hint=5.0)
    assert ctx.n_prompt == 20 and ctx.n_generated == 2 and ctx.location == "device"
    assert e.memory().suspended_device == 7 and e.memory().running == 0
    assert e.step() == [] and e.running() == 0
    t0 = e.now()
    e.resume(1, ctx, max_tokens=30)
    out = e.step()
    assert e.now() - t0 == pytest.approx(0.021)  # no prefill, no transfer
    assert out[0].text == "100" and e.memory().suspended_device == 0


def test_eviction_to_host_then_restore_cost():
    e = engine(kv_capacity_tokens=25)
    admit(e, 1)
    e.step()
    e.step()
    ctx = e.suspend(1)  # 7 private tokens on the device
    admit(e, 2)  # needs prefix 15 + 5 + 1 = 21; with the suspended 7 -> 28 > 25: evict
    t0 = e.now()
    e.step()
    assert e.now() - t0 == pytest.approx(7 * 1000 / 2e6 + 0.015)  # swap out + prefill(5)
    m = e.memory()
    assert (m.suspended_device, m.suspended_host) == (0, 7)
    e.release(2)
    t0 = e.now()
    e.resume(1, ctx, max_tokens=30)
    e.step()
    assert e.now() - t0 == pytest.approx(7 * 1000 / 1e6 + 0.021)  # swap in + decode
    assert e.memory().suspended_host == 0 and e.stats["swap_in"] == 1


def test_discard_then_reprefill_when_host_is_full():
    e = engine(kv_capacity_tokens=25, host_kv_capacity_tokens=0)
    admit(e, 1)
    e.step()
    e.step()
    ctx = e.suspend(1)
    admit(e, 2)
    t0 = e.now()
    e.step()
    assert e.now() - t0 == pytest.approx(0.015)  # discarding costs nothing now ...
    assert e.stats["discard"] == 1
    e.release(2)
    e.resume(1, ctx, max_tokens=30)
    t0 = e.now()
    e.step()
    assert e.now() - t0 == pytest.approx(0.001 * 7 + 0.01)  # ... but resuming re-prefills 7 tokens


@pytest.mark.parametrize("policy,victim", [("furthest", 1), ("lru", 2)])
def test_eviction_victim_choice(policy, victim):
    # capacity 30: prefix 15 + two suspended (6 each) fit; a third admission forces one eviction
    e = engine(kv_capacity_tokens=30, eviction=policy)
    admit(e, 2)
    e.step()
    admit(e, 1)
    e.step()
    e.suspend(2, resume_hint=1.0)  # suspended first, resumed soon
    e.suspend(1, resume_hint=9.0)  # suspended later, resumed late
    admit(e, 3)
    e.step()
    assert e._seqs[victim].location == "host"
    assert e._seqs[3 - victim].location == "device"


def test_out_of_memory_when_running_alone_exceeds_capacity():
    e = engine(kv_capacity_tokens=18)
    admit(e, 1)
    with pytest.raises(EngineOutOfMemory):
        e.step()


def test_protocol_errors():
    e = engine()
    admit(e, 1)
    with pytest.raises(EngineError, match="already"):
        admit(e, 1)
    with pytest.raises(EngineError, match="not running"):
        e.suspend(1)  # admitted but not stepped yet
    e.step()
    with pytest.raises(EngineError, match="not suspended"):
        e.resume(1, Context(1, PROMPT + [1], 20), max_tokens=5)
    ctx = e.suspend(1)
    with pytest.raises(EngineError, match="does not match"):
        e.resume(1, Context(1, ctx.token_ids[:-1], 20), max_tokens=5)
    with pytest.raises(EngineError, match="unknown"):
        e.suspend(42)
    with pytest.raises(EngineError, match="context"):
        e.admit(7, list(range(100)), max_tokens=5)
    e.release(42)  # unknown ids are ignored
    e.release(1)
    assert e.memory().suspended_device == 0


def test_advance_to_only_moves_forward():
    e = engine()
    e.advance_to(5.0)
    e.advance_to(3.0)
    assert e.now() == 5.0
    with pytest.raises(EngineError):
        e.advance_to(float("nan"))
