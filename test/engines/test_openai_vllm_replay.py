"""Replay mode against vLLM's own OpenAI server (marker ``vllm``; the server fixture of
test_openai_vllm.py, started here on 127.0.0.1): the literal goes in ``structured_outputs``
(``grammar``), every resumption is a new request constrained to the rest of the literal, and the
plans replayed are not the ones the model writes for these instructions (objects swapped).
"""

from __future__ import annotations

import pytest
from llama_server_kit import drive_planner
from test_openai_replay import PLANS, REPLAY, _assert_replayed, _spec
from test_openai_vllm import vllm_server  # noqa: F401 (the module-scoped server fixture)

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.engines.openai import OpenAIEngine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_vllm_server_replays_the_reference_plans(vllm_server: str):  # noqa: F811
    engine = OpenAIEngine(vllm_server, model="smollm2", step_wait=0.05)
    assert engine.replicas[0].engine.kind == "vllm"
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0, options=REPLAY)
    try:
        recs = [planner.submit(_spec(i, PLANS[i])) for i in range(2)]
        drive_planner(planner, sent, timeout=1200)
        assert [r.state for r in recs] == [ev.COMPLETED] * 2, [(r.state, r.reason) for r in recs]
        for i in range(2):
            _assert_replayed(recs[i], PLANS[i])
        assert sum(r.n_suspensions for r in recs) >= 4  # resumed into the rest of the literal
    finally:
        engine.close()
