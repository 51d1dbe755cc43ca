"""Bags for every rosbag2 from Humble on: metadata per target distro, zstd chunks, rosbag2's record.

What each distro's rosbag2 reads is taken from its sources (ros2/rosbag2, branches humble, iron,
jazzy, rolling): Humble's ``metadata_io.cpp`` decodes ``offered_qos_profiles`` with
``as<std::string>()`` (a YAML *string*, since version 4) and its QoS parser reads the policies with
``as<int>()``; files/compression fields from versions 5 and 3. ``humble_decode`` below applies those
rules to our ``metadata.yaml``; a version 9 file (profiles as a YAML list) fails them, as it fails
on Humble.
"""

from __future__ import annotations

import struct

import pytest
import yaml

from timely_llm_ros.lrtrace import bagio, bagread
from timely_llm_ros.lrtrace.mcap import MAGIC, OP_CHUNK_INDEX, OP_METADATA, OP_METADATA_INDEX

TOPIC = "/trace_events"


def _write(path, **kwargs):
    """A bag of 50 trace events (long details, so chunk compression has something to do)."""
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.interfaces.mapping import seconds_to_ns
    from timely_llm_ros.lrtrace import convert as cv
    from timely_llm_ros.lrtrace import typestore as ts

    store = ts.shared_typestore()
    with bagio.BagWriter(path, {TOPIC: ts.TRACE_EVENT}, flush_every_s=None, **kwargs) as writer:
        for i in range(50):
            e = ev.TraceEvent(1.0 + i, "ARRIVAL", f"t-{i}", "drone_1", 0, 0.0, "queued " * 40)
            writer.write_msg(TOPIC, seconds_to_ns(e.t), cv.event_to_msg(store, e))
    return path


def humble_decode(info: dict) -> list[dict]:
    """The checks rosbag2 on Humble applies to metadata.yaml; returns the parsed QoS profiles."""
    assert isinstance(info["version"], int) and info["version"] <= 5
    assert isinstance(info["storage_identifier"], str)
    int(info["duration"]["nanoseconds"])
    int(info["starting_time"]["nanoseconds_since_epoch"])
    int(info["message_count"])
    assert all(isinstance(p, str) for p in info["relative_file_paths"])
    assert isinstance(info["compression_format"], str) and isinstance(info["compression_mode"], str)
    for f in info["files"]:
        assert isinstance(f["path"], str) and int(f["message_count"]) >= 0
        int(f["duration"]["nanoseconds"])
        int(f["starting_time"]["nanoseconds_since_epoch"])
    profiles = []
    for entry in info["topics_with_message_count"]:
        meta = entry["topic_metadata"]
        for key in ("name", "type", "serialization_format", "offered_qos_profiles"):
            assert isinstance(meta[key], str), (key, meta[key])  # as<std::string>()
        for qos in yaml.safe_load(meta["offered_qos_profiles"]):
            for policy in ("history", "reliability", "durability", "liveliness", "depth"):
                assert isinstance(qos[policy], int), (policy, qos[policy])  # as<int>()
            for dur in ("deadline", "lifespan", "liveliness_lease_duration"):
                assert isinstance(qos[dur]["sec"], int) and isinstance(qos[dur]["nsec"], int)
            profiles.append(qos)
        int(entry["message_count"])
    return profiles


def _metadata(bag) -> dict:
    return yaml.safe_load((bag / "metadata.yaml").read_text())["rosbag2_bagfile_information"]


def _summary_records(path) -> list[tuple[int, bytes]]:
    """(opcode, content) of every record in the MCAP summary section (footer -> summary start)."""
    raw = path.read_bytes()
    assert raw.startswith(MAGIC) and raw.endswith(MAGIC)
    summary_start, _offsets, _crc = struct.unpack_from("<QQI", raw, len(raw) - len(MAGIC) - 20)
    out, pos = [], summary_start
    while pos < len(raw) - len(MAGIC) - 29:
        op, length = struct.unpack_from("<BQ", raw, pos)
        out.append((op, raw[pos + 9 : pos + 9 + length]))
        pos += 9 + length
    return out


def _string(buf: bytes, pos: int) -> tuple[str, int]:
    (n,) = struct.unpack_from("<I", buf, pos)
    return buf[pos + 4 : pos + 4 + n].decode(), pos + 4 + n


def _metadata_records(path) -> dict[str, dict[str, str]]:
    """Metadata records found through the summary's metadata indexes (as rosbag2_storage_mcap does)."""
    raw = path.read_bytes()
    found = {}
    for op, body in _summary_records(path):
        if op != OP_METADATA_INDEX:
            continue
        offset, length = struct.unpack_from("<QQ", body, 0)
        name, _ = _string(body, 16)
        rop, rlen = struct.unpack_from("<BQ", raw, offset)
        assert rop == OP_METADATA and 9 + rlen == length
        record = raw[offset + 9 : offset + 9 + rlen]
        rname, pos = _string(record, 0)
        (size,) = struct.unpack_from("<I", record, pos)
        pos, end, values = pos + 4, pos + 4 + size, {}
        while pos < end:
            key, pos = _string(record, pos)
            values[key], pos = _string(record, pos)
        assert rname == name
        found[name] = values
    return found


def test_a_bag_for_humble_has_metadata_humbles_rosbag2_decodes(tmp_path):
    from timely_llm_ros.lrtrace.mcap import scan_records

    bag = _write(tmp_path / "humble_bag", distro="humble")
    info = _metadata(bag)
    assert info["version"] == 5 and info["ros_distro"] == "humble"
    (qos,) = humble_decode(info)
    assert qos["reliability"] == 1  # RELIABLE as rmw's integer
    (channel,) = scan_records(bag / "humble_bag_0.mcap").channels.values()
    assert yaml.safe_load(channel.metadata["offered_qos_profiles"]) == [qos]  # the MCAP channel too
    read = bagread.read_bag(bag, expected=[TOPIC])
    assert not read.problems and len(read.messages(TOPIC)) == 50


def test_the_default_bag_is_version_9_which_humble_cannot_decode(tmp_path):
    bag = _write(tmp_path / "kilted_bag", distro="kilted")
    info = _metadata(bag)
    assert (
        info["version"] == 9
        and info["topics_with_message_count"][0]["topic_metadata"]["type_description_hash"]
    )
    with pytest.raises(AssertionError):
        humble_decode(info)
    assert bagio.metadata_version("iron") == 7 and bagio.metadata_version("jazzy") == 9


def test_rosbag2_metadata_record_is_in_the_mcap_file(tmp_path):
    bag = _write(tmp_path / "meta_bag", distro="jazzy")
    records = _metadata_records(bag / "meta_bag_0.mcap")
    assert set(records) == {"rosbag2"}
    assert records["rosbag2"]["ROS_DISTRO"] == "jazzy"
    serialized = yaml.safe_load(records["rosbag2"]["serialized_metadata"])
    assert serialized["version"] == 9 and serialized["message_count"] == 50
    assert serialized["topics_with_message_count"][0]["topic_metadata"]["name"] == TOPIC
    stats = [body for op, body in _summary_records(bag / "meta_bag_0.mcap") if op == 0x0B]
    assert struct.unpack_from("<QHIII", stats[0], 0)[4] == 1  # statistics count the metadata record


def test_zstd_chunks_are_smaller_and_read_back(tmp_path):
    plain = _write(tmp_path / "plain")
    packed = _write(tmp_path / "packed", compression="zstd")
    size = {b.name: (b / f"{b.name}_0.mcap").stat().st_size for b in (plain, packed)}
    assert size["packed"] < size["plain"] / 2, size
    indexes = [body for op, body in _summary_records(packed / "packed_0.mcap") if op == OP_CHUNK_INDEX]
    assert indexes and all(b"zstd" in body for body in indexes)
    read = bagread.read_bag(packed, expected=[TOPIC])  # through rosbags, which decompresses the chunks itself
    assert not read.problems and [m.task_id for _, m in read.messages(TOPIC)] == [f"t-{i}" for i in range(50)]
    from timely_llm_ros.lrtrace.mcap import scan_records

    assert len(scan_records(packed / "packed_0.mcap").messages) == 50  # and the recovering scanner
    with pytest.raises(ValueError, match="compression"):
        bagio.BagWriter(tmp_path / "bad", {TOPIC: "timely_llm_ros/msg/TraceEvent"}, compression="lz5")


def test_a_missing_codec_names_the_pip_package(monkeypatch):
    import sys

    from timely_llm_ros.lrtrace import mcap

    monkeypatch.setitem(sys.modules, "lz4", None)
    monkeypatch.setitem(sys.modules, "lz4.frame", None)
    with pytest.raises(mcap.CodecMissing, match="pip install lz4"):
        mcap.lz4_frame()
