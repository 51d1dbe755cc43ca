"""tools/compare_bags.py tells identical bags from bags that differ in a topic, a count, a
timestamp or one message's bytes, bag by bag in a directory of bags."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("rosbags")
from rosbags.rosbag2 import StoragePlugin, Writer
from rosbags.typesys import Stores, get_typestore

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import compare_bags

STORE = get_typestore(Stores.ROS2_JAZZY)
String = STORE.types["std_msgs/msg/String"]
MESSAGES = [("/a", 100, "one"), ("/b", 150, "two"), ("/a", 200, "three")]


def write_bag(path: Path, messages=MESSAGES, storage=StoragePlugin.MCAP) -> Path:
    with Writer(path, version=9, storage_plugin=storage) as writer:
        conns = {}
        for topic, stamp, text in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, "std_msgs/msg/String", typestore=STORE)
            writer.write(conns[topic], stamp, STORE.serialize_cdr(String(data=text), String.__msgtype__))
    return path


def test_identical_bags_even_in_another_storage_format(tmp_path: Path) -> None:
    a = write_bag(tmp_path / "a")
    b = write_bag(tmp_path / "b", storage=StoragePlugin.SQLITE3)  # other files, same messages
    assert compare_bags.compare_bag(a, b) == []
    assert compare_bags.main([str(a), str(b)]) == 0


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        ([("/a", 100, "one"), ("/b", 150, "two"), ("/a", 201, "three")], "/a: message 2: timestamp 200"),
        ([("/a", 100, "one"), ("/b", 150, "twO"), ("/a", 200, "three")], "/b: message 1: raw bytes differ"),
        ([("/a", 100, "one"), ("/b", 150, "two")], "/a: type/count std_msgs/msg/String x2 before"),
        ([("/a", 100, "one"), ("/c", 150, "two"), ("/a", 200, "three")], "/b: only in before"),
    ],
)
def test_a_changed_message_is_named(tmp_path: Path, changed, expected: str) -> None:
    problems = compare_bags.compare_bag(write_bag(tmp_path / "a"), write_bag(tmp_path / "b", changed))
    assert any(p.startswith(expected) for p in problems), problems


def test_directories_of_bags_are_compared_bag_by_bag(tmp_path: Path, capsys) -> None:
    for side in ("before", "after"):
        write_bag(tmp_path / side / "wid1_timely")
    write_bag(tmp_path / "before" / "wid1_fcfs")
    write_bag(tmp_path / "after" / "wid1_fcfs", [("/a", 100, "one"), ("/b", 150, "two"), ("/a", 200, "3")])
    write_bag(tmp_path / "before" / "wid2_timely")
    result = compare_bags.compare(tmp_path / "before", tmp_path / "after")
    assert result["wid1_timely"] == []
    assert result["wid1_fcfs"] == ["/a: message 2: raw bytes differ (14 bytes before, 10 after)"]
    assert result["wid2_timely"] == ["bag only in before"]
    assert compare_bags.main([str(tmp_path / "before"), str(tmp_path / "after")]) == 1
    assert "1 of 3 bag(s) identical message by message" in capsys.readouterr().out
    assert compare_bags.compare(tmp_path / "before", tmp_path / "nothing") != {}
