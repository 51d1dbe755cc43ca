"""One side of the two-process DDS test (run as a script by test_dds_roundtrip.py).

``pub``: publishes every sample of ros_dds_samples once all topics have a subscriber, and serves
EstimateExecTime; runs until SIGINT/SIGTERM or ``--timeout``. ``sub``: receives every sample,
compares it with the expected one field by field, then calls the service with every request.
Prints one JSON line ``RESULT {...}`` and exits 0 only when everything arrived intact.

QoS is reliable + transient-local (depth >= samples per topic) so that no sample depends on the
timing of discovery; discovery itself is waited for by polling, never by sleeping.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import time
from typing import Any

import rclpy
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, HistoryPolicy, QoSProfile, ReliabilityPolicy
from rclpy.signals import SignalHandlerOptions
from ros_dds_samples import TOPIC_PREFIX, differences, samples, service_cases, to_plain

from timely_llm_ros.srv import EstimateExecTime

QOS = QoSProfile(
    history=HistoryPolicy.KEEP_LAST,
    depth=10,
    reliability=ReliabilityPolicy.RELIABLE,
    durability=DurabilityPolicy.TRANSIENT_LOCAL,
)
SERVICE = f"{TOPIC_PREFIX}/estimate_exec_time"


def spin_until(node: Node, done, deadline: float) -> bool:
    while not done():
        if time.monotonic() > deadline:
            return False
        rclpy.spin_once(node, timeout_sec=0.1)
    return True


def run_pub(node: Node, deadline: float) -> dict[str, Any]:
    cases = service_cases()
    served: list[str] = []

    def handle(request, response):
        got = to_plain(request)
        for expected_request, answer in cases:
            if not differences(to_plain(expected_request), got):
                served.append("ok")
                return answer
        served.append(f"unexpected request {got!r}")
        response.ok = False
        response.error = f"server got an unexpected request: {got!r}"
        return response

    node.create_service(EstimateExecTime, SERVICE, handle)
    publishers = {
        topic: (node.create_publisher(msg_type, f"{TOPIC_PREFIX}/{topic}", QOS), items)
        for topic, (msg_type, items) in samples().items()
    }
    matched = spin_until(
        node, lambda: all(p.get_subscription_count() > 0 for p, _ in publishers.values()), deadline
    )
    if not matched:
        missing = [t for t, (p, _) in publishers.items() if p.get_subscription_count() == 0]
        return {"ok": False, "error": f"no subscriber discovered on {missing}"}
    for publisher, items in publishers.values():
        for item in items:
            publisher.publish(item)
    stop = []
    signal.signal(signal.SIGINT, lambda *_: stop.append(1))
    signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
    spin_until(node, lambda: bool(stop), deadline)
    bad = [s for s in served if s != "ok"]
    return {"ok": not bad, "served": len(served), "errors": bad, "stopped_by_signal": bool(stop)}


def run_sub(node: Node, deadline: float) -> dict[str, Any]:
    expected = samples()
    received: dict[str, list[Any]] = {topic: [] for topic in expected}
    for topic, (msg_type, _) in expected.items():
        node.create_subscription(
            msg_type, f"{TOPIC_PREFIX}/{topic}", lambda msg, topic=topic: received[topic].append(msg), QOS
        )
    complete = spin_until(
        node, lambda: all(len(received[t]) >= len(expected[t][1]) for t in expected), deadline
    )
    errors = []
    for topic, (_, items) in expected.items():
        errors += [f"{topic}{d}" for d in differences(to_plain(items), to_plain(received[topic]))]
    if not complete:
        errors.append(
            "timed out waiting for samples: "
            + ", ".join(f"{t} {len(received[t])}/{len(expected[t][1])}" for t in expected)
        )
    client = node.create_client(EstimateExecTime, SERVICE)
    if not spin_until(node, client.service_is_ready, deadline):
        return {"ok": False, "errors": errors + ["service never became available"]}
    calls = 0
    for request, expected_response in service_cases():
        future = client.call_async(request)
        if not spin_until(node, future.done, deadline):
            errors.append(f"service call {calls} timed out")
            break
        calls += 1
        diffs = differences(to_plain(expected_response), to_plain(future.result()))
        errors += [f"response{d}" for d in diffs]
    counts = {t: len(v) for t, v in received.items()}
    return {"ok": not errors, "errors": errors, "received": counts, "service_calls": calls}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("role", choices=["pub", "sub"])
    parser.add_argument("--timeout", type=float, default=60.0)
    args = parser.parse_args(argv)
    deadline = time.monotonic() + args.timeout
    rclpy.init(args=[], signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node(f"timely_dds_test_{args.role}")
    try:
        result = run_pub(node, deadline) if args.role == "pub" else run_sub(node, deadline)
    finally:
        node.destroy_node()
        rclpy.shutdown()
    print("RESULT " + json.dumps(result, ensure_ascii=False), flush=True)
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
