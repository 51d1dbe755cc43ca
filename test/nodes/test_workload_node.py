"""Workload node: the task plan (agent mapping, ids, offsets) as a pure function, and the node as an
OS process that waits for planner + robots, publishes every task in order and exits with a summary
once the (test) planner answered them all.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from planner_testkit import Peer, log_text, start_node, stop_process, wait_for

DATA = Path(__file__).with_name("data")
SMALL = DATA / "workload_small.yaml"


def _plan(**overrides):
    pytest.importorskip("rclpy")
    from timely_llm_ros.nodes.workload import parse_agents, plan_tasks
    from timely_llm_ros.workload import resolve_workload

    wl = resolve_workload(str(SMALL))
    kwargs = dict(
        name=wl.name,
        agents=parse_agents(["wl_d1:drone", "wl_d2:drone", "wl_a1:arm"]),
        agent_prefix="agent_",
        skip_unmapped=False,
        id_prefix="{name}-",
        time_scale=1.0,
        max_tasks=0,
    )
    kwargs.update(overrides)
    return plan_tasks(wl.tasks, **kwargs)


@pytest.mark.ros
def test_agents_are_mapped_by_robot_type_round_robin_and_offsets_start_at_zero():
    planned, skipped = _plan()
    assert not skipped
    assert [p.msg.task_id for p in planned] == ["small-a", "small-b", "small-c", "small-d"]
    # workload agent 7 -> first drone, 8 -> second drone, 9 -> the arm; 7 keeps its robot
    assert [p.msg.agent_id for p in planned] == ["wl_d1", "wl_d2", "wl_a1", "wl_d1"]
    assert [p.offset for p in planned] == pytest.approx([0.0, 0.3, 0.6, 1.0])
    assert planned[1].msg.tuf.ert == pytest.approx(0.2) and planned[1].msg.tuf.beta == 2.0
    assert planned[2].msg.scene.startswith("[pencil") and planned[2].msg.skill_set == "arm_fltrnn"
    scaled, _ = _plan(time_scale=0.5, max_tasks=2, id_prefix="x")
    assert [p.offset for p in scaled] == pytest.approx([0.0, 0.15]) and scaled[0].msg.task_id == "xa"


@pytest.mark.ros
def test_tuf_scale_stretches_ert_and_zero_time_but_keeps_beta():
    """The CPU demo's TUF scaling: [2, 0.2, 0.5] x5 -> ERT 1 s, zero utility at 2.5 s, beta 2."""
    base, _ = _plan()
    scaled, _ = _plan(tuf_scale=5.0)
    for b, s in zip(base, scaled):
        assert s.msg.tuf.ert == pytest.approx(5 * b.msg.tuf.ert) and s.msg.tuf.beta == b.msg.tuf.beta
        assert s.msg.tuf.alpha == pytest.approx(b.msg.tuf.alpha / 5)
        assert s.offset == b.offset  # arrivals are not scaled (that is time_scale)
    assert [p.msg.task_class for p in scaled] == [p.msg.task_class for p in base]


@pytest.mark.ros
def test_unmapped_robot_types_are_an_error_or_reported_skips():
    from timely_llm_ros.nodes.common import ParamError
    from timely_llm_ros.nodes.workload import parse_agents

    with pytest.raises(ParamError, match="arm tasks but parameter 'agents' has no agent"):
        _plan(agents=parse_agents(["wl_d1:drone"]))
    planned, skipped = _plan(agents=parse_agents(["wl_d1:drone"]), skip_unmapped=True)
    assert dict(skipped) == {"arm": 1} and len(planned) == 3
    # without 'agents', numeric workload ids get the prefix that makes them ROS names
    planned, _ = _plan(agents={})
    assert [p.msg.agent_id for p in planned] == ["agent_7", "agent_8", "agent_9", "agent_7"]
    with pytest.raises(ParamError, match="not 'agent:robot_type'"):
        parse_agents(["wl_d1"])


@pytest.mark.ros
@pytest.mark.slow
def test_the_node_publishes_every_task_in_order_and_exits_when_all_are_answered(tmp_path):
    peer = Peer(
        robots={"wl_d1": "silent", "wl_d2": "silent", "wl_a1": "silent"},
        name="wl_peer",
        answer_tasks="COMPLETED",
    )
    proc = start_node(
        "workload",
        dict(os.environ),
        tmp_path / "workload.log",
        params={
            "workload": str(SMALL),
            "agents": ["wl_d1:drone", "wl_d2:drone", "wl_a1:arm"],
            "exit_when_done": True,
            "start_delay": 0.2,
            "completion_timeout": 60.0,
            "planner_node": "/wl_peer",
        },
    )
    try:
        proc.wait(timeout=120)
    except subprocess.TimeoutExpired:
        stop_process(proc)
        raise AssertionError(f"workload node did not finish:\n{log_text(proc)}") from None
    finally:
        peer.close()
    out = log_text(proc)
    assert proc.returncode == 0, out
    got = [m for _, m in peer.tasks]
    assert [m.task_id for m in got] == ["small-a", "small-b", "small-c", "small-d"]
    assert [m.agent_id for m in got] == ["wl_d1", "wl_d2", "wl_a1", "wl_d1"]
    assert all(m.header.stamp.sec > 0 for m in got)
    (line,) = [ln for ln in out.splitlines() if ln.startswith("WORKLOAD_SUMMARY ")]
    summary = json.loads(line.split(" ", 1)[1])
    assert summary["published"] == summary["planned"] == 4 and summary["open"] == 0
    assert summary["final"] == {"COMPLETED": 4}


@pytest.mark.ros
@pytest.mark.slow
def test_a_missing_workload_is_a_clear_start_up_error(tmp_path):
    proc = start_node("workload", dict(os.environ), tmp_path / "w.log", params={"workload": "no-such-thing"})
    wait_for(lambda: proc.poll() is not None, 120, "the node to exit")
    assert proc.returncode == 2
    assert "parameter 'workload'" in log_text(proc) and "no-such-thing" in log_text(proc)


@pytest.mark.ros
def test_task_ids_of_a_composed_workload_are_readable():
    """A workload given with overrides (``wid1:duration=30,rate=0.1``, the demo fleet's) names its
    task ids by its base name, numbered to one width: wid1-00, wid1-01, ... (not
    ``wid1:duration=30,rate=0.1-0``)."""
    pytest.importorskip("rclpy")
    from timely_llm_ros.nodes.workload import parse_agents, plan_tasks
    from timely_llm_ros.workload import resolve_workload

    wl = resolve_workload("wid1:duration=30,rate=0.5")
    planned, _ = plan_tasks(
        wl.tasks,
        name=wl.name,
        agents=parse_agents(["d1:drone", "a1:arm"]),
        agent_prefix="agent_",
        skip_unmapped=True,
        id_prefix="{name}-",
        time_scale=1.0,
        max_tasks=0,
    )
    ids = [p.msg.task_id for p in planned]
    assert len(ids) >= 10, ids
    width = len(str(max(int(t.task_id) for t in wl.tasks)))
    assert all(i.startswith("wid1-") and len(i) == len("wid1-") + width for i in ids), ids
    assert len(set(ids)) == len(ids)


@pytest.mark.ros
def test_a_tuf_scale_leaves_an_auto_tuf_task_to_the_planner():
    # tuf_scale (the demo's slower engines) scaled every task's TUF: a ``tuf: auto`` task (no TUF)
    # raised AttributeError while the node planned its messages
    import dataclasses

    from timely_llm_ros.nodes.workload import parse_agents, plan_tasks
    from timely_llm_ros.workload import resolve_workload

    wl = resolve_workload(str(SMALL))
    tasks = [dataclasses.replace(wl.tasks[0], tuf=None), *wl.tasks[1:]]
    planned, _ = plan_tasks(
        tasks,
        name=wl.name,
        agents=parse_agents(["wl_d1:drone", "wl_d2:drone", "wl_a1:arm"]),
        agent_prefix="agent_",
        skip_unmapped=False,
        id_prefix="{name}-",
        time_scale=1.0,
        max_tasks=0,
        tuf_scale=8.0,
    )
    by_id = {f"{wl.name}-{t.task_id}": t for t in tasks}
    assert len(planned) == len(tasks)
    for p in planned:
        spec, tuf = by_id[p.msg.task_id], p.msg.tuf
        if spec.tuf is None:
            assert (tuf.ert, tuf.alpha, tuf.beta) == (0.0, 0.0, 0.0)  # sent as "auto"
        else:
            assert tuf.ert == pytest.approx(8.0 * spec.tuf.ert) and tuf.beta == spec.tuf.beta
