"""``engine: openai`` — the inference servers a team already runs (vLLM, llama.cpp's llama-server),
over their OpenAI-compatible completions API, one or several replicas behind one planner.

Planner parameters (``engine_options``, YAML)::

    {endpoints: [http://127.0.0.1:8080, http://127.0.0.1:8081], model: smollm2, server: auto}
    {base_url: http://gpu-box:8000/v1, model: meta-llama/Llama-3.1-8B-Instruct, api_key_env: VLLM_KEY}

Every endpoint is an :class:`~.openai_endpoint.OpenAIEndpointEngine` (protocol mapping, server kinds
and which scheduler estimates are approximate: see there); the set of them is a
:class:`~.replicas.ReplicaSetEngine` (placement, failover, health probes). One endpoint is a set of
one, so the fault handling is the same: a server that goes away is retried with backoff while its
generations wait up to ``failover_timeout`` seconds, then fail with the reason.

At start-up every endpoint is asked what it is (``/v1/models``, ``/props``, ``/version``); an endpoint
that does not answer starts *down* and is probed like a failed one; if none answers, the engine
cannot be created (the planner node reports that and exits). A server that is not one of the known
kinds is refused with the reason (see :func:`~.openai_protocol.detect_kind`), never driven blindly.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.openai_config import OpenAIConfig
from timely_llm_ros.engines.openai_endpoint import OpenAIEndpointEngine
from timely_llm_ros.engines.openai_http import HttpFailure
from timely_llm_ros.engines.replicas import ReplicaSetEngine


class OpenAIEngine(ReplicaSetEngine):
    """The ``openai`` engine: ``base_url`` (one server) or ``endpoints`` (replicas of one model).

    The options are the fields of :class:`~.openai_config.OpenAIConfig`, given as keyword arguments
    (what the registry and the planner's ``engine_options`` pass) or as ``config`` (keyword
    arguments override it)."""

    def __init__(
        self,
        base_url: str | None = None,
        model: str | None = None,
        *,
        endpoints: list[str] | None = None,
        config: OpenAIConfig | None = None,
        clock: Callable[[], float] = time.monotonic,
        **options: object,
    ) -> None:
        cfg = OpenAIConfig.from_options(options, config).validate()
        self.config = cfg
        urls = list(endpoints or []) + ([base_url] if base_url else [])
        if not urls:
            raise EngineError("engine 'openai' needs base_url or endpoints (a list of server URLs)")
        if len(set(urls)) != len(urls):
            raise EngineError(f"endpoints must be distinct, got {urls}")
        eps = [OpenAIEndpointEngine(u, model, config=cfg, connect=False, clock=clock) for u in urls]
        down: list[tuple[int, str]] = []
        for i, ep in enumerate(eps):
            try:
                ep.connect()
            except HttpFailure as exc:
                down.append((i, str(exc)))
        if len(down) == len(eps):
            raise EngineError("no endpoint answered: " + "; ".join(msg for _, msg in down))
        models = {ep.model for ep in eps if ep.connected}
        if len(models) > 1:
            raise EngineError(
                f"the endpoints serve different models {sorted(map(str, models))}: replicas "
                "must serve the same model (pass model: to pick one)"
            )
        for ep in eps:  # a replica that was down at start serves the model the others serve
            if ep.model is None:
                ep.model = next(iter(models))
        super().__init__(
            eps,
            names=urls,
            step_wait=cfg.step_wait,
            retry_base=cfg.retry_base,
            retry_max=cfg.retry_max,
            failover_timeout=cfg.failover_timeout,
            placement_tokens=cfg.placement_tokens,
            clock=clock,
        )
        for i, msg in down:
            self._mark_down(self.replicas[i], msg)
        for ep in eps:
            ep._external_wake = self._wake.set
