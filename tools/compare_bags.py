"""Compare rosbag2 bags message by message: same topics, counts, timestamps and raw bytes.

Why a tool of its own: a refactor that must keep behaviour (``timely-llm bench ... --bag DIR``
before and after) is checked on its bags, and a byte-level ``cmp`` of the storage files says
nothing useful when it fails (an MCAP file also holds chunk indexes and the writer's library
string). This reads both sides with the ``rosbags`` reader, as any consumer would, and says which
topic differs first and how.

Two bag directories are compared directly; two directories *of* bags (a bench ``--bag DIR``) are
compared bag by bag, matched by sub-directory name (a bag on one side only is a difference).

Usage::

    python tools/compare_bags.py BEFORE AFTER        # exit status 0: identical, 1: they differ
    python tools/compare_bags.py -q BEFORE AFTER     # print only the differences
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from pathlib import Path

from rosbags.rosbag2 import Reader


def is_bag(path: Path) -> bool:
    """A rosbag2 bag directory is one with a ``metadata.yaml``."""
    return (path / "metadata.yaml").is_file()


def _messages(path: Path) -> Iterator[tuple[str, int, bytes]]:
    with Reader(path) as reader:
        for conn, stamp, raw in reader.messages():
            yield conn.topic, stamp, bytes(raw)


def _topics(path: Path) -> dict[str, tuple[str, int]]:
    with Reader(path) as reader:
        return {c.topic: (c.msgtype, c.msgcount) for c in reader.connections}


def compare_bag(before: Path, after: Path) -> list[str]:
    """Differences between two bags, one line each (empty when identical message by message).

    Topics are compared by name, type and count; then the message streams in reading order, each
    message by topic, timestamp and raw (CDR) bytes. Only the first difference per topic is
    reported: after one message differs, the rest of that topic usually does too.
    """
    out: list[str] = []
    topics_a, topics_b = _topics(before), _topics(after)
    for topic in sorted(set(topics_a) | set(topics_b)):
        a, b = topics_a.get(topic), topics_b.get(topic)
        if a is None or b is None:
            out.append(f"{topic}: only in {'after' if a is None else 'before'}")
        elif a != b:
            out.append(f"{topic}: type/count {a[0]} x{a[1]} before, {b[0]} x{b[1]} after")
    if out:
        return out
    seen: set[str] = set()
    index = 0
    stream_b = _messages(after)
    for index, (topic, stamp, raw) in enumerate(_messages(before)):
        other = next(stream_b, None)
        if other is None:  # unreachable with equal counts per topic; kept for a corrupt bag
            out.append(f"message {index}: after ends early")
            break
        if (topic, stamp, raw) == other or topic in seen:
            continue
        seen.add(topic)
        o_topic, o_stamp, o_raw = other
        if topic != o_topic:
            what = f"topic {topic} before, {o_topic} after"
        elif stamp != o_stamp:
            what = f"timestamp {stamp} before, {o_stamp} after"
        else:
            what = f"raw bytes differ ({len(raw)} bytes before, {len(o_raw)} after)"
        out.append(f"{topic}: message {index}: {what}")
    return out


def compare(before: Path, after: Path) -> dict[str, list[str]]:
    """Bag name -> its differences; for two bags the single name is ``after``'s directory name."""
    if is_bag(before) or is_bag(after):
        if not (is_bag(before) and is_bag(after)):
            return {after.name: [f"not a bag on both sides: {before} / {after}"]}
        return {after.name: compare_bag(before, after)}
    names_a = {p.name for p in before.iterdir() if is_bag(p)} if before.is_dir() else set()
    names_b = {p.name for p in after.iterdir() if is_bag(p)} if after.is_dir() else set()
    if not names_a and not names_b:
        return {after.name: [f"no bags in {before} or {after}"]}
    out: dict[str, list[str]] = {}
    for name in sorted(names_a | names_b):
        if name not in names_b or name not in names_a:
            out[name] = [f"bag only in {'before' if name in names_a else 'after'}"]
        else:
            out[name] = compare_bag(before / name, after / name)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("before", type=Path, help="a bag directory, or a directory of bags")
    ap.add_argument("after", type=Path, help="the same kind of directory to compare with")
    ap.add_argument("-q", "--quiet", action="store_true", help="print only the bags that differ")
    args = ap.parse_args(argv)
    result = compare(args.before, args.after)
    for name, problems in result.items():
        if problems:
            print(f"{name}: DIFFERENT")
            print("\n".join(f"  {p}" for p in problems))
        elif not args.quiet:
            print(f"{name}: identical")
    differing = sum(1 for p in result.values() if p)
    print(f"{len(result) - differing} of {len(result)} bag(s) identical message by message")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
