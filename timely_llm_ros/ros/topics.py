"""Topic and service names of the timely_llm_ros node graph, in one place.

Every node (planner, robots, time model, workload, recorder, replay) takes its names from here so
that a rename is one edit. Names are absolute except the per-agent segment topic, which lives in
the robot's namespace: the planner publishes ``/<agent_id>/skill_segments`` and a robot node started
in namespace ``/<agent_id>`` subscribes to the relative name :data:`SKILL_SEGMENTS`.

=============================  ==========================  ==========================================
name                           type                        direction
=============================  ==========================  ==========================================
``/tasks``                     ``Task``                    robots / workload → planner
``/<agent>/skill_segments``    ``Segment``                 planner → that agent's robot
``/segment_feedback``          ``SegmentFeedback``         robots → planner, time model
``/task_status``               ``TaskStatus``              planner → robots, recorder
``/trace_events``              ``TraceEvent``              planner → recorder
``/estimate_exec_time``        ``EstimateExecTime`` (srv)  time-model node serves it
=============================  ==========================  ==========================================

Robot nodes run in namespace ``/<agent_id>`` (node name free, e.g. ``drone``): the planner accepts a
task only once a node *in that namespace* subscribes to the agent's segment topic, so observers
that subscribe to every ``/*/skill_segments`` (recorder, time model) never pass for a robot.
"""

from __future__ import annotations

import re

TASKS = "/tasks"
SKILL_SEGMENTS = "skill_segments"  # relative: resolved in the agent's namespace
SEGMENT_FEEDBACK = "/segment_feedback"
TASK_STATUS = "/task_status"
TRACE_EVENTS = "/trace_events"
ESTIMATE_EXEC_TIME = "/estimate_exec_time"

# Topics the LRTrace recorder records (the per-agent segment topics are found by discovery).
RECORDED_TOPICS = (TASKS, SEGMENT_FEEDBACK, TASK_STATUS, TRACE_EVENTS)

# ROS 2 name rules for one token of a topic name: letters, digits, '_', not starting with a digit.
_AGENT_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def valid_agent_id(agent_id: str) -> bool:
    """True if ``agent_id`` can be a ROS namespace token (so ``/<agent_id>/...`` is a legal name)."""
    return isinstance(agent_id, str) and bool(_AGENT_RE.match(agent_id)) and "__" not in agent_id


def agent_of_segment_topic(name: str) -> str | None:
    """``/drone_1/skill_segments`` → ``drone_1``; None for any other topic name."""
    parts = name.split("/")
    if len(parts) == 3 and parts[0] == "" and parts[2] == SKILL_SEGMENTS and valid_agent_id(parts[1]):
        return parts[1]
    return None


def segment_topic(agent_id: str) -> str:
    """Absolute segment topic of one agent; ValueError with the reason for an unusable id."""
    if not valid_agent_id(agent_id):
        raise ValueError(f"agent_id {agent_id!r} is not a valid ROS name token (letters, digits and "
                         "single '_', not starting with a digit)")
    return f"/{agent_id}/{SKILL_SEGMENTS}"
