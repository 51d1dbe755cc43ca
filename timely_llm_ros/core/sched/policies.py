"""The scheduling policies: a closed set of names (:class:`PolicyName`) and a plain factory.

Why a closed set: every policy the planner, the benchmarks and the ablations can run is listed
here, so a name is checked once (:func:`parse_policy`, with the list of known names in the error)
and nothing registers itself at import time. A policy is a priority strategy
(:mod:`.priority`, :mod:`.policy_timely`) paired with an admission check (:mod:`.admission`);
:mod:`.scheduler` runs whichever :class:`Policy` it is given. To try a new pairing, build a
:class:`Policy` yourself and pass it to :class:`~.scheduler.Scheduler`.

A policy spec is ``name`` or ``name@bN`` (a fixed maximum batch ``N``; default
:data:`~.admission.DEFAULT_MAX_BATCH`), optionally followed by ``@aK``: at most ``K`` admissions
(new generations and resumptions together) per engine step. Why ``@a1``: the paper's public code
adds one request per engine iteration in every scheduler it compares (vLLM, FCFS, EDF and its own),
so ``edf-seg@a1`` runs a baseline as the paper ran it (``bench --suite paper``); the default admits
whatever fits. The table of what each built-in policy does is in
:mod:`.scheduler`'s docstring.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass

from timely_llm_ros.core.sched.admission import DEFAULT_MAX_BATCH, Admission, LatencyGuidedAdmission
from timely_llm_ros.core.sched.policy_timely import (
    VARIANTS,
    UtilityAccrualPriority,
    UtilityGuidedAdmission,
    timely_strategies,
)
from timely_llm_ros.core.sched.preemption import Preemption
from timely_llm_ros.core.sched.priority import (
    EDFPriority,
    FCFSPriority,
    PriorityStrategy,
    PUDPriority,
    RequeueFCFSPriority,
)

__all__ = [
    "POLICY_NAMES",
    "Policy",
    "PolicyName",
    "UnknownPolicy",
    "make_policy",
    "parse_policy",
    "policy_names",
]


class UnknownPolicy(ValueError):
    """Policy name that is not one of :class:`PolicyName` (the message lists the known ones)."""


class PolicyName(enum.StrEnum):
    """Every policy there is (the order is the one :func:`policy_names` and errors list)."""

    TIMELY_PAPER = "timely-paper"
    TIMELY = "timely"
    FCFS_SEG = "fcfs-seg"
    EDF_SEG = "edf-seg"
    VLLM = "vllm"
    VLLM_STREAM = "vllm-stream"
    # ablations of the robust ``timely`` policy (policy_timely.VARIANTS, bench/ablation.py)
    TIMELY_NO_UA = "timely-no-ua"
    TIMELY_NO_LATE = "timely-no-late"
    TIMELY_NO_AGING = "timely-no-aging"
    TIMELY_PROMOTE_HALF = "timely-promote-half"
    TIMELY_CRIT_D = "timely-crit-d"
    TIMELY_ADM_GROUP = "timely-adm-group"
    TIMELY_ADM_NOCAP = "timely-adm-nocap"
    TIMELY_ADM_PAPER = "timely-adm-paper"
    TIMELY_NO_ADM = "timely-no-adm"
    TIMELY_EDF_DYN = "timely-edf-dyn"
    TIMELY_FULL_UA = "timely-full-ua"
    TIMELY_ADM_NOPROMISE = "timely-adm-nopromise"
    TIMELY_ADM_G = "timely-adm-g"
    TIMELY_CLAMPED = "timely-clamped"
    TIMELY_UNCLAMPED = "timely-unclamped"
    TIMELY_NO_CLAIM = "timely-no-claim"
    TIMELY_ADM_KEEPDUE = "timely-adm-keepdue"
    TIMELY_FLOOR_05 = "timely-floor05"
    TIMELY_FLOOR_1 = "timely-floor1"
    TIMELY_FLOOR_2 = "timely-floor2"
    TIMELY_FLOOR_1_IDLE_2 = "timely-floor1-idle2"
    TIMELY_NO_CHAIN = "timely-no-chain"
    TIMELY_NO_PREEMPT = "timely-no-preempt"
    TIMELY_PREEMPT_2 = "timely-preempt2"
    TIMELY_PREEMPT_AGAIN = "timely-preempt-again"
    TIMELY_PREEMPT_LATE = "timely-preempt-late"
    TIMELY_PREEMPT_LATE_0 = "timely-preempt-late0"
    TIMELY_PREEMPT_ONTIME = "timely-preempt-ontime"
    # the paper's baselines as its public code runs them where that differs from ours (bench --suite paper)
    FCFS_REQUEUE = "fcfs-requeue"


@dataclass(frozen=True)
class Policy:
    """A scheduling policy: what is segmented, how it is ranked, how admission is gated."""

    name: str  # the spec it was made from, e.g. "timely@b4"
    base: str  # its PolicyName's value, e.g. "timely"
    segmented: bool  # suspend after every executable segment
    stream: bool  # dispatch each executable segment as soon as it appears (else the whole plan at EOS)
    priority: PriorityStrategy
    admission: Admission
    max_batch: int = DEFAULT_MAX_BATCH
    admit_per_step: int | None = None  # at most this many admissions per engine step (None: no limit)
    # suspends running segments for urgent queued ones (core.sched.preemption; None: never)
    preemption: Preemption | None = None


_SPEC = re.compile(r"^([a-z][a-z0-9-]*)(?:@b(\d+))?(?:@a(\d+))?$")


def policy_names() -> tuple[str, ...]:
    """The known policy names, in :class:`PolicyName` order."""
    return tuple(p.value for p in PolicyName)


POLICY_NAMES = policy_names()


def _strategies(name: PolicyName) -> tuple[PriorityStrategy, Admission]:
    """Fresh (priority, admission) objects of ``name`` (a strategy keeps the index of one queue)."""
    if name is PolicyName.TIMELY_PAPER:
        return PUDPriority(), LatencyGuidedAdmission()
    if name is PolicyName.TIMELY:
        return timely_strategies()
    if name is PolicyName.EDF_SEG:
        return EDFPriority(), Admission()
    if name in (PolicyName.FCFS_SEG, PolicyName.VLLM, PolicyName.VLLM_STREAM):
        return FCFSPriority(), Admission()
    if name is PolicyName.FCFS_REQUEUE:
        return RequeueFCFSPriority(), Admission()
    return timely_strategies(VARIANTS[name.value])


def make_policy(
    name: PolicyName | str,
    max_batch: int = DEFAULT_MAX_BATCH,
    spec: str | None = None,
    admit_per_step: int | None = None,
) -> Policy:
    """A fresh :class:`Policy` ``name`` with batch cap ``max_batch`` and at most ``admit_per_step``
    admissions per engine step (``spec``: the name it is shown under; default ``name``, plus ``@bN``
    for a batch cap other than the default and ``@aK`` for a per-step limit)."""
    try:
        kind = PolicyName(name)
    except ValueError:
        raise UnknownPolicy(_unknown(name)) from None
    if spec is None:
        spec = kind.value if max_batch == DEFAULT_MAX_BATCH else f"{kind.value}@b{max_batch}"
        spec += "" if admit_per_step is None else f"@a{admit_per_step}"
    if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
        raise UnknownPolicy(f"{spec!r}: max batch must be >= 1")
    if admit_per_step is not None and (
        isinstance(admit_per_step, bool) or not isinstance(admit_per_step, int) or admit_per_step < 1
    ):
        raise UnknownPolicy(f"{spec!r}: admissions per step must be >= 1")
    prio, adm = _strategies(kind)
    segmented = kind not in (PolicyName.VLLM, PolicyName.VLLM_STREAM)
    stream = kind is not PolicyName.VLLM
    opt = prio.opt if isinstance(prio, UtilityAccrualPriority) else None
    preemption = None
    if opt is not None and opt.preempt > 0 and isinstance(adm, UtilityGuidedAdmission):
        preemption = Preemption(
            adm.model,
            max_per_segment=opt.preempt,
            outrun=opt.preempt_outrun,
            tardy=opt.preempt_tardy,
            tardy_live=opt.preempt_tardy_live,
            tardy_victim=opt.preempt_tardy_victim,
        )
    return Policy(
        name=spec,
        base=kind.value,
        segmented=segmented,
        stream=stream,
        priority=prio,
        admission=adm,
        max_batch=max_batch,
        admit_per_step=admit_per_step,
        preemption=preemption,
    )


def _unknown(spec: object) -> str:
    return f"unknown policy {spec!r}; known: {', '.join(policy_names())} (optionally @bN and @aK, e.g. timely@b4, edf-seg@a1)"


def parse_policy(spec: str | Policy) -> Policy:
    """``"timely"``, ``"edf-seg@b4"`` ... → a fresh :class:`Policy` (a :class:`Policy` is returned as is)."""
    if isinstance(spec, Policy):
        return spec
    m = _SPEC.match(spec.strip()) if isinstance(spec, str) else None
    if not m or m.group(1) not in POLICY_NAMES:
        raise UnknownPolicy(_unknown(spec))
    batch = int(m.group(2)) if m.group(2) else DEFAULT_MAX_BATCH
    if batch < 1:
        raise UnknownPolicy(f"{spec!r}: max batch must be >= 1")
    per_step = int(m.group(3)) if m.group(3) else None
    return make_policy(m.group(1), batch, spec=spec.strip(), admit_per_step=per_step)
