"""Workload node: publishes the tasks of an LRTrace workload on ``/tasks`` at their trigger times.

The workload is anything :func:`timely_llm_ros.workload.resolve_workload` accepts (parameter
``workload``): a preset (``wid1``…), a public TimelyLLM sample (``sample1``, ``sample2``, ``arm``) or
a file (our YAML/JSON format, or the public JSON list format). Task ``i`` is published at
``start + time_scale × (arrival_i − arrival_0)`` on the node's monotonic clock, where ``start`` is
when the planner (and, with ``wait_for_robots``, every robot the workload needs, and every node of
``wait_for_nodes`` — e.g. the recorder, so that it misses no task) has been discovered plus
``start_delay``.

Agents: workload agent ids (``"0"``, ``"17"`` in the composed and public workloads) are usually no
fleet robots. With ``agents`` (``"drone_1:drone"`` entries) each workload agent is mapped, in order
of first appearance, round-robin onto the fleet agents of its robot type — so all tasks of one
workload agent go to one robot. A robot type without a fleet agent is a start-up error unless
``skip_unmapped`` is set (then those tasks are counted and reported as skipped, never silently
dropped). Without ``agents`` the ids are kept, prefixed with ``agent_prefix`` where an id cannot be
a ROS name.

Task ids are ``task_id_prefix`` + the workload's id (``{name}`` in the prefix = the workload name
without its overrides; numeric ids zero-padded to one width, so ``wid1-07`` sorts before ``wid1-12``),
unique per run. The node follows ``/task_status`` and, at the end (or at shutdown), prints one line
``WORKLOAD_SUMMARY {json}`` with the published tasks and their final states. With
``exit_when_done`` it exits once every published task reached a terminal state (status 0) or
``completion_timeout`` passed (status 3).
"""

from __future__ import annotations

import dataclasses
import json
import threading
import time
from collections import Counter
from dataclasses import dataclass
from typing import Any

from rclpy.node import Node

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.interfaces import topics
from timely_llm_ros.msg import Task, TaskStatus
from timely_llm_ros.nodes.common import Param, ParamError, declare_params, nonempty, run_node
from timely_llm_ros.ros import convert, qos
from timely_llm_ros.workload.ids import published_ids


def _fqn_check(value: list[str]) -> str | None:
    bad = [v for v in value if not v.startswith("/") or v.endswith("/")]
    return f"not fully qualified node names (like /recorder): {bad}" if bad else None


PARAMS = (
    Param(
        "workload",
        "",
        "workload: preset (wid1..), public sample (sample1, sample2, arm) or file path",
        read_only=True,
        check=nonempty,
    ),
    Param(
        "agents",
        [],
        "fleet agents as 'agent:robot_type'; workload agents are mapped onto them by "
        "robot type (empty = keep the workload's agent ids)",
        read_only=True,
    ),
    Param(
        "agent_prefix",
        "agent_",
        "prefix for workload agent ids that are not valid ROS names (without 'agents')",
        read_only=True,
    ),
    Param(
        "skip_unmapped",
        False,
        "skip (and report) tasks whose robot type has no fleet agent instead of refusing to start",
        read_only=True,
    ),
    Param(
        "task_id_prefix",
        "{name}-",
        "prefix of published task ids ({name} = workload name without its overrides)",
        read_only=True,
    ),
    Param(
        "time_scale",
        1.0,
        "multiplies the workload's inter-arrival times (0.5 = twice as dense)",
        low=0.0,
        high=1000.0,
        read_only=True,
    ),
    Param(
        "tuf_scale",
        1.0,
        "multiplies every task's ERT and zero-utility time (TUF.scaled): run the "
        "paper's GPU-calibrated TUFs on a slower engine, e.g. 5 for the embedded CPU model",
        low=0.01,
        high=1000.0,
        read_only=True,
    ),
    Param("max_tasks", 0, "publish only the first N tasks (0 = all)", low=0, high=10_000_000, read_only=True),
    Param(
        "start_delay",
        0.5,
        "wait after discovery before the first task (s)",
        low=0.0,
        high=3600.0,
        read_only=True,
    ),
    Param(
        "wait_for_planner",
        True,
        "start only once the planner node (planner_node) subscribes to /tasks",
        read_only=True,
    ),
    Param(
        "planner_node",
        "/planner",
        "fully qualified name of the planner node: other /tasks subscribers "
        "(recorder, time model) do not count, and a planner that warms its engine up subscribes late",
        read_only=True,
        check=nonempty,
    ),
    Param(
        "wait_for_robots",
        True,
        "start only once every mapped agent has a robot node (a subscriber in namespace /<agent>)",
        read_only=True,
    ),
    Param(
        "wait_for_nodes",
        [],
        "start only once these nodes (fully qualified, e.g. /recorder) subscribe to "
        "/tasks: observers that must not miss the first tasks",
        read_only=True,
        check=_fqn_check,
    ),
    Param(
        "discovery_timeout",
        60.0,
        "give up waiting for planner / robots after this long (s); the node then exits with status 4",
        low=0.1,
        high=86400.0,
        read_only=True,
    ),
    Param(
        "exit_when_done", False, "exit after every published task reached a terminal state", read_only=True
    ),
    Param(
        "completion_timeout",
        600.0,
        "with exit_when_done: give up waiting for final states after the "
        "last task was published (s); exit status 3",
        low=0.1,
        high=86400.0,
        read_only=True,
    ),
)


@dataclass(frozen=True)
class Planned:
    """One task to publish: offset from the start (s) and the message."""

    offset: float
    msg: Task


def parse_agents(entries: list[str]) -> dict[str, list[str]]:
    """``["drone_1:drone", "arm_1:arm"]`` → ``{"drone": ["drone_1"], "arm": ["arm_1"]}``."""
    out: dict[str, list[str]] = {}
    for entry in entries:
        agent, sep, rtype = entry.partition(":")
        agent, rtype = agent.strip(), rtype.strip()
        if not sep or not agent or not rtype:
            raise ParamError(f"parameter 'agents': entry {entry!r} is not 'agent:robot_type'")
        if not topics.valid_agent_id(agent):
            raise ParamError(f"parameter 'agents': {agent!r} is not a valid ROS name token")
        out.setdefault(rtype, []).append(agent)
    return out


def plan_tasks(
    tasks: list[TaskSpec],
    *,
    name: str,
    agents: dict[str, list[str]],
    agent_prefix: str,
    skip_unmapped: bool,
    id_prefix: str,
    time_scale: float,
    max_tasks: int,
    tuf_scale: float = 1.0,
) -> tuple[list[Planned], Counter]:
    """Messages and publication offsets for a workload (pure function; unit-tested)."""
    ordered = sorted(tasks, key=lambda t: t.arrival)
    if max_tasks:
        ordered = ordered[:max_tasks]
    skipped: Counter = Counter()
    mapping: dict[str, str] = {}
    next_index: dict[str, int] = {}
    missing = sorted({t.robot_type for t in ordered} - set(agents)) if agents else []
    if missing and not skip_unmapped:
        raise ParamError(
            f"workload {name!r} has {', '.join(missing)} tasks but parameter 'agents' has no "
            "agent of that robot type (set skip_unmapped to skip them)"
        )
    ids = published_ids(name, [spec.task_id for spec in tasks], id_prefix)
    out: list[Planned] = []
    t0 = ordered[0].arrival if ordered else 0.0
    for spec in ordered:
        if agents:
            pool = agents.get(spec.robot_type)
            if not pool:
                skipped[spec.robot_type] += 1
                continue
            key = f"{spec.robot_type}/{spec.agent_id}"
            if key not in mapping:
                i = next_index.get(spec.robot_type, 0)
                mapping[key] = pool[i % len(pool)]
                next_index[spec.robot_type] = i + 1
            agent = mapping[key]
        else:
            agent = spec.agent_id
            if not topics.valid_agent_id(agent):
                agent = f"{agent_prefix}{spec.agent_id}"
            if not topics.valid_agent_id(agent):
                raise ParamError(
                    f"workload agent {spec.agent_id!r} gives no valid ROS name even with prefix "
                    f"{agent_prefix!r}; set parameter 'agents'"
                )
        if tuf_scale != 1.0 and spec.tuf is not None:  # ``tuf: auto``: the planner derives one
            spec = dataclasses.replace(spec, tuf=spec.tuf.scaled(tuf_scale))
        msg = convert.task_to_msg(spec)
        msg.agent_id = agent
        msg.task_id = ids[spec.task_id]
        out.append(Planned((spec.arrival - t0) * time_scale, msg))
    return out, skipped


class WorkloadNode(Node):
    """See the module docstring."""

    def __init__(self, name: str = "workload", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.p = declare_params(self, PARAMS)
        from timely_llm_ros.workload.errors import WorkloadError
        from timely_llm_ros.workload.fileformat import resolve_workload

        try:
            wl = resolve_workload(self.p["workload"])
        except WorkloadError as exc:
            raise ParamError(f"parameter 'workload': {exc}") from None
        self.workload_name = wl.name
        self.planned, self.skipped = plan_tasks(
            wl.tasks,
            name=wl.name,
            agents=parse_agents(self.p["agents"]),
            agent_prefix=self.p["agent_prefix"],
            skip_unmapped=self.p["skip_unmapped"],
            id_prefix=self.p["task_id_prefix"],
            time_scale=self.p["time_scale"],
            max_tasks=self.p["max_tasks"],
            tuf_scale=self.p["tuf_scale"],
        )
        if self.skipped:
            self.get_logger().warning(f"skipping tasks without a fleet agent: {dict(self.skipped)}")
        self._ids = {p.msg.task_id for p in self.planned}
        self._agents = sorted({p.msg.agent_id for p in self.planned})
        self.final: dict[str, str] = {}
        self.reasons: dict[str, str] = {}
        self.published = 0
        self._lock = threading.Lock()
        self._done = threading.Event()
        self.exit_status = 0
        self._pub = self.create_publisher(Task, topics.TASKS, qos.task_qos())
        self.create_subscription(TaskStatus, topics.TASK_STATUS, self._on_status, qos.status_qos())
        self._created = time.monotonic()
        self._started: float | None = None
        self._all_published_at: float | None = None
        self._summary_printed = False
        self._thread: threading.Thread | None = None
        self.create_timer(0.1, self._tick)
        span = self.planned[-1].offset if self.planned else 0.0
        self.get_logger().info(
            f"workload {wl.name!r}: {len(self.planned)} tasks for {len(self._agents)} "
            f"agents over {span:.1f} s"
        )

    # ------------------------------------------------------------------ discovery, then publishing
    def _ready(self) -> bool:
        present = {
            f"{i.node_namespace.rstrip('/')}/{i.node_name}"
            for i in self.get_subscriptions_info_by_topic(topics.TASKS)
        }
        if self.p["wait_for_planner"] and "/" + self.p["planner_node"].strip("/") not in present:
            return False
        if self.p["wait_for_nodes"]:
            if not set(self.p["wait_for_nodes"]) <= present:
                return False
            if self._pub.get_subscription_count() < len(self.p["wait_for_nodes"]):
                return False
        if self.p["wait_for_robots"]:
            for agent in self._agents:
                infos = self.get_subscriptions_info_by_topic(topics.segment_topic(agent))
                if not any(i.node_namespace == topics.join(self.get_namespace(), agent) for i in infos):
                    return False
        return True

    def _tick(self) -> None:
        now = time.monotonic()
        if self._started is None:
            if self._ready():
                self._started = now + self.p["start_delay"]
                self._thread = threading.Thread(target=self._publish_all, name="workload", daemon=True)
                self._thread.start()
            elif now - self._created > self.p["discovery_timeout"]:
                self.get_logger().error(
                    "planner or robot nodes not discovered within discovery_timeout "
                    f"({self.p['discovery_timeout']} s); agents: "
                    f"{', '.join(self._agents)}"
                )
                self.exit_status = 4
                self._finish()
            return
        if not self.p["exit_when_done"] or self._all_published_at is None:
            return
        with self._lock:
            complete = len(self.final) >= len(self.planned)
        if complete:
            self._finish()
        elif now - self._all_published_at > self.p["completion_timeout"]:
            self.get_logger().error(
                f"{len(self.planned) - len(self.final)} tasks without a final state "
                f"after completion_timeout ({self.p['completion_timeout']} s)"
            )
            self.exit_status = 3
            self._finish()

    def _publish_all(self) -> None:
        assert self._started is not None
        for item in self.planned:
            delay = self._started + item.offset - time.monotonic()
            if delay > 0 and self._done.wait(delay):
                return
            msg = item.msg
            msg.header.stamp = self.get_clock().now().to_msg()
            self._pub.publish(msg)
            with self._lock:
                self.published += 1
        self._all_published_at = time.monotonic()
        self.get_logger().info(f"all {len(self.planned)} tasks published")

    def _on_status(self, msg: TaskStatus) -> None:
        if msg.task_id not in self._ids:
            return
        try:
            state = convert.status_name(msg)
        except ValueError:
            return
        if state in ev.TERMINAL_STATES:
            with self._lock:
                self.final.setdefault(msg.task_id, state)
                if msg.reason:
                    self.reasons.setdefault(msg.task_id, msg.reason)

    # ------------------------------------------------------------------ end
    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {
                "workload": self.workload_name,
                "planned": len(self.planned),
                "published": self.published,
                "skipped": dict(self.skipped),
                "final": dict(Counter(self.final.values())),
                "open": len(self.planned) - len(self.final),
                "reasons": dict(list(self.reasons.items())[:20]),
            }

    def _finish(self) -> None:
        if self.stop_requested is not None:  # set by run_node
            self.stop_requested.set()

    stop_requested: threading.Event | None = None

    def close(self) -> None:
        self._done.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
        if not self._summary_printed:
            self._summary_printed = True
            print("WORKLOAD_SUMMARY " + json.dumps(self.summary(), sort_keys=True), flush=True)


def main(argv: list[str] | None = None) -> int:
    return run_node(
        WorkloadNode, argv, description="publishes an LRTrace workload's tasks on /tasks", params=PARAMS
    )


if __name__ == "__main__":
    raise SystemExit(main())
