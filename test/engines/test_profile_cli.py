"""``timely-llm profile``: the sweeps and the least-squares fit recover a known profile exactly when
the engine is the simulated one (its step times ARE the profile), and the written YAML loads."""

from __future__ import annotations

import argparse

import numpy as np
import pytest

from timely_llm_ros.bench import profile_cli
from timely_llm_ros.core.profile import EngineProfile, ProfileError, load_profile
from timely_llm_ros.engines.sim import SimEngine

TRUE = EngineProfile(
    name="truth",
    prefill_a=2e-8,
    prefill_b=7e-5,
    prefill_c=0.02,
    decode_q=0.02,
    decode_p=1.3e-7,
    decode_r=8e-4,
)


def test_sweeps_on_the_simulated_engine_recover_its_coefficients():
    meas = profile_cli.measure(SimEngine(TRUE), profile_cli.SweepPlan.quick())
    assert {m[1] for m in meas.decode} == {1, 4} and len(meas.prefill) == 3
    coef = profile_cli.fit(meas)
    for k in ("prefill_a", "prefill_b", "prefill_c", "decode_q", "decode_p", "decode_r"):
        assert coef[k] == pytest.approx(getattr(TRUE, k), rel=1e-6), k
    assert coef["clamped"] == [] and coef["decode_fit"]["r2"] > 0.999999


def test_negative_coefficients_are_refitted_at_zero():
    n = np.array([10.0, 20, 40, 80])
    t = 1e-4 * n + 0.01 - 1e-9 * n * n  # a concave curve: the quadratic term fits negative
    meas = profile_cli.Measurements(
        prefill=list(zip(n.tolist(), t.tolist(), strict=True)),
        decode=[(100, 1, 0.02), (300, 1, 0.025), (200, 2, 0.03), (800, 4, 0.06)],
    )
    coef = profile_cli.fit(meas)
    assert coef["prefill_a"] == 0.0 and "prefill_a" in coef["clamped"]
    assert coef["prefill_b"] > 0 and coef["prefill_c"] > 0


def test_too_few_samples_is_a_clear_error():
    with pytest.raises(ProfileError, match="too few measurements"):
        profile_cli.fit(profile_cli.Measurements(prefill=[(1, 0.1)], decode=[]))


def test_cli_writes_a_profile_that_loads(tmp_path, capsys):
    parser = argparse.ArgumentParser()
    profile_cli.add_arguments(parser)
    out = tmp_path / "p.yaml"
    args = parser.parse_args(
        [
            "--engine",
            "sim",
            "--quick",
            "--param",
            "profile=llama3-8b-fp16-rtx4090",
            "--name",
            "sim-check",
            "--out",
            str(out),
            "--raw",
            str(tmp_path / "raw.json"),
        ]
    )
    assert profile_cli.run(args) == 0
    prof = load_profile(out)
    ref = load_profile("llama3-8b-fp16-rtx4090")
    assert prof.name == "sim-check" and prof.decode_r == pytest.approx(ref.decode_r, rel=1e-6)
    assert prof.prefill_b == pytest.approx(ref.prefill_b, rel=1e-6)
    text = out.read_text()
    assert text.startswith("# Engine profile measured with:") and "R²" in text
    assert (tmp_path / "raw.json").is_file() and "wrote" in capsys.readouterr().out


def test_bad_sweep_arguments_are_rejected():
    parser = argparse.ArgumentParser()
    profile_cli.add_arguments(parser)
    with pytest.raises(SystemExit):
        parser.parse_args(["--engine", "sim", "--batches", "1,0"])
