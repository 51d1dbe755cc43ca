"""Planner options beyond the paper: the related schedulers' mechanisms (papers 001–004) as switches.

==================  ==========  ==================================================================
option              default     what it does
==================  ==========  ==================================================================
urgency             lexical     classifier for tasks that come without a TUF (001): ``off`` rejects
                                them, ``lexical`` (rule model), ``llm`` (the embedded LLM, one word)
length_predictor    off         G(·) from an online per-class segment-length predictor (002)
pessimism           1.0         TimeBill's factor k on the predicted length (``N̂_W = min(kN̂, M)``)
overrun             continue    default overrun strategy (002): ``continue``, ``kill``, ``skip-next``
token_budget        whole       prompt tokens per step (004): ``whole``, ``fixed``, ``slack``
prefill_chunk       64          ``fixed``: tokens per step
min_chunk           16          ``slack``: smallest chunk
plan_source         model       ``reference``: a task with a reference plan makes the engine write
                                exactly that plan (replay mode, :mod:`.replay`); ``model``: the
                                model writes its own under the skill grammar
==================  ==========  ==================================================================

KV handling of suspended generations (003, 001) is an *engine* option (``kv_policy``, ``eviction``,
``reload``; :mod:`.kv_policy`) because the engine owns the memory. Defaults were chosen by
``timely-llm bench --suite related`` (README "Beyond the paper").

:class:`PlannerExtras` is the runtime side the planner calls at a few points: at submission (TUF
derivation), when it queues a generation (G from the predictor), before each engine step (the
token budget, expired horizons), at each finished segment (the predictor learns) and for the LLM
classifier's probe generations.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from timely_llm_ros.core.engine import script_kwargs
from timely_llm_ros.core.options.length_predictor import LengthPredictor, segment_time
from timely_llm_ros.core.options.overrun import STRATEGIES, OverrunTracker
from timely_llm_ros.core.options.replay import MODEL, check_plan_source
from timely_llm_ros.core.options.token_budget import TOKEN_BUDGETS, BudgetOptions, Running, choose_budget
from timely_llm_ros.core.options.urgency import (
    CLASSIFIERS,
    PROBE_KEY,
    Classification,
    LexicalClassifier,
    LLMClassifier,
    ProbeBook,
    load_urgency_config,
)

if TYPE_CHECKING:
    from timely_llm_ros.core.engine import Engine
    from timely_llm_ros.core.generation import Generation
    from timely_llm_ros.core.profile import EngineProfile
    from timely_llm_ros.core.task import TaskSpec


@dataclass(frozen=True)
class PlannerOptions:
    """The switches of the module docstring's table (validated)."""

    urgency: str = "lexical"
    length_predictor: bool = False
    pessimism: float = 1.0
    overrun: str = "continue"
    token_budget: str = "whole"
    prefill_chunk: int = 64
    min_chunk: int = 16
    protect_tardy: bool = False
    plan_source: str = MODEL

    def __post_init__(self) -> None:
        check_plan_source(self.plan_source)
        if self.urgency not in CLASSIFIERS:
            raise ValueError(f"urgency must be one of {', '.join(CLASSIFIERS)}, got {self.urgency!r}")
        if self.overrun not in STRATEGIES:
            raise ValueError(f"overrun must be one of {', '.join(STRATEGIES)}, got {self.overrun!r}")
        if not isinstance(self.length_predictor, bool):
            raise ValueError(f"length_predictor must be true or false, got {self.length_predictor!r}")
        if not (
            isinstance(self.pessimism, (int, float))
            and math.isfinite(self.pessimism)
            and self.pessimism >= 1.0
        ):
            raise ValueError(f"pessimism must be a number >= 1, got {self.pessimism!r}")
        if self.token_budget not in TOKEN_BUDGETS:
            raise ValueError(
                f"token_budget must be one of {', '.join(TOKEN_BUDGETS)}, got {self.token_budget!r}"
            )
        self.budget()  # validates the chunk sizes

    def budget(self) -> BudgetOptions:
        return BudgetOptions(
            self.token_budget,
            chunk=self.prefill_chunk,
            min_chunk=self.min_chunk,
            protect_tardy=self.protect_tardy,
        )

    @classmethod
    def paper(cls) -> PlannerOptions:
        """Every option in its off state: the planner of the TimelyLLM paper (tasks without a TUF are
        still classified lexically; the paper has no such tasks)."""
        return cls(overrun="continue", token_budget="whole")

    @classmethod
    def from_mapping(cls, data: dict[str, Any] | None) -> PlannerOptions:
        """From a mapping (node parameters, bench flags); unknown keys are an error that lists the known."""
        data = dict(data or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown planner option(s) {unknown}; known: {sorted(known)}")
        return cls(**data)

    def changed(self) -> dict[str, Any]:
        """The options that differ from the defaults (for labels and reports)."""
        base = PlannerOptions()
        return {
            f.name: getattr(self, f.name)
            for f in dataclasses.fields(self)
            if getattr(self, f.name) != getattr(base, f.name)
        }


@dataclass
class _Wait:
    """A task whose generation waits for the LLM classifier's answer."""

    gen: Generation
    explicit_class: str  # the class the task named itself ("" = none)
    probe: int | None = None  # the probe generation's id once admitted


def planning_class(gen: Generation) -> str:
    """The key the length predictor learns under: the TUF the planner schedules the task with
    (given or derived; never a benchmark's hidden reference class)."""
    return f"ert={gen.ert:g},alpha={gen.alpha:g},beta={gen.beta:g}"


class PlannerExtras:
    """Runtime state of the options for one planner (see the module docstring)."""

    def __init__(self, options: PlannerOptions | None = None) -> None:
        self.opt = options or PlannerOptions()
        opt = self.opt
        cfg = load_urgency_config() if opt.urgency != "off" else None
        self.lexical = LexicalClassifier(cfg) if cfg is not None else None
        self.probes = ProbeBook(LLMClassifier(cfg)) if opt.urgency == "llm" else None
        self.waiting: dict[str, _Wait] = {}
        self.predictor = LengthPredictor(opt.pessimism) if opt.length_predictor else None
        self.overrun = OverrunTracker(opt.overrun)
        self._budget = opt.budget()
        self._prefilling: set[int] = set()  # generations whose prompt (or re-prefill) is not done
        self.classified: dict[str, int] = {}  # classifier source -> tasks

    # -- submission: derive a TUF --------------------------------------------------------------
    def derive_tuf(self, spec: TaskSpec) -> TaskSpec:
        """``spec`` when it has a TUF, else a copy with the lexical classifier's TUF (and class, when
        it named none and no benchmark judges it by a reference TUF). With the LLM classifier the
        task then waits for the LLM's answer (:meth:`wait`), which replaces the lexical one."""
        if spec.tuf is not None or self.lexical is None or not isinstance(spec.instruction, str):
            return spec
        res = self.lexical.classify(spec.instruction)
        if self.probes is None:
            self._count(res.source)
        return _with_class(spec, res, spec.task_class)

    def wants_llm(self, spec: TaskSpec) -> bool:
        """Whether the task (as sent: without a TUF) waits for the LLM classifier."""
        return self.probes is not None and spec.tuf is None

    def wait(self, gen: Generation, explicit_class: str) -> None:
        self.waiting[gen.record.task_id] = _Wait(gen, explicit_class)

    def answered(self, res: Classification, task_id: str) -> Generation | None:
        """The LLM's class for a waiting task: its generation, updated (None if it is gone)."""
        w = self.waiting.pop(task_id, None)
        if w is None:
            return None
        gen = w.gen
        spec = _with_class(gen.spec, res, w.explicit_class)
        gen.spec = spec
        tuf = spec.tuf
        assert tuf is not None  # _with_class gave it the classifier's TUF
        gen.alpha, gen.beta, gen.ert = float(tuf.alpha), float(tuf.beta), float(tuf.ert)
        if gen.k == 0:
            gen.ert_k = gen.ert
        rec = gen.record
        if spec.reference_tuf is None:  # a real task is judged by the TUF it was given
            rec.tuf = tuf
            rec.task_class = spec.task_class
        self._count(f"llm-{res.source}" if res.source != "llm" else "llm")
        return gen

    def _count(self, key: str) -> None:
        self.classified[key] = self.classified.get(key, 0) + 1

    def admit_probes(
        self, engine: Engine, new_id: Callable[[], int], t: float
    ) -> list[tuple[Generation, Exception]]:
        """Admit a probe for every waiting task that has none; returns (generation, error) of the
        tasks whose probe the engine refused (the planner fails them with the reason)."""
        book = self.probes
        failed: list[tuple[Generation, Exception]] = []
        if book is None or not self.waiting:
            return failed
        book.prepare_engine(engine)
        for tid, w in list(self.waiting.items()):
            if w.probe is not None:
                continue
            gid = new_id()
            ids, plen = book.probe_prompt(engine, w.gen.spec.instruction)
            try:
                engine.admit(
                    gid,
                    ids,
                    max_tokens=book.clf.max_tokens(engine.tokenize) + 1,
                    prefix_key=PROBE_KEY,
                    prefix_len=plen,
                    **script_kwargs(engine, self._probe_script(engine, w.gen.spec)),
                )
            except Exception as exc:  # noqa: BLE001 - reported to the planner with the task
                del self.waiting[tid]
                failed.append((w.gen, exc))
                continue
            w.probe = gid
            book.start(tid, gid, t)
        return failed

    def _probe_script(self, engine: Engine, spec: TaskSpec) -> list[int] | None:
        """Simulated engine only: the answer it emits — the labelled class when a benchmark knows it
        (the simulator prices the probe's work; the real model's accuracy is measured on llama.cpp by
        ``bench.urgency_bench``), else the lexical model's answer."""
        if not engine.needs_script:
            return None
        assert self.lexical is not None  # the LLM classifier runs with the lexical one
        cfg = self.lexical.config
        ref = spec.reference_tuf
        if ref is not None:
            label = min(cfg.classes, key=lambda c: (abs(cfg.classes[c].ert - ref.ert), c))
        else:
            label = self.lexical.classify(spec.instruction).label
        return engine.tokenize(label)

    def drop_waiting(self, task_id: str) -> int | None:
        """Forget a waiting task (it failed or expired); returns its probe's generation id, if any."""
        w = self.waiting.pop(task_id, None)
        if w is None or w.probe is None:
            return None
        if self.probes is not None:  # a waiting task has a probe book
            self.probes.drop(w.probe)
        return w.probe

    # -- G(·) ------------------------------------------------------------------------------------
    def estimate(self, gen: Generation, speed: float | None, costs: EngineProfile | None) -> None:
        """Set ``gen.g`` for its next segment from the length predictor (else keep the prior)."""
        p = self.predictor
        if p is None or gen.skill_set is None:
            return
        prior = float(gen.skill_set.segment_gen_estimate_s)
        n = p.pessimistic(gen.skill_set.name, planning_class(gen), gen.k, gen.skill_set.max_segment_tokens)
        if n is None:
            gen.g = prior
            return
        pre = 0.0
        if gen.k == 0 and costs is not None:
            pre = costs.prefill_time(len(gen.prompt_ids) - gen.prefix_len)
        g = segment_time(n, speed, pre)
        gen.g = g if g is not None and g > 0 else prior

    def learned(self, gen: Generation, seg_index: int, n_tokens: int) -> None:
        if self.predictor is not None and gen.skill_set is not None:
            self.predictor.observe(gen.skill_set.name, planning_class(gen), seg_index, n_tokens)

    # -- the token budget -------------------------------------------------------------------------
    def started(self, gen_id: int, prefill: bool) -> None:
        if prefill:
            self._prefilling.add(gen_id)

    def token(self, gen_id: int) -> None:
        self._prefilling.discard(gen_id)

    def budget(
        self, t: float, running: Iterable[Generation], speed: float | None, costs: EngineProfile | None
    ) -> int | None:
        """Prompt tokens for the next step (:func:`~.token_budget.choose_budget`)."""
        if self._budget.mode == "whole":
            return None
        step = 1.0 / speed if speed else None
        cost = None
        if costs is not None:
            profile = costs

            def cost(c: int) -> float:  # marginal cost of c prompt tokens fused into a decode pass
                return profile.prefill_time(c) - profile.prefill_c

        runs = [
            Running(
                g.deadline(),
                self._tokens_left(g, speed),
                g.gen_id not in self._prefilling,
                g.alpha < 0.0,
            )
            for g in running
        ]
        return choose_budget(self._budget, t, runs, step, cost)

    def _tokens_left(self, g: Generation, speed: float | None) -> int:
        n: float | None = None
        if self.predictor is not None and g.skill_set is not None:
            n = self.predictor.pessimistic(
                g.skill_set.name, planning_class(g), g.k, g.skill_set.max_segment_tokens
            )
        if n is None:
            n = g.g * speed if speed else g.max_seg_tokens
        return max(1, int(math.ceil(n)) - g.seg_tokens)


def _with_class(spec: TaskSpec, res: Classification, explicit_class: str) -> TaskSpec:
    """``spec`` with the classifier's TUF; its class: the one it named, else none when a benchmark
    judges it by a reference TUF (the record derives it from that), else the derived one."""
    if explicit_class:
        klass = explicit_class
    elif spec.reference_tuf is not None:
        klass = ""
    else:
        klass = res.label
    return dataclasses.replace(spec, tuf=res.tuf, task_class=klass)
