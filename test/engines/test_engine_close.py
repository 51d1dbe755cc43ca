"""``Engine.close()`` is part of the port: every engine implements it, a second call does nothing,
and whoever releases an engine calls it without probing for it."""

from __future__ import annotations

import pytest

from timely_llm_ros.core.engine import Engine
from timely_llm_ros.engines.registry import available_engines, engine_class
from timely_llm_ros.engines.replicas import ReplicaSetEngine
from timely_llm_ros.engines.sim import SimEngine


def test_close_is_on_the_port_and_every_registered_engine_has_it():
    assert "close" in Engine.__abstractmethods__  # an engine without close() cannot be built
    for name in available_engines():
        cls = engine_class(name)
        assert "close" not in cls.__abstractmethods__, name


def test_an_engine_without_close_is_refused():
    class NoClose(Engine):
        def tokenize(self, text):  # pragma: no cover - never built
            return []

    with pytest.raises(TypeError, match="close"):
        NoClose()


def test_sim_close_forgets_generations_and_is_idempotent():
    eng = SimEngine()
    ids = eng.tokenize("takeoff(); land();")
    eng.admit(1, ids, max_tokens=4, script=ids)
    eng.step()
    assert eng.running() == 1 and eng.memory().running > 0
    eng.close()
    assert eng.running() == 0 and eng.memory().running == 0
    eng.close()  # idempotent


def test_replica_set_closes_every_replica_once_per_call():
    reps = [SimEngine(), SimEngine()]
    for i, r in enumerate(reps):
        ids = r.tokenize("land();")
        r.admit(i, ids, max_tokens=3, script=ids)
    eng = ReplicaSetEngine(reps)
    eng.close()
    eng.close()
    assert all(r.running() == 0 for r in reps)
