"""A bag that cannot be written (a full disk) is closed at its last complete state, readable, and the
writer says so once — before, the flush thread died and the recorder went on as if recording."""

from __future__ import annotations

import errno

import pytest

pytest.importorskip("rosbags", reason="rosbags is installed in the project venv (make)")

from timely_llm_ros.core import events as ev
from timely_llm_ros.interfaces.topics import TOPIC_TRACE
from timely_llm_ros.lrtrace import convert as cv
from timely_llm_ros.lrtrace import mcap
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.bagio import BagWriteError, BagWriter
from timely_llm_ros.lrtrace.bagread import read_bag


def _raw(i: int) -> bytes:
    store = ts.shared_typestore()
    e = ev.TraceEvent(1.0 + i, ev.ARRIVAL, f"t{i}", "a1")
    return bytes(store.serialize_cdr(cv.event_to_msg(store, e), ts.TRACE_EVENT))


def test_enospc_closes_the_bag_readable_up_to_the_failure_and_reports_once(tmp_path, monkeypatch):
    errors: list[BagWriteError] = []
    w = BagWriter(tmp_path / "b", {TOPIC_TRACE: ts.TRACE_EVENT}, flush_every_s=None, on_error=errors.append)
    for i in range(5):
        w.write(TOPIC_TRACE, (1 + i) * 10**9, _raw(i))
    w.flush()  # 5 messages on disk

    real = mcap.os.pwrite
    capacity = w.storage_file.stat().st_size + 64  # a disk with 64 bytes left after the first flush
    full = {"on": True}

    def pwrite(fd, data, offset):  # like a full disk: what goes past the capacity is refused
        if full["on"] and offset + len(data) > capacity:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(fd, data, offset)

    monkeypatch.setattr(mcap.os, "pwrite", pwrite)
    for i in range(5, 40):
        w.write(TOPIC_TRACE, (1 + i) * 10**9, _raw(i))
    with pytest.raises(BagWriteError, match="No space left on device"):
        w.flush()
    assert len(errors) == 1 and errors[0].cause.errno == errno.ENOSPC
    with pytest.raises(BagWriteError):  # no more writes: the caller counts them as lost
        w.write(TOPIC_TRACE, 99 * 10**9, _raw(99))
    w.close()  # idempotent, no second report
    assert len(errors) == 1
    full["on"] = False
    got = read_bag(tmp_path / "b")
    assert [e.task_id for e in got.trace_events()] == [f"t{i}" for i in range(5)]
    assert not got.problems and not got.recovered
    assert w.counts == {TOPIC_TRACE: 5}
