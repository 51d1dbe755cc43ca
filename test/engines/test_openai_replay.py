"""Replay mode over HTTP: ``engine: openai`` against a real ``llama-server`` on 127.0.0.1.

The literal goes in llama-server's ``grammar`` field; every resumption (a new request) carries the
rest of the literal after the text delivered so far, and a failover restarts the interrupted
submission at its segment boundary with the literal positioned there. The plans replayed are not the
ones the model writes for these instructions (objects swapped), so a plan equal to its reference is
the constraint's doing.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_server_kit import FaultProxy, LlamaServer, drive_planner

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF
from timely_llm_ros.engines.openai import OpenAIEngine

pytestmark = pytest.mark.slow

SSET = load_skill_set("robot_arm")  # the shortest skill prompt with a grammar (~430 tokens)
REPLAY = PlannerOptions(plan_source="reference")
PLANS = (
    "sc('blue_box'); gt('blue_box'); pi('blue_box'); sc('red_box'); gt('red_box'); dr();",
    # no final ';': the last segment ends the literal, so its resumption's rest is empty (only the end)
    "sc('fruit_basket'); gt('fruit_basket'); pi('fruit_basket'); sc('apple'); gt('apple'); dr()",
)


def _spec(i: int, plan: str | None, urgent: bool = False) -> TaskSpec:
    return TaskSpec(
        task_id=f"t{i}",
        agent_id=f"arm{i}",
        robot_type="arm",
        skill_set=SSET.name,
        instruction=(
            "Pick up the red box and drop it on the blue box."
            if i % 2 == 0
            else "Pick up the apple and drop it in the fruit basket."
        ),
        tuf=URGENT_TUF if urgent else NORMAL_TUF,
        max_tokens=48,
        reference_plan=plan,
    )


def _assert_replayed(rec, plan: str) -> None:
    got = "".join(s.text for s in rec.segments)  # a final tail of separators is not sent: it does nothing
    assert plan.startswith(got) and not plan[len(got) :].replace(";", "").strip(), (got, plan)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory):
    s = LlamaServer(tmp_path_factory.mktemp("llama-server-replay"))
    yield s
    s.stop()


def test_replayed_plans_over_http_resume_into_the_rest_of_their_literal(server: LlamaServer):
    engine = OpenAIEngine(server.url, step_wait=0.05)
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0, options=REPLAY)
    try:
        recs = [planner.submit(_spec(i, PLANS[i], urgent=i == 0)) for i in range(2)]
        recs.append(planner.submit(_spec(2, None)))  # no reference plan: the model's own, skill grammar
        drive_planner(planner, sent)
        assert [r.state for r in recs] == [ev.COMPLETED] * 3, [(r.state, r.reason) for r in recs]
        for i in range(2):
            _assert_replayed(recs[i], PLANS[i])
        assert sum(r.n_suspensions for r in recs[:2]) >= 4  # every resumption was a new request
        SSET.parse_segments([s.text for s in recs[2].segments])
    finally:
        engine.close()


def test_a_replay_survives_a_failover_mid_stream(server: LlamaServer, tmp_path: Path):
    proxy = FaultProxy(server.url, mode="drop", after=3)  # drops the first stream after 3 chunks
    engine = OpenAIEngine(endpoints=[proxy.url, server.url], step_wait=0.05, retry_base=0.2, retry_max=1.0)
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0, options=REPLAY)
    try:
        rec = planner.submit(_spec(0, PLANS[0]))
        drive_planner(planner, sent)
        assert rec.state == ev.COMPLETED, rec.reason
        assert proxy.faults >= 1
        assert any(p.kind == "failover" and p.replica == server.url for p in engine.placements)
        _assert_replayed(rec, PLANS[0])
    finally:
        engine.close()
        proxy.stop()
