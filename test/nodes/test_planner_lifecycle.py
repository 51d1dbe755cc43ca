"""The planner as a managed (lifecycle) node: with ``autostart: false`` it takes no
task before configure (engine loaded, warmed up) + activate; deactivate stops the intake (new tasks
REJECTED with the reason) and, with ``on_deactivate: cancel``, cancels the tasks in flight;
activate takes tasks again; cleanup ends every open task and releases the engine; a bad engine
parameter fails configure (the node stays unconfigured, nothing crashes).

A planner process (simulated engine) and the test peer as robots; transitions through the node's
standard lifecycle services, as `ros2 lifecycle set` and launch_ros call them. Nothing is timed.
"""

from __future__ import annotations

import os
import time

import pytest
from planner_testkit import PLANS, Peer, log_text, make_task, start_node, stop_process, wait_for, write_params

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 120.0
CLIMB = "[A] Climb, turn and take a picture."


TARGET = {
    "configure": "inactive",
    "activate": "active",
    "deactivate": "inactive",
    "cleanup": "unconfigured",
    "shutdown": "finalized",
}


def _answer(fut, seconds: float):
    """The service answer, or None when none came within ``seconds`` (the peer's thread spins)."""
    end = time.monotonic() + seconds
    while not fut.done() and time.monotonic() < end:
        time.sleep(0.05)
    return fut.result() if fut.done() else None


class Lifecycle:
    """Client of one node's lifecycle services (get_state, change_state). A DDS service answer can
    be lost (the server answers before it matched the client's response reader: rmw logs "failed to
    send response"), so — like ros/lifecycle_client.py — a state question is asked again, and an
    unanswered transition counts as done once the node reports its target state."""

    def __init__(self, peer: Peer, node: str) -> None:
        from lifecycle_msgs.srv import ChangeState, GetState

        self.peer = peer
        self.get = peer.node.create_client(GetState, f"{node}/get_state")
        self.change = peer.node.create_client(ChangeState, f"{node}/change_state")
        peer.executor.wake()

    def _state_once(self, seconds: float = 2.0) -> str | None:
        from lifecycle_msgs.srv import GetState

        res = _answer(self.get.call_async(GetState.Request()), seconds)
        return res.current_state.label if res is not None else None

    def state(self) -> str:
        wait_for(self.get.service_is_ready, WAIT, "get_state")
        deadline = time.monotonic() + WAIT
        while (label := self._state_once(5.0)) is None:
            assert time.monotonic() < deadline, "get_state not answered"
        return label

    def set(self, label: str) -> bool:
        from lifecycle_msgs.msg import Transition
        from lifecycle_msgs.srv import ChangeState

        wait_for(self.change.service_is_ready, WAIT, "change_state")
        ids = {
            "configure": Transition.TRANSITION_CONFIGURE,
            "activate": Transition.TRANSITION_ACTIVATE,
            "deactivate": Transition.TRANSITION_DEACTIVATE,
            "cleanup": Transition.TRANSITION_CLEANUP,
            "shutdown": Transition.TRANSITION_UNCONFIGURED_SHUTDOWN,
        }
        request = ChangeState.Request(transition=Transition(id=ids[label]))
        deadline = time.monotonic() + WAIT
        fut, sent, resent = self.change.call_async(request), time.monotonic(), False
        while True:
            res = _answer(fut, 2.0)
            if res is not None:  # refused: fine only as the repeat of a copy already applied
                return res.success or (resent and self.state() == TARGET[label])
            current = self._state_once()
            if current == TARGET[label]:
                return True
            assert time.monotonic() < deadline, f"{label} not answered (state {current})"
            if current is not None and not current.endswith("ing") and time.monotonic() - sent > 10.0:
                fut, sent, resent = self.change.call_async(request), time.monotonic(), True


def test_lifecycle_transitions_drive_the_intake(tmp_path):
    params = write_params(
        tmp_path / "planner.yaml",
        {
            "sim_plans": ["catalog", PLANS],
            "autostart": False,
            "on_deactivate": "cancel",
            "journal": "off",
            "robot_grace_period": 10.0,
        },
    )
    proc = start_node("planner", dict(os.environ), tmp_path / "planner.log", params_file=params)
    peer = Peer({"lc_done": "done", "lc_silent": "silent"}, name="lifecycle_peer")
    lc = Lifecycle(peer, "/planner")
    try:
        assert lc.state() == "unconfigured"
        assert peer.task_pub.get_subscription_count() == 0  # nothing takes tasks before activation
        assert lc.set("configure") and lc.state() == "inactive"
        assert "planner configured: engine sim-realtime" in log_text(proc)
        assert lc.set("activate") and lc.state() == "active"
        wait_for(lambda: peer.task_pub.get_subscription_count() > 0, WAIT, "the planner's tasks subscription")
        peer.task_pub.publish(make_task("lc-1", "lc_done", CLIMB))
        wait_for(lambda: peer.final_state("lc-1") == "COMPLETED", WAIT, "lc-1 to complete", procs=(proc,))

        # deactivate with a task in flight (its robot never answers): cancelled; new tasks refused
        peer.task_pub.publish(make_task("lc-2", "lc_silent", CLIMB))
        wait_for(lambda: "GENERATING" in peer.states("lc-2"), WAIT, "lc-2 to be planned", procs=(proc,))
        assert lc.set("deactivate") and lc.state() == "inactive"
        wait_for(lambda: peer.final_state("lc-2") == "CANCELLED", WAIT, "lc-2 cancelled", procs=(proc,))
        assert peer.final("lc-2").reason == "planner deactivated"
        peer.task_pub.publish(make_task("lc-3", "lc_done", CLIMB))
        wait_for(lambda: peer.final_state("lc-3") == "REJECTED", WAIT, "lc-3 refused", procs=(proc,))
        assert "not active" in peer.final("lc-3").reason

        # active again: tasks are taken again
        assert lc.set("activate")
        peer.task_pub.publish(make_task("lc-4", "lc_done", CLIMB))
        wait_for(lambda: peer.final_state("lc-4") == "COMPLETED", WAIT, "lc-4 to complete", procs=(proc,))

        # cleanup ends what is open and releases the engine; configure + activate work again
        peer.task_pub.publish(make_task("lc-5", "lc_silent", CLIMB))
        wait_for(lambda: "ACCEPTED" in peer.states("lc-5"), WAIT, "lc-5 accepted", procs=(proc,))
        assert lc.set("deactivate")
        wait_for(lambda: peer.final_state("lc-5") == "CANCELLED", WAIT, "lc-5 cancelled", procs=(proc,))
        assert lc.set("cleanup") and lc.state() == "unconfigured"
        wait_for(lambda: peer.task_pub.get_subscription_count() == 0, WAIT, "the tasks subscription to go")
        assert lc.set("configure") and lc.set("activate") and lc.state() == "active"
        wait_for(lambda: peer.task_pub.get_subscription_count() > 0, WAIT, "the tasks subscription")
        peer.task_pub.publish(make_task("lc-6", "lc_done", CLIMB))
        wait_for(lambda: peer.final_state("lc-6") == "COMPLETED", WAIT, "lc-6 to complete", procs=(proc,))
    finally:
        peer.close()
        rc = stop_process(proc)
    assert rc == 0, log_text(proc)[-3000:]


def test_a_failing_configure_leaves_the_node_unconfigured(tmp_path):
    params = write_params(
        tmp_path / "planner.yaml", {"autostart": False, "journal": "off", "profile": "no_such_profile"}
    )
    proc = start_node("planner", dict(os.environ), tmp_path / "planner.log", params_file=params)
    peer = Peer({}, name="lifecycle_bad_peer")
    lc = Lifecycle(peer, "/planner")
    try:
        assert lc.state() == "unconfigured"
        assert not lc.set("configure")
        assert lc.state() == "unconfigured"
        assert "configure failed: parameter 'profile'" in log_text(proc)
        assert proc.poll() is None  # still up: a corrected parameter can be configured later
    finally:
        peer.close()
        rc = stop_process(proc)
    assert rc == 0, log_text(proc)[-3000:]


def test_autostart_with_a_bad_engine_parameter_exits_with_status_2(tmp_path):
    params = write_params(tmp_path / "planner.yaml", {"journal": "off", "profile": "no_such_profile"})
    proc = start_node("planner", dict(os.environ), tmp_path / "planner.log", params_file=params)
    assert proc.wait(timeout=WAIT) == 2
    assert "parameter 'profile'" in log_text(proc)


def _set(peer: Peer, values: dict, node: str = "/planner") -> list:
    """Set parameters (strings, or None = delete, as ``ros2 param delete``) through the node's
    set_parameters service, as ``ros2 param set`` does; the results (successful, reason) in order."""
    from rcl_interfaces.msg import Parameter, ParameterType, ParameterValue
    from rcl_interfaces.srv import SetParameters

    client = peer.node.create_client(SetParameters, f"{node}/set_parameters")
    peer.executor.wake()
    wait_for(client.service_is_ready, WAIT, f"{node}/set_parameters")
    params = [
        Parameter(
            name=name,
            value=ParameterValue(type=ParameterType.PARAMETER_NOT_SET)
            if value is None
            else ParameterValue(type=ParameterType.PARAMETER_STRING, string_value=value),
        )
        for name, value in values.items()
    ]
    fut = client.call_async(SetParameters.Request(parameters=params))
    wait_for(fut.done, WAIT, f"set {sorted(values)}")
    peer.node.destroy_client(client)
    return list(fut.result().results)


@pytest.mark.skipif(
    __import__("importlib.util").util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (make test installs it)",
)
def test_cleanup_set_configure_repoints_the_planner_at_another_engine_and_back(tmp_path):
    """The lifecycle way to change the engine or model of a running planner process: engine, model
    and options are refused while it is configured, and taken after cleanup — sim → llamacpp (the
    embedded model, named through the nested parameter engine_options.model_path) → sim, with a
    task completing on each, and a configure with a missing model failing with the path in between."""
    from timely_llm_ros.engines.llamacpp_native import default_model_path

    params = write_params(
        tmp_path / "planner.yaml",
        {"sim_plans": ["catalog", PLANS], "autostart": False, "journal": "off", "robot_grace_period": 10.0},
    )
    proc = start_node("planner", dict(os.environ), tmp_path / "planner.log", params_file=params)
    peer = Peer({"rp_done": "done"}, name="repoint_peer")
    lc = Lifecycle(peer, "/planner")

    def run_task(task_id: str) -> None:
        wait_for(lambda: peer.task_pub.get_subscription_count() > 0, WAIT, "the tasks subscription")
        msg = make_task(task_id, "rp_done", CLIMB)
        msg.max_tokens = 24  # a short plan keeps the real model's part brief on a CPU
        peer.task_pub.publish(msg)
        wait_for(lambda: peer.final_state(task_id) is not None, 3 * WAIT, f"{task_id} to end", procs=(proc,))
        assert peer.final_state(task_id) == "COMPLETED", peer.final(task_id).reason

    try:
        assert lc.set("configure") and lc.set("activate")
        run_task("rp-sim-1")
        (refused,) = _set(peer, {"engine": "llamacpp"})  # active: refused with the recipe
        assert not refused.successful and "cleanup" in refused.reason
        assert lc.set("deactivate") and lc.set("cleanup") and lc.state() == "unconfigured"

        missing = str(tmp_path / "no_such_model.gguf")
        assert all(
            r.successful for r in _set(peer, {"engine": "llamacpp", "engine_options.model_path": missing})
        )
        assert not lc.set("configure") and lc.state() == "unconfigured"
        assert "no_such_model.gguf" in log_text(proc)  # the failed configure names the missing file

        (ok,) = _set(peer, {"engine_options.model_path": str(default_model_path())})
        assert ok.successful
        assert lc.set("configure") and lc.set("activate") and lc.state() == "active"
        assert f"engine llamacpp:{default_model_path().name}" in log_text(proc)
        run_task("rp-llm-1")

        assert lc.set("deactivate") and lc.set("cleanup")
        assert all(r.successful for r in _set(peer, {"engine": "sim", "engine_options.model_path": None}))
        assert lc.set("configure") and lc.set("activate")
        assert log_text(proc).count("planner configured: engine sim-realtime") == 2
        run_task("rp-sim-2")
    finally:
        peer.close()
        rc = stop_process(proc)
    assert rc == 0, log_text(proc)[-3000:]
