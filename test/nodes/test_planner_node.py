"""Planner node as an OS process on real DDS, with fake robots in the test process.

One planner process (simulated engine in real time) serves every test of this module; each test
uses its own agents and task ids. Checks: the segment stream (order, texts, parsed calls, estimates,
final flag and closing marker, one publisher per robot), the status sequence and the trace events of a task, planner-assigned ids,
and the parameter descriptors. Nothing is timed: every wait polls with a generous bound.
"""

from __future__ import annotations

import math

import pytest
from planner_testkit import is_closing_marker, make_task, planner_graph, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 60.0
CAT = ("[A] Could you find the cat? If so, go to it.", "[]")  # LRTrace task 1 (catalog plan)


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    params = {"robot_grace_period": 5.0, "segment_timeout_margin": 30.0}
    robots = {"pn_drone": "done", "pn_drone2": "done", "pn_arm": "done"}
    with planner_graph(tmp_path_factory.mktemp("planner"), params, robots, "pn_peer") as pair:
        yield pair


def test_a_task_is_planned_in_segments_executed_and_completed(graph):
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.core.exectime import load_exec_time_model
    from timely_llm_ros.core.skills import load_skill_set
    from timely_llm_ros.interfaces.mapping import from_stamp
    from timely_llm_ros.ros import convert
    from timely_llm_ros.workload.tasks import load_catalog

    peer, proc = graph
    peer.task_pub.publish(make_task("pn-cat", "pn_drone", CAT[0], scene=CAT[1]))
    wait_for(lambda: peer.final_state("pn-cat") is not None, WAIT, "pn-cat to finish", procs=(proc,))
    assert peer.final_state("pn-cat") == ev.COMPLETED, peer.final("pn-cat").reason
    states = peer.states("pn-cat")
    assert states[:3] == [ev.ACCEPTED, ev.QUEUED, ev.GENERATING] and states[-1] == ev.COMPLETED
    assert ev.SUSPENDED in states  # segmented generation: suspended after each dispatched segment

    plan = load_catalog().get(1).primary.plan
    sent_all = [s for s in peer.segments["pn_drone"] if s.task_id == "pn-cat"]
    assert [s.index for s in sent_all] == list(range(len(sent_all)))
    # the plan ends with "}->False" (no skill call) after its last executable segment: that tail
    # closes the condition and returns, so it is a real final segment, not a text-less closing marker
    tail = sent_all[-1]
    assert tail.final and not tail.calls and tail.text.replace(" ", "").endswith("}->False")
    assert not is_closing_marker(tail)
    assert any(f.task_id == "pn-cat" and f.index == tail.index for f in peer.feedback_sent)  # answered
    segs = sent_all
    assert len(segs) >= 3
    sent = "".join(s.text for s in segs).replace(" ", "")
    assert sent == plan.replace(" ", "").rstrip(";")  # the segments are the whole plan, in order
    sset = load_skill_set("tello_minispec")
    model = load_exec_time_model()
    calls_by_seg = sset.parse_segments([s.text for s in segs])
    for seg, calls in zip(segs, calls_by_seg):
        assert [c.name for c in seg.calls] == [c.name for c in calls]
        assert [c.source for c in seg.calls] == [c.source for c in calls]
        est = model.estimate("drone", calls)
        assert seg.exec_time_min == pytest.approx(est.minimum)
        assert seg.exec_time_expected == pytest.approx(est.expected)
        assert from_stamp(seg.gen_start) <= from_stamp(seg.gen_end)
        assert seg.agent_id == "pn_drone"
    assert not any(s.final for s in segs[:-1])

    final = peer.final("pn-cat")
    assert final.has_response and final.response_time >= 0.0
    r = final.response_time
    assert final.utility == pytest.approx(1.0 if r <= 1.0 else 1.0 - 2.0 * (r - 1.0))

    # the trace events come on their own topic: the final TaskStatus may arrive before the last one
    def complete_seen() -> bool:
        return any(convert.EVENT_KIND_NAME[e.kind] == ev.COMPLETE for e in peer.events_of("pn-cat"))

    wait_for(complete_seen, WAIT, "pn-cat's COMPLETE trace event", procs=(proc,))
    events = peer.events_of("pn-cat")
    kinds = [convert.EVENT_KIND_NAME[e.kind] for e in events]
    for kind in (
        ev.ARRIVAL,
        ev.ADMIT,
        ev.GEN_START,
        ev.SEGMENT_READY,
        ev.DISPATCH,
        ev.SUSPEND,
        ev.RESUME,
        ev.EXEC_START,
        ev.EXEC_END,
        ev.COMPLETE,
    ):
        assert kind in kinds, f"{kind} missing from {kinds}"
    assert kinds[0] == ev.ARRIVAL and kinds[-1] == ev.COMPLETE
    assert kinds.count(ev.DISPATCH) == len(segs) == kinds.count(ev.EXEC_END)
    stamps = [from_stamp(e.stamp) for e in events]
    assert all(b >= a - 1e-6 for a, b in zip(stamps, stamps[1:])), "trace events out of time order"
    # every segment was dispatched before the robot started it
    for i in range(len(segs)):
        dispatch = next(
            e for e in events if e.kind == convert.EVENT_KIND_CODE[ev.DISPATCH] and e.segment_index == i
        )
        start = next(
            e for e in events if e.kind == convert.EVENT_KIND_CODE[ev.EXEC_START] and e.segment_index == i
        )
        assert from_stamp(start.stamp) >= from_stamp(dispatch.stamp) - 1e-6


def test_one_segment_publisher_per_robot_whatever_the_tasks_tuf(graph):
    from timely_llm_ros.core.tuf import URGENT_TUF

    peer, proc = graph
    peer.task_pub.publish(
        make_task(
            "pn-urgent",
            "pn_drone2",
            "[A] Take a picture.",
            tuf=(URGENT_TUF.ert, URGENT_TUF.alpha, URGENT_TUF.beta),
        )
    )
    peer.task_pub.publish(make_task("pn-normal", "pn_drone2", "[A] Take a picture."))
    wait_for(
        lambda: peer.final_state("pn-urgent") and peer.final_state("pn-normal"),
        WAIT,
        "both tasks",
        procs=(proc,),
    )
    infos = peer.node.get_publishers_info_by_topic("/pn_drone2/skill_segments")
    assert len(infos) == 1  # one publisher per robot: its segments stay in dispatch order on the topic
    (info,) = infos
    assert round(info.qos_profile.lifespan.nanoseconds / 1e9, 3) == 30.0  # segment_lifespan default
    assert info.qos_profile.reliability.name == "RELIABLE"
    assert info.qos_profile.durability.name == "VOLATILE"
    assert info.qos_profile.depth == 10 or info.qos_profile.history.name == "UNKNOWN"
    assert peer.final_state("pn-urgent") == peer.final_state("pn-normal") == "COMPLETED"
    # one task at a time: every segment of the first task came before any of the second
    order = [s.task_id for s in peer.segments["pn_drone2"]]
    assert order == sorted(order, key=order.index) and order.index("pn-normal") > max(
        i for i, t in enumerate(order) if t == "pn-urgent"
    )
    segs = [s for s in peer.segments["pn_drone2"] if s.task_id == "pn-urgent"]
    assert segs[-1].final and [s.final for s in segs[:-1]] == [False] * (len(segs) - 1)


def test_an_empty_task_id_is_assigned_and_reported(graph):
    peer, proc = graph
    before = set(peer.statuses)
    peer.task_pub.publish(
        make_task("", "pn_arm", "[A] Pick up the pencil.", robot_type="arm", skill_set="arm_fltrnn")
    )

    def assigned():
        new = [t for t in set(peer.statuses) - before if t.startswith("pn_arm-")]
        return new and peer.final_state(new[0]) is not None

    wait_for(assigned, WAIT, "a status for the id-less task", procs=(proc,))
    (tid,) = [t for t in set(peer.statuses) - before if t.startswith("pn_arm-")]
    assert peer.final_state(tid) == "COMPLETED", peer.final(tid).reason
    segs = [s for s in peer.segments["pn_arm"] if s.task_id == tid and s.calls]
    assert [c.name for s in segs for c in s.calls] == ["move_to", "take"]
    assert segs[0].calls[0].args == ["0.48", "0.55"] and segs[-1].calls[0].args == ["'pencil'"]


def test_parameters_are_declared_with_descriptors_and_validated(graph):
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import DescribeParameters, SetParameters

    peer, proc = graph
    node = peer.node
    describe = node.create_client(DescribeParameters, "/planner/describe_parameters")
    setp = node.create_client(SetParameters, "/planner/set_parameters")
    wait_for(lambda: describe.service_is_ready() and setp.service_is_ready(), WAIT, "parameter services")
    names = ["engine", "segment_timeout_factor", "policy"]
    fut = describe.call_async(DescribeParameters.Request(names=names))
    wait_for(fut.done, WAIT, "describe_parameters")
    engine, factor, policy = fut.result().descriptors
    # engine and policy are read by configure: not read-only for ROS, refused while configured
    assert "sim" in engine.additional_constraints and engine.description
    assert "unconfigured" in engine.additional_constraints and "unconfigured" in policy.additional_constraints
    assert factor.floating_point_range[0].from_value == 1.0 and not factor.read_only

    def set_param(name, value: ParameterValue):
        f = setp.call_async(SetParameters.Request(parameters=[Parameter(name=name, value=value)]))
        wait_for(f.done, WAIT, f"set {name}")
        return f.result().results[0]

    bad = set_param(
        "segment_timeout_factor", ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=0.5)
    )
    assert not bad.successful and "1.0" in bad.reason
    ro = set_param("engine", ParameterValue(type=ParameterType.PARAMETER_STRING, string_value="vllm"))
    assert not ro.successful and "cleanup" in ro.reason  # active: the lifecycle recipe is named
    bad_types = set_param(
        "agent_types",
        ParameterValue(type=ParameterType.PARAMETER_STRING_ARRAY, string_array_value=["drone_1"]),
    )
    assert not bad_types.successful and "agent:robot_type" in bad_types.reason
    ok = set_param(
        "segment_timeout_factor", ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=4.0)
    )
    assert ok.successful
    assert math.isfinite(4.0)


def test_bad_start_up_parameters_exit_with_a_clear_error(tmp_path):
    import os
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "timely_llm_ros.nodes.planner", "--ros-args", "-p", "policy:=nonsense"]
    out = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2
    assert "unknown policy 'nonsense'" in out.stderr
    cmd[-1] = "sim_plans:=['no-such-workload']"
    out = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "no-such-workload" in out.stderr
    # engine options the sim engine does not take are an error, never silently ignored
    cmd[-1] = "engine_options:={model_path: /m.gguf}"
    out = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "engine 'sim' has no parameter(s) ['model_path']" in out.stderr
    cmd[-1] = "engine_options:={kv_policy: sometimes}"
    out = subprocess.run(cmd, env=dict(os.environ), capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "kv_policy must be one of" in out.stderr


def test_the_sim_engine_takes_its_kv_options():
    from timely_llm_ros.engines.sim_realtime import RealtimeSimEngine

    eng = RealtimeSimEngine(clock=lambda: 0.0, kv_policy="discard", chunked_prefill=True)
    assert (eng.kv.policy, eng.chunked) == ("discard", True)
    assert eng.kv.eviction == RealtimeSimEngine(clock=lambda: 0.0).kv.eviction  # the profile's order stays


# --------------------------------------------------------------------------------------- pieces
class _FakeClock:
    """Clock + stop event for RealtimeSimEngine: ``wait(d)`` advances the clock by d (no sleeping)."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t
        self.waits: list[float] = []

    def __call__(self) -> float:
        return self.t

    def wait(self, d: float) -> bool:
        self.waits.append(d)
        self.t += d
        return False


def test_realtime_sim_engine_waits_until_each_modelled_step_end():
    from timely_llm_ros.engines.sim import SimEngine
    from timely_llm_ros.engines.sim_realtime import RealtimeSimEngine

    clock = _FakeClock()
    eng = RealtimeSimEngine("llama3-8b-fp16-rtx4090", clock=clock, stop=clock)
    ref = SimEngine("llama3-8b-fp16-rtx4090", start_time=100.0)
    for e in (eng, ref):
        e.admit(0, e.tokenize("Task: take a picture"), max_tokens=16, script=e.tokenize("tp();"))
    outs = eng.step()
    ref_outs = ref.step()
    # same modelled timing as the virtual-clock engine; the call returned at the step's end
    assert [o.t for o in outs] == pytest.approx([o.t for o in ref_outs])
    assert clock.t == pytest.approx(outs[0].t) and clock.waits == [pytest.approx(outs[0].t - 100.0)]
    # the engine was idle for 5 s (planner busy elsewhere): the next step starts from "now"
    clock.t += 5.0
    ref.advance_to(clock.t)
    assert eng.step()[0].t == pytest.approx(ref.step()[0].t)
    assert eng.now() == clock.t
    # a host slower than the model (each clock reading 1 s later): no wait, the lateness is counted
    waits = len(clock.waits)
    ticks = iter(range(10**6))
    eng._clock = lambda: 1000.0 + next(ticks)  # the engine's injected clock
    eng.step()
    assert len(clock.waits) == waits and eng.late_s > 0.5


def test_plan_table_matches_instruction_and_scene_of_every_workload_task():
    from timely_llm_ros.nodes.sim_support import PlanTable
    from timely_llm_ros.workload import resolve_workload

    table = PlanTable()
    assert table.load("catalog") >= 11
    for spec in resolve_workload("wid1:duration=30").tasks:
        assert table.lookup(spec.skill_set, spec.instruction, spec.scene) == spec.reference_plan
    table.add("s", "i", "scene one", "a();")
    table.add("s", "i", "scene two", "b();")
    assert table.lookup("s", "i", "scene two") == "b();"
    strict = PlanTable(fallback=False)
    strict.load("catalog")
    strict.add("s", "i", "scene one", "a();")
    strict.add("s", "i", "scene two", "b();")
    assert strict.lookup("s", "i", "other scene") is None  # ambiguous without the exact scene
    assert strict.lookup("tello_minispec", "[A] Juggle.") is None and strict.fallbacks == 0


def test_plan_table_plans_any_instruction_from_the_closest_known_plan():
    from timely_llm_ros.core.skills import load_skill_set
    from timely_llm_ros.nodes.sim_support import PlanTable, grammar_plan

    table = PlanTable()
    table.load("catalog")
    # the README's example: the catalog instruction without its "[A]" tag
    cat = "?s('cat')==True{g('cat')}->False"
    assert table.lookup("tello_minispec", "Could you find the cat? If so, go to it.") == cat
    assert table.lookup("tello_minispec", "Scene: [] Task: [A] could you FIND the cat") == cat
    assert (
        table.lookup("tello_minispec", "Look around in quarter turns, a picture after each.")
        == "4{tc(90);tp}"
    )
    assert table.lookup("robot_arm", "Put the red box on the blue box.").startswith("sc('red_box')")
    assert table.fallbacks == 4
    # no known plan at all: a valid one-statement program from the grammar; unknown set: None
    tello = load_skill_set("tello_minispec")
    assert tello.parse_plan(grammar_plan(tello, "anything")) and grammar_plan(tello, "x") == "mf(20);"
    chat = table.lookup("chatbot_sentence", "[Q] What is ROS 2?")
    assert chat.endswith(".") and "What is ROS 2" in chat
    assert table.lookup("no_such_set", "anything") is None


def test_conversions_round_trip_and_refuse_bad_values():
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.core.task import TaskRejected, TaskSpec
    from timely_llm_ros.core.tuf import URGENT_TUF
    from timely_llm_ros.interfaces.mapping import Feedback, from_stamp, split_call_args, task_from_msg
    from timely_llm_ros.msg import TaskStatus, TraceEvent
    from timely_llm_ros.ros import convert

    t = 1_700_000_123.456789
    assert from_stamp(convert.to_stamp(t)) == pytest.approx(t, abs=1e-9)
    assert convert.to_stamp(math.nan).sec == 0 and convert.to_stamp(-1.0).nanosec == 0
    spec = TaskSpec("t1", "drone_1", "drone", "tello_minispec", "go", URGENT_TUF, scene="[]", max_tokens=64)
    back = task_from_msg(convert.task_to_msg(spec), arrival=5.0)
    got = (back.task_id, back.tuf, back.max_tokens, back.arrival, back.scene)
    assert got == ("t1", URGENT_TUF, 64, 5.0, "[]")
    msg = convert.task_to_msg(spec)
    msg.max_tokens = 0
    assert task_from_msg(msg, 0.0, default_max_tokens=99).max_tokens == 99
    assert task_from_msg(msg, 0.0).overrun == "" and msg.overrun == ""  # "" = planner default
    msg.overrun = " kill "
    assert convert.task_to_msg(task_from_msg(msg, 0.0)).overrun == "kill"
    msg.overrun = "x" * 70_000
    with pytest.raises(TaskRejected, match="overrun must be one of") as bad:
        task_from_msg(msg, 0.0)
    assert len(bad.value.reason) < 200  # an unknown strategy is named, cut short
    msg.overrun = ""
    msg.tuf.beta = -1.0
    with pytest.raises(TaskRejected, match="invalid TUF: beta must be > 0"):
        task_from_msg(msg, 0.0)
    assert split_call_args('f(a, \'b, c\', g(1,2), "x\\"y")') == ["a", "'b, c'", "g(1,2)", '"x\\"y"']
    assert split_call_args("tp()") == [] and split_call_args("say") == []
    for name in ev.EVENT_KINDS:
        e = ev.TraceEvent(t, name, "t1", "drone_1", 2, 0.5, "why")
        assert convert.event_from_msg(convert.event_to_msg(e)).kind == name
    assert convert.event_to_msg(ev.TraceEvent(t, ev.FAIL, "t1")).kind == TraceEvent.FAIL
    with pytest.raises(ValueError, match="unknown trace event kind"):
        convert.event_to_msg(ev.TraceEvent(t, "LAUNCH", "t1"))
    status = convert.status_to_msg("t1", "drone_1", ev.COMPLETED, t, response_time=0.3, utility=2.0)
    assert status.state == TaskStatus.COMPLETED and status.has_response
    assert convert.status_name(status) == "COMPLETED"
    assert not convert.status_to_msg("t1", "d", ev.QUEUED, t).has_response
    fb = convert.feedback_to_msg("t1", "drone_1", 3, ev.DONE, t, 1.5, "ok")
    expected = Feedback("t1", "drone_1", 3, ev.DONE, pytest.approx(t), 1.5, "ok")
    assert convert.feedback_from_msg(fb) == expected
    fb.state = 9
    with pytest.raises(ValueError, match="unknown SegmentFeedback state 9"):
        convert.feedback_from_msg(fb)
