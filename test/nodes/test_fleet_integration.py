"""The whole node graph on real DDS: ``timely-llm fleet`` starts the planner (simulated engine),
three drone nodes, one arm node, the time model, the recorder and a workload node as separate OS
processes from one fleet YAML; a short mixed workload (normal + urgent drone tasks, one arm task)
runs to its end, the workload node exits and the fleet shuts down in order.

Checked afterwards, from an observer node in this process and from the recorded bag (opened with
``rosbags``):

* every task ends COMPLETED (or EXPIRED / REJECTED with a reason) and the workload summary agrees;
* every segment was executed, in order, by the robot of its task, one segment at a time per robot;
* when the load allows — the previous action took clearly longer than generating the next segment —
  the next segment was dispatched before the robot finished the previous one (it never went idle);
* the bag holds every task, segment, feedback and trace event seen on the wire, and its timestamps
  are consistent (log time not before the message's own stamp; per task ARRIVAL ≤ DISPATCH ≤
  EXEC_START ≤ EXEC_END ≤ COMPLETE; Segment gen_start ≤ gen_end ≤ the robot's STARTED).

Robust on a busy 2-core machine: discovery is waited for by the nodes themselves (the workload node
starts only once planner and robots are discovered), all bounds are generous, nothing asserts speed.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml
from planner_testkit import Peer, is_closing_marker, stop_process, wait_for

REPO = Path(__file__).resolve().parents[2]
DATA = Path(__file__).with_name("data")
DRONES = ("drone_1", "drone_2", "drone_3")
ARM = "arm_1"
RUN_TIMEOUT = 240.0
OBSERVER = "fleet_observer"
EPS = 0.02  # s: stamp rounding between processes on one clock


def _fleet_config(tmp: Path) -> Path:
    cfg = {
        "planner": {
            "parameters": {
                "engine": "sim",
                "policy": "timely",
                "robot_grace_period": 10.0,
                "segment_timeout_factor": 3.0,
                "segment_timeout_margin": 30.0,
            }
        },
        "robot_defaults": {
            "drone": {"backend": "sim", "exec_mode": "min", "time_scale": 0.5},
            "arm": {"backend": "sim", "exec_mode": "min", "time_scale": 0.5, "skill_set": "arm_fltrnn"},
        },
        "robots": [*({"agent": d, "type": "drone"} for d in DRONES), {"agent": ARM, "type": "arm"}],
        "timemodel": {"enabled": True, "parameters": {"refit_output": str(tmp / "refit")}},
        "recorder": {"enabled": True, "parameters": {"output": str(tmp / "bag")}},
        "workload": {
            "enabled": True,
            "parameters": {
                "workload": str(DATA / "mixed_short.yaml"),
                "exit_when_done": True,
                "start_delay": 2.0,
                "completion_timeout": 150.0,
                "discovery_timeout": 180.0,
                "wait_for_nodes": ["/recorder", "/timemodel", f"/{OBSERVER}"],
            },
        },
    }
    path = tmp / "fleet.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not (REPO / "timely_llm_ros" / "nodes" / "recorder.py").is_file():
        pytest.skip("the recorder node (timely_llm_ros/nodes/recorder.py) is not in this checkout yet")
    tmp = tmp_path_factory.mktemp("fleet")
    config = _fleet_config(tmp)
    peer = Peer(name=OBSERVER, watch_agents=(*DRONES, ARM))
    log = tmp / "fleet.log"
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "timely_llm_ros.fleet", str(config)],
            env=dict(os.environ),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        # The run starts when this observer subscribes to /tasks (the workload waits for it): first
        # let discovery settle, so that the observer and the recorder see every publisher from the
        # first message on (all topics are volatile: what is sent before matching is not seen).
        wait_for(
            lambda: _graph_settled(peer),
            RUN_TIMEOUT / 2,
            "the fleet's graph to be discovered",
            period=0.2,
            procs=(proc,),
        )
        peer.watch_tasks()
        proc.wait(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        stop_process(proc, timeout=60)
        pytest.fail(f"the fleet did not finish within {RUN_TIMEOUT:.0f} s:\n{log.read_text()[-8000:]}")
    finally:
        peer.close()
    text = log.read_text(encoding="utf-8", errors="replace")
    yield {"rc": proc.returncode, "log": text, "peer": peer, "tmp": tmp}


def _graph_settled(peer) -> bool:
    """Every publisher and the recorder's subscriptions of the fleet are visible from here, and this
    observer's feedback reader has matched every robot's writer (seeing a publisher in the graph comes
    before matching it: a STARTED sent in between would be lost to the observer, not to the planner)."""
    from timely_llm_ros.interfaces import topics

    node = peer.node

    def subscribers(topic: str) -> set[str]:
        return {i.node_name for i in node.get_subscriptions_info_by_topic(topic)}

    return (
        node.count_publishers(topics.SEGMENT_FEEDBACK) >= len(DRONES) + 1
        and peer.feedback_sub.get_publisher_count() >= len(DRONES) + 1
        and node.count_publishers(topics.TASK_STATUS) >= 1
        and node.count_publishers(topics.TRACE_EVENTS) >= 1
        and node.count_publishers(topics.TASKS) >= 1
        and all(
            "recorder" in subscribers(t)
            for t in (topics.TASKS, topics.SEGMENT_FEEDBACK, topics.TASK_STATUS, topics.TRACE_EVENTS)
        )
        and all("recorder" in subscribers(topics.segment_topic(a)) for a in (*DRONES, ARM))
    )


def _summary(log: str) -> dict:
    lines = [ln for ln in log.splitlines() if ln.startswith("WORKLOAD_SUMMARY ")]
    assert lines, f"no WORKLOAD_SUMMARY in the fleet output:\n{log[-8000:]}"
    return json.loads(lines[-1].split(" ", 1)[1])


def _task_ids() -> list[str]:
    from timely_llm_ros.workload import resolve_workload

    return [f"mixed-{t.task_id}" for t in resolve_workload(str(DATA / "mixed_short.yaml")).tasks]


@pytest.mark.ros
@pytest.mark.slow
def test_every_task_ends_completed_or_with_a_reason(run):
    assert run["rc"] == 0, run["log"][-8000:]
    summary = _summary(run["log"])
    assert summary["published"] == summary["planned"] == 7 and summary["open"] == 0
    peer = run["peer"]
    for task_id in _task_ids():
        final = peer.final(task_id)
        assert final is not None, f"{task_id}: no final status"
        state = peer.final_state(task_id)
        assert state == "COMPLETED" or (state in ("EXPIRED", "REJECTED") and final.reason), (
            task_id,
            state,
            final.reason,
        )
        if state == "COMPLETED":
            assert final.has_response and final.response_time >= 0
    assert sum(peer.final_state(t) == "COMPLETED" for t in _task_ids()) >= 5
    assert "[fleet] workload finished: stopping the fleet" in run["log"]


@pytest.mark.ros
@pytest.mark.slow
def test_segments_run_in_order_on_the_right_robot(run):
    from timely_llm_ros.ros import convert

    peer = run["peer"]
    agent_of = {m.task_id: m.agent_id for _, m in peer.tasks}
    assert set(agent_of) == set(_task_ids())
    assert {agent_of[t] for t in agent_of} == {*DRONES, ARM}  # every robot got work
    sent: dict[str, list[int]] = defaultdict(list)
    for agent, segs in peer.segments.items():
        for s in segs:
            assert agent_of[s.task_id] == agent == s.agent_id, (s.task_id, agent)
            sent[s.task_id].append(s.index)
    for task_id, idx in sent.items():
        assert idx == list(range(len(idx))), f"{task_id}: segments out of order {idx}"
    executable: dict[str, list[int]] = defaultdict(list)  # the text-less closing marker gets no feedback
    for segs in peer.segments.values():
        for s in segs:
            if not is_closing_marker(s):  # a call-less tail with text ("}->False") is executed
                executable[s.task_id].append(s.index)
    by_agent: dict[str, list] = defaultdict(list)
    for fb in peer.feedback:
        assert fb.agent_id == agent_of[fb.task_id], f"{fb.task_id} executed by {fb.agent_id}"
        if fb.state != fb.PROGRESS:  # heartbeats of the running segment
            by_agent[fb.agent_id].append(convert.feedback_from_msg(fb))
    for agent, fbs in by_agent.items():  # one publisher per robot: the wire order is the robot's order
        running = None
        done: dict[str, list[int]] = defaultdict(list)
        for f in fbs:
            assert f.state != "FAILED", f"{agent}: {f.task_id}/{f.index} failed: {f.detail}"
            if f.state == "STARTED":
                assert running is None, f"{agent} started {f.task_id}/{f.index} while running {running}"
                running = (f.task_id, f.index)
            else:
                assert running == (f.task_id, f.index), f"{agent}: DONE of {f.task_id}/{f.index} vs {running}"
                running = None
                done[f.task_id].append(f.index)
        for task_id, idx in done.items():
            assert idx == executable[task_id], f"{task_id} on {agent}: executed {idx}, sent {sent[task_id]}"
    completed = [t for t in _task_ids() if peer.final_state(t) == "COMPLETED"]
    assert all(sent[t] for t in completed)


@pytest.mark.ros
@pytest.mark.slow
def test_segments_arrive_before_the_robot_goes_idle_when_load_allows(run):
    from timely_llm_ros.interfaces.mapping import from_stamp
    from timely_llm_ros.ros import convert

    peer = run["peer"]
    ev_of: dict[tuple[str, str, int], float] = {}
    for e in peer.events:
        ev_of.setdefault((e.task_id, convert.EVENT_KIND_NAME[e.kind], e.segment_index), from_stamp(e.stamp))
    checked = late = 0
    report = []
    for segs in peer.segments.values():
        for s in segs:
            if s.index == 0:
                continue
            prev_start = ev_of.get((s.task_id, "EXEC_START", s.index - 1))
            prev_end = ev_of.get((s.task_id, "EXEC_END", s.index - 1))
            dispatch = ev_of.get((s.task_id, "DISPATCH", s.index))
            if None in (prev_start, prev_end, dispatch):
                continue
            generation = from_stamp(s.gen_end) - from_stamp(s.gen_start)
            # "when the load allows": the previous action outlasted this segment's generation clearly
            if prev_end - prev_start < 2.0 * generation + 0.3:
                continue
            checked += 1
            if dispatch > prev_end + EPS:
                late += 1
                report.append((s.task_id, s.index, round(dispatch - prev_end, 3)))
    assert checked >= 5, f"only {checked} segments were eligible: the workload no longer tests overlap"
    assert late == 0, f"segments dispatched after the robot went idle: {report}"


def _read_bag(path: Path):
    from rosbags.highlevel import AnyReader

    from timely_llm_ros.lrtrace.typestore import make_typestore

    out: dict[str, list] = defaultdict(list)
    with AnyReader([path], default_typestore=make_typestore()) as reader:
        for conn, t_ns, raw in reader.messages():
            out[conn.topic].append((t_ns * 1e-9, reader.deserialize(raw, conn.msgtype)))
    return out


def _bag_dir(tmp: Path) -> Path:
    found = [p.parent for p in (tmp / "bag").rglob("metadata.yaml")] + (
        [tmp / "bag"] if (tmp / "bag" / "metadata.yaml").is_file() else []
    )
    assert found, f"no bag (metadata.yaml) under {tmp / 'bag'}"
    return found[0]


@pytest.mark.ros
@pytest.mark.slow
def test_the_bag_holds_everything_with_consistent_timestamps(run):
    from timely_llm_ros.interfaces.mapping import from_stamp
    from timely_llm_ros.ros import convert

    peer = run["peer"]
    bag = _read_bag(_bag_dir(run["tmp"]))

    def stamp(m) -> float:
        return m.sec + m.nanosec * 1e-9

    tasks = {m.task_id for _, m in bag["/tasks"]}
    assert tasks == set(_task_ids())
    for agent in (*DRONES, ARM):
        recorded = [(m.task_id, m.index, m.text) for _, m in bag[f"/{agent}/skill_segments"]]
        seen = [(m.task_id, m.index, m.text) for m in peer.segments[agent]]
        assert recorded == seen and seen, f"/{agent}/skill_segments: bag and wire differ (or empty)"
    fb_bag = sorted((m.task_id, m.index, m.state, stamp(m.stamp)) for _, m in bag["/segment_feedback"])
    fb_wire = sorted((m.task_id, m.index, m.state, from_stamp(m.stamp)) for m in peer.feedback)
    assert fb_bag == fb_wire and len(fb_wire) >= 2 * 7  # STARTED + DONE of at least one segment per task
    ev_bag = sorted((m.task_id, m.kind, m.segment_index, stamp(m.stamp)) for _, m in bag["/trace_events"])
    ev_wire = sorted((m.task_id, m.kind, m.segment_index, from_stamp(m.stamp)) for m in peer.events)
    assert ev_bag == ev_wire and {m.task_id for m in peer.events} == set(_task_ids())
    st_bag = sorted((m.task_id, m.state, stamp(m.stamp)) for _, m in bag["/task_status"])
    st_wire = sorted((m.task_id, m.state, from_stamp(m.stamp)) for v in peer.statuses.values() for m in v)
    assert st_bag == st_wire

    # log time (recorder receipt) never precedes the stamp the sender put on the message
    for topic, items in bag.items():
        for log_t, m in items:
            own = getattr(m, "stamp", None) or (m.header.stamp if hasattr(m, "header") else None)
            if own is None and hasattr(m, "gen_end"):
                own = m.gen_end
            if own is not None and stamp(own) > 0:
                assert log_t >= stamp(own) - EPS, f"{topic}: logged at {log_t} before its stamp {stamp(own)}"

    # per task: ARRIVAL <= DISPATCH(k) <= EXEC_START(k) <= EXEC_END(k) <= COMPLETE
    kinds = convert.EVENT_KIND_NAME
    per_task: dict[str, dict[tuple[str, int], float]] = defaultdict(dict)
    for _, m in bag["/trace_events"]:
        per_task[m.task_id].setdefault((kinds[m.kind], m.segment_index), stamp(m.stamp))
    started = {(m.task_id, m.index): stamp(m.stamp) for _, m in bag["/segment_feedback"] if m.state == 0}
    for task_id, evs in per_task.items():
        arrival = evs[("ARRIVAL", -1)]
        n = 1 + max((k[1] for k in evs if k[0] == "DISPATCH"), default=-1)
        for k in range(n):
            d, s, e = evs[("DISPATCH", k)], evs[("EXEC_START", k)], evs[("EXEC_END", k)]
            assert arrival - EPS <= d <= s + EPS <= e + 2 * EPS, (task_id, k, arrival, d, s, e)
        complete = [t for (kind, _), t in evs.items() if kind == "COMPLETE"]
        if complete:
            assert complete[0] >= evs[("EXEC_END", n - 1)] - EPS
    for agent in (*DRONES, ARM):
        for _, m in bag[f"/{agent}/skill_segments"]:
            g0, g1 = stamp(m.gen_start), stamp(m.gen_end)
            assert 0 < g0 <= g1 + 1e-6
            if (m.task_id, m.index) in started:
                assert g1 <= started[(m.task_id, m.index)] + EPS


@pytest.mark.ros
@pytest.mark.slow
def test_the_time_model_measured_the_run(run):
    refit = run["tmp"] / "refit"
    files = sorted(p.name for p in refit.glob("*.yaml"))
    assert "drone.yaml" in files and "arm.yaml" in files, files
    data = yaml.safe_load((refit / "drone.yaml").read_text())
    assert data["refit"]["segment_ratio_measured_over_expected"]["n"] > 0


# --------------------------------------------------------------------------------------- fleet file
def _write(tmp: Path, data: dict) -> Path:
    path = tmp / "f.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_fleet_files_with_errors_are_refused_with_the_field(tmp_path):
    from timely_llm_ros.fleet import FleetError, load_fleet

    robot = {"agent": "drone_1", "type": "drone"}
    cases = [
        ({"robots": [robot], "planer": {}}, "unknown field(s) 'planer'; known: config_path, planner"),
        ({"robots": [robot, robot]}, "agent 'drone_1' appears twice"),
        ({"robots": [{"agent": "drone 1", "type": "drone"}]}, "robots[0].agent must be a ROS name"),
        (
            {"robots": [{"agent": "boat_1", "type": "boat"}]},
            "robots[0].type must be a robot type (arm, drone",
        ),
        ({"robots": [robot], "workload": {"enabled": True}}, "workload.parameters.workload is required"),
        ({"robots": [robot], "planner": {"enabled": False}}, "the planner cannot be disabled"),
        ({"robots": [robot], "timemodel": {"enabled": "yes"}}, "timemodel.enabled: must be bool, got 'yes'"),
        (
            {"robots": [robot], "planner": {"parameters": {"engine": "simm"}}},
            "planner.parameters.engine: parameter 'engine' must be one of sim, llamacpp, vllm, openai, got 'simm'",
        ),
        (
            {"robots": [robot], "planner": {"parameters": {"polcy": "timely"}}},
            "planner.parameters.polcy: not a planner parameter; known:",
        ),
        ({"robots": [robot], "planner": {"parameters": {"policy": "fifo"}}}, "planner.parameters.policy:"),
    ]
    for data, needle in cases:
        with pytest.raises(FleetError, match=re.escape(needle)):
            load_fleet(_write(tmp_path, data))
    with pytest.raises(FleetError, match="cannot read"):
        load_fleet(tmp_path / "missing.yaml")


def test_the_shipped_fleet_files_describe_the_documented_graphs():
    from timely_llm_ros.fleet import fleet_nodes, load_fleet

    for name in ("fleet.yaml", "demo_fleet.yaml"):
        nodes = fleet_nodes(load_fleet(REPO / "config" / name))
        roles = [n.role for n in nodes]
        assert roles.count("robot") == 4 and roles.count("planner") == 1
        robots = [(n.arguments[0], n.namespace, n.params["agent_id"]) for n in nodes if n.role == "robot"]
        assert robots == [
            ("drone", "drone_1", "drone_1"),
            ("drone", "drone_2", "drone_2"),
            ("drone", "drone_3", "drone_3"),
            ("arm", "arm_1", "arm_1"),
        ]
        planner = next(n for n in nodes if n.role == "planner")
        assert planner.params["agent_types"] == [
            "drone_1:drone",
            "drone_2:drone",
            "drone_3:drone",
            "arm_1:arm",
        ]
        # the recorder starts before the robots and the planner (so it sees their first messages)
        assert roles.index("recorder") < roles.index("robot") < roles.index("planner")
    demo = fleet_nodes(load_fleet(REPO / "config" / "demo_fleet.yaml"))
    workload = next(n for n in demo if n.role == "workload")
    planner = next(n for n in demo if n.role == "planner")
    assert planner.params["sim_plans"] == ["catalog", workload.params["workload"]]
    assert workload.params["agents"] == planner.params["agent_types"]


def test_dry_run_prints_every_node_command(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.fleet", str(REPO / "config" / "fleet.yaml"), "--dry-run"],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert out.returncode == 0, out.stderr
    cmds = [ln for ln in out.stdout.splitlines() if " -m timely_llm_ros.nodes." in ln]
    assert len(cmds) == 7  # time model, recorder, 3 drones, arm, planner (workload disabled)
    assert any("timely_llm_ros.nodes.robot drone --ros-args" in c and "__ns:=/drone_2" in c for c in cmds)
    bad = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.fleet", str(tmp_path / "none.yaml")],
        capture_output=True,
        text=True,
        timeout=120,
        env=dict(os.environ),
    )
    assert bad.returncode == 2 and "cannot read" in bad.stderr


def test_launch_files_compile_and_build_the_graph_from_the_fleet_file():
    import ast
    import py_compile

    for name in ("fleet.launch.py", "demo.launch.py"):
        py_compile.compile(str(REPO / "launch" / name), doraise=True)
    tree = ast.parse((REPO / "launch" / "fleet.launch.py").read_text())
    names = {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert {"fleet_nodes", "load_fleet", "generate_launch_description"} <= imported | names | {
        f.name for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
    }
    assert {"Node", "DeclareLaunchArgument", "OpaqueFunction", "LaunchDescription"} <= imported
    demo = (REPO / "launch" / "demo.launch.py").read_text()
    assert "fleet.launch.py" in demo and "demo_fleet.yaml" in demo


@pytest.mark.ros
@pytest.mark.slow
def test_timeline_and_report_read_the_recorded_bag(run, tmp_path):
    """Issue 7 on a bag a live fleet recorded (not a simulated one): one timeline row per task with
    generation and execution bars, and a report that scores every task under its class."""
    from timely_llm_ros.lrtrace.from_bag import load_run
    from timely_llm_ros.lrtrace.timeline_model import EXECUTING, GENERATING
    from timely_llm_ros.viz.layout import make_layout
    from timely_llm_ros.viz.report import build, write_outputs

    run_ = load_run(_bag_dir(run["tmp"]))
    layout = make_layout(run_.model, max_tasks=0)
    assert sorted(r.label for r in layout.rows) == sorted(_task_ids())
    completed = {
        tid for tid, msgs in run["peer"].statuses.items() if any(m.state == 5 for m in msgs)
    }  # TaskStatus.COMPLETED
    for row in layout.rows:
        kinds = {b.kind for b in row.bars}
        assert GENERATING in kinds, f"{row.label}: no generation bar"
        if row.label in completed:
            assert EXECUTING in kinds, f"{row.label}: completed but no execution bar"
    result = build(run_)
    assert len(result.records) == len(_task_ids())
    assert sum(m["n"] for c, m in result.classes.items() if c != "all") == len(_task_ids())
    assert result.policy == "timely"
    written = {p.name for p in write_outputs(run_, result, tmp_path / "report")}
    assert {"report.txt", "metrics.json", "timeline.png", "timeline.html"} <= written
