"""``engine: openai`` against real llama.cpp servers (``llama-server``) on 127.0.0.1, started here.

The servers are llama.cpp's own HTTP server built into the venv by bootstrap, serving the SmolLM2
GGUF the project ships (1 thread, 2 slots each: small). What is checked: the planner's segmented
generation end to end over HTTP (token-id prompts, the skill grammar, suspension = closing the stream,
resumption reusing the server's cached prompt — measured by the server's own count), placement on two
replicas, and faults: a killed server, a refusing / stream-dropping / hanging one (the fault proxy in
front of a real server), no replica left. Outcomes only (every task terminal, reasons given), never
speed: the machine is shared and slow.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from llama_server_kit import FaultProxy, LlamaServer, drive_planner

from timely_llm_ros.bench.replicas import run_realtime
from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF
from timely_llm_ros.engines.base import EngineError
from timely_llm_ros.engines.openai import OpenAIEngine
from timely_llm_ros.engines.registry import create_engine

pytestmark = pytest.mark.slow

SSET = load_skill_set("robot_arm")  # the shortest skill prompt with a grammar (~430 tokens)
TASKS = (
    "Pick up the red box and drop it on the blue box.",
    "Pick up the green box and drop it on the red box.",
    "Pick up the blue box and drop it on the green box.",
    "Pick up the yellow box and drop it on the red box.",
)


def _spec(i: int, *, arrival: float = 0.0, urgent: bool = False) -> TaskSpec:
    return TaskSpec(
        task_id=f"t{i}",
        agent_id=f"arm{i}",
        robot_type="arm",
        skill_set=SSET.name,
        instruction=TASKS[i % len(TASKS)],
        tuf=URGENT_TUF if urgent else NORMAL_TUF,
        max_tokens=48,
        arrival=arrival,
    )


def _engine(*urls: str, **kw: object) -> OpenAIEngine:
    opts: dict = dict(step_wait=0.05, retry_base=0.2, retry_max=1.0, failover_timeout=60.0)
    opts.update(kw)
    return OpenAIEngine(endpoints=list(urls), **opts)  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("llama-server")


@pytest.fixture(scope="module")
def server(logs: Path):
    s = LlamaServer(logs)
    yield s
    s.stop()


def test_server_facts_and_registry(server: LlamaServer):
    eng = create_engine("openai", base_url=server.url + "/v1")
    try:
        ep = eng.replicas[0].engine
        assert ep.kind == "llamacpp" and ep.max_running == 2 and eng.info.context_limit == 2048
        assert eng.info.eos_id >= 0 and ep._template is not None  # SmolLM2 is a ChatML model
        assert eng.tokenize("pick up") == ep.tokenize("pick up") != []
        with pytest.raises(EngineError, match="does not serve model"):
            OpenAIEngine(server.url, model="no-such-model")
    finally:
        eng.close()


def test_segmented_plans_over_http_reuse_the_servers_cached_prompt(server: LlamaServer):
    engine = _engine(server.url)
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0)
    try:
        # as many generations as the server has slots: each keeps its slot (and KV) while suspended
        recs = [planner.submit(_spec(i, urgent=i == 0)) for i in range(2)]
        drive_planner(planner, sent)
        assert [r.state for r in recs] == [ev.COMPLETED] * 2, [(r.state, r.reason) for r in recs]
        for r in recs:
            SSET.parse_segments([s.text for s in r.segments])  # the grammar kept every plan valid
        assert sum(r.n_suspensions for r in recs) > 0  # suspended (stream closed) and resumed
        log = engine.replicas[0].engine.resume_log
        counted = [x for x in log if x.cached_tokens is not None]
        assert counted and len(counted) == len(log)
        # every resumption found its prompt (skill prompt + task + plan so far) in the server's cache:
        # at most one KV block (16 tokens) recomputed, on llama.cpp in practice 1 token
        bad = [x for x in counted if x.prompt_tokens - x.cached_tokens > 16]
        assert not bad, (bad, engine.replicas[0].engine.stats)
        assert engine.speed() and engine.running() == 0
    finally:
        engine.close()


def test_two_replicas_and_a_server_killed_mid_run_loses_no_task(logs: Path):
    a, b = LlamaServer(logs), LlamaServer(logs)
    engine = _engine(a.url, b.url)
    killed: list[float] = []
    try:
        engine.warm_prefix(engine.tokenize(SSET.prompt), SSET.name)

        def kill_b(elapsed: float, planner: PlannerCore) -> None:
            rb = engine.replicas[1]
            if not killed and rb.engine.running() and rb.engine.stats["tokens"] > 0:
                b.kill()  # mid-stream: generations on b must move to a
                killed.append(elapsed)

        tasks = [_spec(i, arrival=0.2 * i, urgent=i % 3 == 0) for i in range(6)]
        planner = run_realtime(tasks, engine, "timely@b4", exec_mode="min", timeout=600, hook=kill_b)
        recs = planner.records
        assert killed, "server b never ran a generation: placement did not use both replicas"
        assert len(recs) == len(tasks)
        assert all(r.state in (ev.COMPLETED, ev.FAILED) for r in recs), [(r.task_id, r.state) for r in recs]
        assert all(r.reason for r in recs if r.state == ev.FAILED)
        assert not any(r.reason.startswith("engine error") for r in recs), [(r.state, r.reason) for r in recs]
        assert any(r.state == ev.COMPLETED for r in recs)
        status = {s["name"]: s for s in engine.status()}
        assert status[b.url]["healthy"] is False and status[b.url]["error"]
        assert engine.stats["failovers"] >= 1
        assert any(p.kind == "failover" and p.replica == a.url for p in engine.placements)
    finally:
        engine.close()
        a.stop()
        b.stop()


@pytest.mark.parametrize("mode", ["refuse", "drop", "hang"])
def test_faulty_replica_is_bypassed_then_comes_back(server: LlamaServer, mode: str):
    proxy = FaultProxy(server.url, mode=mode, after=3)
    # the proxy is listed first: with equal estimates the first replica gets the first generation
    # hang: the stream of the faulty replica is given up after 20 s without a token (the real server,
    # prompt cached, answers well within that even on a loaded machine)
    timeouts = dict(first_token_timeout=20.0, stall_timeout=20.0) if mode == "hang" else {}
    engine = _engine(proxy.url, server.url, **timeouts)
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0)
    try:
        rec = planner.submit(_spec(1))
        drive_planner(planner, sent)
        assert rec.state == ev.COMPLETED, rec.reason
        assert proxy.faults >= 1
        assert engine.placements[0].replica == proxy.url  # first placed on the faulty one ...
        assert any(p.kind == "failover" and p.replica == server.url for p in engine.placements)  # ... moved
        assert [name for _, name, _ in engine.down_log] and engine.down_log[0][1] == proxy.url
        proxy.mode = "pass"  # the replica recovers: probed with backoff, then used again
        deadline = time.monotonic() + 60
        while not engine.replicas[0].healthy and time.monotonic() < deadline:
            engine.step()
            time.sleep(0.05)
        assert engine.replicas[0].healthy
    finally:
        engine.close()
        proxy.stop()


def test_no_replica_left_fails_the_task_with_a_reason_and_never_hangs(logs: Path):
    s = LlamaServer(logs)
    engine = _engine(s.url, failover_timeout=2.0)
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0)
    try:
        first = planner.submit(_spec(1))  # tokenized while the server is up
        s.kill()
        with pytest.raises(TaskRejected, match="cannot tokenize"):
            planner.submit(_spec(2))  # a new prompt cannot be tokenized: rejected with the reason
        drive_planner(planner, sent, timeout=120)
        assert first.state == ev.FAILED and "no healthy replica" in first.reason  # waited failover_timeout
        assert "no healthy replica" in next(iter(engine.failures.values()))
        assert [r.state for r in planner.records] == [ev.FAILED, ev.REJECTED]
    finally:
        engine.close()
        s.stop()


def test_a_request_the_server_rejects_fails_that_task_only(server: LlamaServer):
    engine = _engine(server.url, grammar={SSET.name: "root ::= this is not gbnf ("})
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0)
    try:
        rec = planner.submit(_spec(3))
        drive_planner(planner, sent, timeout=300)
        assert rec.state == ev.FAILED and rec.reason
        assert "grammar" in engine.failures[next(iter(engine.failures))]
        assert engine.replicas[0].healthy  # the server is fine; the request was wrong
    finally:
        engine.close()
