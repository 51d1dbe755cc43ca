"""Mechanisms beyond the paper: the related schedulers' ideas (related papers 001–004) as switches.

TimelyLLM (paper 000) needs none of these; each one is off or neutral unless a planner option or an
engine option turns it on, and ``timely-llm bench --suite related`` measures what it changes
(README "Beyond the paper"):

* :mod:`.planner_options` — :class:`~.planner_options.PlannerOptions` (the table of switches, checked)
  and :class:`~.planner_options.PlannerExtras`, the runtime side the planner calls at a few points;
* :mod:`.urgency` — a TUF for a task that comes without one, from its instruction (001);
* :mod:`.length_predictor` — the segment generation-time estimate G(·) from predicted lengths (002);
* :mod:`.overrun` — what happens once a segment's utility horizon has passed (002);
* :mod:`.token_budget` — prompt tokens per engine step from the tightest slack (004);
* :mod:`.kv_policy` — keep, drop or swap a suspended generation's KV cache (003, 001); an *engine*
  option, since the engine owns the memory;
* :mod:`.replay` — ``plan_source: reference``: a real engine writes a task's reference plan exactly,
  so runs on real engines can be compared with the simulator's.

Why a package of its own: the paper's algorithms (``core/``) and the scheduler's parts
(:mod:`timely_llm_ros.core.sched`) read without these; a reader who wants the paper skips this folder.
Inside the package every module imports its siblings by their own module path; this face is for
callers (``from timely_llm_ros.core.options import PlannerOptions``).
"""

from timely_llm_ros.core.options.kv_policy import KV_POLICIES, KVOptions, KVPolicyError
from timely_llm_ros.core.options.length_predictor import LengthPredictor, PredictorError, segment_time
from timely_llm_ros.core.options.overrun import OverrunTracker
from timely_llm_ros.core.options.planner_options import PlannerExtras, PlannerOptions
from timely_llm_ros.core.options.replay import PLAN_SOURCES, ReplayError, check_plan_source
from timely_llm_ros.core.options.token_budget import TOKEN_BUDGETS, BudgetOptions, choose_budget
from timely_llm_ros.core.options.urgency import (
    LexicalClassifier,
    LLMClassifier,
    UrgencyConfig,
    UrgencyConfigError,
    load_urgency_config,
)

__all__ = [
    "KV_POLICIES",
    "PLAN_SOURCES",
    "TOKEN_BUDGETS",
    "BudgetOptions",
    "KVOptions",
    "KVPolicyError",
    "LLMClassifier",
    "LengthPredictor",
    "LexicalClassifier",
    "OverrunTracker",
    "PlannerExtras",
    "PlannerOptions",
    "PredictorError",
    "ReplayError",
    "UrgencyConfig",
    "UrgencyConfigError",
    "check_plan_source",
    "choose_budget",
    "load_urgency_config",
    "segment_time",
]
