"""Typed hand-off items between the planner node's threads (service/handoff.py): frozen, named fields,
and a receiver that dispatches on the type sees every kind."""

from __future__ import annotations

import dataclasses
import math
import queue

import pytest

from timely_llm_ros.core.events import ARRIVAL, TraceEvent
from timely_llm_ros.core.generation import Dispatch
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF
from timely_llm_ros.service import handoff as ho


def spec(task_id: str = "t1") -> TaskSpec:
    return TaskSpec(task_id, "d1", "drone", "tello_minispec", "take off", NORMAL_TUF)


def test_items_are_frozen_and_name_their_fields():
    item = ho.Cancel("t1", "operator")
    with pytest.raises(dataclasses.FrozenInstanceError):
        item.reason = "other"  # type: ignore[misc]
    assert ho.Submit(spec()).resume is None  # a new task; a resumed one carries its sent segments
    assert [f.name for f in dataclasses.fields(ho.SegmentOut)] == [
        "agent",
        "dispatch",
        "gen_start",
        "gen_end",
        "tokens",
        "nonce",
    ]


def _dispatch(item: ho.Inbound) -> str:
    match item:
        case ho.Submit(s, resume):
            return f"submit {s.task_id} {resume}"
        case ho.FeedbackIn(fb, t):
            return f"feedback {fb} at {t}"
        case ho.Recovered(waiting, problem):
            return f"recovered {waiting.spec.task_id} {problem!r}"
        case ho.Cancel(task_id, reason):
            return f"cancel {task_id} {reason}"
    return "unknown"


def test_a_queue_of_items_dispatches_on_type_in_fifo_order():
    q: queue.Queue[ho.Inbound] = queue.Queue()
    w = ho.Waiting(spec("r1"), deadline=5.0)
    for item in (ho.Submit(spec()), ho.FeedbackIn("fb", 1.5), ho.Recovered(w, ""), ho.Cancel("t1", "stop")):
        q.put(item)
    got = [_dispatch(q.get_nowait()) for _ in range(4)]
    assert got == ["submit t1 None", "feedback fb at 1.5", "recovered r1 ''", "cancel t1 stop"]


def test_outbound_kinds_are_distinct_types_of_core_values():
    e = TraceEvent(1.0, ARRIVAL, "t", "d1")
    d = Dispatch("t", "d1", "drone", 0, "tp;", (), 1.0, 0.1, 0.1)
    status = ho.Status("t", "d1", "ACCEPTED", 1.0)
    kinds = {type(i) for i in (status, ho.Event(e), ho.Closed("t"), ho.SegmentOut("d1", d, 0.5, 1.0, 3))}
    assert len(kinds) == 4
    assert ho.Closed("t") == ho.Closed("t")
    # no message classes: a status is its fields (response and utility unknown until measured)
    assert math.isnan(status.response) and math.isnan(status.utility) and status.reason == ""


def test_a_waiting_task_has_no_earliest_time_unless_recovered():
    w = ho.Waiting(spec(), deadline=3.0)
    assert w.recovered is None and w.earliest == float("-inf")


@pytest.mark.parametrize(
    "ready,heard,now,outcome",
    [
        (False, False, 1.0, ho.WaitOutcome.WAIT),
        (True, False, 1.0, ho.WaitOutcome.SUBMIT),  # a new task does not wait for status readers
        (False, True, 5.0, ho.WaitOutcome.GIVE_UP),  # deadline reached without its robot
        (True, True, 5.0, ho.WaitOutcome.SUBMIT),
    ],
)
def test_a_new_waiting_task_goes_with_its_robot_or_is_given_up_at_the_deadline(ready, heard, now, outcome):
    assert ho.Waiting(spec(), deadline=5.0).outcome(ready, heard, now) is outcome


@pytest.mark.parametrize(
    "ready,heard,now,outcome",
    [
        (True, True, 1.0, ho.WaitOutcome.WAIT),  # before ``earliest``: other readers may still appear
        (True, False, 2.5, ho.WaitOutcome.WAIT),  # a status reader is not matched yet
        (True, True, 2.5, ho.WaitOutcome.RESOLVE),
        (False, False, 6.0, ho.WaitOutcome.RESOLVE),  # at the deadline: resolved anyway (failed)
    ],
)
def test_a_recovered_task_waits_for_robot_and_status_readers(ready, heard, now, outcome):
    from timely_llm_ros.service.journal import OpenTask

    w = ho.Waiting(spec(), deadline=6.0, recovered=OpenTask({"task_id": "t1"}), earliest=2.0)
    assert w.outcome(ready, heard, now) is outcome
