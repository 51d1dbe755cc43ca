"""Eq. 4 (PUD priority), slack and its guard, EDF/FCFS keys — hand-computed values."""

import math
import random

import numpy as np
import pytest

from timely_llm_ros.core.sched.priority import (
    L_MIN,
    EDFPriority,
    FCFSPriority,
    PUDPriority,
    QueueColumns,
    pud_priority,
)
from timely_llm_ros.core.tuf import waiting_time

NET = 0.008
G = 0.09


def test_first_segment_normal():
    # arrival 9.5, now 10: W = 10 + 0.09 + 0.008 - 9.5 = 0.598 ; TUF_0(0.598) = 1 ; L = 1 - 0.598 = 0.402
    assert waiting_time(10.0 + G, NET, 9.5) == pytest.approx(0.598)
    assert 1.0 - waiting_time(10.0 + G, NET, 9.5) == pytest.approx(0.402)  # the slack L
    assert pud_priority(10.0, 9.5, 1.0, -2.0, 1.0, G, NET) == pytest.approx(1.0 / (0.09 * 0.402))


def test_first_segment_urgent_outranks_normal():
    # urgent arrived 9.95: W = 0.148, U = 2, L = 0.2 - 0.148 = 0.052 -> 2 / (0.09 * 0.052) = 427.35
    urgent = pud_priority(10.0, 9.95, 0.2, -2.0 / 0.3, 2.0, G, NET)
    assert urgent == pytest.approx(2.0 / (0.09 * 0.052))
    assert urgent > pud_priority(10.0, 9.5, 1.0, -2.0, 1.0, G, NET)


def test_first_segment_past_ert_positive_utility():
    # normal arrived 8.9: W = 1.198, U = -2 * 0.198 + 1 = 0.604, L = -0.198 -> guarded to 1 ms
    p = pud_priority(10.0, 8.9, 1.0, -2.0, 1.0, G, NET)
    assert p == pytest.approx(0.604 / (0.09 * L_MIN))


def test_suspended_segment_uses_tuf1_and_previous_action_end():
    # previous action expected to end at 10.5: W = 10.098 - 10.5 = -0.402 (early) -> TUF_1 = beta = 1
    # L = 0 - (-0.402) = 0.402
    p = pud_priority(10.0, 10.5, 0.0, -2.0, 1.0, G, NET)
    assert p == pytest.approx(1.0 / (0.09 * 0.402))
    # previous action ended at 9.9: W = 0.198 late, TUF_1 = 1 - 2 * 0.198 = 0.604, L < 0 -> guard
    late = pud_priority(10.0, 9.9, 0.0, -2.0, 1.0, G, NET)
    assert late == pytest.approx(0.604 / (0.09 * L_MIN))


def test_negative_utility_gets_negative_priority_literal_eq4():
    # normal arrived 8.0: W = 2.098, U = -2 * 1.098 + 1 = -1.196 -> the most negative priority
    p = pud_priority(10.0, 8.0, 1.0, -2.0, 1.0, G, NET)
    assert p == pytest.approx(-1.196 / (0.09 * L_MIN))
    assert p < 0


def test_slack_exactly_zero_is_guarded():
    # ref chosen so that W == ERT exactly: L = 0 -> L_MIN, no division by zero
    t, ref = 1.0, 1.0 + G + NET - 0.5
    p = pud_priority(t, ref, 0.5, -2.0, 1.0, G, NET)
    assert math.isfinite(p) and p > 0


def test_static_keys():
    assert FCFSPriority().fixed_key(3.0, 0.2) == -3.0
    assert EDFPriority().fixed_key(3.0, 0.2) == pytest.approx(-3.2)
    # EDF: an urgent task arriving later (3.0 + 0.2) beats a normal earlier one (2.5 + 1)
    assert EDFPriority().fixed_key(3.0, 0.2) > EDFPriority().fixed_key(2.5, 1.0)


def _columns(n, seed=1):
    rng = random.Random(seed)
    q = QueueColumns(capacity=4)
    for i in range(n):
        urgent = rng.random() < 0.5
        k0 = rng.random() < 0.5
        ert = 0.2 if urgent else 1.0
        q.append(
            (
                rng.uniform(0, 3),
                ert if k0 else 0.0,
                -6.67 if urgent else -2.0,
                2.0 if urgent else 1.0,
                rng.choice([0.09, 0.16]),
                NET,
                float(i),
            )
        )
    return q


def test_python_and_numpy_paths_agree_bit_for_bit():
    q = _columns(300)
    s = PUDPriority()
    for t in (0.0, 1.3, 2.9, 10.0):
        py = s.scores_py(t, q.cols, q.n)
        npv = s.scores_np(t, q.arrs, q.n)
        assert py == list(npv)  # exact equality, not approx


def test_scalar_reference_matches_vectorised():
    q = _columns(20)
    s = PUDPriority()
    py = s.scores_py(1.7, q.cols, q.n)
    c = q.cols
    ref = [
        pud_priority(1.7, c["ref"][i], c["ert_k"][i], c["alpha"][i], c["beta"][i], c["g"][i], c["net"][i])
        for i in range(q.n)
    ]
    assert py == ref


def test_queue_columns_swap_remove_keeps_arrays_in_sync():
    q = _columns(10)
    moved = q.remove(2)
    assert moved == 9 and q.n == 9
    for f in QueueColumns.FIELDS:
        assert list(q.arrs[f][: q.n]) == q.cols[f]
    assert q.remove(q.n - 1) == -1
    assert isinstance(q.arrs["ref"], np.ndarray)
