"""LRTrace bag I/O: real rosbag2 directories, kill-safety, damaged bags, simulator bags."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

pytest.importorskip("rosbags", reason="rosbags is installed in the project venv (make)")

from rosbags.highlevel import AnyReader
from rosbags.rosbag2 import Reader
from ruamel.yaml import YAML
from viz_testlib import SCENARIO, write_scenario_bag

from timely_llm_ros.core import events as ev
from timely_llm_ros.interfaces.mapping import from_stamp, seconds_to_ns
from timely_llm_ros.interfaces.topics import TOPIC_TRACE
from timely_llm_ros.interfaces.topics import bag_segments_topic as segments_topic
from timely_llm_ros.lrtrace import convert as cv
from timely_llm_ros.lrtrace import typestore as ts
from timely_llm_ros.lrtrace.bagio import DEFAULT_TOPICS, BagWriter
from timely_llm_ros.lrtrace.bagread import read_bag
from timely_llm_ros.lrtrace.simbag import write_sim_bag
from timely_llm_ros.lrtrace.typestore import make_typestore
from timely_llm_ros.sim.simulator import SimConfig, simulate
from timely_llm_ros.workload.fileformat import resolve_workload


def _meta(bag: Path) -> dict:
    return YAML(typ="safe").load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]


def test_type_hashes_equal_rosidl(repo_root):
    """RIHS01 hashes we embed must equal the ones rosidl generated for the same .msg files."""
    share = Path(sys.prefix) / "share" / "timely_llm_ros" / "msg"
    if not (share / "TraceEvent.json").is_file():
        pytest.skip(f"no rosidl type descriptions at {share} (interfaces not built into this interpreter)")
    store = make_typestore(repo_root / "msg")
    for name in ts.MSG_NAMES:
        doc = json.loads((share / f"{name}.json").read_text())
        hashes = {h["type_name"]: h["hash_string"] for h in doc["type_hashes"]}
        assert store.hash_rihs01(f"timely_llm_ros/msg/{name}") == hashes[f"timely_llm_ros/msg/{name}"], name


def test_codes_follow_the_message_constants(repo_root):
    text = (repo_root / "msg" / "TraceEvent.msg").read_text()
    assert "uint8 SUSPEND=9" in text and ts.EVENT_KIND_CODE[ev.SUSPEND] == 9
    assert set(ts.EVENT_KIND_CODE) == set(ev.EVENT_KINDS)
    assert set(ts.TASK_STATE_CODE) == set(ev.TASK_STATES)


def test_writer_makes_a_rosbag2_directory_rosbags_opens(tmp_path):
    bag = write_scenario_bag(tmp_path / "run")
    assert sorted(p.name for p in bag.iterdir()) == ["metadata.yaml", "run_0.mcap"]
    meta = _meta(bag)
    assert meta["version"] == 9 and meta["storage_identifier"] == "mcap"
    topics = {t["topic_metadata"]["name"]: t for t in meta["topics_with_message_count"]}
    assert topics[TOPIC_TRACE]["message_count"] == len(SCENARIO)
    assert topics[TOPIC_TRACE]["topic_metadata"]["type_description_hash"].startswith("RIHS01_")
    assert topics[TOPIC_TRACE]["topic_metadata"]["offered_qos_profiles"][0]["reliability"] == "reliable"
    assert meta["message_count"] == len(SCENARIO) + 3
    # the definitions are embedded: AnyReader builds its types from the bag alone, no typestore given
    with AnyReader([bag]) as reader:
        conns = [c for c in reader.connections if c.topic == TOPIC_TRACE]
        assert "uint8 SUSPEND=9" in conns[0].msgdef.data
        msgs = [reader.deserialize(raw, c.msgtype) for c, _t, raw in reader.messages(connections=conns)]
    assert [cv.event_from_msg(m) for m in msgs] == [
        ev.TraceEvent(round(e.t, 9), e.kind, e.task_id, e.agent_id, e.seg, e.value, e.detail)
        for e in SCENARIO
    ]


def test_raw_cdr_write_and_topic_added_later(tmp_path):
    store = ts.shared_typestore()
    e = ev.TraceEvent(1.5, ev.ARRIVAL, "t1", "a1")
    raw = bytes(store.serialize_cdr(cv.event_to_msg(store, e), ts.TRACE_EVENT))
    with BagWriter(tmp_path / "b", {TOPIC_TRACE: "timely_llm_ros/TraceEvent"}, flush_every_s=None) as w:
        w.write(TOPIC_TRACE, 1_500_000_000, raw)
        w.flush()
        w.add_topic("/drone_1/skill_segments", ts.SEGMENT)
        w.add_topic(TOPIC_TRACE, ts.TRACE_EVENT)  # idempotent
        seg = store.types[ts.SEGMENT](
            task_id="t1",
            agent_id="drone_1",
            index=0,
            text="tp;",
            calls=[],
            final=True,
            gen_start=ts.stamp(store, 1.0),
            gen_end=ts.stamp(store, 1.2),
            tokens=3,
            exec_time_min=0.5,
            exec_time_expected=0.7,
            nonce="",
        )
        w.write_msg("/drone_1/skill_segments", 1_200_000_000, seg)
        assert w.counts == {TOPIC_TRACE: 1, "/drone_1/skill_segments": 1}
    got = read_bag(tmp_path / "b")
    assert got.trace_events() == [e]
    ((_, msg),) = got.messages("/drone_1/skill_segments")
    assert msg.text == "tp;" and from_stamp(msg.gen_end) == pytest.approx(1.2)


def test_writer_refuses_bad_input_with_reasons(tmp_path):
    with BagWriter(tmp_path / "b", DEFAULT_TOPICS, flush_every_s=None) as w:
        with pytest.raises(KeyError, match="add_topic first"):
            w.write("/nope", 1, b"\0\1\0\0")
        with pytest.raises(ValueError, match="non-negative integer"):
            w.write(TOPIC_TRACE, -1, b"\0\1\0\0")
        with pytest.raises(ValueError, match="not CDR"):
            w.write(TOPIC_TRACE, 1, b"")
        with pytest.raises(ValueError, match="unknown to the typestore"):
            w.add_topic("/x", "my_pkg/msg/Nothing")
        with pytest.raises(ValueError, match="recorded as"):
            w.add_topic(TOPIC_TRACE, ts.TASK)
        with pytest.raises(ValueError, match="absolute"):
            w.add_topic("tasks", ts.TASK)
    with pytest.raises(FileExistsError, match="never overwritten"):
        BagWriter(tmp_path / "b", DEFAULT_TOPICS)
    with pytest.raises(ValueError, match="storage"):
        BagWriter(tmp_path / "c", DEFAULT_TOPICS, storage="sqlite3")
    with pytest.raises(RuntimeError, match="closed"):
        w.write(TOPIC_TRACE, 1, b"\0\1\0\0")


_KILL_CHILD = textwrap.dedent("""
    import sys, time
    from timely_llm_ros.core.events import TraceEvent
    from timely_llm_ros.lrtrace import convert as cv, typestore as ts
    from timely_llm_ros.lrtrace.bagio import BagWriter, DEFAULT_TOPICS
    from timely_llm_ros.interfaces.mapping import seconds_to_ns
    store = ts.shared_typestore()
    mode = sys.argv[2]
    w = BagWriter(sys.argv[1], DEFAULT_TOPICS, flush_every_s=3600 if mode == "explicit" else 0.2)
    def put(i):
        e = TraceEvent(1.0 + i, "ARRIVAL", f"t{i}", "a")
        w.write_msg("/trace_events", seconds_to_ns(e.t), cv.event_to_msg(store, e))
    for i in range(50):
        put(i)
    if mode == "explicit":
        w.flush()
        for i in range(50, 80):  # never flushed: lost by design when the process is killed
            put(i)
    print("ready", flush=True)
    time.sleep(600)
""")


@pytest.mark.parametrize("mode", ["explicit", "timer"])
def test_sigkilled_writer_leaves_a_bag_rosbags_opens(tmp_path, subprocess_env, mode):
    bag = tmp_path / "killed"
    child = subprocess.Popen(
        [sys.executable, "-c", _KILL_CHILD, str(bag), mode],
        stdout=subprocess.PIPE,
        text=True,
        env=subprocess_env,
    )
    try:
        assert child.stdout.readline().strip() == "ready"
        if mode == "timer":  # the background flush catches up without any further write
            deadline = time.monotonic() + 30
            while _meta(bag)["message_count"] < 50 and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    with Reader(bag) as reader:  # plain rosbags, no recovery: the file is finished after every flush
        assert reader.message_count == 50
        assert sum(1 for _ in reader.messages()) == 50
    got = read_bag(bag)
    assert not got.problems and len(got.trace_events()) == 50


def test_truncated_storage_file_gives_what_is_before_the_damage(tmp_path):
    bag = tmp_path / "b"
    store = ts.shared_typestore()
    with BagWriter(bag, DEFAULT_TOPICS, flush_every_s=None) as w:
        for i in range(100):
            e = ev.TraceEvent(1.0 + i, ev.ARRIVAL, f"t{i}", "a")
            w.write_msg(TOPIC_TRACE, seconds_to_ns(e.t), cv.event_to_msg(store, e))
            if i % 10 == 9:
                w.flush()  # one chunk per 10 messages
    mcap = bag / "b_0.mcap"
    data = mcap.read_bytes()
    mcap.write_bytes(data[: int(len(data) * 0.6)])
    got = read_bag(bag)
    events = got.trace_events()
    assert 30 <= len(events) < 100 and [e.task_id for e in events] == [f"t{i}" for i in range(len(events))]
    assert got.recovered
    text = " ".join(got.problems)
    assert "rosbags could not read" in text and "cut off" in text and "lists 100 messages" in text
    # metadata.yaml lost as well: the storage file alone still reads
    (bag / "metadata.yaml").unlink()
    assert len(read_bag(bag).trace_events()) == len(events)
    # a bare .mcap file is a bag too
    assert len(read_bag(mcap).trace_events()) == len(events)


def test_missing_topics_are_listed_not_raised(tmp_path):
    bag = write_scenario_bag(tmp_path / "b", with_tasks=False)
    got = read_bag(bag)
    assert got.missing == [
        "/tasks (not recorded)",
        "/task_status (recorded, but no messages)",
        "/segment_feedback (recorded, but no messages)",
        "/<agent>/skill_segments (no segment topic recorded)",
    ]
    assert "MISSING: /tasks (not recorded)" in got.describe()
    with pytest.raises(FileNotFoundError, match="no bag"):
        read_bag(tmp_path / "nothing")
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no bag storage file"):
        read_bag(tmp_path / "empty")


def test_garbage_messages_are_counted_as_problems(tmp_path):
    bag = tmp_path / "b"
    with BagWriter(bag, DEFAULT_TOPICS, flush_every_s=None) as w:
        w.write(TOPIC_TRACE, 5, b"\x00\x01\x00\x00\xff")  # a CDR header and nothing of the message
    got = read_bag(bag)
    assert got.messages(TOPIC_TRACE) == []
    assert any("could not be decoded" in p for p in got.problems)


def test_sim_bag_holds_every_task_segment_feedback_and_event(tmp_path):
    wl = resolve_workload("wid2:agents=8")
    res = simulate(wl.tasks, SimConfig())
    bag = write_sim_bag(res, wl.tasks, tmp_path / "sim")
    got = read_bag(bag)
    assert got.missing == [] and got.problems == []
    assert len(got.messages("/tasks")) == len(wl.tasks)
    events = got.trace_events()
    assert len(events) == len(res.events)
    assert sorted((e.kind, e.task_id, e.seg) for e in events) == sorted(
        (e.kind, e.task_id, e.seg) for e in res.events
    )
    n_segments = sum(len(r.segments) for r in res.records)
    seg_msgs = got.by_type(ts.SEGMENT)
    assert len(seg_msgs) == n_segments
    assert all(topic == segments_topic(msg.agent_id) for topic, _, msg in seg_msgs)
    assert (
        segments_topic("0") == "/agent_0/skill_segments"
        and segments_topic("drone_1") == "/drone_1/skill_segments"
    )
    executed = sum(1 for r in res.records for s in r.segments if s.exec_end == s.exec_end)
    assert len(got.messages("/segment_feedback")) == 2 * executed
    final = {}
    for _, _, msg in got.by_type(ts.STATUS):
        final[msg.task_id] = msg
    assert {t: ts.TASK_STATE_NAME[m.state] for t, m in final.items()} == {
        r.task_id: r.state for r in res.records
    }
    assert got.custom_data["policy"] == "timely"


def test_scenario_round_trip_keeps_order_of_simultaneous_events(tmp_path):
    got = read_bag(write_scenario_bag(tmp_path / "b"))
    kinds_at_1025 = [e.kind for e in got.trace_events() if e.t == pytest.approx(10.25)]
    assert kinds_at_1025 == [ev.SEGMENT_READY, ev.DISPATCH, ev.GEN_STOP, ev.SUSPEND, ev.GEN_START]
    infos = got.task_infos()
    assert infos["u1"].tuf.ert == pytest.approx(0.2) and infos["f1"].agent_id == "arm_1"


def test_invalid_tuf_in_a_task_message_is_a_problem_not_a_crash():
    store = ts.shared_typestore()
    from types import SimpleNamespace

    spec = SimpleNamespace(
        task_id="x",
        agent_id="a",
        robot_type="drone",
        skill_set="s",
        instruction="i",
        scene="",
        max_tokens=5,
        tuf=SimpleNamespace(ert=1.0, alpha=2.0, beta=1.0),
    )
    info = cv.task_info_from_msg(cv.task_to_msg(store, spec, 1.0), 1_000_000_000)
    assert info.tuf is None and "alpha must be <= 0" in info.problem


@pytest.mark.ros
def test_rclpy_qos_profiles_are_recorded(tmp_path):
    from timely_llm_ros.lrtrace.bagio import qos_from_profile
    from timely_llm_ros.ros.qos import event_qos, segment_qos

    seg = qos_from_profile(segment_qos(2.5))
    assert seg.depth == 10 and seg.reliability.name == "RELIABLE" and seg.durability.name == "VOLATILE"
    assert (seg.lifespan.sec, seg.lifespan.nsec) == (2, 500_000_000)
    assert seg.deadline.sec == 9223372036  # rclpy's default (0) = infinite, as rosbag2 writes it
    with BagWriter(tmp_path / "b", {}, flush_every_s=None) as w:
        w.add_topic("/drone_1/skill_segments", ts.SEGMENT, qos=[seg])
        w.add_topic(TOPIC_TRACE, ts.TRACE_EVENT, qos=[qos_from_profile(event_qos())])
    with Reader(tmp_path / "b") as reader:  # metadata.yaml and MCAP channel QoS agree
        qos = {c.topic: c.ext.offered_qos_profiles for c in reader.connections}
    assert qos["/drone_1/skill_segments"] == [seg] and qos[TOPIC_TRACE][0].depth == event_qos().depth


def test_reads_bags_written_by_rosbags_own_writer(tmp_path):
    """Bags from other tools (here: rosbags' writer, sqlite3 and MCAP storage) read the same."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    store = ts.shared_typestore()
    for plugin in (StoragePlugin.SQLITE3, StoragePlugin.MCAP):
        path = tmp_path / plugin.name.lower()
        with Writer(path, version=9, storage_plugin=plugin) as w:
            conn = w.add_connection(TOPIC_TRACE, ts.TRACE_EVENT, typestore=store)
            for e in SCENARIO:
                w.write(
                    conn,
                    seconds_to_ns(e.t),
                    bytes(store.serialize_cdr(cv.event_to_msg(store, e), ts.TRACE_EVENT)),
                )
        got = read_bag(path)
        assert not got.problems and len(got.trace_events()) == len(SCENARIO)
        assert "/tasks (not recorded)" in got.missing


def test_a_bag_recorded_with_an_older_task_definition_still_decodes(tmp_path, repo_root):
    """Interfaces grow (Task gained task_class, trace_id, overrun): a bag recorded before that must still
    give its tasks, decoded with the definition embedded in the bag, and say so."""
    old_dir = tmp_path / "old_msg"
    old_dir.mkdir()
    for name in ts.MSG_NAMES:
        text = (repo_root / "msg" / f"{name}.msg").read_text(encoding="utf-8")
        if name == "Task":
            text = "\n".join(
                line
                for line in text.splitlines()
                if not line.startswith(("string task_class", "uint32 trace_id", "string overrun"))
            )
        (old_dir / f"{name}.msg").write_text(text, encoding="utf-8")
    old = make_typestore(old_dir)
    assert old.hash_rihs01(ts.TASK) != ts.shared_typestore().hash_rihs01(ts.TASK)
    tuf = old.types[ts.TUF_MSG](ert=0.2, alpha=-6.67, beta=2.0)
    task = old.types[ts.TASK](
        header=old.types[ts.HEADER](stamp=ts.stamp(old, 1.0), frame_id=""),
        task_id="t1",
        agent_id="drone_1",
        robot_type="drone",
        skill_set="tello_minispec",
        instruction="go",
        scene="",
        tuf=tuf,
        max_tokens=0,
    )
    with BagWriter(tmp_path / "b", {"/tasks": ts.TASK}, flush_every_s=None, typestore=old) as w:
        w.write_msg("/tasks", 1_000_000_000, task)
    got = read_bag(tmp_path / "b")
    info = got.task_infos()["t1"]
    assert info.tuf.ert == pytest.approx(0.2) and info.task_class == "" and info.trace_id is None
    assert any("differs from the installed definition" in p for p in got.problems)


def test_metadata_names_the_environment_distro_and_writes_empty_custom_data_as_a_mapping(
    tmp_path, monkeypatch
):
    from timely_llm_ros.lrtrace.bagio import ros_distro

    monkeypatch.setenv("ROS_DISTRO", "jazzy")
    with BagWriter(tmp_path / "a", DEFAULT_TOPICS, flush_every_s=None):
        pass
    meta = _meta(tmp_path / "a")
    assert meta["ros_distro"] == "jazzy" and meta["custom_data"] == {}
    assert "custom_data: {}" in (tmp_path / "a" / "metadata.yaml").read_text()
    # the PyPI wheels set no ROS_DISTRO: the rclpy wheel's release series names it (9.x = kilted)
    monkeypatch.delenv("ROS_DISTRO")
    from importlib import metadata

    try:
        expected = {"9": "kilted", "7": "jazzy"}.get(metadata.version("ros-rclpy").split(".")[0], ts.DISTRO)
    except metadata.PackageNotFoundError:
        expected = ts.DISTRO
    assert ros_distro() == expected
    with BagWriter(tmp_path / "b", DEFAULT_TOPICS, flush_every_s=None, custom_data={"policy": "timely"}):
        pass
    assert _meta(tmp_path / "b")["ros_distro"] == expected
    assert _meta(tmp_path / "b")["custom_data"] == {"policy": "timely"}
