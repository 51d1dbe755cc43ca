"""LRTrace recorder over real DDS: a real rosbag2 bag that rosbags opens, also after SIGKILL."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest
import yaml

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _metadata_counts(bag) -> dict[str, int]:
    try:
        info = yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]
    except (OSError, yaml.YAMLError, KeyError, TypeError):
        return {}
    return {t["topic_metadata"]["name"]: t["message_count"] for t in info["topics_with_message_count"] or []}


def _read_with_rosbags(bag) -> dict[str, list]:
    from rosbags.rosbag2 import Reader

    from timely_llm_ros.lrtrace.typestore import make_typestore

    store = make_typestore()
    out: dict[str, list] = {}
    with Reader(bag) as reader:
        for conn in reader.connections:
            out.setdefault(conn.topic, [])
        for conn, t_ns, raw in reader.messages():
            out[conn.topic].append((t_ns, store.deserialize_cdr(raw, conn.msgtype)))
    return out


def _publish_everything(peer):
    """One burst per topic (each within its QoS depth); returns what was sent per topic."""
    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.msg import Segment, SegmentFeedback, TraceEvent
    from timely_llm_ros.ros import qos

    fb = peer.node.create_publisher(SegmentFeedback, topics.SEGMENT_FEEDBACK, qos.feedback_qos())
    ev = peer.node.create_publisher(TraceEvent, topics.TRACE_EVENTS, qos.event_qos())
    seg1, seg2 = peer.segments_pub("drone_1"), peer.segments_pub("drone_2")
    pubs = [peer.tasks, peer.status, fb, ev, seg1, seg2]
    assert peer.spin_until(lambda: all(p.get_subscription_count() > 0 for p in pubs)), [
        p.topic_name for p in pubs if p.get_subscription_count() == 0
    ]
    for i in range(5):
        peer.send_task("drone_1", f"task{i}", scene="[cat x:0.5 y:0.5]")
    for i in range(3):
        peer.send_status("drone_1", f"task{i}", 5, "")
        fb.publish(
            SegmentFeedback(
                task_id=f"task{i}", agent_id="drone_1", index=0, state=1, duration=1.5, detail="ok"
            )
        )
        ev.publish(TraceEvent(task_id=f"task{i}", agent_id="drone_1", segment_index=-1, kind=0, detail="é"))
        seg1.publish(Segment(task_id=f"task{i}", agent_id="drone_1", index=0, text="mf(50);"))
        seg2.publish(Segment(task_id=f"other{i}", agent_id="drone_2", index=i, text="tc(90);"))
    return {
        "/tasks": 5,
        "/task_status": 3,
        "/segment_feedback": 3,
        "/trace_events": 3,
        "/drone_1/skill_segments": 3,
        "/drone_2/skill_segments": 3,
    }


def test_recorder_bag_survives_sigkill_and_opens_with_rosbags(subprocess_env, tmp_path):
    import robot_testkit as kit

    bag = tmp_path / "run_bag"
    # drone_1 given as a parameter, drone_2 found by discovery
    proc = kit.start_node(
        "timely_llm_ros.nodes.recorder",
        None,
        {"output": str(bag), "agents": "['drone_1']", "flush_period": 0.2, "discovery_period": 0.2},
        subprocess_env,
        tmp_path / "rec.log",
    )
    peer = kit.Peer()
    try:
        expected = _publish_everything(peer)
        flushed = peer.spin_until(
            lambda: all(_metadata_counts(bag).get(t, 0) >= n for t, n in expected.items())
        )
        assert flushed, f"{_metadata_counts(bag)} vs {expected}\n{(tmp_path / 'rec.log').read_text()}"
        rc = kit.stop_node(proc, signal.SIGKILL)
    finally:
        kit.stop_node(proc, signal.SIGKILL)
        peer.close()
    assert rc == -signal.SIGKILL
    content = _read_with_rosbags(bag)
    assert {t: len(m) for t, m in content.items() if t in expected} == expected
    assert [m.task_id for _, m in content["/tasks"]] == [f"task{i}" for i in range(5)]
    assert [m.index for _, m in content["/drone_2/skill_segments"]] == [0, 1, 2]
    assert content["/trace_events"][0][1].detail == "é"
    assert content["/segment_feedback"][0][1].duration == 1.5
    for msgs in content.values():  # log times are receive times: non-decreasing per topic
        times = [t for t, _ in msgs]
        assert times == sorted(times)


def test_recorder_closes_cleanly_on_sigint_and_refuses_to_overwrite(subprocess_env, tmp_path):
    import robot_testkit as kit

    from timely_llm_ros.lrtrace.bagread import read_bag

    bag = tmp_path / "clean_bag"
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
        peer.send_task("drone_1", "only")
        assert peer.spin_until(lambda: _metadata_counts(bag).get("/tasks", 0) == 1)
        rc = kit.stop_node(proc, signal.SIGINT)
    finally:
        kit.stop_node(proc, signal.SIGKILL)
        peer.close()
    assert rc == 0, (tmp_path / "rec.log").read_text()
    contents = read_bag(bag)
    assert [m.task_id for _, m in contents.messages("/tasks")] == ["only"]
    assert not contents.problems
    again = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.nodes.recorder", "--ros-args", "-p", f"output:={bag}"],
        env=subprocess_env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert again.returncode == 2 and "exists already" in again.stderr
