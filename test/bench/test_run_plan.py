"""The bench run plan: which (workload, policy) runs a command line means, built without running any."""

from __future__ import annotations

import pytest

from timely_llm_ros.bench import cli
from timely_llm_ros.bench import figure_registry as fr
from timely_llm_ros.bench.run_plan import RunPlan
from timely_llm_ros.bench.runner import Job


def _plan(*argv: str) -> RunPlan:
    return RunPlan.from_args(cli.build_parser().parse_args(list(argv)))


def test_default_is_wid1_under_the_default_policies() -> None:
    plan = _plan("-p", "timely,vllm")
    assert plan.jobs == [Job("wid1", "timely"), Job("wid1", "vllm")]
    assert plan.explicit == ["wid1"] and plan.batches == [None] and not plan.figures


def test_batches_and_sweep_multiply_and_shared_runs_happen_once() -> None:
    plan = _plan("-w", "wid1", "-p", "timely,vllm", "--max-batch", "4,8", "--sweep", "rate=0.1,0.2")
    assert plan.explicit == ["wid1:rate=0.1", "wid1:rate=0.2"]
    assert plan.sweeps == {"wid1": [("0.1", "wid1:rate=0.1"), ("0.2", "wid1:rate=0.2")]}
    assert len(plan.jobs) == 2 * 2 * 2
    assert Job("wid1:rate=0.2", "vllm@b8") in plan.jobs
    twice = _plan("-w", "wid2", "-p", "timely,vllm", "--figure", "8")  # Figure 8 also runs wid2
    assert len(twice.jobs) == len(set(twice.jobs))
    assert twice.workloads() == ["wid2", "wid1"]


def test_paper_suite_asks_for_every_figure_and_the_overhead() -> None:
    plan = _plan("--suite", "paper")
    assert plan.figures == ["5", "6", "7", "8", "9"] and plan.overhead and not plan.explicit
    wanted = [name for name, (asked, _draw) in fr.REGISTRY.items() if asked(plan)]
    assert wanted == ["5", "6", "7", "8", "9"]
    # the claims table and its runs: the paper's baselines as its code ran them, one admission per step
    assert plan.claims and Job("wid2", "edf-seg@a1") in plan.jobs and Job("wid1", "fcfs-requeue") in plan.jobs
    assert not _plan("--figure", "5").claims


@pytest.mark.parametrize(
    "argv, message",
    [
        (("--max-batch", "0"), "--max-batch"),
        (("--sweep", "rate"), "--sweep"),
        (("--sweep", "traces=1,2"), "traces cannot be swept"),
        (("-p", " , "), "no policy given"),
    ],
)
def test_bad_values_are_named(argv: tuple[str, ...], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        _plan(*argv)
