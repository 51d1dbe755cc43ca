"""Phase index of the timely policy: phase boundaries by hand, the blocked sorted tiers."""

import random

import pytest
from schedkit import gen

from timely_llm_ros.core.sched import ua_index
from timely_llm_ros.core.sched.ua_index import LATE, ONTIME, PROMOTED, TARDY, Entry, PhaseIndex, SortedTuples
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF


def test_phase_boundaries_hand_computed():
    # urgent first segment arrived at 0, G = 0.09, net = 0.008: D = 0.192, on time while t <= D - G =
    # 0.102; span = β/|α| = 0.3, Z = 0.492, late from Z - G = 0.402; promoted at P = Z + 1·(ERT + span)
    # = 0.992
    e = Entry(gen(arrival=0.0, tuf=URGENT_TUF), aging=1.0)
    assert (e.d, e.z, e.p) == pytest.approx((0.192, 0.492, 0.992))
    assert [e.phase_at(t) for t in (0.0, 0.102, 0.1021, 0.4019, 0.402, 0.9919, 0.992)] == [
        ONTIME,
        ONTIME,
        TARDY,
        TARDY,
        LATE,
        LATE,
        PROMOTED,
    ]
    assert e.utility(0.0) == 2.0 and e.utility(0.2) == pytest.approx(2 - 20 / 3 * 0.098)
    # a suspended normal segment whose previous action ends at 5.0: D = 4.992, span 0.5, Z = 5.492
    s = Entry(gen(arrival=0.0, tuf=NORMAL_TUF, k=1, ref=5.0), aging=0.0)
    assert (s.d, s.z, s.p) == pytest.approx((4.992, 5.492, float("inf")))
    assert s.phase_at(100.0) == LATE  # without aging never promoted


def test_index_moves_entries_between_tiers_as_time_passes():
    ix = PhaseIndex(aging=1.0, critical_zero=True, late_tier=True)
    u = gen(arrival=0.0, tuf=URGENT_TUF)
    u.slot = 1
    ix.add(u)
    ix.advance(0.0)
    assert list(ix.live) == [(pytest.approx(0.192), u.seq, 1)] and ix.tardy_slope() == 0.0
    ix.advance(0.2)  # tardy: keyed by Z, its slope counts
    assert list(ix.live)[0][0] == pytest.approx(0.492) and ix.tardy_slope() == pytest.approx(20 / 3)
    ix.advance(0.5)
    assert not len(ix.live) and len(ix.late) == 1 and ix.tardy_slope() == 0.0
    ix.advance(1.0)
    assert len(ix.promoted) == 1 and not len(ix.late)
    ix.advance(0.1)  # the clock went back: rebuilt
    assert len(ix.live) == 1 and not len(ix.promoted)
    ix.discard(1)
    assert not len(ix) and not len(ix.live)


def test_sorted_tuples_match_a_sorted_list(monkeypatch):
    monkeypatch.setattr(ua_index, "BLOCK", 4)  # small blocks: splits and empty blocks happen
    rng = random.Random(7)
    st, model = SortedTuples(), []
    for step in range(3000):
        if model and rng.random() < 0.45:
            item = model.pop(rng.randrange(len(model)))
            st.remove(item)
        else:
            item = (rng.choice([0.1, 0.2, rng.random()]), rng.randrange(5), step)
            st.add(item)
            model.append(item)
        model.sort()
        if step % 97 == 0:
            assert list(st) == model and len(st) == len(model)
            k = rng.randrange(len(model) + 2)
            assert st.head(k) == model[:k] and list(st.iter_from(k)) == model[k:]
            if model:
                assert st[k % len(model)] == model[k % len(model)] and st[-1] == model[-1]
    assert list(SortedTuples(list(reversed(model)))) == model
