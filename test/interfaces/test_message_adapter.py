"""One message adapter, two back-ends: rclpy messages and bag (rosbags) messages carry the same fields.

Every core value goes out through :class:`timely_llm_ros.interfaces.mapping.MessageAdapter` on both
back-ends (:mod:`timely_llm_ros.ros.convert` for the nodes, :mod:`timely_llm_ros.lrtrace.typestore`
for bags). Checked three ways: the rclpy message, serialised by rclpy and decoded by rosbags, equals
the bag back-end's message field for field (dataclass equality, nested messages included); both read
back to the same core value; and that value is the one sent (core -> msg -> core), ``SkillCall.args``
(the exact source text of each argument) included.
"""

from __future__ import annotations

import dataclasses
import math

import pytest

pytestmark = pytest.mark.ros


@pytest.fixture(scope="module")
def sides():
    """(rclpy adapter, bag adapter, rosbags typestore)."""
    from timely_llm_ros.lrtrace import typestore as ts
    from timely_llm_ros.ros import convert

    return convert.ADAPTER, ts.adapter(), ts.shared_typestore()


def _same_on_the_wire(rclpy_msg, bag_msg, store) -> None:
    from rclpy.serialization import serialize_message

    name = type(rclpy_msg).__name__
    msgtype = f"timely_llm_ros/msg/{name}"
    decoded = store.deserialize_cdr(serialize_message(rclpy_msg), msgtype)
    assert decoded == bag_msg, f"{name}: rclpy side {decoded} != bag side {bag_msg}"
    # and the bag side's bytes decode to the same message in rclpy (the recorder writes rclpy bytes)
    assert store.serialize_cdr(bag_msg, msgtype) == store.serialize_cdr(decoded, msgtype)


def _spec(**over):
    from timely_llm_ros.core.task import TaskSpec
    from timely_llm_ros.core.tuf import TUF

    base = dict(
        task_id="t-1",
        agent_id="drone_1",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] Take a picture.",
        tuf=TUF(ert=1.5, alpha=-0.25, beta=2.0),
        arrival=12.25,
        scene="a kitchen, two cups",
        max_tokens=300,
        task_class="urgent",
        trace_id=7,
    )
    base.update(over)
    return TaskSpec(**base)


@pytest.mark.parametrize(
    "over",
    [
        {},
        {"tuf": None},
        {"scene": "", "task_class": "", "trace_id": None},
        {"max_tokens": 0, "trace_id": 2**33},
    ],
)
def test_task_maps_every_field_the_same_on_both_back_ends(sides, over) -> None:
    from timely_llm_ros.interfaces.mapping import DEFAULT_MAX_TOKENS, TASK_TEXT_FIELDS, UINT32_MAX
    from timely_llm_ros.msg import Task

    ros, bag, store = sides
    spec = _spec(**over)
    r, b = ros.task_to_msg(spec, spec.arrival), bag.task_to_msg(spec, spec.arrival)
    _same_on_the_wire(r, b, store)
    back_r, back_b = ros.task_from_msg(r, arrival=spec.arrival), bag.task_from_msg(b, arrival=spec.arrival)
    assert back_r == back_b
    # core -> msg -> core keeps every field the message carries (out-of-range numbers: clamped / none)
    expected = dataclasses.replace(
        spec,
        max_tokens=spec.max_tokens or DEFAULT_MAX_TOKENS,
        trace_id=spec.trace_id if (spec.trace_id or 0) <= UINT32_MAX else None,
    )
    assert back_r == expected
    assert math.isclose(r.header.stamp.sec + r.header.stamp.nanosec * 1e-9, spec.arrival)
    # the table of copied string fields covers every string field of Task.msg
    strings = {k for k, v in Task.get_fields_and_field_types().items() if v == "string"}
    assert strings == set(TASK_TEXT_FIELDS)


def test_task_fields_out_of_range_are_clamped_and_rejected_alike(sides) -> None:
    from timely_llm_ros.core.task import TaskRejected
    from timely_llm_ros.interfaces.mapping import UINT32_MAX

    ros, bag, store = sides
    spec = _spec(max_tokens=2**40, trace_id=-3, scene=None)
    r, b = ros.task_to_msg(spec), bag.task_to_msg(spec)
    _same_on_the_wire(r, b, store)
    assert (r.max_tokens, r.trace_id, r.scene, r.header.stamp.sec) == (UINT32_MAX, 0, "", 0)
    for adapter, msg in ((ros, r), (bag, b)):
        with pytest.raises(TaskRejected, match="max_tokens 4294967295 is out of range"):
            adapter.task_from_msg(msg, arrival=1.0)


def test_a_ros_task_tuf_is_validated_once(sides, monkeypatch) -> None:
    # the field limits built and checked the TUF, then the conversion built and checked it again
    from timely_llm_ros.core import limits

    calls = []
    real = limits.tuf_or_reject
    monkeypatch.setattr(limits, "tuf_or_reject", lambda *a: calls.append(a) or real(*a))
    ros, bag, _ = sides
    spec = _spec()
    for adapter in (ros, bag):
        calls.clear()
        assert adapter.task_from_msg(adapter.task_to_msg(spec, spec.arrival), arrival=spec.arrival) == spec
        assert calls == [(1.5, -0.25, 2.0)]


def test_segment_maps_the_same_on_both_back_ends(sides) -> None:
    from timely_llm_ros.core.generation import Dispatch, Segment
    from timely_llm_ros.core.skills import SkillCall
    from timely_llm_ros.interfaces.mapping import from_stamp
    from timely_llm_ros.lrtrace import convert as lcv
    from timely_llm_ros.ros import convert

    _ros, bag, store = sides
    calls = (
        SkillCall("move_forward", (50,), "move_forward(50)"),
        SkillCall("say", ("hi, you",), "say('hi, you')"),
        SkillCall("take_picture", (), "take_picture()"),
        SkillCall("answer", ("yes", 2), "answer yes"),
    )
    seg = Segment(
        idx=2,
        text="move_forward(50);say('hi, you')",
        n_tokens=17,
        gen_start=3.5,
        gen_end=4.25,
        dispatch=4.25,
        min_exec=1.5,
        expected_exec=2.5,
        final=True,
        calls=calls,
    )
    d = Dispatch(
        task_id="t-1",
        agent_id="drone_1",
        robot_type="drone",
        seg=2,
        text=seg.text,
        calls=calls,
        t=4.25,
        min_exec=1.5,
        expected_exec=2.5,
        final=True,
    )
    r = convert.segment_to_msg(d, gen_start=3.5, tokens=17)
    b = lcv.segment_to_msg(store, "t-1", "drone_1", seg)
    # SkillCall.args: the exact source text of each argument on both back-ends (msg/SkillCall.msg)
    assert [list(c.args) for c in r.calls] == [["50"], ["'hi, you'"], [], ["yes", "2"]]
    assert [list(c.args) for c in b.calls] == [["50"], ["'hi, you'"], [], ["yes", "2"]]
    _same_on_the_wire(r, b, store)  # and every other field is the same
    assert (from_stamp(b.gen_start), from_stamp(b.gen_end), b.tokens) == (3.5, 4.25, 17)
    # estimates the message cannot carry (nan, negative, unordered) come out finite and ordered
    odd = dataclasses.replace(d, min_exec=-1.0, expected_exec=math.nan, calls=calls[:1])
    r = convert.segment_to_msg(odd, gen_start=9.0)
    assert (r.exec_time_min, r.exec_time_expected, r.gen_start == r.gen_end) == (0.0, 0.0, True)
    b = bag.segment_to_msg(
        "t-1",
        "drone_1",
        2,
        seg.text,
        calls[:1],
        final=True,
        gen_start=9.0,
        gen_end=4.25,
        tokens=0,
        min_exec=-1.0,
        expected_exec=math.nan,
    )
    _same_on_the_wire(r, b, store)


def test_feedback_status_and_events_round_trip_the_same_on_both_back_ends(sides) -> None:
    from timely_llm_ros.core import events as ev

    ros, bag, store = sides
    for state in ev.FEEDBACK_STATES:
        r = ros.feedback_to_msg("t-1", "drone_1", 3, state, 5.5, duration=1.25, detail="ok")
        b = bag.feedback_to_msg("t-1", "drone_1", 3, state, 5.5, duration=1.25, detail="ok")
        _same_on_the_wire(r, b, store)
        assert ros.feedback_from_msg(r) == bag.feedback_from_msg(b)
        assert (ros.feedback_from_msg(r).state, ros.feedback_from_msg(r).t) == (state, 5.5)
    for state in ev.TASK_STATES:
        for response, utility in ((math.nan, math.nan), (0.75, -0.5), (2.0, math.nan)):
            r = ros.status_to_msg("t-1", "drone_1", state, 6.0, "why", response, utility)
            b = bag.status_to_msg("t-1", "drone_1", state, 6.0, "why", response, utility)
            _same_on_the_wire(r, b, store)
            got = ros.status_from_msg(r)
            assert repr(got) == repr(bag.status_from_msg(b))  # nan-aware equality
            assert got[:3] == (state, 6.0, "why")
            assert got[3] == response or (math.isnan(response) and math.isnan(got[3]))
    for kind in ev.EVENT_KINDS:
        e = ev.TraceEvent(7.125, kind, "t-1", "drone_1", 1, 3.5, "detail")
        r, b = ros.event_to_msg(e), bag.event_to_msg(e)
        _same_on_the_wire(r, b, store)
        assert ros.event_from_msg(r) == bag.event_from_msg(b) == e


def test_the_code_tables_of_both_back_ends_are_the_message_constants(sides) -> None:
    ros, bag, _store = sides
    for attr in ("task_state_code", "event_kind_code", "feedback_code"):
        assert getattr(ros, attr) == getattr(bag, attr)
    with pytest.raises(ValueError, match="unknown feedback state"):
        bag.feedback_to_msg("t", "a", 0, "NOPE", 1.0)
    with pytest.raises(ValueError, match="unknown task state"):
        bag.status_to_msg("t", "a", "NOPE", 1.0)


def test_the_node_functions_are_the_adapter() -> None:
    # the nodes keep calling ros.convert's functions; they are the one adapter's, not a copy
    from timely_llm_ros.ros import convert

    for name in ("task_to_msg", "event_to_msg", "event_from_msg", "status_to_msg", "feedback_to_msg"):
        assert getattr(convert, name).__func__ is getattr(type(convert.ADAPTER), name)
