"""Shared builders for the viz tests: a hand-made three-task run with known timings, written as a
bag, and a synthetic event stream of a given rate. Imported by the test modules of this folder."""

from __future__ import annotations

from pathlib import Path

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF

E = ev.TraceEvent

# u1: urgent, two segments with a suspension in between, first action at 10.3 > ERT 10.2 (missed).
# n1: normal, one segment, first action at 10.45 <= ERT 11.0 (met).
# f1: normal, fails while generating (never acts: missed for good).
SCENARIO = [
    E(10.0, ev.ARRIVAL, "u1", "drone_1", detail="class=urgent trace=6"),
    E(10.0, ev.ADMIT, "u1", "drone_1"),
    E(10.0, ev.ARRIVAL, "n1", "drone_2", detail="class=normal trace=1"),
    E(10.0, ev.ADMIT, "n1", "drone_2"),
    E(10.1, ev.GEN_START, "u1", "drone_1", 0),
    E(10.2, ev.ARRIVAL, "f1", "arm_1"),
    E(10.2, ev.ADMIT, "f1", "arm_1"),
    E(10.25, ev.SEGMENT_READY, "u1", "drone_1", 0, detail="tp;"),
    E(10.25, ev.DISPATCH, "u1", "drone_1", 0, value=1.0),
    E(10.25, ev.GEN_STOP, "u1", "drone_1", 0, value=5, detail="segment"),
    E(10.25, ev.SUSPEND, "u1", "drone_1", 1),
    E(10.25, ev.GEN_START, "n1", "drone_2", 0),
    E(10.3, ev.EXEC_START, "u1", "drone_1", 0, value=0.3),
    E(10.3, ev.GEN_START, "f1", "arm_1", 0),
    E(10.4, ev.SEGMENT_READY, "n1", "drone_2", 0, detail="mf(50);"),
    E(10.4, ev.DISPATCH, "n1", "drone_2", 0, value=0.5),
    E(10.4, ev.GEN_STOP, "n1", "drone_2", 1, value=12, detail="eos"),
    E(10.45, ev.EXEC_START, "n1", "drone_2", 0, value=0.45),
    E(10.5, ev.GEN_START, "u1", "drone_1", 1),
    E(10.5, ev.RESUME, "u1", "drone_1", 1),
    E(10.5, ev.FAIL, "f1", "arm_1", detail="segment 0 does not parse: unknown skill 'fly'"),
    E(10.6, ev.SEGMENT_READY, "u1", "drone_1", 1, detail="mf(30);"),
    E(10.6, ev.DISPATCH, "u1", "drone_1", 1, value=0.6),
    E(10.62, ev.GEN_STOP, "u1", "drone_1", 2, value=4, detail="eos"),
    E(11.0, ev.EXEC_END, "n1", "drone_2", 0),
    E(11.0, ev.COMPLETE, "n1", "drone_2", 0, value=1.0),
    E(11.3, ev.EXEC_END, "u1", "drone_1", 0),
    E(11.3, ev.EXEC_START, "u1", "drone_1", 1),
    E(12.0, ev.EXEC_END, "u1", "drone_1", 1),
    E(12.0, ev.COMPLETE, "u1", "drone_1", 1, value=URGENT_TUF(0.3)),
]
TUFS = {"u1": URGENT_TUF, "n1": NORMAL_TUF, "f1": NORMAL_TUF}
AGENTS = {"u1": "drone_1", "n1": "drone_2", "f1": "arm_1"}


def scenario_specs() -> list[TaskSpec]:
    return [
        TaskSpec(
            task_id=t,
            agent_id=AGENTS[t],
            robot_type="drone",
            skill_set="tello_minispec",
            instruction=f"task {t}",
            tuf=TUFS[t],
            arrival=10.0 if t != "f1" else 10.2,
        )
        for t in TUFS
    ]


def write_scenario_bag(path: Path, *, with_tasks: bool = True, events: list | None = None) -> Path:
    """The scenario as a bag with /trace_events (and /tasks unless ``with_tasks`` is False)."""
    from timely_llm_ros.interfaces.mapping import seconds_to_ns
    from timely_llm_ros.interfaces.topics import TOPIC_TASKS, TOPIC_TRACE
    from timely_llm_ros.lrtrace import convert as cv
    from timely_llm_ros.lrtrace import typestore as ts
    from timely_llm_ros.lrtrace.bagio import DEFAULT_TOPICS, BagWriter

    store = ts.shared_typestore()
    topics = dict(DEFAULT_TOPICS)
    if not with_tasks:
        topics.pop(TOPIC_TASKS)
    with BagWriter(path, topics, flush_every_s=None) as w:
        if with_tasks:
            for spec in scenario_specs():
                w.write_msg(
                    TOPIC_TASKS, seconds_to_ns(spec.arrival), cv.task_to_msg(store, spec, spec.arrival)
                )
        for e in events if events is not None else SCENARIO:
            w.write_msg(TOPIC_TRACE, seconds_to_ns(e.t), cv.event_to_msg(store, e))
    return path


def stream(rate_per_s: int, seconds: int, t0: float = 100.0) -> list:
    """A plausible event stream of about ``rate_per_s`` events per second: tasks of 12 events each
    (two segments with a suspension, ~2 s from arrival to completion), every 4th urgent, every 7th
    acting late."""
    per_task = 12
    out = []
    n_tasks = rate_per_s * seconds // per_task
    gap = per_task / rate_per_s
    for i in range(n_tasks):
        a = t0 + i * gap
        tid, agent = f"s{i}", f"r{i % 30}"
        late = 0.5 if i % 7 == 0 else 0.0
        out += [
            E(a, ev.ARRIVAL, tid, agent, detail="class=urgent" if i % 4 == 0 else "class=normal"),
            E(a, ev.ADMIT, tid, agent),
            E(a + 0.02, ev.GEN_START, tid, agent, 0),
            E(a + 0.12, ev.SEGMENT_READY, tid, agent, 0),
            E(a + 0.12, ev.DISPATCH, tid, agent, 0, value=0.5),
            E(a + 0.12, ev.GEN_STOP, tid, agent, 0, detail="segment"),
            E(a + 0.12, ev.SUSPEND, tid, agent, 1),
            E(a + 0.15 + late, ev.EXEC_START, tid, agent, 0),
            E(a + 0.3, ev.GEN_START, tid, agent, 1),
            E(a + 0.35, ev.GEN_STOP, tid, agent, 1, detail="eos"),
            E(a + 1.9 + late, ev.EXEC_END, tid, agent, 0),
            E(a + 1.9 + late, ev.COMPLETE, tid, agent, 0),
        ]
    out.sort(key=lambda e: e.t)
    return out
