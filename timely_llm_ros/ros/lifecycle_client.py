"""Drive a managed (lifecycle) node through transitions: ``python -m timely_llm_ros.ros.lifecycle_client
/planner configure activate`` — what ``timely-llm fleet`` runs for its planner (``autostart: false``),
like ``ros2 lifecycle set`` does one transition at a time and fleet.launch.py does with launch_ros.

Each transition is requested through the node's standard ``<node>/change_state`` service once the
service is there; configure can take long (the engine loads a model and warms up), hence the
generous ``--timeout`` per transition. A service response can be lost over DDS (the server answers
before it has matched the client's response reader: rmw logs "failed to send response"), so a
transition counts as done when the node *reports* its target state (``<node>/get_state``), and a
request that got neither an answer nor a state change is sent again. Exit status 0 when every
transition succeeded, 1 otherwise (with the reason on stderr: node not found, transition refused —
the node logs why).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

TRANSITIONS = ("configure", "activate", "deactivate", "cleanup", "shutdown")
# the primary state each transition ends in (ROS 2 managed-node design)
TARGET = {
    "configure": "inactive",
    "activate": "active",
    "deactivate": "inactive",
    "cleanup": "unconfigured",
    "shutdown": "finalized",
}
POLL = 2.0  # seconds between state checks while a transition is unanswered
RESEND = 10.0  # an unanswered request with the node still in a primary state is sent again after this


def drive(node_name: str, transitions: list[str], timeout: float) -> str | None:
    """Request ``transitions`` of ``node_name`` in order; returns why it failed, or None."""
    import rclpy
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState, GetState
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    ids = {
        "configure": Transition.TRANSITION_CONFIGURE,
        "activate": Transition.TRANSITION_ACTIVATE,
        "deactivate": Transition.TRANSITION_DEACTIVATE,
        "cleanup": Transition.TRANSITION_CLEANUP,
        "shutdown": Transition.TRANSITION_UNCONFIGURED_SHUTDOWN,
    }
    from timely_llm_ros.ros.secure_dds import apply_security

    apply_security([])  # security on: its enclave is ROS_SECURITY_ENCLAVE_OVERRIDE (the fleet's client)
    context = rclpy.Context()
    rclpy.init(args=[], context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("lifecycle_client", context=context, start_parameter_services=False)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    base = node_name.rstrip("/")
    try:
        client: Any = node.create_client(ChangeState, f"{base}/change_state")
        getter: Any = node.create_client(GetState, f"{base}/get_state")

        def state() -> str | None:
            """The node's state label, or None when no answer came within POLL seconds."""
            fut = getter.call_async(GetState.Request())
            executor.spin_until_future_complete(fut, timeout_sec=POLL)
            answer = fut.result() if fut.done() else None
            return answer.current_state.label if answer is not None else None

        for name in transitions:
            deadline = time.monotonic() + timeout
            while not client.wait_for_service(timeout_sec=0.5):
                if time.monotonic() > deadline:
                    return f"{node_name}: no change_state service within {timeout:.0f} s (is it a lifecycle node?)"
            request = ChangeState.Request(transition=Transition(id=ids[name]))
            future, sent = client.call_async(request), time.monotonic()
            while True:
                executor.spin_until_future_complete(future, timeout_sec=POLL)
                if future.done():
                    answer = future.result()
                    if answer is not None and answer.success:
                        break
                    if state() == TARGET[name]:  # refused as a repeat of a request already applied
                        break
                    return f"{node_name}: transition {name} failed (the node's log says why)"
                current = state()
                if current == TARGET[name]:  # done; its answer was lost on the way
                    break
                if time.monotonic() > deadline:
                    return f"{node_name}: {name} not answered within {timeout:.0f} s (state {current or 'unknown'})"
                if current is not None and not current.endswith("ing") and time.monotonic() - sent > RESEND:
                    future, sent = client.call_async(request), time.monotonic()  # the request was lost
            print(f"[lifecycle] {node_name}: {name} done", flush=True)
        return None
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m timely_llm_ros.ros.lifecycle_client", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("node", help="fully qualified node name, e.g. /planner or /fleet_a/planner")
    parser.add_argument("transitions", nargs="+", choices=TRANSITIONS)
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per transition (default 600)")
    args = parser.parse_args(argv)
    problem = drive(args.node, args.transitions, args.timeout)
    if problem:
        print(f"lifecycle_client: error: {problem}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
