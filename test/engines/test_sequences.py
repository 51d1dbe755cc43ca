"""The sequence table shared by the simulated and llama.cpp engines: states, checks, eviction order."""

from __future__ import annotations

import pytest

from timely_llm_ros.core.engine import Context, EngineError
from timely_llm_ros.core.options.kv_policy import KVOptions
from timely_llm_ros.engines.sequences import (
    FINISHED,
    HOST,
    PENDING_RESUME,
    RUNNING,
    SUSPENDED,
    Sequence,
    SequenceTable,
)


def _table(n: int) -> SequenceTable[Sequence]:
    table: SequenceTable[Sequence] = SequenceTable()
    for gid in range(1, n + 1):
        table.add(Sequence(gid, [7, 8, 9], max_tokens=4, order=table.next_order()))
        table.seqs[gid].state = RUNNING  # what an engine's step does
    return table


def test_life_cycle_and_its_checks() -> None:
    table = _table(1)
    seq = table.get(1)
    table.suspend(seq, resume_hint=5.0, now=2.0)
    assert seq.state == SUSPENDED and 1 not in table.active and (seq.hint, seq.suspended_at) == (5.0, 2.0)
    ctx = Context(gen_id=1, token_ids=[7, 8, 9], n_prompt=3, kv=1)
    with pytest.raises(EngineError, match="does not match"):
        table.suspended(1, Context(gen_id=1, token_ids=[7, 8], n_prompt=2, kv=1))
    table.resume(table.suspended(1, ctx), max_tokens=9)
    assert seq.state == PENDING_RESUME and seq.max_tokens == 9 and table.active == {1: seq}
    with pytest.raises(EngineError, match="not suspended"):
        table.suspended(1, ctx)
    seq.state = RUNNING
    table.finish(seq)
    assert seq.state == FINISHED and not table.active
    assert table.forget(1) is seq and table.forget(1) is None
    with pytest.raises(EngineError, match="unknown generation 1"):
        table.get(1)


def test_priority_and_importance_ignore_unknown_ids_and_bad_values() -> None:
    table = _table(1)
    table.set_priority(1, float("nan"))
    table.set_importance(1, float("inf"))
    table.set_priority(2, 1.0)
    assert (table.get(1).priority, table.get(1).importance) == (float("inf"), 0.0)
    table.set_priority(1, 3)
    table.set_importance(1, 2)
    assert (table.get(1).priority, table.get(1).importance) == (3.0, 2.0)


def test_suspended_on_device_puts_the_furthest_resumption_first() -> None:
    table = _table(3)
    for gid, hint in ((1, 10.0), (2, 30.0), (3, 20.0)):
        table.suspend(table.get(gid), resume_hint=hint, now=0.0)
    table.get(3).location = HOST  # already off the device: not a victim
    assert [s.gen_id for s in table.suspended_on_device(KVOptions(eviction="furthest"))] == [2, 1]
