"""Metrics on hand-built records: utilities (unclamped/clamped), Σβ, percentiles, waiting, on-time."""

import math

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.generation import Segment, TaskRecord
from timely_llm_ros.core.metrics import percentile, summarize, summarize_group, task_utility
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF


def rec(task_id, tuf, klass, starts_ends, state=ev.COMPLETED, arrival=10.0, terminal=math.nan):
    r = TaskRecord(
        task_id=task_id,
        agent_id="a",
        task_class=klass,
        tuf=tuf,
        arrival=arrival,
        state=state,
        terminal_time=terminal,
    )
    for i, (s, e) in enumerate(starts_ends):
        r.segments.append(Segment(idx=i, exec_start=arrival + s, exec_end=arrival + e))
    if state == ev.COMPLETED:
        r.completion_time_abs = r.segments[-1].exec_end
    return r


def records():
    return [
        rec("A", NORMAL_TUF, "normal", [(0.5, 2.0), (2.2, 3.0)]),  # W = [0.5, 0.2], U = 1
        rec("B", NORMAL_TUF, "normal", [(1.25, 2.0)]),  # U = -2 * 0.25 + 1 = 0.5
        rec("C", URGENT_TUF, "urgent", [(0.35, 1.0)]),  # U = 2 - (2/0.3) * 0.15 = 1.0
        rec("D", URGENT_TUF, "urgent", [], state=ev.FAILED, terminal=11.0),  # gave up at 1.0 s: U = -3.333
        rec("E", URGENT_TUF, "urgent", [], state=ev.REJECTED, terminal=10.0),  # excluded
    ]


def test_record_latencies():
    a = records()[0]
    assert a.response_time == pytest.approx(0.5)
    assert a.waiting_times() == pytest.approx([0.5, 0.2])
    assert a.waiting_time == pytest.approx(0.7)
    assert a.completion_time == pytest.approx(3.0)
    assert a.exec_time == pytest.approx(2.3)
    assert a.utility == 1.0


def test_task_utility_of_unserved_tasks():
    rs = records()
    assert task_utility(rs[3]) == pytest.approx(2.0 - (2.0 / 0.3) * 0.8)
    assert math.isnan(task_utility(rs[4]))


def test_per_class_summary_hand_computed():
    m = summarize(records())
    n = m["normal"]
    assert (n.n, n.n_completed, n.n_served) == (2, 2, 2)
    assert n.utility_mean == pytest.approx(0.75) and n.utility_mean_clamped == pytest.approx(0.75)
    assert n.sum_beta == 2.0 and n.pct_beta == pytest.approx(75.0)
    assert (n.response_mean, n.response_p50, n.response_p99, n.response_max) == pytest.approx(
        (0.875, 0.5, 1.25, 1.25)
    )
    assert n.waiting_mean == pytest.approx((0.7 + 1.25) / 2)
    assert n.completion_mean == pytest.approx((3.0 + 2.0) / 2)
    assert n.on_time_pct == pytest.approx(50.0)
    u = m["urgent"]
    assert (u.n, u.n_rejected, u.n_failed, u.n_served) == (3, 1, 1, 1)
    d = 2.0 - (2.0 / 0.3) * 0.8
    assert u.utility_mean == pytest.approx((1.0 + d) / 2)
    assert u.utility_mean_clamped == pytest.approx(0.5)
    assert u.sum_beta == 4.0
    assert u.pct_beta == pytest.approx(100 * (1.0 + d) / 4)
    assert u.pct_beta_clamped == pytest.approx(25.0)
    assert u.n_nonpositive == 1 and u.on_time_pct == 0.0
    assert list(m) == ["normal", "urgent", "all"] and m["all"].n == 5


def test_summary_grouping_options():
    m = summarize(records(), by=lambda r: r.task_id[0] in "AB" and "x" or "y", total=None)
    assert set(m) == {"x", "y"}
    empty = summarize_group([])
    assert empty.n == 0 and math.isnan(empty.utility_mean) and math.isnan(empty.pct_beta)


def test_nearest_rank_percentile():
    xs = [float(i) for i in range(1, 101)]
    assert percentile(xs, 50) == 50.0
    assert percentile(xs, 99) == 99.0
    assert percentile(xs, 100) == 100.0
    assert percentile([3.0], 99) == 3.0
    assert math.isnan(percentile([], 50))
