"""fleet.launch.py stops the whole launch when the planner cannot start.

`launch` and `launch_ros` are not installable here or in CI (no PyPI wheels; they come with a ROS
distro), so this test loads the launch file's ``generate_launch_description`` over a minimal stand-in
of those two packages that only records what the file constructs, runs its OpaqueFunction on the
default fleet file and asserts on the event handlers it registers: a planner process exit and a failed
configure or activate transition each lead to ``Shutdown`` with the reason. (The same file was run by
hand with the real launch/launch_ros built from their public sources: ``engine:=simm`` and a missing
``model_path:=`` each end the launch within seconds, naming the cause.)
"""

from __future__ import annotations

import importlib.util
import sys
import types
from dataclasses import dataclass

import pytest


class Recorded:
    """Stand-in for any launch entity: keeps the constructor's arguments."""

    def __init__(self, *args, **kwargs) -> None:
        self.args, self.kwargs = args, kwargs


class LaunchConfiguration(Recorded):
    def perform(self, context: dict) -> str:
        return context.get(self.args[0], "")


def _module(name: str, **fixed) -> types.ModuleType:
    """A module whose every other attribute is a fresh :class:`Recorded` subclass of that name."""
    mod = types.ModuleType(name)
    mod.__path__ = []  # a package, so that submodules import

    def missing(attr: str):
        if attr.startswith("__"):
            raise AttributeError(attr)
        cls = type(attr, (Recorded,), {})
        setattr(mod, attr, cls)
        return cls

    mod.__getattr__ = missing
    mod.__dict__.update(fixed)
    return mod


FAKES = (
    "launch",
    "launch.actions",
    "launch.conditions",
    "launch.events",
    "launch.event_handlers",
    "launch.launch_description_sources",
    "launch_ros",
    "launch_ros.actions",
    "launch_ros.event_handlers",
    "launch_ros.events",
    "launch_ros.events.lifecycle",
)


@dataclass
class Context:
    """What the handlers read from launch's context and event."""

    is_shutdown: bool = False


@dataclass
class Exited:
    returncode: int


@pytest.fixture
def load_description(repo_root, monkeypatch):
    """``load_description(name)``: the LaunchDescription a launch file of this package returns."""
    pytest.importorskip("lifecycle_msgs", reason="lifecycle_msgs comes with the ROS wheels (make test)")
    for name in FAKES:
        monkeypatch.setitem(sys.modules, name, _module(name))
    substitutions = _module("launch.substitutions", LaunchConfiguration=LaunchConfiguration)
    monkeypatch.setitem(sys.modules, "launch.substitutions", substitutions)
    import ament_index_python.packages as packages

    monkeypatch.setattr(packages, "get_package_share_directory", lambda pkg: str(repo_root))

    def load(name: str):
        spec = importlib.util.spec_from_file_location("launch_file_under_test", repo_root / "launch" / name)
        launch_file = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(launch_file)
        return launch_file.generate_launch_description()

    return load


@pytest.fixture
def fleet_actions(repo_root, load_description):
    """The actions fleet.launch.py builds for the default fleet file."""
    description = load_description("fleet.launch.py")
    (opaque,) = [e for e in description.args[0] if type(e).__name__ == "OpaqueFunction"]
    context = {"config": str(repo_root / "config" / "fleet.yaml"), "log_level": "info", "localhost": "true"}
    return opaque.kwargs["function"](context)


def _handlers(actions, kind: str) -> list:
    return [
        a.args[0]
        for a in actions
        if type(a).__name__ == "RegisterEventHandler" and type(a.args[0]).__name__ == kind
    ]


def _shutdown_reason(entities) -> str:
    (shutdown,) = [e for e in entities if type(e).__name__ == "Shutdown"]
    return shutdown.kwargs["reason"]


def test_a_planner_that_exits_shuts_the_launch_down(fleet_actions):
    (planner,) = [a for a in fleet_actions if type(a).__name__ == "LifecycleNode"]
    exits = [h for h in _handlers(fleet_actions, "OnProcessExit") if h.kwargs["target_action"] is planner]
    assert exits, "no OnProcessExit handler for the planner: a planner that exits leaves the fleet running"
    on_exit = exits[0].kwargs["on_exit"]
    assert "status 2" in _shutdown_reason(on_exit(Exited(2), Context()))
    assert on_exit(Exited(0), Context(is_shutdown=True)) == []  # Ctrl-C or workload end: nothing to add


@pytest.mark.parametrize(("start", "goal"), [("configuring", "unconfigured"), ("activating", "inactive")])
def test_a_failed_transition_at_start_up_shuts_the_launch_down(fleet_actions, start, goal):
    (planner,) = [a for a in fleet_actions if type(a).__name__ == "LifecycleNode"]

    def handlers(start_state, goal_state):
        return [
            h
            for h in _handlers(fleet_actions, "OnStateTransition")
            if h.kwargs["target_lifecycle_node"] is planner
            and h.kwargs.get("start_state") == start_state
            and h.kwargs.get("goal_state") == goal_state
        ]

    failed = handlers(start, goal)
    assert failed, f"no handler for {start} -> {goal}: the launch keeps running without a planner"

    def run(handler) -> list:
        out = []
        for entity in handler.kwargs["entities"]:
            out += (
                entity.kwargs["function"](Context())
                if type(entity).__name__ == "OpaqueFunction"
                else [entity]
            )
        return out

    assert "failed" in _shutdown_reason(run(failed[0]))
    # once active, a failed transition is the user's re-configuration: the fleet stays up
    (active,) = handlers(None, "active")
    run(active)
    assert not any(type(e).__name__ == "Shutdown" for e in run(failed[0]))


def test_the_start_up_configure_activates_once(fleet_actions):
    """configure -> activate is driven at start-up only; a user's later configure (cleanup, set,
    configure) is not followed by an automatic activate."""
    (ok,) = [
        h
        for h in _handlers(fleet_actions, "OnStateTransition")
        if h.kwargs.get("start_state") == "configuring" and h.kwargs.get("goal_state") == "inactive"
    ]
    (fn,) = [e.kwargs["function"] for e in ok.kwargs["entities"] if type(e).__name__ == "OpaqueFunction"]
    first = fn(Context())
    assert len(first) == 1 and type(first[0]).__name__ == "EmitEvent"
    assert fn(Context()) == []


def test_the_demo_launch_says_which_engine_it_runs(load_description):
    """demo.launch.py runs the simulated engine while `make demo` runs llama.cpp: it must say so."""
    entities = load_description("demo.launch.py").args[0]
    engine = [e for e in entities if type(e).__name__ == "DeclareLaunchArgument" and e.args[0] == "engine"]
    assert engine and engine[0].kwargs["default_value"] == "sim"
    logs = [e for e in entities if type(e).__name__ == "LogInfo"]
    assert logs, "demo.launch.py does not log the engine it runs"
    text = "".join(m if isinstance(m, str) else f"<{m.args[0]}>" for m in logs[0].kwargs["msg"])
    assert "<engine>" in text and "make demo" in text and "llama.cpp" in text
