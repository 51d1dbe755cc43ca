"""Preemption of a running segment for urgent work (``timely``; core/sched/preemption.py).

Hand-computed decisions on a measured step model (2 running: 30 ms a step; a prefill pass 30 ms;
a drone segment: G = 0.09 s = 4 tokens), and one simulated case on the virtual clock where an
urgent request finds both slots of a 2-slot engine taken by normal first segments.
"""

import pytest
from schedkit import gen

from timely_llm_ros.core.sched.scheduler import Scheduler
from timely_llm_ros.core.tuf import URGENT_TUF
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.workload.tasks import load_catalog

T = 1.0


def running(arrival, tuf=None, seg_tokens=1, k=0, ref=None):
    g = gen(arrival=arrival, seg_tokens=seg_tokens, k=k, ref=ref, **({"tuf": tuf} if tuf else {}))
    g.seg_start = T - 0.03 * seg_tokens
    return g


def scheduler(policy, batch):
    """A scheduler whose step model measured one pure step of 30 ms with ``batch`` running."""
    s = Scheduler(policy)
    model = s.policy.admission.model
    model.record_decision(T - 0.03, batch, [])
    model.observe(T)
    return s


def decide(s, run, *queued):
    for q in queued:
        s.push(q)
    return s.decide(T, run, None, 10**6)


def test_an_urgent_segment_takes_the_slot_of_the_lowest_cost_density_one():
    normal = running(0.9)  # deadline 1.892: ends ~1.09, still on time after an urgent segment
    urgent = running(0.95, URGENT_TUF)  # the same cost density as the candidate: never a victim
    cand = gen(arrival=T, tuf=URGENT_TUF)  # deadline 1.192; waiting for the first end (1.09) misses it
    d = decide(scheduler("timely@b2", [normal, urgent]), [normal, urgent], cand)
    assert d.suspend == [(normal, cand)]
    assert d.admit == [cand]
    # without preemption the candidate waits for a slot
    plain = decide(
        scheduler("timely-no-preempt@b2", [normal, urgent]), [normal, urgent], gen(arrival=T, tuf=URGENT_TUF)
    )
    assert plain.admit == [] and plain.suspend == []


def test_no_preemption_when_the_victim_would_miss_or_was_preempted_or_the_candidate_can_wait():
    # a normal later segment whose robot is about to finish (deadline 1.25 - 0.008): the delay of an
    # urgent segment plus a resume step would make it late
    tight = running(0.0, k=1, ref=1.25)
    other = running(0.95, URGENT_TUF)
    d = decide(scheduler("timely@b2", [tight, other]), [tight, other], gen(arrival=T, tuf=URGENT_TUF))
    assert d.suspend == [] and d.admit == []
    # a segment preempted once is not preempted again (timely: once per segment)
    normal = running(0.9)
    normal.preempted = 1
    d = decide(scheduler("timely@b2", [normal, other]), [normal, other], gen(arrival=T, tuf=URGENT_TUF))
    assert d.suspend == []
    # ... timely-preempt2 allows a second time
    d = decide(
        scheduler("timely-preempt2@b2", [normal, other]), [normal, other], gen(arrival=T, tuf=URGENT_TUF)
    )
    assert [v for v, _ in d.suspend] == [normal]
    # a candidate that can wait for the first running end (one token left: ends 1.03) is not helped
    fresh = running(0.9)
    almost = running(0.95, URGENT_TUF, seg_tokens=3)
    d = decide(scheduler("timely@b2", [fresh, almost]), [fresh, almost], gen(arrival=T, tuf=URGENT_TUF))
    assert d.suspend == []
    # a candidate already too late to be on time if admitted now (arrived 0.1 s ago) preempts
    # nothing in timely-preempt-ontime; timely lets it (each further second still costs |α|)
    for policy, swaps in (("timely-preempt-ontime@b2", 0), ("timely@b2", 1)):
        run = [running(0.9), other]
        d = decide(scheduler(policy, run), run, gen(arrival=T - 0.1, tuf=URGENT_TUF))
        assert len(d.suspend) == swaps, policy


def test_a_late_candidate_preempts_only_a_victim_safe_at_its_maximum_segment():
    # a late urgent candidate (arrived 0.1 s ago); the victim is a normal later segment whose
    # deadline (1.302) holds if its segment ends as expected (1.03 + the candidate's segment + a
    # resume step ~ 1.18) but not if it runs to the skill set's maximum (10 tokens: ~1.42)
    other = running(0.95, URGENT_TUF)
    for policy, swaps in (("timely-preempt-late@b2", 1), ("timely@b2", 0)):
        run = [running(0.0, k=1, ref=1.31), other]
        d = decide(scheduler(policy, run), run, gen(arrival=T - 0.1, tuf=URGENT_TUF))
        assert len(d.suspend) == swaps, policy
    # a victim with slack even at its maximum (a fresh normal first segment, deadline 1.892) yields
    run = [running(0.9), other]
    d = decide(scheduler("timely@b2", run), run, gen(arrival=T - 0.1, tuf=URGENT_TUF))
    assert [v for v, _ in d.suspend] == [run[0]]
    # an on-time candidate still times the victim as expected (the tight one yields, as in timely)
    run = [running(0.0, k=1, ref=1.31), other]
    d = decide(scheduler("timely@b2", run), run, gen(arrival=T, tuf=URGENT_TUF))
    assert [v for v, _ in d.suspend] == [run[0]]


def test_a_segment_past_its_estimate_is_timed_as_long_again_in_timely_preempt_again():
    # both running segments have outrun G (4 tokens): timely counts one token left for each
    # (a slot frees at 1.03, the candidate can wait); timely-preempt-again counts as many again as
    # each has run (ends 1.15 and 1.24), so the candidate would miss and the normal one yields
    run = [running(0.9, seg_tokens=8), running(0.95, URGENT_TUF, seg_tokens=5)]
    assert decide(scheduler("timely@b2", run), run, gen(arrival=T, tuf=URGENT_TUF)).suspend == []
    d = decide(scheduler("timely-preempt-again@b2", run), run, gen(arrival=T, tuf=URGENT_TUF))
    assert [v for v, _ in d.suspend] == [run[0]]


def test_select_never_preempts():
    # select() is for callers that cannot suspend a running generation: admissions only
    normal, urgent = running(0.9), running(0.95, URGENT_TUF)
    s = scheduler("timely@b2", [normal, urgent])
    s.push(gen(arrival=T, tuf=URGENT_TUF))
    assert s.select(T, [normal, urgent], None, 10**6) == []


def clump():
    """Two normal first segments fill a 2-slot engine; an urgent request arrives 120 ms later."""
    cat = load_catalog()
    return [
        cat.get(1).to_spec(task_id="n1", agent_id="a1", arrival=0.0),
        cat.get(2).to_spec(task_id="n2", agent_id="a2", arrival=0.0),
        cat.get(6).to_spec(task_id="u", agent_id="a3", arrival=0.12),
    ]


def test_simulated_clump_urgent_preempts_and_the_victim_resumes_its_segment():
    base = simulate(clump(), SimConfig(policy="timely-no-preempt@b2"))
    res = simulate(clump(), SimConfig(policy="timely@b2"))
    got = {r.task_id: r for r in res.records}
    ref = {r.task_id: r for r in base.records}
    assert all(r.state == "COMPLETED" for r in res.records)
    # without preemption the urgent task waits for a normal segment to end (measured 0.28 s: U 1.47);
    # with it, it starts at the first decision after its arrival (0.147 s: U = β)
    assert ref["u"].response_time > 0.25
    assert got["u"].response_time < 0.2 and got["u"].utility == pytest.approx(2.0)
    # the victim's segment went on where it stopped: the same plan, the same tokens per segment, its
    # generation start kept, and it is still on time (U = β)
    for tid in ("n1", "n2"):
        assert [s.text for s in got[tid].segments] == [s.text for s in ref[tid].segments]
        assert [s.n_tokens for s in got[tid].segments] == [s.n_tokens for s in ref[tid].segments]
        assert got[tid].utility == pytest.approx(1.0)
    pre = [e for e in res.events if e.kind == "SUSPEND" and e.detail.startswith("preempted")]
    assert [(e.task_id, e.seg) for e in pre] == [("n1", 0)]
    resumed = [e for e in res.events if e.kind == "RESUME" and e.detail == "mid-segment"]
    assert [e.task_id for e in resumed] == ["n1"] and resumed[0].t > pre[0].t
    assert got["n1"].segments[0].gen_start == ref["n1"].segments[0].gen_start
    assert got["n1"].n_suspensions == ref["n1"].n_suspensions + 1


class _BoundaryOnlySim(SimEngine):
    """A simulated engine that, like vLLM or an HTTP server with the skill grammar, cannot resume a
    generation mid-statement (its resumed request would start a new grammar derivation)."""

    def resumes_mid_segment(self, gen_id: int) -> bool:
        return False


def test_no_preemption_on_an_engine_that_cannot_resume_mid_segment():
    cfg = SimConfig(policy="timely@b2")
    base = simulate(clump(), SimConfig(policy="timely-no-preempt@b2"))
    res = simulate(clump(), cfg, engine=_BoundaryOnlySim(cfg.profile))
    assert not [e for e in res.events if e.kind == "SUSPEND" and e.detail.startswith("preempted")]
    # the same run as without preemption: the urgent task waits for a slot
    assert [(r.task_id, r.response_time) for r in res.records] == [
        (r.task_id, r.response_time) for r in base.records
    ]


def test_which_engines_resume_mid_segment():
    from timely_llm_ros.core.engine import Engine

    assert Engine.resumes_mid_segment(_BoundaryOnlySim(SimConfig().profile), 1) is False  # the port's default
    assert SimEngine(SimConfig().profile).resumes_mid_segment(1) is True
