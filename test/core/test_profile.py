"""EngineProfile: the shipped Table-1 profile's anchors, YAML round trip, least-squares fits, errors."""

import numpy as np
import pytest

from timely_llm_ros.core.profile import (
    EngineProfile,
    ProfileError,
    available_profiles,
    fit_decode,
    fit_prefill,
    load_profile,
)


def test_shipped_profile_reproduces_paper_anchors():
    p = load_profile("llama3-8b-fp16-rtx4090")
    assert "llama3-8b-fp16-rtx4090" in available_profiles()
    assert p.prefill_time(2884) == pytest.approx(0.32845, abs=2e-4)  # Table 1, token 0
    assert p.prefill_time(1300) == pytest.approx(0.13331, abs=2e-4)  # §4.1 re-prefill of 170.35 MB
    assert p.decode_time(1, 2884) == pytest.approx(0.0215, abs=1e-4)  # Table 1 / pitfalls reference
    assert p.decode_time(2, 2 * 2884) - p.decode_time(1, 2884) == pytest.approx(0.0008 + 2884 * 1.3e-7)
    assert p.swap_in_time(1300) == pytest.approx(0.0095, abs=1e-4)  # §4.1 host -> GPU restore
    assert p.kv_bytes_per_token == 32 * 8 * 128 * 2 * 2
    assert p.context_limit == 8192


def test_yaml_round_trip(tmp_path):
    p = load_profile("llama3-8b-fp16-rtx4090")
    f = tmp_path / "x.yaml"
    p.save(f)
    assert load_profile(f) == p


def test_fit_prefill_and_decode_recover_coefficients():
    n = np.array([100, 400, 900, 1600, 2500, 3600], dtype=float)
    t = 2e-8 * n * n + 7e-5 * n + 0.02
    a, b, c = fit_prefill(list(n), list(t))
    assert (a, b, c) == pytest.approx((2e-8, 7e-5, 0.02), rel=1e-6)
    kv = [1000, 2000, 5000, 8000, 3000, 12000]
    bs = [1, 2, 4, 8, 1, 6]
    tt = [0.02 + 1.3e-7 * k + 0.0008 * b for k, b in zip(kv, bs, strict=True)]
    assert fit_decode(kv, bs, tt) == pytest.approx((0.02, 1.3e-7, 0.0008), rel=1e-6)


def test_fit_errors_say_why():
    with pytest.raises(ProfileError, match="at least 3"):
        fit_prefill([1, 2], [0.1, 0.2])
    with pytest.raises(ProfileError, match="do not determine"):
        fit_decode([100, 100, 100], [1, 1, 1], [0.1, 0.1, 0.1])
    with pytest.raises(ProfileError, match="same length"):
        fit_prefill([1, 2, 3], [0.1, 0.2])


@pytest.mark.parametrize(
    "field,value,word",
    [
        ("decode_q", float("nan"), "finite"),
        ("prefill_b", -1.0, ">= 0"),
        ("kv_capacity_tokens", 0, "> 0"),
        ("eviction", "random", "eviction"),
    ],
)
def test_bad_profile_values(field, value, word):
    with pytest.raises(ProfileError, match=word):
        EngineProfile(name="x", **{field: value})


def test_unknown_profile_and_fields(tmp_path):
    with pytest.raises(ProfileError, match="available"):
        load_profile("no-such-profile")
    with pytest.raises(ProfileError, match=r"unknown field\(s\) .speed.; known: context_limit"):
        EngineProfile.from_dict({"name": "x", "speed": 3})
