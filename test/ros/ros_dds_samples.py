"""Sample values of every timely_llm_ros interface, shared by the two processes of the DDS test.

Both the publishing and the subscribing process build the same samples from this module, so the
subscriber can compare what arrived with what was sent, field by field. Between them the samples
give every field a non-default value, hold non-ASCII text, and leave every array empty at least
once (test_interfaces.py checks that this stays true when a message gains a field).
"""

from __future__ import annotations

from typing import Any

from builtin_interfaces.msg import Time
from std_msgs.msg import Header

from timely_llm_ros.msg import Segment, SegmentFeedback, SkillCall, Task, TaskStatus, TraceEvent, Tuf
from timely_llm_ros.srv import EstimateExecTime

TOPIC_PREFIX = "/timely_test"
UNICODE = "Flieg zur Café-Tür ☕ · 拿起红色积木 · ölçüm ✓ 🚁"


def _time(sec: int, nanosec: int) -> Time:
    return Time(sec=sec, nanosec=nanosec)


def _tufs() -> list[Tuf]:
    return [
        Tuf(ert=1.0, alpha=-2.0, beta=1.0),
        Tuf(ert=0.2, alpha=-6.666666666666667, beta=2.0),
        Tuf(ert=0.0, alpha=0.0, beta=1e-9),
    ]


def _calls() -> list[SkillCall]:
    return [
        SkillCall(name="move_forward", args=["50"], source="mf(50)"),
        SkillCall(name="say", args=[f'"{UNICODE}"', "'a, b'"], source=f"say(\"{UNICODE}\", 'a, b')"),
        SkillCall(name="land", args=[], source="l()"),
    ]


def samples() -> dict[str, tuple[type, list[Any]]]:
    """topic name -> (message type, samples in publishing order)."""
    calls = _calls()
    return {
        "tuf": (Tuf, _tufs()),
        "skill_call": (SkillCall, calls),
        "task": (
            Task,
            [
                Task(
                    header=Header(stamp=_time(1_700_000_000, 999_999_999), frame_id="map"),
                    task_id="task-1",
                    agent_id="drone_1",
                    robot_type="drone",
                    skill_set="tello_minispec",
                    instruction=f"Find the apple and land next to it. {UNICODE}",
                    scene="apple; banana\nline 2",
                    tuf=_tufs()[1],
                    max_tokens=4_294_967_295,
                    task_class=f"urgent {UNICODE}",
                    trace_id=4_294_967_295,
                    overrun="skip-next",
                ),
                Task(
                    header=Header(),
                    task_id="",
                    agent_id="arm_2",
                    robot_type="arm",
                    skill_set="robot_arm",
                    instruction="stack the blocks",
                    scene="",
                    tuf=_tufs()[0],
                    max_tokens=0,
                ),
            ],
        ),
        "segment": (
            Segment,
            [
                Segment(
                    task_id="task-1",
                    agent_id="drone_1",
                    index=0,
                    text=f"mf(50);say(\"{UNICODE}\", 'a, b');",
                    calls=calls[:2],
                    final=False,
                    gen_start=_time(10, 5),
                    gen_end=_time(10, 500_000_000),
                    tokens=17,
                    exec_time_min=1.25,
                    exec_time_expected=2.5,
                    nonce="9f2c4e1a7b3d5c60",
                ),
                Segment(
                    task_id="task-1",
                    agent_id="drone_1",
                    index=4_294_967_295,
                    text="",
                    calls=[],
                    final=True,
                    gen_start=_time(0, 0),
                    gen_end=_time(0, 0),
                    tokens=0,
                    exec_time_min=0.0,
                    exec_time_expected=0.0,
                ),
            ],
        ),
        "segment_feedback": (
            SegmentFeedback,
            [
                SegmentFeedback(
                    task_id="task-1",
                    agent_id="drone_1",
                    index=3,
                    state=SegmentFeedback.FAILED,
                    stamp=_time(-5, 1),
                    duration=0.125,
                    detail=f"obstacle ahead: {UNICODE}",
                    nonce="9f2c4e1a7b3d5c60",
                ),
                SegmentFeedback(
                    task_id="",
                    agent_id="",
                    index=0,
                    state=SegmentFeedback.STARTED,
                    stamp=_time(0, 0),
                    duration=0.0,
                    detail="",
                ),
            ],
        ),
        "task_status": (
            TaskStatus,
            [
                TaskStatus(
                    task_id="task-1",
                    agent_id="drone_1",
                    state=TaskStatus.COMPLETED,
                    reason="",
                    stamp=_time(12, 3),
                    has_response=True,
                    response_time=0.8125,
                    utility=-1.5,
                ),
                TaskStatus(
                    task_id="task-2",
                    agent_id="arm_2",
                    state=TaskStatus.REJECTED,
                    reason=f"unknown skill set 'x' ({UNICODE})",
                    stamp=_time(1, 0),
                    has_response=False,
                    response_time=0.0,
                    utility=0.0,
                ),
            ],
        ),
        "trace_event": (
            TraceEvent,
            [
                TraceEvent(
                    stamp=_time(7, 7),
                    task_id="task-1",
                    agent_id="drone_1",
                    segment_index=-1,
                    kind=TraceEvent.FAIL,
                    value=-3.5e-7,
                    detail=UNICODE,
                ),
                TraceEvent(
                    stamp=_time(8, 0),
                    task_id="task-1",
                    agent_id="drone_1",
                    segment_index=2_147_483_647,
                    kind=TraceEvent.ARRIVAL,
                    value=0.0,
                    detail="",
                ),
            ],
        ),
    }


def service_cases() -> list[tuple[Any, Any]]:
    """(request, response) pairs: the server answers each known request with its paired response."""
    req, res = EstimateExecTime.Request, EstimateExecTime.Response
    return [
        (
            req(robot_type="drone", skill_set="tello_minispec", segment_text=f'mf(50); say("{UNICODE}");'),
            res(ok=True, error="", minimum=1.5, expected=2.25, maximum=4.0),
        ),
        (
            req(robot_type="", skill_set="", segment_text=""),
            res(ok=False, error=f"unknown robot type '' — {UNICODE}", minimum=0.0, expected=0.0, maximum=0.0),
        ),
    ]


def to_plain(value: Any) -> Any:
    """A message (or list of them) as nested dicts/lists of plain values, for comparing and printing."""
    if hasattr(value, "get_fields_and_field_types"):
        return {name: to_plain(getattr(value, name)) for name in value.get_fields_and_field_types()}
    if isinstance(value, (list, tuple)) or type(value).__name__ == "array":
        return [to_plain(v) for v in value]
    return value


def differences(expected: Any, got: Any, path: str = "") -> list[str]:
    """Human-readable list of the fields where ``got`` differs from ``expected`` (plain values)."""
    if isinstance(expected, dict) and isinstance(got, dict):
        out = []
        for key in sorted(set(expected) | set(got)):
            out += differences(expected.get(key, "<missing>"), got.get(key, "<missing>"), f"{path}.{key}")
        return out
    if isinstance(expected, list) and isinstance(got, list):
        if len(expected) != len(got):
            return [f"{path}: {len(got)} elements, expected {len(expected)}"]
        out = []
        for i, (e, g) in enumerate(zip(expected, got, strict=True)):
            out += differences(e, g, f"{path}[{i}]")
        return out
    if type(expected) is not type(got) or expected != got:
        return [f"{path}: got {got!r}, expected {expected!r}"]
    return []
