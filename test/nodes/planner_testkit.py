"""Helpers for the node tests: start nodes as OS processes, and a peer node inside the test process.

Processes inherit the test session's environment (loopback-only DDS, random domain id, source-tree
PYTHONPATH; see test/conftest.py) and run in their own process group so a hang can be ended with
one signal. The :class:`Peer` spins in a background thread and records everything it receives;
tests wait for conditions by polling (:func:`wait_for`), never by sleeping a fixed time and never by
asserting on speed. Timeouts only bound a hung run and are generous for a busy 2-core machine.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

STARTUP_TIMEOUT = 60.0
PLANS = str(Path(__file__).with_name("data") / "planner_plans.yaml")  # reference plans of the test tasks


def write_params(path: Path, params: dict[str, Any]) -> Path:
    """A --params-file in the documented form (``/**: ros__parameters:``)."""
    path.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}, sort_keys=False))
    return path


def start_node(
    module: str,
    env: dict[str, str],
    log_path: Path,
    *,
    name: str | None = None,
    namespace: str | None = None,
    params_file: Path | None = None,
    params: dict[str, Any] | None = None,
) -> subprocess.Popen:
    """``python -m timely_llm_ros.nodes.<module> --ros-args ...``, output to ``log_path``."""
    if module == "planner":  # see _instant_robots
        params = _instant_robots(params_file, params)
    cmd = [sys.executable, "-m", f"timely_llm_ros.nodes.{module}", "--ros-args"]
    if name:
        cmd += ["-r", f"__node:={name}"]
    if namespace:
        cmd += ["-r", f"__ns:={namespace}"]
    if params_file is not None:
        cmd += ["--params-file", str(params_file)]
    for key, value in (params or {}).items():
        cmd += ["-p", f"{key}:={_ros_value(value)}"]
    log = open(log_path, "w", encoding="utf-8")  # noqa: SIM115 - kept open for the child's lifetime
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    proc.log_path = log_path  # type: ignore[attr-defined]
    log.close()
    return proc


def _instant_robots(params_file: Path | None, params: dict[str, Any] | None) -> dict[str, Any]:
    """The test robots (this peer, or sim robots at time_scale << 1) finish a segment far sooner than
    its minimum execution time: the planner's plausibility floor for DONE is off unless a test sets
    ``feedback_min_exec_fraction`` itself (test_feedback_forgery does)."""
    key = "feedback_min_exec_fraction"
    given = dict(params or {})
    if params_file is not None:
        data = yaml.safe_load(params_file.read_text()) or {}
        given.update(data.get("/**", {}).get("ros__parameters", {}))
    return {**(params or {}), **({} if key in given else {key: 0.0})}


def _ros_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(f"'{v}'" for v in value) + "]"
    return str(value)


def stop_process(proc: subprocess.Popen, timeout: float = 30.0) -> int:
    """SIGINT the process group, then SIGKILL if it does not exit; returns the exit status."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGINT)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    return proc.returncode


def log_text(proc: subprocess.Popen) -> str:
    try:
        return Path(proc.log_path).read_text(encoding="utf-8", errors="replace")  # type: ignore[attr-defined]
    except OSError:
        return ""


def run_fleet(cfg: dict[str, Any], tmp_path: Path, timeout: float) -> tuple[int, str, dict[str, Any]]:
    """``timely-llm fleet`` on ``cfg`` (a fleet YAML as a dict) until it exits by itself (the workload
    node's ``exit_when_done``); returns (exit status, log text, the WORKLOAD_SUMMARY). A fleet still
    running after ``timeout`` is stopped and the test fails with the log's tail."""
    import json
    import re

    import pytest

    config = tmp_path / "fleet.yaml"
    config.write_text(yaml.safe_dump(cfg, sort_keys=False))
    log = tmp_path / "fleet.log"
    with open(log, "w", encoding="utf-8") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "timely_llm_ros.fleet", str(config)],
            env=dict(os.environ),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGINT)
        stop_process(proc, timeout=60)
        pytest.fail(f"the fleet did not finish within {timeout:.0f} s:\n{log.read_text()[-6000:]}")
    text = log.read_text(encoding="utf-8", errors="replace")
    match = re.search(r"WORKLOAD_SUMMARY (\{.*\})", text)
    assert match, text[-6000:]
    return proc.returncode, text, json.loads(match.group(1))


def wait_for(
    pred: Callable[[], bool],
    timeout: float,
    what: str = "condition",
    period: float = 0.05,
    procs: tuple[subprocess.Popen, ...] = (),
) -> None:
    """Poll ``pred`` until true; fail with ``what`` (and the logs of dead ``procs``) on timeout."""
    deadline = time.monotonic() + timeout
    while not pred():
        for p in procs:
            if p.poll() is not None:
                raise AssertionError(
                    f"process exited ({p.returncode}) while waiting for {what}:\n{log_text(p)}"
                )
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {p.args[2]} ---\n{log_text(p)[-4000:]}" for p in procs)
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}\n{logs}")
        time.sleep(period)


class Peer:
    """A node in the test process playing robots and observers (recording what it receives).

    ``robots``: agent id → behaviour of a fake robot on ``/<agent>/skill_segments``: "done" (report
    STARTED + DONE at once), "fail" (STARTED + FAILED), "silent" (never answer).
    """

    def __init__(
        self,
        robots: dict[str, str] | None = None,
        name: str = "test_peer",
        answer_tasks: str | None = None,
        watch_agents: tuple[str, ...] = (),
    ) -> None:
        import rclpy
        from rclpy.executors import SingleThreadedExecutor
        from rclpy.signals import SignalHandlerOptions

        from timely_llm_ros.interfaces import topics
        from timely_llm_ros.msg import Segment, SegmentFeedback, Task, TaskStatus, TraceEvent
        from timely_llm_ros.ros import qos

        self.context = rclpy.Context()
        rclpy.init(context=self.context, signal_handler_options=SignalHandlerOptions.NO)
        self.node = rclpy.create_node(name, context=self.context)
        self.lock = threading.Lock()
        self.statuses: dict[str, list] = defaultdict(list)
        self.events: list = []
        self.segments: dict[str, list] = defaultdict(list)  # agent -> Segment msgs in arrival order
        self.feedback_sent: list = []
        self.robots = dict(robots or {})
        self.task_pub = self.node.create_publisher(Task, topics.TASKS, qos.task_qos())
        self.fb_pub = self.node.create_publisher(SegmentFeedback, topics.SEGMENT_FEEDBACK, qos.feedback_qos())
        self.node.create_subscription(TaskStatus, topics.TASK_STATUS, self._on_status, qos.status_qos())
        self.node.create_subscription(TraceEvent, topics.TRACE_EVENTS, self._on_event, qos.event_qos())
        # playing the planner (workload-node tests): record tasks, answer each with a final status
        self.tasks: list = []
        self.answer_tasks = answer_tasks
        if answer_tasks:
            self.status_pub = self.node.create_publisher(TaskStatus, topics.TASK_STATUS, qos.status_qos())
            self.node.create_subscription(Task, topics.TASKS, self._on_task, qos.task_qos())
        # observing a fleet: tasks, feedback, and segments seen from outside the robots' namespaces
        self.feedback: list = []
        self.feedback_sub = None
        if watch_agents:  # /tasks: see watch_tasks()
            self.feedback_sub = self.node.create_subscription(
                SegmentFeedback, topics.SEGMENT_FEEDBACK, self._on_feedback, qos.feedback_qos()
            )
        for agent in watch_agents:
            self.node.create_subscription(
                Segment,
                topics.segment_topic(agent),
                lambda m, a=agent: self._record_segment(a, m),
                qos.segment_qos(),
            )
        self.robot_nodes = []
        for agent in self.robots:  # a robot node lives in namespace /<agent> (what the planner checks)
            rnode = rclpy.create_node("robot", namespace=agent, context=self.context)
            rnode.create_subscription(
                Segment, topics.SKILL_SEGMENTS, lambda m, a=agent: self._on_segment(a, m), qos.segment_qos()
            )
            self.robot_nodes.append(rnode)
        self.executor = SingleThreadedExecutor(context=self.context)
        self.executor.add_node(self.node)
        for rnode in self.robot_nodes:
            self.executor.add_node(rnode)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._spin, daemon=True)
        self._thread.start()

    def _spin(self) -> None:
        while not self._stop.is_set():
            self.executor.spin_once(timeout_sec=0.05)

    def nonce(self, agent: str, task_id: str, index: int) -> str:
        """The nonce of the segment this peer last received for (task, index): a robot echoes it."""
        with self.lock:
            found = [s.nonce for s in self.segments[agent] if s.task_id == task_id and s.index == index]
        return found[-1] if found else ""

    def close(self) -> None:
        import rclpy

        self._stop.set()
        self._thread.join(timeout=10)
        self.executor.shutdown()
        for rnode in self.robot_nodes:
            rnode.destroy_node()
        self.node.destroy_node()
        rclpy.try_shutdown(context=self.context)

    def watch_tasks(self) -> None:
        """Subscribe to /tasks now (a workload that waits for this node starts only afterwards)."""
        from timely_llm_ros.interfaces import topics
        from timely_llm_ros.msg import Task
        from timely_llm_ros.ros import qos

        self.node.create_subscription(Task, topics.TASKS, self._on_task, qos.task_qos())
        self.executor.wake()

    # -- receiving
    def _on_status(self, msg) -> None:
        with self.lock:
            self.statuses[msg.task_id].append(msg)

    def _on_task(self, msg) -> None:
        from timely_llm_ros.ros import convert

        with self.lock:
            self.tasks.append((time.monotonic(), msg))
        if self.answer_tasks:
            self.status_pub.publish(
                convert.status_to_msg(
                    msg.task_id, msg.agent_id, self.answer_tasks, time.time(), "answered by the test peer"
                )
            )

    def _on_event(self, msg) -> None:
        with self.lock:
            self.events.append(msg)

    def _on_feedback(self, msg) -> None:
        with self.lock:
            self.feedback.append(msg)

    def _record_segment(self, agent: str, msg) -> None:
        with self.lock:
            self.segments[agent].append(msg)

    def _on_segment(self, agent: str, msg) -> None:
        from timely_llm_ros.core import events as ev
        from timely_llm_ros.ros import convert

        with self.lock:
            self.segments[agent].append(msg)
        mode = self.robots.get(agent, "silent")
        if mode == "silent" or is_closing_marker(msg):  # no feedback for a closing marker
            return
        now = time.time()
        nonce = msg.nonce  # echoed, as a robot node does (the planner refuses feedback without it)
        self._send(convert.feedback_to_msg(msg.task_id, agent, msg.index, ev.STARTED, now, nonce=nonce))
        if mode == "done":
            self._send(
                convert.feedback_to_msg(
                    msg.task_id, agent, msg.index, ev.DONE, now + 0.001, 0.001, nonce=nonce
                )
            )
        else:
            self._send(
                convert.feedback_to_msg(
                    msg.task_id,
                    agent,
                    msg.index,
                    ev.FEEDBACK_FAILED,
                    now + 0.001,
                    0.001,
                    "gripper jammed (test robot)",
                    nonce,
                )
            )

    def _send(self, msg) -> None:
        self.feedback_sent.append(msg)
        self.fb_pub.publish(msg)

    # -- queries
    def states(self, task_id: str) -> list[str]:
        from timely_llm_ros.ros import convert

        with self.lock:
            return [convert.status_name(s) for s in self.statuses.get(task_id, [])]

    def final(self, task_id: str):
        """The terminal TaskStatus of a task, or None."""
        from timely_llm_ros.core import events as ev
        from timely_llm_ros.ros import convert

        with self.lock:
            for s in self.statuses.get(task_id, []):
                if convert.status_name(s) in ev.TERMINAL_STATES:
                    return s
        return None

    def final_state(self, task_id: str) -> str | None:
        from timely_llm_ros.ros import convert

        s = self.final(task_id)
        return None if s is None else convert.status_name(s)

    def events_of(self, task_id: str) -> list:
        with self.lock:
            return [e for e in self.events if e.task_id == task_id]

    def wait_planner(self, timeout: float = STARTUP_TIMEOUT, procs: tuple = ()) -> None:
        """Discovery: the planner subscribes to /tasks, our task writer matched every /tasks reader
        (robots read /tasks too: "some reader matched" let the first 9 tasks of a flood go out before
        the planner's reader matched, and they were lost), and it publishes statuses to us."""

        def matched() -> bool:
            readers = self.node.get_subscriptions_info_by_topic("/tasks")
            return (
                any(i.node_name == "planner" for i in readers)
                and self.task_pub.get_subscription_count() >= len(readers)
                and self.node.count_publishers("/task_status") > 0
            )

        wait_for(matched, timeout, "the planner to be discovered", procs=procs)


def set_params(peer: Peer, node: str = "/planner", timeout: float = STARTUP_TIMEOUT, **values: Any) -> None:
    """Set parameters of a running node through its set_parameters service (fails on a refusal)."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    client = peer.node.create_client(SetParameters, f"{node}/set_parameters")
    wait_for(client.service_is_ready, timeout, f"{node}/set_parameters")
    params = []
    for name, value in values.items():
        if isinstance(value, bool):
            pv = ParameterValue(type=ParameterType.PARAMETER_BOOL, bool_value=value)
        elif isinstance(value, int):
            pv = ParameterValue(type=ParameterType.PARAMETER_INTEGER, integer_value=value)
        else:
            pv = ParameterValue(type=ParameterType.PARAMETER_DOUBLE, double_value=float(value))
        params.append(Parameter(name=name, value=pv))
    fut = client.call_async(SetParameters.Request(parameters=params))
    wait_for(fut.done, timeout, f"set {sorted(values)}")
    bad = [r.reason for r in fut.result().results if not r.successful]
    assert not bad, bad
    peer.node.destroy_client(client)


def is_closing_marker(msg) -> bool:
    """The planner's closing marker: a final Segment without text (a call-less tail with text, such
    as a loop's closing ``}``, is a real segment the robot executes and answers)."""
    return msg.final and not msg.text.strip()


def make_task(
    task_id: str,
    agent: str,
    instruction: str = "[A] Take a picture.",
    robot_type: str = "drone",
    skill_set: str = "tello_minispec",
    tuf: tuple[float, float, float] = (1.0, -2.0, 1.0),
    scene: str = "",
):
    """A ``Task`` message (default: a drone task the simulated planner has a plan for)."""
    from timely_llm_ros.msg import Task, Tuf

    msg = Task(
        task_id=task_id,
        agent_id=agent,
        robot_type=robot_type,
        skill_set=skill_set,
        instruction=instruction,
        scene=scene,
    )
    msg.tuf = Tuf(ert=tuf[0], alpha=tuf[1], beta=tuf[2])
    return msg


@contextmanager
def planner_graph(tmp: Path, params: dict[str, Any], robots: dict[str, str], name: str) -> Iterator[tuple]:
    """A planner process (simulated engine, the test plans) and a :class:`Peer` playing ``robots``;
    yields ``(peer, proc)``; the planner must exit cleanly (status 0) at the end."""
    params = {"sim_plans": ["catalog", PLANS], **params}
    proc = start_node(
        "planner",
        dict(os.environ),
        tmp / "planner.log",
        params_file=write_params(tmp / "planner.yaml", params),
    )
    peer = Peer(robots=robots, name=name)
    try:
        peer.wait_planner(procs=(proc,))
        yield peer, proc
    finally:
        peer.close()
        rc = stop_process(proc)
        assert rc == 0, f"planner exit status {rc}"
