"""The per-phase account of a run (bench/phase_account.py) and the planner-run profile terms
(bench/calibrate.py), on the simulated engine's virtual clock: exact sums, no timing asserts."""

import math

import pytest

from timely_llm_ros.bench import realbench
from timely_llm_ros.bench.calibrate import calibrated, overheads, probe_tap
from timely_llm_ros.bench.phase_account import (
    LATER_PHASES,
    RESPONSE_PHASES,
    PhaseTap,
    StepSample,
    compare_phases,
    phase_table,
    price_step,
)
from timely_llm_ros.core.profile import load_profile
from timely_llm_ros.engines.sim import SimEngine


def run(policy):
    sim = SimEngine("llama3-8b-fp16-rtx4090")
    tasks = realbench.load_tasks("demo", 7, 1.0)
    tap = PhaseTap(sim.now)
    steps0 = sim.stats["steps"]
    result = realbench.drive(sim, tasks, policy, realtime=False, tap=tap)
    return sim, tap, result, sim.stats["steps"] - steps0


@pytest.mark.parametrize("policy", ["timely", "vllm"])
def test_response_phases_add_up_to_the_response_time(policy):
    sim, tap, result, steps = run(policy)
    phases = tap.tasks()
    assert {r.task_id for r in result.records} == set(phases)
    for rec in result.records:
        p = phases[rec.task_id]
        assert all(p[k] >= 0 for k in (*RESPONSE_PHASES, *LATER_PHASES)), p
        assert sum(p[k] for k in RESPONSE_PHASES) == pytest.approx(rec.response_time, abs=1e-9)
        assert p["response"] == pytest.approx(rec.response_time, abs=1e-9)
        assert p["prefill"] > 0 and p["to_robot"] >= 0.008 - 1e-12  # network latency
    acc = tap.run_account(sim.profile)
    assert acc["steps"] == steps == len(tap.steps)
    assert acc["planner_s"] == pytest.approx(0.0, abs=1e-9)  # the virtual clock moves only in steps
    assert acc["step_s"] == pytest.approx(sim.stats["busy_time"], rel=1e-9)
    assert math.isnan(acc["forward_s"])  # the simulated engine has no forward/sampling split
    if policy == "timely":  # segmented: later segments are suspended and resumed
        assert sum(p["suspended"] + p["resume"] for p in phases.values()) > 0


def test_identical_runs_compare_to_zero_and_the_table_prints_every_phase():
    _, tap_a, _, _ = run("timely")
    _, tap_b, _, _ = run("timely")
    cmp = compare_phases(tap_a.tasks(), tap_b.tasks())
    assert all(row["diff"] == 0 for row in cmp["mean"].values() if row["n"])
    cmp["run"] = {"real": tap_a.run_account(), "sim": tap_b.run_account()}
    text = phase_table("timely", cmp)
    for name in (*RESPONSE_PHASES, "response", *LATER_PHASES):
        assert name in text


def test_overheads_recover_the_terms_from_observed_steps():
    prof = load_profile("smollm2-135m-q4_1-cpu")
    kv, tok, loop = 5e-5, 0.003, 0.004
    tap = PhaseTap(lambda: 0.0)
    # prompt steps alone behind a cached prefix: forward = profile price + kv term
    for rows, front in ((16, 1200), (64, 1216), (10, 1280)):
        fwd = prof.prefill_time(rows) + kv * front
        tap.steps.append(StepSample(0.0, fwd, 1, rows, 0, front + rows, fwd, tok))
    for i in range(5):  # decode steps: one token each
        fwd = prof.decode_time(1, 1300 + i)
        tap.steps.append(StepSample(0.0, fwd + tok, 1, 0, 1, 1300 + i, fwd, tok))
    tap.busy(loop * len(tap.steps))
    got = overheads(prof, [tap])
    assert got == pytest.approx({"prefill_kv": kv, "token_overhead": tok, "step_overhead": loop})
    new = calibrated(prof, [tap])
    assert (new.prefill_kv, new.decode_r) == (pytest.approx(kv), prof.decode_r)
    # a step priced by the calibrated profile's forward-pass form: rows as one prefill pass + decode
    assert price_step(prof, tap.steps[-1]) == pytest.approx(prof.decode_time(1, 1304))


def test_chunked_steps_are_priced_like_the_simulated_engine_prices_them():
    """A real step's chunks (offset, rows, cached front) priced by price_step equal what SimEngine's
    llama.cpp mode charges for the same work (same profile, virtual clock)."""
    from timely_llm_ros.core.profile import EngineProfile
    from timely_llm_ros.engines.prompt_rule import PromptRule

    prof = EngineProfile(
        name="cpu", prefill_a=1e-5, prefill_b=0.01, prefill_c=0.1, decode_q=0.0, decode_r=0.05,
        prefill_kv=1e-4, token_overhead=0.002, context_limit=4000, kv_capacity_tokens=4000,
    )  # fmt: skip
    sim = SimEngine(prof, prompt_rule=PromptRule(chunk=16, fast=64))
    prefix = list(range(1000, 1100))
    script = sim.tokenize("mf(100);tp;")
    sim.admit(1, prefix + [7], max_tokens=5, prefix_key="p", prefix_len=100, script=script)
    while not sim.step():  # the prefix's own prefill
        pass
    sim.release(1)
    sim.admit(
        2, prefix + list(range(2000, 2040)), max_tokens=5, prefix_key="p", prefix_len=100, script=script
    )
    for offset, rows, emitted in ((0, 16, 0), (16, 16, 0), (32, 8, 1)):
        t0 = sim.now()
        sim.step()
        step = StepSample(0.0, 0.0, emitted, rows, 0, 0, chunks=[(offset, rows, 100)])
        assert sim.now() - t0 == pytest.approx(price_step(prof, step))


def test_slowed_profile_scales_every_time_term():
    prof = load_profile("smollm2-135m-q4_1-cpu")
    slow = prof.slowed(2.0)
    assert slow.prefill_time(50, 100) == pytest.approx(2 * prof.prefill_time(50, 100))
    assert slow.decode_time(3, 900) == pytest.approx(2 * prof.decode_time(3, 900))
    assert slow.swap_in_time(100) == pytest.approx(2 * prof.swap_in_time(100))


def test_nothing_measured_gives_zero_terms():
    prof = load_profile("smollm2-135m-q4_1-cpu")
    assert overheads(prof, [PhaseTap(lambda: 0.0)]) == {
        "prefill_kv": 0.0,
        "token_overhead": 0.0,
        "step_overhead": 0.0,
    }


def test_probe_tap_serves_one_task_to_the_end_of_its_plan():
    sim = SimEngine("llama3-8b-fp16-rtx4090")
    task = realbench.load_tasks("demo", 1, 1.0)[0]
    tap = probe_tap(sim, task)
    assert tap.steps and tap.first_tokens.get("calibration-probe")
    assert sum(s.emitted for s in tap.steps) >= len(sim.tokenize(task.reference_plan))
    assert "step" not in sim.__dict__  # the engine is unwrapped afterwards


def test_joint_fit_recovers_the_forward_pass_from_sweep_and_probe_steps():
    from timely_llm_ros.bench.calibrate import joint_fit
    from timely_llm_ros.bench.profile_cli import Measurements
    from timely_llm_ros.core.profile import EngineProfile

    true = EngineProfile(
        name="cpu", prefill_a=2e-6, prefill_b=0.008, prefill_c=0.12, decode_q=0.01, decode_p=3e-5,
        decode_r=0.02, prefill_kv=5e-5,
    )  # fmt: skip
    meas = Measurements()
    meas.prefill = [(n, true.prefill_time(n)) for n in (8, 16, 64, 128)]
    meas.decode = [(b * k, b, true.decode_time(b, b * k), k) for k in (64, 256) for b in (1, 4)]
    tap = PhaseTap(lambda: 0.0)
    for rows, front in ((16, 1200), (64, 1200), (10, 1250)):  # a task's chunks behind the prefix
        t = true.prefill_c + true.chunk_time(0, rows, front)
        tap.steps.append(StepSample(0.0, t + 0.001, 1, rows, 0, 0, t, 0.001, [(0, rows, front)]))
    for kv in (1210, 1300, 1400):  # its decoding steps at the task's context
        t = true.decode_time(1, kv)
        tap.steps.append(StepSample(0.0, t + 0.002, 1, 0, 1, kv, t, 0.002, [], kv))
    got = joint_fit(meas, [tap])
    for name in ("prefill_a", "prefill_b", "prefill_c", "prefill_kv", "decode_q", "decode_p", "decode_r"):
        assert got[name] == pytest.approx(getattr(true, name), rel=1e-6, abs=1e-12), name
