"""Paper Figure 2: a normal request is generating when an urgent one arrives.

Normal drone request at t = 0 ("find the cat", first segment ``?s('cat')==True{``); an urgent
re-plan arrives at t = 0.2 s while the normal one is still generating that segment. With segmented
generation (``timely``) the normal generation is suspended after its first segment, the urgent one
starts acting within its ERT (0.2 s) and the normal one's next segment is ready long before its
first action (a scan, 3.7 s) ends. Under ``vllm`` (whole plan, dispatched at the end) the urgent
request misses its ERT. ``@b1`` is the figure's literal one-at-a-time engine; the default batch
(8) lets both run together and must give the same verdicts.
"""

import pytest

from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, URGENT_TUF
from timely_llm_ros.sim.simulator import SimConfig, simulate


def scenario():
    normal = TaskSpec(
        task_id="normal",
        agent_id="drone0",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[A] Could you find the cat? If so, go to it.",
        scene="[]",
        tuf=NORMAL_TUF,
        arrival=0.0,
        reference_plan="?s('cat')==True{g('cat')}->False",
        exec_times=[("s(", 3.7132), ("g(", 2.4613)],
    )
    urgent = TaskSpec(
        task_id="urgent",
        agent_id="drone1",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="[E] A boy is running towards you, get away from him.",
        scene="[]",
        tuf=URGENT_TUF,
        arrival=0.2,
        reference_plan="mb(100);tc(90);mf(50);",
        exec_times=[("mb", 2.5), ("tc", 2.3), ("mf", 2.1)],
    )
    return [normal, urgent]


def run(policy):
    res = simulate(scenario(), SimConfig(policy=policy))
    normal, urgent = res.records
    return normal, urgent


@pytest.mark.parametrize("policy", ["timely", "timely@b1", "timely-paper"])
def test_timely_serves_the_urgent_request_within_its_ert(policy):
    normal, urgent = run(policy)
    # the urgent request arrived while the normal one was generating its first segment
    assert normal.segments[0].gen_start < urgent.arrival < normal.segments[0].gen_end
    assert urgent.response_time <= URGENT_TUF.ert
    assert urgent.utility == URGENT_TUF.beta
    # the normal request's next segment is ready before its first action ends
    assert normal.segments[1].gen_end < normal.segments[0].exec_end
    assert normal.response_time <= NORMAL_TUF.ert
    assert normal.n_suspensions >= 1


@pytest.mark.parametrize("policy", ["vllm", "vllm@b1"])
def test_vllm_misses_the_urgent_ert(policy):
    normal, urgent = run(policy)
    assert urgent.response_time > URGENT_TUF.ert
    assert urgent.utility < URGENT_TUF.beta
    assert len(normal.segments) == 1 and len(urgent.segments) == 1


def test_one_at_a_time_fcfs_segmentation_alone_is_not_enough():
    # same segmentation, FCFS priority: the suspended normal generation (earlier arrival) goes first
    _, urgent = run("fcfs-seg@b1")
    assert urgent.response_time > URGENT_TUF.ert
