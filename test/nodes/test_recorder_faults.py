"""Recorder faults over real DDS: a full disk, a read-only output directory, ghost agents.

Before: on a 256 KiB filesystem the flush thread died, 1534 unrate-limited errors were logged for 40
tasks and the recorder stayed up recording nothing; a read-only output directory gave a traceback;
every agent id in /tasks (rejected ghosts included) cost a subscription.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.slow]
TINY = 256 * 1024


@contextlib.contextmanager
def tiny_dir(where: Path, read_only: bool = False):
    """A 256 KiB filesystem (a tmpfs, as root) or, without root, a directory whose files the child
    cannot grow past 256 KiB (RLIMIT_FSIZE: writes fail with EFBIG, as on a full disk)."""
    where.mkdir()
    opts = f"size={TINY}" + (",ro" if read_only else "")
    mounted = (
        os.geteuid() == 0
        and subprocess.run(
            ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(where)], capture_output=True
        ).returncode
        == 0
    )
    if not mounted and read_only:
        where.chmod(0o555)
    try:
        yield mounted
    finally:
        if mounted:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)


def start_recorder(params: dict, env: dict, log: Path, limit_files: bool) -> subprocess.Popen:
    argv = [sys.executable, "-m", "timely_llm_ros.nodes.recorder", "--ros-args"]
    for key, value in params.items():
        argv += ["-p", f"{key}:={value}"]

    def limit() -> None:  # only without a tmpfs: every file of the child stops at 256 KiB
        resource.setrlimit(resource.RLIMIT_FSIZE, (TINY, TINY))

    return subprocess.Popen(
        argv,
        env=env,
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
        preexec_fn=limit if limit_files else None,
    )


class Diagnostics:
    def __init__(self, peer) -> None:
        from diagnostic_msgs.msg import DiagnosticArray

        self.seen: list = []
        peer.node.create_subscription(DiagnosticArray, "/diagnostics", self._on, 10)

    def _on(self, msg) -> None:
        self.seen += [s for s in msg.status if s.name == "lrtrace_recorder: bag"]

    def last(self):
        return self.seen[-1] if self.seen else None


def _flood(peer, pub, n: int, start: int = 0) -> None:
    from timely_llm_ros.msg import TraceEvent

    for i in range(start, start + n):
        pub.publish(TraceEvent(task_id=f"t{i}", agent_id="drone_1", segment_index=-1, detail="x" * 4000))
        peer.spin_until(lambda: False, timeout=0.01)


@pytest.mark.parametrize("mode", ["retry", "exit"])
def test_a_full_disk_stops_the_bag_cleanly_says_so_once_and_retries_or_exits(subprocess_env, tmp_path, mode):
    import robot_testkit as kit
    from diagnostic_msgs.msg import DiagnosticStatus

    from timely_llm_ros.interfaces import topics
    from timely_llm_ros.lrtrace.bagread import read_bag
    from timely_llm_ros.msg import TraceEvent
    from timely_llm_ros.ros import qos

    log = tmp_path / "rec.log"
    with tiny_dir(tmp_path / "tiny") as mounted:
        bag = tmp_path / "tiny" / "bag"
        # Room the operator can make in one step (a single unlink). Moving the full bag off the
        # filesystem instead copies it and then deletes it file by file: a retry in between finds a
        # few KiB free, opens bag_1, fills it and fails a second time (CI saw that once).
        filler, crumb = tmp_path / "tiny" / "filler", tmp_path / "tiny" / "crumb"
        filler.write_bytes(b"\0" * (TINY // 2))
        crumb.write_bytes(b"\0" * (TINY // 16))
        params = {
            "output": str(bag),
            "flush_period": 0.1,
            "on_write_error": mode,
            "retry_period": 0.3,
            # more than a failed flush gives back (about 40 KiB here) and the crumb, less than the filler
            "retry_min_free_mib": TINY * 3 / 8 / 2**20,
        }
        proc = start_recorder(params, subprocess_env, log, limit_files=not mounted)
        peer = kit.Peer()
        diag = Diagnostics(peer)
        try:
            pub = peer.node.create_publisher(TraceEvent, topics.TRACE_EVENTS, qos.event_qos())
            assert peer.spin_until(lambda: pub.get_subscription_count() > 0), log.read_text()
            assert peer.spin_until(
                lambda: diag.last() is not None and diag.last().level == DiagnosticStatus.OK
            )
            sent = 0
            while diag.last().level == DiagnosticStatus.OK and sent < 400:  # 1.6 MB for 256 KiB
                _flood(peer, pub, 10, sent)
                sent += 10
            assert diag.last().level == DiagnosticStatus.ERROR, log.read_text()
            assert "not recording: cannot write bag" in diag.last().message
            _flood(peer, pub, 20, sent)  # received while nothing can be written: counted as lost
            if mode == "exit":
                assert proc.wait(timeout=60) == 1, log.read_text()
            else:
                assert proc.poll() is None, log.read_text()
                if mounted:
                    # a few KiB of room (the crumb, and what the failed flush gave back) over several
                    # retry periods is no room: a bag opened there would fail at its first flush
                    crumb.unlink()
                    _flood(peer, pub, 60, sent + 20)
                    assert diag.last().level == DiagnosticStatus.ERROR, log.read_text()
                # the operator makes room: recording goes on in a new bag beside the full one
                filler.unlink()
                ok = lambda: diag.last().level == DiagnosticStatus.OK and "bag_1" in diag.last().message  # noqa: E731
                assert peer.spin_until(ok), log.read_text()
                assert kit.stop_node(proc, signal.SIGINT) == 0, log.read_text()
        finally:
            kit.stop_node(proc, signal.SIGKILL)
            peer.close()
            shutil.move(str(bag), str(tmp_path / "bag_full"))
    text = log.read_text()
    assert "Traceback" not in text
    lines = [line for line in text.splitlines() if "recording stopped:" in line]
    assert len(lines) == 1, text
    assert ("No space left on device" if mounted else "File too large") in lines[0]
    assert "closed and readable up to its" in lines[0]
    got = read_bag(tmp_path / "bag_full")
    n = len(got.messages("/trace_events"))
    assert n > 0 and not got.problems, got.problems
    assert [m.task_id for _, m in got.messages("/trace_events")] == [f"t{i}" for i in range(n)]
    if mode == "retry":
        assert "messages were lost meanwhile" in text and "not recorded" in text


def _fastdds_log_line(line: str) -> bool:
    """A line Fast DDS logs on its own (its categories are bracketed: [RTPS_…], [DDS_…], [XMLPARSER…])."""
    return any(tag in line for tag in ("[RTPS_", "[DDS_", "[XMLPARSER", "open_and_lock_file"))


def test_a_read_only_output_directory_is_one_line_and_exit_2(subprocess_env, tmp_path):
    with tiny_dir(tmp_path / "ro", read_only=True) as mounted:
        if not mounted and os.geteuid() == 0:
            pytest.skip("root ignores directory permissions and no read-only tmpfs could be mounted")
        out = subprocess.run(
            [
                sys.executable,
                "-m",
                "timely_llm_ros.nodes.recorder",
                "--ros-args",
                "-p",
                f"output:={tmp_path / 'ro' / 'bag'}",
            ],
            env=subprocess_env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr
    # Fast DDS itself may log to stderr (e.g. "[RTPS_TRANSPORT_SHM Error] ... open_and_lock_file
    # failed" when a shared-memory port of another test is locked); the recorder's own output is
    # what must be one line.
    ours = [ln for ln in out.stderr.splitlines() if ln.strip() and not _fastdds_log_line(ln)]
    (line,) = ours
    assert "cannot create the bag" in line and (
        "Read-only file system" in line or "Permission denied" in line
    )


def test_ghost_agents_cost_the_recorder_no_subscription(subprocess_env, tmp_path):
    import robot_testkit as kit

    from timely_llm_ros.msg import TaskStatus

    log = tmp_path / "rec.log"
    proc = kit.start_node(
        "timely_llm_ros.nodes.recorder",
        None,
        {"output": str(tmp_path / "bag"), "discovery_period": 0.2},
        subprocess_env,
        log,
    )
    peer = kit.Peer()
    try:
        assert peer.spin_until(lambda: peer.tasks.get_subscription_count() > 0)
        assert peer.spin_until(lambda: peer.status.get_subscription_count() > 0)
        for i in range(20):
            peer.send_task(f"ghost_{i}", f"g{i}")
        peer.send_task("real_1", "r1")

        def subscribed() -> set[str]:
            names = peer.node.get_topic_names_and_types()
            out = set()
            for name, _ in names:
                if name.endswith("/skill_segments"):
                    for info in peer.node.get_subscriptions_info_by_topic(name):
                        if info.node_name == "lrtrace_recorder":
                            out.add(name)
            return out

        assert peer.spin_until(lambda: len(subscribed()) == 21), subscribed()
        for i in range(20):  # the planner rejects the ghosts, accepts real_1
            peer.send_status(f"ghost_{i}", f"g{i}", TaskStatus.REJECTED, "no robot node")
        peer.send_status("real_1", "r1", TaskStatus.ACCEPTED)
        assert peer.spin_until(lambda: subscribed() == {"/real_1/skill_segments"}), subscribed()
        time.sleep(1.0)  # several discovery scans: no ghost comes back
        peer.spin_until(lambda: False, timeout=0.5)
        assert subscribed() == {"/real_1/skill_segments"}
        assert kit.stop_node(proc, signal.SIGINT) == 0
    finally:
        kit.stop_node(proc, signal.SIGKILL)
        peer.close()
