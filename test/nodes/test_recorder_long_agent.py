"""The recorder: one Task with an agent id too long for a topic name killed it.

The recorder subscribes to ``/<agent>/skill_segments`` as soon as a task names a new agent; for a
300-character id rcl refuses the topic name and the exception ended the process. The agent-id rule
(``interfaces.topics.valid_agent_id``) is now length-bounded like every task field (``core.limits``): the
recorder records the task and goes on. Likewise an id with a trailing newline, which the old rule's
``$`` let through. Real recorder process on real DDS; outcomes only.
"""

from __future__ import annotations

import signal

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_a_task_with_an_overlong_agent_id_is_recorded_and_the_recorder_survives(subprocess_env, tmp_path):
    import robot_testkit as kit

    from timely_llm_ros.core.limits import MAX_AGENT_ID
    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.lrtrace.bagread import read_bag

    assert topics.valid_agent_id("a" * MAX_AGENT_ID) and not topics.valid_agent_id("a" * (MAX_AGENT_ID + 1))
    bag = tmp_path / "bag"
    proc = kit.start_node(
        "timely_llm_ros.nodes.recorder",
        None,
        {"output": str(bag), "flush_period": 0.2},
        subprocess_env,
        tmp_path / "rec.log",
    )
    peer = kit.Peer()
    try:
        assert peer.spin_until(lambda: peer.tasks.get_subscription_count() > 0)
        peer.send_task("a" * 300, "long-agent")
        peer.send_task("b" * 232, "long-agent-2")
        peer.send_task("drone_1\n", "newline-agent")  # once passed the rule ('$' matches before '\n')
        peer.send_task("drone_1", "after")
        assert peer.spin_until(
            lambda: peer.node.count_subscribers("/drone_1/skill_segments") > 0 or proc.poll() is not None
        )
        assert proc.poll() is None, (tmp_path / "rec.log").read_text()[-3000:]
        rc = kit.stop_node(proc, signal.SIGINT)
    finally:
        kit.stop_node(proc, signal.SIGKILL)
        peer.close()
    log = (tmp_path / "rec.log").read_text()
    assert rc == 0 and "Traceback" not in log, log[-3000:]
    recorded = [m.task_id for _, m in read_bag(bag).messages("/tasks")]
    assert recorded == ["long-agent", "long-agent-2", "newline-agent", "after"]
