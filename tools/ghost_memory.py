"""Planner memory after ghost agents (issue 27 item 5): does it return to its baseline?

A *ghost* is an agent id that shows up and goes away without ever being a robot of the fleet: it
sends a task (rejected: no robot node), feedback (refused: no such segment) and heartbeats for a
moment, then falls silent (the planner declares it down and forgets it). This tool runs a real
planner node (simulated engine, loopback DDS as ``make``/``wrun`` set it) *in this process*, so
``tracemalloc`` sees the planner's Python allocations, and a peer node here plays ``--ghosts`` new
ghosts per round. After each round — all tasks REJECTED, the ghosts silent past
``robot_down_timeout`` — it measures:

* ``rss``: the process's resident set (``/proc/self/status``), and again after ``malloc_trim(0)``
  (glibc: memory freed by Python/DDS but kept in malloc's arenas shows up as the difference);
* ``py``: ``tracemalloc``'s total of live Python allocations (its own tables and the baseline
  snapshot add several MiB to RSS: read RSS with ``--frames 0``, tracemalloc off);
* ``agent state``: the planner's per-agent structures (:meth:`PlannerService.agent_state`), which
  must be back at their baseline size.

Prints a table (and ``--json``), plus the ``--top`` source lines whose Python allocations grew most
from the baseline to the last round. Usage (from a checkout)::

    python tools/ghost_memory.py                      # 3 rounds of 100 ghosts
    python tools/ghost_memory.py --rounds 3 --ghosts 100 --json ghosts.json
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import sys
import threading
import time
import tracemalloc
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def rss_kib() -> int:
    """Resident set size of this process (KiB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def malloc_trim() -> bool:
    """Give glibc's free arena memory back to the OS (False where there is no glibc)."""
    try:
        return bool(ctypes.CDLL("libc.so.6").malloc_trim(0))
    except (OSError, AttributeError):
        return False


class Ghosts:
    """The peer node: sends each ghost's task, feedback and heartbeats; counts the planner's answers."""

    def __init__(self, rclpy: Any) -> None:
        from std_msgs.msg import Header

        from timely_llm_ros.interfaces import topics
        from timely_llm_ros.msg import SegmentFeedback, Task, TaskStatus
        from timely_llm_ros.ros import qos

        self.Header, self.Task, self.SegmentFeedback = Header, Task, SegmentFeedback
        self.final = TaskStatus.REJECTED
        self.node = rclpy.create_node("ghost_peer")
        self.task_pub = self.node.create_publisher(Task, topics.TASKS, qos.task_qos())
        self.fb_pub = self.node.create_publisher(SegmentFeedback, topics.SEGMENT_FEEDBACK, qos.feedback_qos())
        self.beat_pub = self.node.create_publisher(Header, topics.ROBOT_HEARTBEAT, qos.heartbeat_qos())
        self.rejected: set[str] = set()
        self.node.create_subscription(TaskStatus, topics.TASK_STATUS, self._on_status, qos.status_qos())

    def _on_status(self, msg: Any) -> None:
        if msg.state == self.final:
            self.rejected.add(msg.task_id)

    def play(self, names: list[str], tag: str) -> list[str]:
        """One round: a task, a forged feedback and a heartbeat per ghost; returns the task ids."""
        ids = []
        for name in names:
            task = self.Task(task_id=f"{tag}-{name}", agent_id=name, robot_type="drone")
            task.skill_set, task.instruction = "tello_minispec", "take off"
            self.task_pub.publish(task)
            ids.append(task.task_id)
            self.fb_pub.publish(self.SegmentFeedback(task_id=task.task_id, agent_id=name, nonce="0"))
            self.beat_pub.publish(self.Header(frame_id=name))
        return ids


def measure(node: Any, label: str, snaps: dict[str, Any]) -> dict[str, Any]:
    """One row: RSS before/after malloc_trim, tracemalloc total, per-agent structure sizes."""
    for key in list(snaps)[1:]:  # keep the baseline's snapshot only: each costs MiBs of RSS
        del snaps[key]
    gc.collect()
    rss = rss_kib()
    trimmed = rss_kib() if malloc_trim() else rss
    py = tracemalloc.get_traced_memory()[0]
    if tracemalloc.is_tracing():
        snaps[label] = tracemalloc.take_snapshot()  # after the RSS readings: a snapshot costs memory
    return {
        "label": label,
        "rss_kib": rss,
        "rss_trimmed_kib": trimmed,
        "py_kib": round(py / 1024, 1),
        "agent_state": {
            **node.svc.agent_state(),
            "segment_publishers": len(node._pubs),
            # rclpy's weak references to the node's entities (destroyed ones pruned: forget_destroyed)
            "callback_refs": len(node.default_callback_group.entities),
        },
    }


def wait(pred: Any, timeout: float, what: str) -> None:
    end = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > end:
            raise SystemExit(f"ghost_memory: timed out waiting for {what}")
        time.sleep(0.05)


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    import os
    import tempfile

    os.environ["ROS_HOME"] = tempfile.mkdtemp(prefix="ghost_memory_")  # the planner's journal
    from timely_llm_ros.fleet import localhost_env

    os.environ.update(localhost_env(dict(os.environ)))  # DDS on loopback only, as make soak/test
    import rclpy
    from rclpy.executors import SingleThreadedExecutor

    from timely_llm_ros.core.limits import RateLimiter
    from timely_llm_ros.nodes.planner import PlannerNode

    if args.frames:
        tracemalloc.start(args.frames)
    ros_args = [
        "--ros-args",
        "-p", "engine:=sim",
        "-p", f"robot_grace_period:={args.grace}",
        "-p", f"robot_down_timeout:={args.down_timeout}",
        "-p", f"warn_period:={args.warn_period}",
    ]  # fmt: skip
    rclpy.init(args=["ghost_memory", *ros_args])
    planner = PlannerNode()
    ghosts = Ghosts(rclpy)
    executor = SingleThreadedExecutor()  # as run_node: the planner destroys publishers in callbacks
    executor.add_node(planner)
    executor.add_node(ghosts.node)
    stop = threading.Event()

    def spin() -> None:
        while not stop.is_set():
            executor.spin_once(timeout_sec=0.05)

    spinner = threading.Thread(target=spin, daemon=True)
    spinner.start()
    rows: list[dict[str, Any]] = []
    snaps: dict[str, Any] = {}
    try:
        wait(lambda: ghosts.task_pub.get_subscription_count() > 0, 30, "the planner's /tasks reader")
        time.sleep(1.0)
        done = 0
        schedule = [("warm-up", args.warmup)] if args.warmup else []
        schedule += [(f"after {args.ghosts * (r + 1)}", args.ghosts) for r in range(args.rounds)]
        rows.append(measure(planner, "baseline (0 ghosts)", snaps))
        for label, count in schedule:
            names = [f"ghost_{done + i}" for i in range(count)]
            done += count
            ids = ghosts.play(names, label.split()[-1])
            wait(lambda ids=ids: ghosts.rejected.issuperset(ids), 120, f"{count} REJECTED statuses")
            # silent past robot_down_timeout: declared down and forgotten (no open task); warnings
            # about them older than warn_period
            gone = set(names)
            wait(
                lambda gone=gone: not gone & set(planner.svc.beats),
                args.down_timeout + 30,
                "ghosts forgotten",
            )
            time.sleep(args.warn_period * (RateLimiter.STALE_PERIODS + 1) + 1.0)
            rows.append(
                measure(planner, f"{label} ghosts" if label != "warm-up" else f"warm-up ({count})", snaps)
            )
    finally:
        stop.set()
        spinner.join(timeout=10)  # nothing may wait in the executor while the nodes are destroyed
        executor.shutdown()
        planner.destroy_node()
        ghosts.node.destroy_node()
        rclpy.try_shutdown()
    if not snaps:
        return rows
    first, last = list(snaps)[0], list(snaps)[-1]
    key = "traceback" if args.frames > 1 else "lineno"
    growth = snaps[last].compare_to(snaps[first], key)
    top = []
    for stat in growth[: args.top]:
        top.append(str(stat))
        if args.frames > 1:
            top += ["    " + line for line in stat.traceback.format(limit=args.frames)]
    rows.append({"top_growth": top})
    return rows


def table(rows: list[dict[str, Any]]) -> str:
    lines = [f"{'':26} {'RSS MiB':>8} {'trimmed':>8} {'py MiB':>8}  per-agent state (non-zero)"]
    base = rows[0]
    for r in rows:
        if "label" not in r:
            continue
        state = ", ".join(f"{k}={v}" for k, v in r["agent_state"].items() if v) or "all 0"
        lines.append(
            f"{r['label']:26} {r['rss_kib'] / 1024:8.1f} {r['rss_trimmed_kib'] / 1024:8.1f} "
            f"{r['py_kib'] / 1024:8.2f}  {state}"
        )
    last = [r for r in rows if "label" in r][-1]
    lines.append(
        f"{'delta last - baseline':26} {(last['rss_kib'] - base['rss_kib']) / 1024:+8.1f} "
        f"{(last['rss_trimmed_kib'] - base['rss_trimmed_kib']) / 1024:+8.1f} "
        f"{(last['py_kib'] - base['py_kib']) / 1024:+8.2f}"
    )
    growth = rows[-1].get("top_growth", [])
    if growth:
        lines.append("Python allocations that grew most (last vs first snapshot):")
        lines += ["  " + g for g in growth]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3, help="rounds of ghosts (default 3)")
    ap.add_argument("--ghosts", type=int, default=100, help="new ghosts per round (default 100)")
    ap.add_argument("--warmup", type=int, default=0, help="ghosts played once before the rounds (default 0)")
    ap.add_argument("--grace", type=float, default=0.5, help="planner robot_grace_period (s)")
    ap.add_argument("--down-timeout", type=float, default=1.0, help="planner robot_down_timeout (s)")
    ap.add_argument("--warn-period", type=float, default=0.2, help="planner warn_period (s)")
    ap.add_argument("--frames", type=int, default=1, help="tracemalloc frames per allocation (0: off)")
    ap.add_argument("--top", type=int, default=12, help="source lines of growth to print")
    ap.add_argument("--json", default="", help="write the rows here")
    args = ap.parse_args(argv)
    rows = run(args)
    print(table(rows))
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
