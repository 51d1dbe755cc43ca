"""The closed set of policies (PolicyName) and its plain factory: every member builds, names are
checked with the error users see (planner parameter ``policy``, ``timely-llm bench -p``)."""

import pytest

from timely_llm_ros.core.sched import policies
from timely_llm_ros.core.sched.admission import DEFAULT_MAX_BATCH, Admission, LatencyGuidedAdmission
from timely_llm_ros.core.sched.policies import (
    POLICY_NAMES,
    Policy,
    PolicyName,
    UnknownPolicy,
    make_policy,
    parse_policy,
    policy_names,
)
from timely_llm_ros.core.sched.policy_timely import VARIANTS, UtilityAccrualPriority, UtilityGuidedAdmission
from timely_llm_ros.core.sched.priority import EDFPriority, FCFSPriority, PUDPriority, RequeueFCFSPriority
from timely_llm_ros.core.sched.scheduler import Scheduler

KNOWN = (
    "timely-paper, timely, fcfs-seg, edf-seg, vllm, vllm-stream, timely-no-ua, timely-no-late, "
    "timely-no-aging, timely-promote-half, timely-crit-d, timely-adm-group, timely-adm-nocap, "
    "timely-adm-paper, timely-no-adm, timely-edf-dyn, timely-full-ua, timely-adm-nopromise, timely-adm-g, "
    "timely-clamped, timely-unclamped, timely-no-claim, timely-adm-keepdue, timely-floor05, timely-floor1, timely-floor2, timely-floor1-idle2, timely-no-chain, "
    "timely-no-preempt, timely-preempt2, timely-preempt-again, timely-preempt-late, timely-preempt-late0, "
    "timely-preempt-ontime, fcfs-requeue"
)


@pytest.mark.parametrize("member", list(PolicyName), ids=lambda m: m.value)
def test_every_member_builds_fresh_strategies(member):
    a, b = make_policy(member), parse_policy(member.value)
    for p in (a, b):
        assert isinstance(p, Policy)
        assert p.name == p.base == member.value and type(p.base) is str
        assert p.max_batch == DEFAULT_MAX_BATCH
        assert isinstance(p.admission, Admission)
    assert a.priority is not b.priority and a.admission is not b.admission  # one index per queue
    assert type(a.priority) is type(b.priority) and type(a.admission) is type(b.admission)
    s = Scheduler(member.value + "@b3")
    assert s.policy.max_batch == 3 and s.policy.name == member.value + "@b3"


def test_the_members_are_the_names_in_their_listed_order():
    assert policy_names() == POLICY_NAMES == tuple(KNOWN.split(", "))
    assert [m.value for m in PolicyName] == list(POLICY_NAMES)
    # every ablation variant of the robust policy is a member, and nothing else is built from VARIANTS
    assert set(VARIANTS) == set(POLICY_NAMES[6:]) - {"fcfs-requeue"}


def test_what_each_built_in_policy_is():
    def kinds(name):
        p = parse_policy(name)
        return type(p.priority), type(p.admission), p.segmented, p.stream

    assert kinds("timely-paper") == (PUDPriority, LatencyGuidedAdmission, True, True)
    assert kinds("timely") == (UtilityAccrualPriority, UtilityGuidedAdmission, True, True)
    assert kinds("fcfs-seg") == (FCFSPriority, Admission, True, True)
    assert kinds("fcfs-requeue") == (RequeueFCFSPriority, Admission, True, True)
    assert kinds("edf-seg") == (EDFPriority, Admission, True, True)
    assert kinds("vllm") == (FCFSPriority, Admission, False, False)
    assert kinds("vllm-stream") == (FCFSPriority, Admission, False, True)
    assert kinds("timely-adm-paper")[:2] == (UtilityAccrualPriority, LatencyGuidedAdmission)
    assert kinds("timely-no-adm")[:2] == (UtilityAccrualPriority, Admission)
    assert parse_policy("timely-crit-d").priority.opt == VARIANTS["timely-crit-d"]


@pytest.mark.parametrize("bad", ["sjf", "TIMELY", "", "timely@4", "timely-@b2x", "  nope  "])
def test_unknown_names_get_the_list_of_known_ones(bad):
    with pytest.raises(UnknownPolicy) as exc:
        parse_policy(bad)
    assert (
        str(exc.value)
        == f"unknown policy {bad!r}; known: {KNOWN} (optionally @bN and @aK, e.g. timely@b4, edf-seg@a1)"
    )
    assert isinstance(exc.value, ValueError)  # the planner's parameter check reports ValueErrors
    with pytest.raises(UnknownPolicy, match="unknown policy"):
        make_policy(bad)


def test_a_batch_below_one_is_refused_with_its_spec():
    with pytest.raises(UnknownPolicy) as exc:
        parse_policy("timely@b0")
    assert str(exc.value) == "'timely@b0': max batch must be >= 1"
    with pytest.raises(UnknownPolicy, match="'edf-seg@b0': max batch must be >= 1"):
        make_policy(PolicyName.EDF_SEG, 0)
    assert make_policy(PolicyName.EDF_SEG, 4).name == "edf-seg@b4"
    assert parse_policy(" edf-seg@b4 ").name == "edf-seg@b4"


def test_nothing_registers_at_import_time():
    # the factory is a plain function over the enum: no mutable registry to plug into
    assert not any(name.startswith("_REGISTRY") or name == "register_policy" for name in vars(policies))
