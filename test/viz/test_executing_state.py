"""EXECUTING end to end outside the live planner: the statuses of a simulated run's bag and the
timeline lanes say EXECUTING while the robot works on a plan that is no longer being generated."""

from __future__ import annotations

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.bagread import read_bag
from timely_llm_ros.lrtrace.convert import status_from_msg
from timely_llm_ros.lrtrace.simbag import write_sim_bag
from timely_llm_ros.lrtrace.timeline_model import TimelineModel
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.workload.tasks import load_catalog


def _run():
    cat = load_catalog()
    tasks = [cat.get(1 + i % 3).to_spec(task_id=f"x{i}", agent_id="d1", arrival=0.1 * i) for i in range(3)]
    return tasks, simulate(tasks, SimConfig(policy="timely", exec_mode="min"))


def test_a_simulated_bag_reports_executing_before_completed(tmp_path):
    tasks, res = _run()
    bag = write_sim_bag(res, tasks, tmp_path / "bag")
    states: dict[str, list[str]] = {}
    for _topic, _t, msg in read_bag(bag).by_type(ts.STATUS):
        states.setdefault(msg.task_id, []).append(status_from_msg(msg)[0])
    for task in tasks:
        seq = states[task.task_id]
        assert seq[-1] == ev.COMPLETED and ev.EXECUTING in seq, seq
        # the last state before COMPLETED is EXECUTING: the generation had ended, the robot worked
        assert seq[-2] == ev.EXECUTING, seq


@pytest.mark.parametrize("upto", ["gen_end", "exec_start"])
def test_the_timeline_lane_state_is_executing_while_only_the_robot_works(upto):
    _tasks, res = _run()
    rec = next(r for r in res.records if r.task_id == "x0")
    # the last segment with a call: the plan's call-less final tail ("}->False") takes no time here
    t = rec.gen_end if upto == "gen_end" else next(s for s in reversed(rec.segments) if s.calls).exec_start
    model = TimelineModel()
    model.extend([e for e in res.events if e.t <= t])
    assert model.lanes["x0"].state == ev.EXECUTING
