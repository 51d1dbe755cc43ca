"""Driver side of the Tello backend tests (run inside the host network namespace).

Usage: ``tello_peer.py '<json spec>'`` with ``{"backend": {TelloBackend keyword args}, "steps": [...]}``;
a step is ``{"segment": [task_id, index, text, final]}``, ``{"idle": seconds}`` (the node's idle
loop: ``backend.idle()`` every 0.1 s) or ``{"interrupt": [task_id, index, text, final, after_s]}``
(run the segment and interrupt its task after ``after_s``, as a terminal status does). The backend
is closed (lands) at the end. Prints one line ``RESULT {json}`` with every outcome, the backend
counters and the commands it sent.
"""

from __future__ import annotations

import json
import sys
import threading
import time

from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.robots.runner import SegmentRunner
from timely_llm_ros.robots.task_queue import SegmentItem
from timely_llm_ros.robots.tello import TelloBackend


def main() -> int:
    spec = json.loads(sys.argv[1])
    sset = load_skill_set("tello_minispec")
    backend = TelloBackend(sset, **spec.get("backend", {}))
    result: dict = {"outcomes": [], "error": None}
    try:
        backend.start()
        runner = SegmentRunner(sset, backend)
        for step in spec["steps"]:
            if "segment" in step:
                task, index, text, final = step["segment"]
                out = runner.run(SegmentItem(task, index, text, final))
                result["outcomes"].append({"ok": out.ok, "detail": out.detail})
            elif "interrupt" in step:  # the planner ends the task while the segment runs
                task, index, text, final, after = step["interrupt"]
                box: list = []
                item = SegmentItem(task, index, text, final)
                worker = threading.Thread(target=lambda box=box, item=item: box.append(runner.run(item)))
                worker.start()
                time.sleep(after)
                backend.interrupt(task, "the planner marked the task FAILED: test", halt=True)
                worker.join(timeout=60)
                result["outcomes"].append({"ok": box[0].ok, "detail": box[0].detail})
            elif "idle" in step:
                end = time.monotonic() + step["idle"]
                while time.monotonic() < end:
                    backend.idle()
                    time.sleep(0.1)
    except Exception as exc:  # noqa: BLE001 - reported to the test, which shows it
        result["error"] = f"{type(exc).__name__}: {exc}"
    finally:
        try:
            backend.close()
        except Exception as exc:  # noqa: BLE001 - reported to the test with the first error
            result["error"] = (result["error"] or "") + f" close: {type(exc).__name__}: {exc}"
        result["status"] = backend.status()
        result["sent"] = [c for c, _ in backend.link.log] if backend.link else []
    print("RESULT " + json.dumps(result), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
