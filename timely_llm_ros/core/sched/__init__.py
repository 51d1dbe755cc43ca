"""The scheduler's parts: which generation runs next, and which may join the running batch.

TimelyLLM's scheduling point (paper §4.4) is here, split by the question each module answers:

* :mod:`.priority` — the order of the queue: PUD (paper Eq. 4), EDF, FCFS as small strategies
  that each hand the scheduler one :class:`~.priority.Ranking` per decision;
* :mod:`.policy_timely` and its index :mod:`.ua_index` — the robust ``timely`` policy
  (utility-accrual order and utility-guided admission) beside the paper's literal ``timely-paper``;
* :mod:`.admission` — may a candidate join the batch in this step (paper §4.4's latency check);
* :mod:`.preemption` — which running segment an urgent one may suspend mid-segment when no slot
  is free (``timely``; the planner carries it out through the engine's ``suspend``);
* :mod:`.policies` — the closed set of policy names and the factory that pairs a priority
  strategy with an admission check (``parse_policy("timely@b8")``);
* :mod:`.scheduler` — :class:`~.scheduler.Scheduler`, which runs whichever policy it is given;
* :mod:`.agent_queue` — one task at a time per robot, before a task reaches the queue;
* :mod:`.deferral_ledger` — the utility-guided admission's promises checked against what happened.

Why a package of its own: these modules only serve :class:`timely_llm_ros.core.planner.PlannerCore`'s
scheduling point, and they import one way (admission below policies and ``policy_timely``, the
scheduler on top), so a reader who wants the policy maths finds all of it here and nothing else.
Inside the package every module imports its siblings by their own module path; this face is for
callers (``from timely_llm_ros.core.sched import Scheduler, parse_policy``).
"""

from timely_llm_ros.core.sched.admission import DEFAULT_MAX_BATCH, Admission, LatencyGuidedAdmission
from timely_llm_ros.core.sched.agent_queue import AgentQueueFull, AgentQueues
from timely_llm_ros.core.sched.policies import (
    POLICY_NAMES,
    Policy,
    PolicyName,
    UnknownPolicy,
    make_policy,
    parse_policy,
    policy_names,
)
from timely_llm_ros.core.sched.policy_timely import (
    TimelyOptions,
    UtilityAccrualPriority,
    UtilityGuidedAdmission,
)
from timely_llm_ros.core.sched.preemption import Preemption
from timely_llm_ros.core.sched.priority import (
    EDFPriority,
    FCFSPriority,
    PriorityStrategy,
    PUDPriority,
    Ranking,
    pud_priority,
)
from timely_llm_ros.core.sched.scheduler import Decision, Scheduler
from timely_llm_ros.core.sched.ua_index import PhaseIndex

__all__ = [
    "DEFAULT_MAX_BATCH",
    "POLICY_NAMES",
    "Admission",
    "Decision",
    "AgentQueueFull",
    "AgentQueues",
    "EDFPriority",
    "FCFSPriority",
    "LatencyGuidedAdmission",
    "PUDPriority",
    "PhaseIndex",
    "Policy",
    "PolicyName",
    "Preemption",
    "PriorityStrategy",
    "Ranking",
    "Scheduler",
    "TimelyOptions",
    "UnknownPolicy",
    "UtilityAccrualPriority",
    "UtilityGuidedAdmission",
    "make_policy",
    "parse_policy",
    "policy_names",
    "pud_priority",
]
