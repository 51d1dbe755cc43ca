"""The one agent-id rule (``interfaces.topics.valid_agent_id``) and the names built on it.

Before it had one home there were two: ``ros/topics.py`` (nodes, recorder) bounded ids to
``core.limits.MAX_AGENT_ID`` characters, the bag writer's copy did not (a 300-character id gave a
bag topic ``ros2 bag play`` refuses), its fallback for other ids could produce ``__`` (not a valid
token), and both let ``"drone_1\\n"`` pass (``$`` matches before a trailing newline), a name rcl
refuses: the recorder subscribed to it and died. Checked here: the rule itself, against rcl's own
validator for every id the planner accepts or rejects, and the bag names built on it.
"""

from __future__ import annotations

import pytest

from timely_llm_ros.core.limits import MAX_AGENT_ID
from timely_llm_ros.interfaces import topics

VALID = ["drone_1", "_x", "arm", "A1", "a_", "a" * MAX_AGENT_ID]
INVALID = [
    "",
    "0",
    "17",
    "1a",
    "a__b",
    "a" * (MAX_AGENT_ID + 1),
    "b" * 300,
    "drone_1\n",
    "\ndrone_1",
    "drone-1",
    "é",
    "a/b",
    " a",
    "a b",
    "drone_1\x00",
    "__ns",
    "/drone_1",
]
# ids the planner gets in Task messages: the inbound fuzz corpus plus the cases above
CORPUS = (
    VALID
    + INVALID
    + [
        "🙂ü\u202eé" * 50,
        "\x01\x7f",
        "/../",
        "__ns",
        "0abc",
        "d1",
        "é" * 65,
        "drone_1" * 40,
        "x" * 70_000,
        "agent_",
        "a__",
        "_",
    ]
)


@pytest.mark.parametrize("agent", VALID)
def test_ros_name_tokens_up_to_the_length_bound_are_agent_ids(agent: str) -> None:
    assert topics.valid_agent_id(agent)
    assert topics.segment_topic(agent) == f"{agent}/skill_segments"
    assert topics.bag_segments_topic(agent) == f"/{agent}/skill_segments"  # the name the recorder records
    assert topics.agent_of_segment_topic(f"/{agent}/skill_segments") == agent


@pytest.mark.parametrize("agent", INVALID)
def test_anything_else_is_refused_with_a_reason_not_an_exception_elsewhere(agent: str) -> None:
    assert not topics.valid_agent_id(agent)
    with pytest.raises(ValueError, match="not a valid ROS name token"):
        topics.segment_topic(agent)
    assert topics.agent_of_segment_topic(f"/{agent}/skill_segments") is None


def test_non_strings_are_no_agent_ids() -> None:
    for agent in (None, 17, b"drone_1", ["drone_1"]):
        assert not topics.valid_agent_id(agent)  # type: ignore[arg-type]


@pytest.mark.parametrize("agent", CORPUS)
def test_bag_segment_topics_are_always_valid_names(agent: str) -> None:
    name = topics.bag_segments_topic(agent)
    token = name.removesuffix(topics.SEGMENTS_SUFFIX).removeprefix("/")
    assert topics.valid_agent_id(token), (agent[:40], name)
    if not topics.valid_agent_id(agent):
        assert token.startswith("agent_")


def test_simulator_ids_keep_their_bag_names() -> None:
    # the public workloads number their agents; bags written before the rule moved keep their names
    assert topics.bag_segments_topic("0") == "/agent_0/skill_segments"
    assert topics.bag_segments_topic("17") == "/agent_17/skill_segments"
    assert topics.bag_segments_topic("drone-1") == "/agent_drone_1/skill_segments"


def test_the_nodes_the_bag_writer_and_the_rule_share_one_home() -> None:
    # one module holds the names and the rule: the nodes' copy (ros/topics.py, a re-export) is gone
    # and the bag writer uses the same objects instead of names of its own
    import importlib.util

    from timely_llm_ros.lrtrace import bagio

    assert importlib.util.find_spec("timely_llm_ros.ros.topics") is None
    assert {topics.TOPIC_TASKS, topics.TOPIC_TRACE} <= set(bagio.DEFAULT_TOPICS)
    assert (topics.TOPIC_TASKS, topics.TOPIC_TRACE) == ("/" + topics.TASKS, "/" + topics.TRACE_EVENTS)
    assert not hasattr(bagio, "segments_topic")


@pytest.mark.ros
@pytest.mark.parametrize("agent", CORPUS)
def test_rcl_accepts_every_name_the_rule_lets_through(agent: str) -> None:
    # what the recorder and the planner do with an id the rule accepts: build /<agent>/skill_segments
    # (and a robot's namespace /<agent>); rcl must accept those names, or the node gets an exception
    from rclpy.validate_full_topic_name import validate_full_topic_name
    from rclpy.validate_namespace import validate_namespace

    if topics.valid_agent_id(agent):
        validate_full_topic_name("/" + topics.segment_topic(agent))
        validate_namespace("/" + agent)
    validate_full_topic_name(topics.bag_segments_topic(agent))  # bags stay playable for any id
