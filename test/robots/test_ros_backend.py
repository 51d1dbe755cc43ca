"""The generic ROS backend against real rclpy action/service servers over DDS (standard interface types).

The servers (``Stack``) are a fault-injecting stand-in for a robot's own stack: a goal that
succeeds, one that is rejected, one that aborts, one that never ends (timed out / cancelled), a
service that reports failure, one that is too slow, and a topic. The backend runs behind the robot's
real :class:`SegmentRunner` (parse → backend → outcome), as in the robot node.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

pytestmark = [pytest.mark.ros]

NS = "rv"
SKILLS = [
    {"abbr": "drive", "name": "drive", "args": [{"name": "steps", "type": "int", "min": 1, "max": 20}]},
    {
        "abbr": "odo",
        "name": "odometer",
        "args": [{"name": "steps", "type": "int"}],
        "returns": "int",
        "query": True,
    },
    {
        "abbr": "far",
        "name": "far",
        "args": [{"name": "steps", "type": "int"}],
        "returns": "int",
        "query": True,
    },
    {"abbr": "refused", "name": "refused", "args": [{"name": "steps", "type": "int"}]},
    {"abbr": "crash", "name": "crash", "args": []},
    {"abbr": "hang", "name": "hang", "args": []},
    {"abbr": "hang_short", "name": "hang_short", "args": []},
    {"abbr": "light", "name": "light", "args": [{"name": "lit", "type": "bool"}]},
    {"abbr": "slow", "name": "slow", "args": []},
    {"abbr": "say", "name": "say", "args": [{"name": "text", "type": "str"}]},
]
MAPPING = {
    "wait_for_servers": 90.0,  # generous: discovery on a loaded 2-core machine can take many seconds
    "skills": {
        "drive": {
            "action": "test_msgs/action/Fibonacci",
            "name": "drive",
            "goal": {"order": "$steps"},
            "timeout": 20,
        },
        "odo": {
            "action": "test_msgs/action/Fibonacci",
            "name": "drive",
            "goal": {"order": "$steps"},
            "returns": "sequence[-1]",
            "timeout": 20,
        },
        "far": {
            "action": "test_msgs/action/Fibonacci",
            "name": "drive",
            "goal": {"order": "$steps"},
            "returns": "sequence[9]",
        },
        "refused": {
            "action": "test_msgs/action/Fibonacci",
            "name": "drive_reject",
            "goal": {"order": "$steps"},
        },
        "crash": {"action": "test_msgs/action/Fibonacci", "name": "drive_abort", "goal": {"order": 2}},
        "hang": {
            "action": "test_msgs/action/Fibonacci",
            "name": "drive_hang",
            "goal": {"order": 1},
            "timeout": 60,
        },
        "hang_short": {
            "action": "test_msgs/action/Fibonacci",
            "name": "drive_hang",
            "goal": {"order": 1},
            "timeout": 0.5,
        },
        "light": {
            "service": "std_srvs/srv/SetBool",
            "name": "light",
            "request": {"data": "$lit"},
            "success": "success",
            "error": "message",
        },
        "slow": {"service": "std_srvs/srv/Trigger", "name": "slow", "timeout": 0.5},
        "say": {"topic": "std_msgs/msg/String", "name": "speech", "message": {"data": "$text"}},
    },
}


def skill_set_doc(mapping: dict | None = None, skills: list | None = None) -> dict:
    full = []
    for s in skills or SKILLS:
        full.append({"returns": "none", "query": False, "description": s["name"], **s})
    return {
        "name": "rv_skills",
        "robot_type": "rover",
        "language": "call",
        "prompt": "Plan.\n",
        "max_segment_tokens": 32,
        "segment_gen_estimate_s": 0.2,
        "skills": full,
        "backends": {"ros": mapping if mapping is not None else MAPPING},
    }


def write_skill_set(tmp: Path, doc: dict) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "rv_skills.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


class Stack:
    """The robot's own servers (see the module docstring); counters say what they saw."""

    def __init__(self, node) -> None:
        from rclpy.action import ActionServer, CancelResponse, GoalResponse
        from rclpy.callback_groups import ReentrantCallbackGroup
        from std_msgs.msg import String
        from std_srvs.srv import SetBool, Trigger
        from test_msgs.action import Fibonacci

        self.Fibonacci = Fibonacci
        self.seen: dict[str, int] = {"cancel_requests": 0, "hang_started": 0, "hang_cancelled": 0}
        self.said: list[str] = []
        g = ReentrantCallbackGroup()
        accept = lambda _c: CancelResponse.ACCEPT  # noqa: E731
        self.servers = [
            ActionServer(node, Fibonacci, "drive", self._drive, callback_group=g, cancel_callback=accept),
            ActionServer(
                node,
                Fibonacci,
                "drive_reject",
                self._drive,
                callback_group=g,
                goal_callback=lambda _g: GoalResponse.REJECT,
            ),
            ActionServer(node, Fibonacci, "drive_abort", self._abort, callback_group=g),
            ActionServer(
                node, Fibonacci, "drive_hang", self._hang, callback_group=g, cancel_callback=self._on_cancel
            ),
        ]
        node.create_service(SetBool, "light", self._light, callback_group=g)
        node.create_service(Trigger, "slow", self._slow, callback_group=g)
        node.create_subscription(String, "speech", lambda m: self.said.append(m.data), 10, callback_group=g)

    def _drive(self, handle):
        result = self.Fibonacci.Result()
        for i in range(handle.request.order):
            time.sleep(0.02)
            result.sequence.append(100 + i)
        handle.succeed()
        return result

    def _abort(self, handle):
        handle.abort()
        return self.Fibonacci.Result(sequence=[7])

    def _on_cancel(self, _goal):
        from rclpy.action import CancelResponse

        self.seen["cancel_requests"] += 1
        return CancelResponse.ACCEPT

    def _hang(self, handle):
        self.seen["hang_started"] += 1
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if handle.is_cancel_requested:
                self.seen["hang_cancelled"] += 1
                handle.canceled()
                return self.Fibonacci.Result()
            time.sleep(0.02)
        handle.succeed()
        return self.Fibonacci.Result()

    def _light(self, req, resp):
        resp.success = bool(req.data)
        resp.message = "on" if req.data else "bulb broken: cannot switch off"
        return resp

    def _slow(self, _req, resp):
        time.sleep(2.0)
        resp.success = True
        return resp


@pytest.fixture(scope="module")
def graph(tmp_path_factory):
    """rclpy with two nodes in /rv — the robot (host of the backend) and its stack — spinning; one
    graph for the module, so that DDS discovery (slow on a loaded machine) happens once."""
    import rclpy
    from rclpy.executors import MultiThreadedExecutor

    from timely_llm_ros.core.skills import load_skill_set_file

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    robot = rclpy.create_node("rover", namespace=f"/{NS}", context=ctx)
    stack_node = rclpy.create_node("stack", namespace=f"/{NS}", context=ctx)
    planner = rclpy.create_node("fake_planner", context=ctx)
    stack = Stack(stack_node)
    executor = MultiThreadedExecutor(num_threads=6, context=ctx)
    for n in (robot, stack_node, planner):
        executor.add_node(n)
    spinner = threading.Thread(target=executor.spin, daemon=True)
    spinner.start()
    tmp_path = tmp_path_factory.mktemp("rv")
    robot.skill_set = load_skill_set_file(write_skill_set(tmp_path, skill_set_doc()))
    robot.agent_id = NS
    robot.p = {}
    yield SimpleNamespace(robot=robot, stack=stack, planner=planner, ctx=ctx, tmp=tmp_path, backend=None)
    executor.shutdown(timeout_sec=5)
    for n in (robot, stack_node, planner):
        n.destroy_node()
    rclpy.shutdown(context=ctx)
    spinner.join(timeout=10)


def _runner(graph):
    """The backend (made once per module, by name as the robot node does) behind a fresh runner."""
    from timely_llm_ros.robots.plugins import create_backend
    from timely_llm_ros.robots.runner import SegmentRunner

    if graph.backend is None:
        graph.backend = create_backend("ros", graph.robot)
        graph.backend.start()
    return graph.backend, SegmentRunner(graph.robot.skill_set, graph.backend)


def _run(runner, task: str, text: str, index: int = 0):
    from timely_llm_ros.robots.task_queue import SegmentItem

    return runner.run(SegmentItem(task, index, text, final=True))


def test_actions_services_and_topics_succeed_and_return_values(graph):
    backend, runner = _runner(graph)
    out = _run(runner, "t-ok", "drive(3); light(True); say('hello rover');")
    assert out.ok, out.detail
    out = _run(runner, "t-query", "odo(4);")
    assert out.ok and "odo(4)=103" in out.detail  # returns: sequence[-1] of the result
    deadline = time.monotonic() + 10
    while not graph.stack.said and time.monotonic() < deadline:
        time.sleep(0.05)
    assert graph.stack.said == ["hello rover"]
    assert backend.status()["failed"] == 0


@pytest.mark.parametrize(
    "plan,reason",
    [
        ("refused(2);", "action 'drive_reject' (test_msgs/action/Fibonacci) rejected the goal"),
        ("crash();", "action 'drive_abort' (test_msgs/action/Fibonacci) aborted"),
        ("light(False);", "reported failure (success = False): bulb broken: cannot switch off"),
        ("slow();", "service 'slow' (std_srvs/srv/Trigger) timed out after 0.5 s"),
        ("far(2);", "action 'drive' (test_msgs/action/Fibonacci) replied without the mapped field"),
        ("drive(0);", "argument 'steps' of drive (drive) = 0 is below the minimum 1"),
    ],
)
def test_rejected_failed_and_slow_calls_fail_the_segment_with_the_reason(graph, plan, reason):
    _, runner = _runner(graph)
    out = _run(runner, f"t-{plan[:4]}", plan)
    assert not out.ok and reason in out.detail, out.detail


def test_a_goal_that_outlives_its_timeout_is_cancelled(graph):
    _, runner = _runner(graph)
    before = graph.stack.seen["hang_cancelled"]
    out = _run(runner, "t-hang", "hang_short();")
    assert not out.ok and "timed out after 0.5 s" in out.detail and "goal cancelled" in out.detail
    deadline = time.monotonic() + 30
    while graph.stack.seen["hang_cancelled"] <= before and time.monotonic() < deadline:
        time.sleep(0.05)
    assert graph.stack.seen["hang_cancelled"] == before + 1  # the server really stopped the motion


def test_the_planner_ending_the_task_cancels_the_running_goal(graph):
    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.msg import TaskStatus
    from timely_llm_ros.ros import qos

    backend, runner = _runner(graph)
    seen = dict(graph.stack.seen)
    cancelled = backend.status()["cancelled"]
    pub = graph.planner.create_publisher(TaskStatus, topics.TASK_STATUS, qos.status_qos())
    result: list = []
    worker = threading.Thread(target=lambda: result.append(_run(runner, "t-cancel", "hang(); drive(1);")))
    worker.start()
    deadline = time.monotonic() + 60
    while (
        graph.stack.seen["hang_started"] == seen["hang_started"] or pub.get_subscription_count() < 1
    ) and time.monotonic() < deadline:  # the backend listens
        time.sleep(0.05)
    assert graph.stack.seen["hang_started"] == seen["hang_started"] + 1
    other = TaskStatus(task_id="another-task", agent_id=NS, state=TaskStatus.FAILED, reason="not ours")
    pub.publish(other)  # a status of another task must not cancel this one
    time.sleep(0.5)
    assert graph.stack.seen["cancel_requests"] == seen["cancel_requests"]
    pub.publish(TaskStatus(task_id="t-cancel", agent_id=NS, state=TaskStatus.EXPIRED, reason="too late"))
    worker.join(timeout=60)
    assert result, "the cancelled segment never returned"
    out = result[0]
    assert not out.ok and "goal cancelled: the planner marked the task EXPIRED: too late" in out.detail
    assert graph.stack.seen["hang_cancelled"] == seen["hang_cancelled"] + 1
    assert backend.status()["cancelled"] == cancelled + 1
    # the next task runs normally
    assert _run(runner, "t-next", "drive(1);").ok


def test_missing_servers_fail_the_start_up_with_their_names(graph):
    from timely_llm_ros.core.skills import load_skill_set_file
    from timely_llm_ros.robots.plugins import create_backend
    from timely_llm_ros.robots.ros_backend_map import MappingError

    mapping = {
        "wait_for_servers": 0.5,
        "skills": {
            **MAPPING["skills"],
            "drive": {
                "action": "test_msgs/action/Fibonacci",
                "name": "no_such_drive",
                "goal": {"order": "$steps"},
            },
        },
    }
    shared = graph.robot.skill_set
    graph.robot.skill_set = load_skill_set_file(
        write_skill_set(graph.tmp / "missing", skill_set_doc(mapping))
    )
    try:
        backend = create_backend("ros", graph.robot)
        with pytest.raises(
            MappingError,
            match=r"no server within 0.5 s .* action 'no_such_drive' .* as "
            r"/rv/no_such_drive",
        ):
            backend.start()
    finally:
        graph.robot.skill_set = shared


# ------------------------------------------------------------------ mappings checked at start-up
def _mutated(change) -> dict:
    doc = skill_set_doc(yaml.safe_load(yaml.safe_dump(MAPPING)))
    change(doc)
    return doc


def _ros(doc: dict) -> dict:
    return doc["backends"]["ros"]["skills"]


@pytest.mark.parametrize(
    "change,fragment",
    [
        (
            lambda d: _ros(d)["drive"].update(action="nav2_msgs/action/NavigateToPose"),
            "backends.ros.skills.drive.action: interface package 'nav2_msgs' is not installed",
        ),
        (
            lambda d: _ros(d)["drive"].update(action="test_msgs/action/Fib"),
            "backends.ros.skills.drive.action: test_msgs.action has no 'Fib'",
        ),
        (
            lambda d: _ros(d)["drive"].update(action="std_srvs/srv/SetBool"),
            "backends.ros.skills.drive.action: 'std_srvs/srv/SetBool' is not valid here",
        ),
        (
            lambda d: _ros(d)["drive"]["goal"].update(speed=3),
            "backends.ros.skills.drive.goal: test_msgs/Fibonacci_Goal has no field 'speed'",
        ),
        (
            lambda d: _ros(d)["drive"].update(goal={"order": "$distance"}),
            "backends.ros.skills.drive.goal.order: 'distance' is not an argument of skill 'drive' (arguments: steps)",
        ),
        (
            lambda d: _ros(d)["say"].update(message={"data": 5}),
            "backends.ros.skills.say.message.data: constant 5 does not fit field 'data' of type string",
        ),
        (
            lambda d: _ros(d)["light"].update(request={"data": "$lit"}, success="message"),
            "backends.ros.skills.light.success: field 'message' is a string; give {field: ..., equals: <value>}",
        ),
        (
            lambda d: _ros(d)["odo"].pop("returns"),
            "backends.ros.skills.odo: skill 'odo' returns int; say which field of the result it returns",
        ),
        (
            lambda d: _ros(d)["drive"].update(returns="sequence"),
            "backends.ros.skills.drive.returns: field 'sequence' is a sequence<int32>; it must be a scalar",
        ),
        (
            lambda d: _ros(d)["say"].update(returns="data"),
            "backends.ros.skills.say.returns: a topic message has no reply to read 'returns' from",
        ),
        (lambda d: _ros(d).pop("slow"), "backends.ros.skills: no mapping for skill(s) slow"),
        (
            lambda d: _ros(d).update(fly={"topic": "std_msgs/msg/String", "name": "x"}),
            "backends.ros.skills.fly: 'fly' is not a skill of this set",
        ),
        (
            lambda d: _ros(d)["drive"].update(service="std_srvs/srv/Trigger"),
            "backends.ros.skills.drive: give exactly one of 'action', 'service' or 'topic'",
        ),
        (lambda d: _ros(d)["drive"].update(timeout=-1), "backends.ros.skills.drive.timeout: must be > 0"),
        (lambda d: d["backends"].pop("ros"), "has no 'backends: ros:' section"),
    ],
)
def test_malformed_mappings_are_refused_with_file_field_and_reason(tmp_path, change, fragment):
    from timely_llm_ros.core.skills import SkillSetError, load_skill_set_file
    from timely_llm_ros.robots.plugins import check_backend
    from timely_llm_ros.robots.ros_backend_map import MappingError

    path = write_skill_set(tmp_path, _mutated(change))
    with pytest.raises((SkillSetError, MappingError)) as err:
        check_backend("ros", load_skill_set_file(path))  # what the fleet and the node run at start-up
    assert str(path) in str(err.value) and fragment in str(err.value), str(err.value)


def test_the_shipped_example_mapping_is_valid():
    from timely_llm_ros.core.skills import load_skill_set_file
    from timely_llm_ros.robots.ros_backend_map import parse_mapping

    root = Path(__file__).resolve().parents[2]
    sset = load_skill_set_file(root / "examples/rover_robot/rover_robot/config/skills/rover_drive.yaml")
    mapping = parse_mapping(sset)
    assert {b.kind for b in mapping.bindings.values()} == {"action", "service"}
