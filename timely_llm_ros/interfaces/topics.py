"""Topic and service names of the timely_llm_ros node graph and the agent-id rule, in one place.

Every node (planner, robots, time model, workload, recorder, replay) and the bag writer/reader
(:mod:`timely_llm_ros.lrtrace`) take their names from here, so that a rename is one edit. Plain
Python (no rclpy): ``timely-llm bench --bag`` and the report use it on machines without ROS;
the ROS nodes import it directly (it is their one home too). All names are **relative**, so a
whole fleet can run in a namespace (launch argument ``namespace``, ``timely-llm fleet --namespace``)
and two fleets share one ROS domain without seeing each other's tasks. Fleet-level nodes (planner,
time model, recorder, workload, replay, rqt timeline) run in the fleet namespace ``<fleet>``
(default ``/``); a robot runs in ``<fleet>/<agent_id>``, its segment topic is the relative
:data:`SKILL_SEGMENTS` in its own namespace, and it resolves the fleet-level topics in its parent
namespace (:func:`fleet_topic`).

=============================  ==========================  ==========================================
name (in fleet ``/``)          type                        direction
=============================  ==========================  ==========================================
``/tasks``                     ``Task``                    robots / workload → planner
``/<agent>/skill_segments``    ``Segment``                 planner → that agent's robot
``/segment_feedback``          ``SegmentFeedback``         robots → planner, time model
``/task_status``               ``TaskStatus``              planner → robots, recorder (transient local)
``/trace_events``              ``TraceEvent``              planner → recorder, rqt (transient local)
``/plan_task``                 ``PlanTask`` (action)       planner serves it (ros/plan_task.py)
``/cancel_task``               ``CancelTask`` (srv)        planner serves it
``/estimate_exec_time``        ``EstimateExecTime`` (srv)  time-model node serves it
=============================  ==========================  ==========================================

In fleet ``/fleet_a`` every name gains that prefix (``/fleet_a/tasks``, ``/fleet_a/drone_1/skill_segments``).
The planner accepts a task only once a node *in the agent's namespace* subscribes to the agent's
segment topic, so observers that subscribe to every segment topic (recorder, time model) never
pass for a robot.

**The agent-id rule** (:func:`valid_agent_id`), the one rule every side applies: an agent id is a
ROS name token (ASCII letters, digits and ``_``, not starting with a digit, no ``__``) of 1 to
``core.limits.MAX_AGENT_ID`` characters — the planner's length bound for ``Task.agent_id``. Only
such an id gets ``/<agent>/skill_segments``; the planner rejects a task whose agent cannot have that
topic, the recorder records such a task without subscribing to anything for it, and a bag written
without ROS (simulator runs, whose workload ids are often "0", "17") files the segments of such an
agent under the always-valid :func:`bag_segments_topic` name instead.
"""

from __future__ import annotations

import re

from timely_llm_ros.core.limits import MAX_AGENT_ID

__all__ = [
    "TASKS",
    "SKILL_SEGMENTS",
    "SEGMENT_FEEDBACK",
    "ROBOT_HEARTBEAT",
    "TASK_STATUS",
    "TRACE_EVENTS",
    "ESTIMATE_EXEC_TIME",
    "RECORDED_TOPICS",
    "TOPIC_TASKS",
    "TOPIC_FEEDBACK",
    "TOPIC_STATUS",
    "TOPIC_TRACE",
    "SEGMENTS_SUFFIX",
    "valid_agent_id",
    "bag_segments_topic",
    "valid_namespace",
    "normalize_namespace",
    "join",
    "parent_namespace",
    "fleet_topic",
    "agent_of_segment_topic",
    "segment_topic",
]

TASKS = "tasks"
SKILL_SEGMENTS = "skill_segments"  # resolved in the agent's namespace <fleet>/<agent>
SEGMENT_FEEDBACK = "segment_feedback"
# robot -> planner: std_msgs/Header every heartbeat_period, frame_id = the agent id (core/robot_liveness.py)
ROBOT_HEARTBEAT = "robot_heartbeat"
TASK_STATUS = "task_status"
TRACE_EVENTS = "trace_events"
ESTIMATE_EXEC_TIME = "estimate_exec_time"

# Topics the LRTrace recorder records (the per-agent segment topics are found by discovery).
RECORDED_TOPICS = (TASKS, SEGMENT_FEEDBACK, TASK_STATUS, TRACE_EVENTS)

# The same topics as an LRTrace bag names them (a fleet in the root namespace ``/``).
TOPIC_TASKS = "/" + TASKS
TOPIC_FEEDBACK = "/" + SEGMENT_FEEDBACK
TOPIC_STATUS = "/" + TASK_STATUS
TOPIC_TRACE = "/" + TRACE_EVENTS
SEGMENTS_SUFFIX = "/" + SKILL_SEGMENTS

# ROS 2 name rules for one token of a topic name: letters, digits, '_', not starting with a digit.
# fullmatch, not match with '$': '$' also matches before a trailing newline, and "drone_1\n" passed
# for a token (rcl then refused the topic name and the recorder died on the exception).
_AGENT_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def valid_agent_id(agent_id: str) -> bool:
    """True if ``agent_id`` can be a ROS namespace token (so ``/<agent_id>/...`` is a legal name).

    Length-bounded like every task field (core.limits): a 300-character id from one Task message made
    the recorder subscribe to a topic name rcl refuses, and the exception killed the recorder."""
    return (
        isinstance(agent_id, str)
        and len(agent_id) <= MAX_AGENT_ID
        and bool(_AGENT_RE.fullmatch(agent_id))
        and "__" not in agent_id
    )


def bag_segments_topic(agent_id: str) -> str:
    """``/<agent>/skill_segments`` of an agent in a bag written without ROS (simulator runs).

    An id that :func:`valid_agent_id` accepts keeps its name (the one a recorder sees); any other id
    (the workloads' "0", "17", an empty or an overlong one) becomes ``agent_<id>`` with every
    character other than an ASCII letter or digit replaced by ``_``, runs of ``_`` folded and the
    token cut to the length bound, so the bag stays playable (``ros2 bag play`` refuses a bag with an
    invalid topic name). Different ids may share such a topic; each message names its agent.
    """
    if valid_agent_id(agent_id):
        return f"/{agent_id}{SEGMENTS_SUFFIX}"
    token = re.sub(r"_+", "_", "agent_" + re.sub(r"[^A-Za-z0-9]", "_", str(agent_id)))
    return f"/{token[:MAX_AGENT_ID]}{SEGMENTS_SUFFIX}"


def valid_namespace(ns: str) -> bool:
    """True for ``/`` or an absolute namespace of name tokens (``/fleet_a``, ``/site/fleet_a``)."""
    if ns == "/":
        return True
    parts = ns.split("/")
    return len(parts) >= 2 and parts[0] == "" and all(valid_agent_id(p) for p in parts[1:])


def normalize_namespace(ns: str) -> str:
    """``fleet_a`` / ``/fleet_a/`` / ``""`` → ``/fleet_a`` / ``/fleet_a`` / ``/``; ValueError when invalid."""
    text = (ns or "").strip()
    out = "/" + text.strip("/") if text.strip("/") else "/"
    if not valid_namespace(out):
        raise ValueError(
            f"namespace {ns!r} is not a ROS namespace (name tokens separated by '/': letters, "
            "digits and single '_', not starting with a digit)"
        )
    return out


def join(ns: str, name: str) -> str:
    """``join("/", "tasks") == "/tasks"``, ``join("/fleet_a", "tasks") == "/fleet_a/tasks"``."""
    return f"{ns.rstrip('/')}/{name}"


def parent_namespace(ns: str) -> str:
    """The fleet namespace of a robot namespace: ``/fleet_a/drone_1`` → ``/fleet_a``, ``/drone_1`` → ``/``."""
    head = ns.rstrip("/").rsplit("/", 1)[0]
    return head or "/"


def fleet_topic(robot_ns: str, name: str) -> str:
    """A fleet-level name as a robot in ``robot_ns`` = ``<fleet>/<agent>`` must use it (absolute)."""
    return join(parent_namespace(robot_ns), name)


def agent_of_segment_topic(name: str, fleet_ns: str = "/") -> str | None:
    """``/drone_1/skill_segments`` → ``drone_1`` (in fleet ``fleet_ns``); None for any other topic name."""
    prefix = fleet_ns.rstrip("/") + "/"
    if not name.startswith(prefix):
        return None
    parts = name[len(prefix) :].split("/")
    if len(parts) == 2 and parts[1] == SKILL_SEGMENTS and valid_agent_id(parts[0]):
        return parts[0]
    return None


def segment_topic(agent_id: str) -> str:
    """Segment topic of one agent, relative (resolved in the fleet namespace); ValueError with the
    reason for an unusable id."""
    if not valid_agent_id(agent_id):
        raise ValueError(
            f"agent_id {agent_id[:80]!r} is not a valid ROS name token (letters, digits and "
            f"single '_', not starting with a digit, at most {MAX_AGENT_ID} characters)"
        )
    return f"{agent_id}/{SKILL_SEGMENTS}"
