"""Planner stand-in as a script (for tests that must run it inside a network namespace).

Usage: ``ros_feedback_peer.py '<json>'`` with
``{"agent": ..., "segments": [[task, index, text, final], ...]}``:
waits for the robot node, sends the segments, waits for every DONE/FAILED, prints
``RESULT {"feedback": [[task, index, state, detail], ...]}``.
"""

from __future__ import annotations

import json
import sys

from robot_testkit import Peer


def main() -> int:
    spec = json.loads(sys.argv[1])
    peer = Peer("ros_feedback_peer")
    try:
        peer.wait_for_robot(spec["agent"])
        for task, index, text, final in spec["segments"]:
            peer.send_segment(spec["agent"], task, index, text, final)
        for task, index, _, _ in spec["segments"]:
            peer.wait_finished(task, index)
        names = {0: "STARTED", 1: "DONE", 2: "FAILED"}  # PROGRESS heartbeats (3) are left out
        result = {
            "feedback": [
                [f.task_id, f.index, names[f.state], f.detail] for f in peer.feedback if f.state in names
            ]
        }
    finally:
        peer.close()
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
