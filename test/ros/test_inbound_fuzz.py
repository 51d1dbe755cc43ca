"""In-process fuzz of the planner's inbound boundary (fast, thousands of cases): every field of Task
and SegmentFeedback at extreme values (huge and odd strings, unicode, NaN/inf, integer limits) goes
through the conversion and validation the planner node applies and then into the core. The only
outcomes allowed are a task accepted with finite derived times, or TaskRejected / ValueError with a
reason; nothing else may escape (the DDS version of this test runs against a planner process)."""

from __future__ import annotations

import math
import random

import pytest

pytestmark = pytest.mark.ros

STRINGS = [
    "",
    " ",
    "x" * 70_000,
    "🙂ü\u202eé" * 50,
    "\x01\x7f",
    "/../",
    "a/b",
    "__ns",
    "0abc",
    "d1",
    "é" * 65,
    "drone_1" * 40,
    "tello_minispec",
    "drone",
    "[A] Take a picture.",
]
FLOATS = [math.nan, math.inf, -math.inf, 1e308, -1e308, 5e-324, -0.0, 0.0, 1e12, -1e-12, 1e6, -1e6, 2.0, -2.0]
UINTS = [0, 1, 2**31, 2**32 - 1]


FIELDS = {
    "task_id": STRINGS,
    "agent_id": STRINGS,
    "robot_type": STRINGS,
    "skill_set": STRINGS,
    "instruction": STRINGS,
    "scene": STRINGS,
    "task_class": STRINGS,
    "max_tokens": UINTS,
    "trace_id": UINTS,
    "tuf.ert": FLOATS,
    "tuf.alpha": FLOATS,
    "tuf.beta": FLOATS,
    "header.stamp.sec": [-(2**31), 0, 2**31 - 1],
    "header.stamp.nanosec": UINTS,
    "header.frame_id": STRINGS,
    "overrun": [*STRINGS, "kill", " skip-next ", "continue", "KILL"],
}


def _rand_task(rng: random.Random):
    """A valid task with 0-3 fields set to extreme values."""
    from timely_llm_ros.msg import Task, Tuf

    msg = Task(
        task_id="t",
        agent_id="d1",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] Take a picture.",
    )
    msg.tuf = Tuf(ert=1.0, alpha=-2.0, beta=1.0)
    for path in rng.sample(sorted(FIELDS), rng.randrange(4)):
        *parents, last = path.split(".")
        obj = msg
        for p in parents:
            obj = getattr(obj, p)
        setattr(obj, last, rng.choice(FIELDS[path]))
    return msg


def test_random_tasks_are_accepted_with_finite_times_or_rejected_with_a_reason():
    from timely_llm_ros.core.planner import PlannerCore
    from timely_llm_ros.core.task import TaskRejected
    from timely_llm_ros.engines.sim import SimEngine
    from timely_llm_ros.interfaces.mapping import task_from_msg
    from timely_llm_ros.msg import Task

    assert set(Task.get_fields_and_field_types()) == {k.split(".")[0] for k in FIELDS}  # every field
    rng = random.Random(18)
    core = PlannerCore(SimEngine())
    accepted = rejected = 0
    for i in range(3000):
        msg = _rand_task(rng)
        try:
            spec = task_from_msg(msg, arrival=float(i))
            spec.task_id = f"t{i}"
            spec.reference_plan = "tp;"
            rec = core.submit(spec)
        except TaskRejected as exc:
            assert exc.reason and isinstance(exc.reason, str)
            rejected += 1
            continue
        accepted += 1
        tuf = rec.tuf
        for t in (0.0, 1e3, 1e9):
            assert math.isfinite(tuf(t))
        assert math.isfinite(tuf.zero_time) or tuf.alpha == 0
    assert accepted > 300 and rejected > 1000  # both paths were exercised
    while core.has_work():  # what was accepted plans without an error
        core.step()


def test_random_feedback_is_converted_or_refused_and_never_moves_a_task_it_does_not_own():
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.core.planner import PlannerCore
    from timely_llm_ros.core.task import TaskSpec
    from timely_llm_ros.core.tuf import NORMAL_TUF
    from timely_llm_ros.engines.sim import SimEngine
    from timely_llm_ros.msg import SegmentFeedback
    from timely_llm_ros.ros import convert

    core = PlannerCore(SimEngine())
    rec = core.submit(
        TaskSpec("live", "d1", "drone", "tello_minispec", "go", NORMAL_TUF, reference_plan="mu(40);tp;")
    )
    while core.has_work():
        core.step()
    rng = random.Random(7)
    for _ in range(3000):
        fb = SegmentFeedback(
            task_id=rng.choice(STRINGS + ["live"]),
            agent_id=rng.choice(STRINGS),
            index=rng.choice(UINTS),
            state=rng.randrange(256),
            duration=rng.choice(FLOATS),
            detail=rng.choice(STRINGS + ["y" * 2_000_000]),
        )
        fb.stamp.sec = rng.choice([-(2**31), 0, 2**31 - 1])
        fb.stamp.nanosec = rng.choice(UINTS)
        try:
            got = convert.feedback_from_msg(fb)
        except ValueError:
            continue
        assert len(got.detail) < 1100 and math.isfinite(got.t) and math.isfinite(got.duration)
        core.feedback(got.task_id, got.index, got.state, 1.0, got.detail, agent=got.agent_id)
    # "d1" is not among the fuzzed senders: the live task was never moved
    assert rec.state == ev.EXECUTING and all(math.isnan(s.exec_start) for s in rec.segments)
