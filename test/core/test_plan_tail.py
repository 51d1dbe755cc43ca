"""A plan's call-less tail with text (a loop's closing ``}``) is a real final segment.

Found by the safety audit: for ``2{mf(50);tc(90)}`` the stop checker cuts ``2{mf(50)`` and
``;tc(90)``; the remaining ``}`` holds no skill call, and the planner sent a text-less closing marker
instead of it, so the robot (whose MiniSpec interpreter runs a loop's replays at its ``}``) flew the
loop once instead of twice, and the task COMPLETED before the replays could have run. Here on the
simulated engine's virtual clock: the tail is dispatched with its text, timed with the replays,
waits for its own feedback; a tail that is only whitespace still ends with the closing marker.
"""

from __future__ import annotations

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.exectime import load_exec_time_model
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.sim.simulator import SimConfig, simulate

PROFILE = EngineProfile(name="t", prefill_b=0.0001, prefill_c=0.01, decode_q=0.02, decode_r=0.0)
LOOP = "2{mf(50);tc(90)}"


def spec(plan: str, task_id: str = "loop") -> TaskSpec:
    return TaskSpec(
        task_id=task_id,
        agent_id="drone_1",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] fly a square corner twice",
        tuf=NORMAL_TUF,
        reference_plan=plan,
    )


def one_pass() -> float:
    """Minimum time of one pass of the loop body (the execution-time model's drone table)."""
    model, sset = load_exec_time_model(), load_skill_set("tello_minispec")
    return model.estimate("drone", sset.parse("mf(50);tc(90)")).minimum


def test_the_checker_leaves_the_closing_brace_as_a_tail():
    assert load_skill_set("tello_minispec").split(LOOP) == ["2{mf(50)", ";tc(90)", "}"]


def test_a_loop_closing_tail_is_dispatched_timed_with_its_replays_and_needs_feedback():
    sent = []
    p = PlannerCore(SimEngine(PROFILE), "timely", dispatch=sent.append)
    rec = p.submit(spec(LOOP))
    while p.has_work():
        p.step()
    assert [d.text for d in sent] == ["2{mf(50)", ";tc(90)", "}"]
    tail = sent[-1]
    assert tail.final and not tail.calls and not tail.closing_marker  # text: a real segment
    assert [d.final for d in sent[:-1]] == [False, False]
    assert tail.min_exec == pytest.approx(one_pass())  # the second pass runs at the '}'
    assert len(rec.segments) == 3 and rec.segments[2].text == "}"
    t = p.clock()
    for seg in (0, 1):
        assert p.feedback("loop", seg, ev.STARTED, t) is None
        assert p.feedback("loop", seg, ev.DONE, t + 1) is None
    assert rec.state == ev.EXECUTING  # the replays still run: not COMPLETED before the tail's DONE
    assert p.feedback("loop", 2, ev.STARTED, t + 2) is None
    assert p.feedback("loop", 2, ev.DONE, t + 3) is None
    assert rec.state == ev.COMPLETED and rec.completion_time_abs == t + 3


def test_a_loop_closing_tail_runs_on_the_virtual_clock_and_the_task_ends_after_both_passes():
    res = simulate([spec(LOOP)], SimConfig(exec_mode="min", network_latency=0.0))
    (rec,) = res.records
    assert rec.state == ev.COMPLETED
    assert [s.text for s in rec.segments] == ["2{mf(50)", ";tc(90)", "}"]
    assert rec.segments[2].final
    ends = [e for e in res.events if e.kind == ev.EXEC_END]
    assert [e.seg for e in ends] == [0, 1, 2]
    first_start = rec.segments[0].exec_start
    # two passes of the body: the task cannot end before both ran (the old marker ended it after one)
    assert rec.completion_time_abs - first_start == pytest.approx(2 * one_pass())


@pytest.mark.parametrize(
    "plan,texts",
    [
        ("mu(40);tp;", ["mu(40)", ";tp;", ""]),  # nothing left: the text-less closing marker
        ("mu(40);tp;\n  ", ["mu(40)", ";tp;", ""]),  # only whitespace left: the closing marker too
        ("tp();", ["tp()", ""]),  # a lone ';' executes nothing: the closing marker
        ("?s('cat')==True{g('cat')}->False", ["?s('cat')==True{", "g('cat')", "}->False"]),
    ],
)
def test_only_a_tail_of_whitespace_and_separators_becomes_the_closing_marker(plan, texts):
    sent = []
    p = PlannerCore(SimEngine(PROFILE), "timely", dispatch=sent.append)
    p.submit(spec(plan))
    while p.has_work():
        p.step()
    assert [d.text.strip() for d in sent] == texts
    assert sent[-1].final and sent[-1].closing_marker == (texts[-1] == "")


def test_a_plan_of_only_call_less_text_still_fails_with_no_executable_skill():
    sent = []
    p = PlannerCore(SimEngine(PROFILE), "timely", dispatch=sent.append)
    rec = p.submit(spec("3{}"))
    while p.has_work():
        p.step()
    assert sent == [] and rec.state == ev.FAILED and "no executable skill" in rec.reason
