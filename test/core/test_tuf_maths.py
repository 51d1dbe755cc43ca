"""The one home of the TUF maths (core/tuf.py): Eq. 1 for segments, segment deadline, zero-utility
time, urgent/normal class — hand-computed values, and bit-identity with the formulas the scheduler,
policies and metrics used to write out themselves (the benchmarks' results must not move)."""

import math
import random

import numpy as np
import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.generation import Segment, TaskRecord
from timely_llm_ros.core.metrics import summarize_group
from timely_llm_ros.core.task import TaskSpec, task_class
from timely_llm_ros.core.tuf import (
    NORMAL_TUF,
    ON_TIME_TOLERANCE_S,
    TUF,
    URGENT_ERT_S,
    URGENT_TUF,
    is_urgent,
    on_time,
    segment_deadline,
    tuf_class,
    utilities,
    utility,
    utility_span,
    waiting_time,
    zero_utility_time,
)
from timely_llm_ros.lrtrace.timeline_model import TaskLane


def test_utility_hand_computed():
    # normal TUF: ERT 1, alpha -2, beta 1
    assert utility(0.5, 1.0, -2.0, 1.0) == 1.0  # before the ERT: beta
    assert utility(1.25, 1.0, -2.0, 1.0) == -2.0 * 0.25 + 1.0 == 0.5
    assert utility(2.0, 1.0, -2.0, 1.0) == -1.0  # unclamped below
    # TUF_1 (ERT_k = 0): an action that may start early (W < 0) is worth beta, never more
    assert utility(-3.0, 0.0, -2.0, 1.0) == 1.0
    assert utility(0.1, 0.0, -2.0, 1.0) == pytest.approx(0.8)
    # urgent [2, 0.2, 0.5]: alpha = -20/3; W = 0.35 -> 2 - 20/3 * 0.15 = 1.0
    assert utility(0.35, 0.2, URGENT_TUF.alpha, 2.0) == pytest.approx(1.0)
    assert utility(5.0, 1.0, 0.0, 1.0) == 1.0  # flat TUF
    assert utility(math.nan, 1.0, -2.0, 1.0) == 1.0  # nan W counts as 0 (as the priorities did)


def test_utilities_is_utility_over_arrays():
    w = np.array([-1.0, 0.0, 0.5, 1.25, 2.0, 40.0])
    e, al, be = np.full(6, 1.0), np.full(6, -2.0), np.full(6, 1.0)
    got = utilities(w, e, al, be)
    assert got.tolist() == [utility(x, 1.0, -2.0, 1.0) for x in w.tolist()]
    assert got.tolist() == [1.0, 1.0, 1.0, 0.5, -1.0, -77.0]


def test_segment_deadline_and_zero_utility_time_hand_computed():
    # normal task arrived at 0.9, net 8 ms: D = 0.9 + 1 - 0.008 = 1.892, Z = D + 1/2 = 2.392
    d = segment_deadline(0.9, 1.0, 0.008)
    assert d == pytest.approx(1.892)
    assert utility_span(-2.0, 1.0) == 0.5
    assert zero_utility_time(d, -2.0, 1.0) == pytest.approx(2.392)
    # suspended segment (ERT_k = 0) whose previous action ends at 3.0: D = 2.992
    assert segment_deadline(3.0, 0.0, 0.008) == pytest.approx(2.992)
    assert utility_span(0.0, 1.0) == math.inf and zero_utility_time(d, 0.0, 1.0) == math.inf
    assert URGENT_TUF.zero_time == zero_utility_time(0.2, URGENT_TUF.alpha, 2.0) == pytest.approx(0.5)
    assert TUF(ert=1.0, alpha=0.0, beta=1.0).zero_time == math.inf


def test_urgent_normal_class():
    assert URGENT_ERT_S == 1.0
    assert is_urgent(URGENT_TUF) and tuf_class(URGENT_TUF) == "urgent"
    assert not is_urgent(NORMAL_TUF) and tuf_class(NORMAL_TUF) == "normal"  # ERT 1.0 is not < 1 s
    assert tuf_class(TUF(ert=0.999, alpha=-1.0, beta=1.0)) == "urgent"
    spec = TaskSpec(task_id="t", agent_id="a", robot_type="r", skill_set="s", instruction="x", tuf=URGENT_TUF)
    assert task_class(spec) == "urgent"


def _cases(n=4000):
    rng = random.Random(7)
    specials = [0.0, -0.0, 1e-300, -1e-300, 1e300, -1e300, math.nan]
    for i in range(n):
        w = rng.choice(specials) if i % 17 == 0 else rng.uniform(-5, 5)
        ert = 0.0 if rng.random() < 0.4 else rng.uniform(0, 3)
        alpha = 0.0 if rng.random() < 0.1 else -rng.uniform(1e-3, 50)
        beta = rng.uniform(1e-3, 10)
        yield w, ert, alpha, beta


def _bits(x: float) -> bytes:
    return np.float64(x).tobytes()


def test_bit_identical_to_the_formulas_it_replaces():
    # the inlined forms of Eq. 1 before there was one home (priority.PUDPriority.scores_py,
    # ua_index.Entry.utility, policy_timely._gen_utility; TUF.__call__ / TUF.segment_utility (gone) / pud_priority
    # used min/max, which agree wherever W is finite)
    for w, ert, alpha, beta in _cases():
        u = alpha * ((w if w > 0.0 else 0.0) - ert) + beta
        inlined = beta if u > beta else u
        assert _bits(utility(w, ert, alpha, beta)) == _bits(inlined)
        if not math.isnan(w):
            assert _bits(utility(w, ert, alpha, beta)) == _bits(min(beta, alpha * (max(w, 0.0) - ert) + beta))
            f = TUF(ert=ert, alpha=alpha, beta=beta)
            assert _bits(f(w)) == _bits(min(beta, alpha * (w - ert) + beta))
            assert _bits(utility(w, 0.0, alpha, beta)) == _bits(min(beta, alpha * max(w, 0.0) + beta))
        ref, net = w, 0.008
        assert _bits(segment_deadline(ref, ert, net)) == _bits(ref + ert - net)
        if alpha < 0:
            assert _bits(utility_span(alpha, beta)) == _bits(beta / -alpha)
            assert _bits(zero_utility_time(ref + ert - net, alpha, beta)) == _bits(
                ref + ert - net + beta / -alpha
            )
            assert _bits(TUF(ert=ert, alpha=alpha, beta=beta).zero_time) == _bits(ert + beta / -alpha)


def test_waiting_time_hand_computed():
    # starts generating at t = 10 with G = 90 ms, net 8 ms: the action starts at 10.098
    assert waiting_time(10.0 + 0.09, 0.008, 9.5) == pytest.approx(0.598)  # first segment, arrival 9.5
    assert waiting_time(10.0 + 0.09, 0.008, 10.5) == pytest.approx(
        -0.402
    )  # early: previous action ends later


def test_waiting_time_is_bit_identical_to_the_inlined_forms():
    # W = t + g + net - ref as PUDPriority.scores_py / pud_priority / slack / ua_index.Entry.utility
    # wrote it, and ((t + g) + net) - ref over arrays as PUDPriority.scores_np did
    rng = random.Random(11)
    rows = [
        (
            rng.uniform(0, 1e4),
            rng.uniform(1e-4, 2),
            rng.choice([0.0, 0.008, rng.uniform(0, 0.1)]),
            rng.uniform(0, 1e4),
        )
        for _ in range(4000)
    ]
    for t, g, net, ref in rows:
        assert _bits(waiting_time(t + g, net, ref)) == _bits(t + g + net - ref)
    t = 1234.5678
    g, net, ref = (np.array([r[i] for r in rows]) for i in (1, 2, 3))
    assert waiting_time(t + g, net, ref).tobytes() == (((t + g) + net) - ref).tobytes()
    assert waiting_time(t + g, net, ref).tolist() == [t + gi + ni - ri for gi, ni, ri in zip(g, net, ref)]


def test_on_time_rule_and_its_tolerance():
    assert ON_TIME_TOLERANCE_S == 1e-9
    assert on_time(0.2, 0.2) and on_time(0.1, 0.2) and on_time(-1.0, 0.0)
    assert on_time(0.2 + 0.5e-9, 0.2)  # a stamp rounded to whole nanoseconds is not lateness
    assert not on_time(0.2 + 2e-9, 0.2) and not on_time(0.3, 0.2)
    assert not on_time(math.nan, 0.2)  # never started


def _served(first_exec: float, arrival: float = 10.0, tuf: TUF = URGENT_TUF) -> tuple[TaskRecord, TaskLane]:
    rec = TaskRecord(task_id="u", agent_id="d", task_class="", tuf=tuf, arrival=arrival, state=ev.COMPLETED)
    rec.segments.append(Segment(0, exec_start=first_exec, exec_end=first_exec + 1.0))
    lane = TaskLane("u", tuf=tuf, arrival=arrival, state=ev.COMPLETED, first_exec=first_exec)
    return rec, lane


@pytest.mark.parametrize("late_by", [0.0, 0.4e-9, 0.9e-9, 1.5e-9, 5e-9, 1e-3])
def test_metrics_and_timeline_judge_a_response_at_the_ert_alike(late_by):
    # the metrics counted r <= ERT, the timeline first_exec > arrival + ERT + 1e-9 as missed: a response
    # a fraction of a nanosecond past the ERT was late in the report and on time in the figure
    rec, lane = _served(10.0 + URGENT_TUF.ert + late_by)
    met = summarize_group([rec]).on_time_pct == 100.0
    assert met == (not lane.missed_ert()) == on_time(rec.response_time, URGENT_TUF.ert)
    assert met == (late_by < 1e-9)
