"""TUF (Eq. 1), TUF_1 (§4.2) and the public [Umax, ERT, t_zero] form, pinned with hand-computed values."""

import math

import pytest

from timely_llm_ros.core.tuf import NORMAL_TUF, TUF, URGENT_TUF, InvalidTUF, utility


def test_eq1_normal_values():
    f = TUF(ert=1.0, alpha=-2.0, beta=1.0)
    assert f(0.0) == 1.0  # capped at beta before the ERT
    assert f(1.0) == 1.0
    assert f(1.25) == pytest.approx(0.5)  # -2 * 0.25 + 1
    assert f(1.5) == pytest.approx(0.0)
    assert f(2.0) == pytest.approx(-1.0)  # unbounded below (Eq. 1 as written)


def test_eq1_urgent_values():
    assert URGENT_TUF.alpha == pytest.approx(-2.0 / 0.3)  # [2, 0.2, 0.5] -> -6.67
    assert URGENT_TUF(0.1) == 2.0
    assert URGENT_TUF(0.35) == pytest.approx(2.0 - (2.0 / 0.3) * 0.15)  # = 1.0
    assert URGENT_TUF(0.35) == pytest.approx(1.0)
    assert URGENT_TUF.zero_time == pytest.approx(0.5)
    assert NORMAL_TUF.zero_time == pytest.approx(1.5)


def test_tuf1_inherits_alpha_beta_with_zero_ert():
    # TUF_1 (§4.2) is Eq. 1 with ERT_k = 0: core.tuf.utility(w, 0, alpha, beta), as the scheduler calls it
    def tuf1(f: TUF, w: float) -> float:
        return utility(w, 0.0, f.alpha, f.beta)

    assert tuf1(NORMAL_TUF, -0.3) == 1.0  # early: full utility
    assert tuf1(NORMAL_TUF, 0.0) == 1.0
    assert tuf1(NORMAL_TUF, 0.2) == pytest.approx(0.6)
    assert tuf1(URGENT_TUF, 0.15) == pytest.approx(1.0)


@pytest.mark.parametrize(
    "kwargs,word",
    [
        ({"ert": math.nan, "alpha": -1.0, "beta": 1.0}, "finite"),
        ({"ert": -0.1, "alpha": -1.0, "beta": 1.0}, "ERT"),
        ({"ert": 1.0, "alpha": 0.5, "beta": 1.0}, "alpha"),
        ({"ert": 1.0, "alpha": -1.0, "beta": 0.0}, "beta"),
        ({"ert": 1.0, "alpha": -1.0, "beta": -2.0}, "beta"),
    ],
)
def test_invalid_tuf_rejected_with_reason(kwargs, word):
    with pytest.raises(InvalidTUF, match=word):
        TUF(**kwargs)
