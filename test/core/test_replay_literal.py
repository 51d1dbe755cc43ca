"""Replay mode's engine-independent part (core/options/replay.py) and its wiring through the planner.

The engine here is the simulated one turned into a *generating* engine that obeys the ``plan``
constraint (it emits the literal it is handed, or a fixed other plan without one): what a real
engine does under the literal grammar, on the virtual clock. The real engines are checked in
test/engines/ (llama.cpp, vLLM, llama-server) and over ROS in test/nodes/.
"""

from __future__ import annotations

import dataclasses
import re

import pytest

from timely_llm_ros.bench import realbench
from timely_llm_ros.core.engine import EngineError, check_replays, plan_kwargs
from timely_llm_ros.core.grammar import Gbnf
from timely_llm_ros.core.intake import Intake
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.options.replay import (
    PlanLiteral,
    ReplayError,
    gbnf_literal,
    reference_literal,
    regex_literal,
    replay_budget,
    token_counts,
)
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.task import TaskRejected
from timely_llm_ros.engines.sim import SimEngine

PROFILE = "llama3-8b-fp16-rtx4090"
OWN_PLAN = "tp();"  # what the "model" writes when nothing holds it to a literal
TRICKY = "?iv('a \"b\"')==True{l('x\\\\y');->True};\tl('ü ∑ [1-2] (a|b) $.*+?/');->False\n"


class ObedientSim(SimEngine):
    """A generating engine that writes the ``plan`` it is given (else :data:`OWN_PLAN`)."""

    needs_script = False
    replays_plans = True

    def __init__(self) -> None:
        super().__init__(PROFILE)
        self.admitted: dict[int, tuple[str | None, int]] = {}

    def admit(self, gen_id, prompt_ids, *, max_tokens, prefix_key=None, prefix_len=0, plan=None):
        self.admitted[gen_id] = (plan, max_tokens)
        super().admit(
            gen_id,
            prompt_ids,
            max_tokens=max_tokens,
            prefix_key=prefix_key,
            prefix_len=prefix_len,
            script=self.tokenize(plan if plan is not None else OWN_PLAN),
        )


class Stubborn(ObedientSim):
    replays_plans = False


@pytest.mark.parametrize("text", ["mf(100);tc(90);", TRICKY, "", "héllo"])
def test_gbnf_literal_derives_exactly_the_text(text: str) -> None:
    g = Gbnf(gbnf_literal(text))
    assert g.matches(text)
    assert not g.matches(text + "x") and not g.matches(text[:-1] if text else "x")


def test_regex_literal_matches_exactly_the_text() -> None:
    rx = regex_literal(TRICKY)
    assert re.fullmatch(rx, TRICKY)
    assert not re.fullmatch(rx, TRICKY.replace("|", "x"))
    assert " " in rx and "\\ " not in rx  # spaces are not escaped (not every regex dialect takes '\ ')


def test_plan_literal_tracks_what_was_written_and_refuses_a_departure() -> None:
    lit = PlanLiteral("mf(100);tc(90);")
    lit.feed("mf(")
    lit.feed("100);")
    assert lit.rest() == "tc(90);" and not lit.complete
    with pytest.raises(ReplayError, match="character 8"):
        lit.feed("tc(45")
    lit.feed("tc(90);")
    assert lit.complete and lit.rest() == ""
    assert lit.at(3).rest() == "100);tc(90);"
    with pytest.raises(ReplayError):
        lit.at(99)


def test_reference_literal_budget_and_token_counts() -> None:
    assert reference_literal(None) is None and reference_literal("") is None
    assert reference_literal("d(3);mf(50);", "d(3);") == "mf(50);"
    assert reference_literal("d(3);", "d(3);") is None  # nothing left to write
    with pytest.raises(ReplayError):
        reference_literal("d(3);mf(50);", "tp();")
    assert replay_budget("ab", 256) == 256 and replay_budget("x" * 300, 256) == 301
    assert replay_budget("ü", 1) == 3  # two UTF-8 bytes, each possibly one token, then the end
    assert token_counts(12, 10) == {"replayed_tokens": 12, "own_tokens": 10, "extra_tokens": 2, "ratio": 1.2}


def test_plan_source_is_validated() -> None:
    assert PlannerOptions.from_mapping({"plan_source": "reference"}).plan_source == "reference"
    with pytest.raises(ValueError, match="plan_source must be one of model, reference"):
        PlannerOptions(plan_source="trace")


def test_an_engine_that_cannot_replay_is_refused_with_the_reason() -> None:
    with pytest.raises(EngineError, match="cannot replay reference plans"):
        PlannerCore(Stubborn(), "timely", options=PlannerOptions(plan_source="reference"))
    PlannerCore(Stubborn(), "timely")  # the default plan source needs nothing of the engine
    sim = SimEngine(PROFILE)  # scripted: its script already is the reference plan
    check_replays(sim)
    assert plan_kwargs(sim, "tp();") == {} and plan_kwargs(ObedientSim(), None) == {}


def test_replayed_tasks_write_their_reference_and_the_others_keep_their_own() -> None:
    tasks = realbench.load_tasks("wid2", 8, 1.0)
    assert all(t.reference_plan for t in tasks)
    tasks[3] = dataclasses.replace(tasks[3], reference_plan=None)  # e.g. a user's own instruction
    engine = ObedientSim()
    run = realbench.drive(
        engine, tasks, "timely", realtime=False, options=PlannerOptions(plan_source="reference")
    )
    assert all(r.state == "COMPLETED" for r in run.records)
    for t in tasks:
        assert run.plans[t.task_id] == (t.reference_plan or OWN_PLAN)
        assert "".join(run.pieces[t.task_id]) == run.plans[t.task_id]
        assert run.tokens[t.task_id] == len(run.pieces[t.task_id]) == run.own_tokens[t.task_id]
    literals = sorted(p or "" for p, _ in engine.admitted.values())
    assert literals == sorted(t.reference_plan or "" for t in tasks)
    # the default source hands no plan to the engine: the model writes its own
    engine = ObedientSim()
    run = realbench.drive(engine, tasks[:3], "timely", realtime=False)
    assert {p for p, _ in engine.admitted.values()} == {None}
    assert set(run.plans.values()) == {OWN_PLAN}


def test_intake_replays_the_rest_after_a_journal_seed_and_widens_the_budget() -> None:
    engine = ObedientSim()
    intake = Intake(engine, replay=True)
    task = realbench.load_tasks("wid2", 1, 1.0)[0]
    plan = task.reference_plan
    cut = plan.index(";") + 1
    prep = intake.prepare(dataclasses.replace(task, max_tokens=4), seed=plan[:cut])
    assert prep.plan == plan[cut:]
    assert prep.max_tokens == len(plan[cut:].encode()) + 1
    with pytest.raises(TaskRejected, match="cannot resume"):
        intake.prepare(task, seed="tp();")
    assert Intake(engine).prepare(task).plan is None  # not in replay mode
