"""Drive a managed (lifecycle) node through transitions: ``python -m timely_llm_ros.ros.lifecycle_client
/planner configure activate`` — what ``timely-llm fleet`` runs for its planner (``autostart: false``),
like ``ros2 lifecycle set`` does one transition at a time and fleet.launch.py does with launch_ros.

Each transition is requested through the node's standard ``<node>/change_state`` service once the
service is there; configure can take long (the engine loads a model and warms up), hence the
generous ``--timeout`` per transition. Exit status 0 when every transition succeeded, 1 otherwise
(with the reason on stderr: node not found, transition refused — the node logs why).
"""

from __future__ import annotations

import argparse
import sys
import time

TRANSITIONS = ("configure", "activate", "deactivate", "cleanup", "shutdown")


def drive(node_name: str, transitions: list[str], timeout: float) -> str | None:
    """Request ``transitions`` of ``node_name`` in order; returns why it failed, or None."""
    import rclpy
    from lifecycle_msgs.msg import Transition
    from lifecycle_msgs.srv import ChangeState
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    ids = {"configure": Transition.TRANSITION_CONFIGURE, "activate": Transition.TRANSITION_ACTIVATE,
           "deactivate": Transition.TRANSITION_DEACTIVATE, "cleanup": Transition.TRANSITION_CLEANUP,
           "shutdown": Transition.TRANSITION_UNCONFIGURED_SHUTDOWN}
    context = rclpy.Context()
    rclpy.init(args=[], context=context, signal_handler_options=SignalHandlerOptions.NO)
    node = rclpy.create_node("lifecycle_client", context=context, start_parameter_services=False)
    executor = SingleThreadedExecutor(context=context)
    executor.add_node(node)
    try:
        client = node.create_client(ChangeState, f"{node_name.rstrip('/')}/change_state")
        for name in transitions:
            deadline = time.monotonic() + timeout
            while not client.wait_for_service(timeout_sec=0.5):
                if time.monotonic() > deadline:
                    return f"{node_name}: no change_state service within {timeout:.0f} s (is it a lifecycle node?)"
            future = client.call_async(ChangeState.Request(transition=Transition(id=ids[name])))
            executor.spin_until_future_complete(future, timeout_sec=max(deadline - time.monotonic(), 1.0))
            if not future.done():
                return f"{node_name}: {name} not answered within {timeout:.0f} s"
            if not future.result().success:
                return f"{node_name}: transition {name} failed (the node's log says why)"
            print(f"[lifecycle] {node_name}: {name} done", flush=True)
        return None
    finally:
        executor.shutdown()
        node.destroy_node()
        rclpy.try_shutdown(context=context)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m timely_llm_ros.ros.lifecycle_client",
                                     description=__doc__.split("\n\n")[0])
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
