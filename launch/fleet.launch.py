"""Launch a timely_llm_ros fleet from one YAML file (config/fleet.yaml documents the format).

    ros2 launch timely_llm_ros fleet.launch.py                       # the installed config/fleet.yaml
    ros2 launch timely_llm_ros fleet.launch.py config:=my_fleet.yaml localhost:=true
    ros2 launch timely_llm_ros fleet.launch.py engine:=llamacpp model_path:=/models/llama.gguf
    ros2 launch timely_llm_ros fleet.launch.py namespace:=fleet_a    # topics /fleet_a/tasks, ...
    ros2 launch timely_llm_ros fleet.launch.py --show-args            # every argument below
    ros2 launch timely_llm_ros fleet.launch.py security_keystore:=/path/keystore   # SROS2 on

The YAML is turned into nodes by ``timely_llm_ros.fleet.fleet_nodes`` — the same function that
``timely-llm fleet CONFIG.yaml`` uses to start the graph as plain processes — so both start the same
nodes, names, namespaces and parameters. Each node's parameters are, in increasing precedence: the
package's per-node file ``config/params/<node>.yaml`` (the defaults of the commonly tuned
parameters), the fleet YAML's parameters, ``params_file:=`` (a usual ROS 2 parameter file for every
node, ``/**:`` or keyed by node name), and the arguments ``engine``, ``model_path``, ``policy``
(planner) and ``use_sim_time`` (all nodes but the planner, which runs on its engine's wall clock).
``log_level`` sets every node's logger level. ``localhost:=true`` keeps DDS on loopback (tests,
demos); by default the ROS 2 discovery settings of the environment apply. When the workload node
exits (``exit_when_done``), the whole launch shuts down. ``namespace:=fleet_a`` runs the whole fleet
under ``/fleet_a`` (robots in ``/fleet_a/<agent>``). The planner is a managed (lifecycle) node: this
file configures it (engine loaded, warmed up) and activates it (tasks accepted) with launch_ros
lifecycle events; ``ros2 lifecycle set /planner deactivate`` etc. work on it afterwards. A fleet
without its planner is of no use, so the launch shuts down, with the reason, when the planner process
exits (a bad ``engine:=`` or other parameter exits with status 2 before any transition) or a
transition this file drives at start-up fails (configure: a missing ``model_path:=``, an engine that
cannot load; activate), instead of leaving robots and recorder running until Ctrl-C. Later failed
transitions (a user re-pointing the planner: cleanup, ``ros2 param set``, configure) leave the fleet up.
"""

import os

import yaml
from ament_index_python.packages import get_package_share_directory
from launch.actions import (
    DeclareLaunchArgument,
    EmitEvent,
    LogInfo,
    OpaqueFunction,
    RegisterEventHandler,
    SetEnvironmentVariable,
    Shutdown,
)
from launch.conditions import IfCondition
from launch.event_handlers import OnProcessExit
from launch.events import matches_action
from launch.substitutions import LaunchConfiguration
from launch_ros.actions import LifecycleNode, Node
from launch_ros.event_handlers import OnStateTransition
from launch_ros.events.lifecycle import ChangeState
from lifecycle_msgs.msg import Transition

from launch import LaunchDescription

PACKAGE = "timely_llm_ros"
ARGUMENTS = (  # name, default, description
    ("config", None, "fleet YAML: planner, robots, time model, recorder, workload"),
    ("localhost", "false", "true: keep all DDS traffic on this machine (loopback only)"),
    (
        "use_sim_time",
        "false",
        "true: robots, time model, recorder and workload follow /clock (e.g. "
        "timely-llm replay); the planner stays on its engine's wall clock",
    ),
    ("log_level", "info", "logger level of every node: debug, info, warn, error or fatal"),
    ("engine", "", "planner engine: sim, llamacpp or vllm (empty: as in the fleet YAML)"),
    (
        "model_path",
        "",
        "model of the llamacpp (GGUF file) or vllm (model directory) engine; empty: "
        "as in the fleet YAML, else the engine's default",
    ),
    (
        "policy",
        "",
        "scheduling policy: timely, timely-paper, edf-seg, fcfs-seg, vllm, vllm-stream, "
        "optionally @bN (empty: as in the fleet YAML)",
    ),
    ("params_file", "", "a ROS 2 parameter YAML applied to every node after the fleet YAML"),
    (
        "security_keystore",
        "",
        "SROS2 keystore (timely-llm security init): DDS-Security on for every node, each in its own "
        "enclave (ROS_SECURITY_ENABLE/KEYSTORE/STRATEGY, --enclave); overrides the fleet YAML's "
        "security section; empty: as in the fleet YAML",
    ),
    ("security_strategy", "Enforce", "with security_keystore: Enforce or Permissive"),
    (
        "namespace",
        "",
        "fleet namespace, e.g. fleet_a: every topic, service and action of the fleet lives "
        "under it (robots in <namespace>/<agent>), so several fleets can share one ROS domain",
    ),
)


def _arg(context, name: str) -> str:
    return LaunchConfiguration(name).perform(context).strip()


def _planner_overrides(context, params: dict) -> None:
    """engine / policy / model_path arguments over the fleet YAML's planner parameters."""
    for name in ("engine", "policy"):
        if _arg(context, name):
            params[name] = _arg(context, name)
    model = _arg(context, "model_path")
    if model:
        raw = params.get("engine_options") or {}  # a mapping in the fleet YAML, or its YAML text
        options = dict(raw) if isinstance(raw, dict) else yaml.safe_load(raw) or {}
        if not isinstance(options, dict):
            raise ValueError(f"planner engine_options is not a mapping: {params.get('engine_options')!r}")
        # llama.cpp takes a GGUF file (model_path), vLLM a model name or directory (model)
        options["model" if params.get("engine", "sim") == "vllm" else "model_path"] = model
        params["engine_options"] = yaml.safe_dump(options, default_flow_style=True).strip()


def _fleet_nodes(context, *args, **kwargs):
    # imported at launch time: the package's Python modules are installed next to its messages
    from timely_llm_ros.fleet import fleet_nodes, load_fleet
    from timely_llm_ros.ros.parent_watch import parent_env

    share = get_package_share_directory(PACKAGE)
    cfg = load_fleet(_arg(context, "config"))
    if _arg(context, "security_keystore"):
        cfg["security"] = {
            "enabled": True,
            "keystore": os.path.abspath(_arg(context, "security_keystore")),
            "strategy": _arg(context, "security_strategy") or "Enforce",
        }
    specs = fleet_nodes(cfg, _arg(context, "namespace") or "/")
    sim_time = _arg(context, "use_sim_time").lower() in ("true", "1", "yes")
    params_file = _arg(context, "params_file")
    actions = []
    for spec in specs:
        params = dict(spec.params)
        if spec.role == "planner":
            _planner_overrides(context, params)
        elif spec.role == "recorder" and _arg(context, "policy"):
            params["policy"] = _arg(context, "policy")  # the bag's metadata names the policy run
        layers = []
        base = os.path.join(share, "config", "params", f"{spec.kind}.yaml")  # a robot: its type
        if os.path.isfile(base):
            layers.append(base)
        layers.append(params)
        if params_file:
            layers.append(params_file)
        if spec.role != "planner":
            layers.append({"use_sim_time": sim_time})
        else:
            layers.append({"autostart": False})  # managed: the transitions below configure + activate it
        node_class = LifecycleNode if spec.role == "planner" else Node
        actions.append(
            node_class(
                package=PACKAGE,
                executable=spec.executable,
                arguments=spec.arguments or None,  # a robot's type: `robot TYPE` (byo-robot)
                # the fleet's config_path as TIMELY_LLM_CONFIG, and this launch's pid: ros2 launch
                # orphans its nodes on SIGTERM, so each node stops when this process dies (parent_watch)
                additional_env={**spec.env, **parent_env()},
                name=spec.name,
                # LifecycleNode requires a namespace ("" = root); a plain Node takes None for the root
                namespace="/" + spec.namespace
                if spec.namespace
                else ("" if spec.role == "planner" else None),
                parameters=layers,
                ros_arguments=["--log-level", _arg(context, "log_level") or "info"]
                + (["--enclave", spec.enclave] if spec.enclave else []),  # security on: its enclave
                output="screen",
                emulate_tty=True,
                on_exit=[Shutdown(reason="workload finished")] if spec.role == "workload" else None,
            )
        )
        if spec.role == "planner":
            actions += _drive_lifecycle(actions[-1]) + _stop_without_planner(actions[-1])
    if sim_time:
        actions.insert(
            0,
            LogInfo(
                msg="use_sim_time: robots, time model, recorder and workload follow /clock; "
                "the planner runs on its engine's wall clock"
            ),
        )
    return actions


def _drive_lifecycle(planner) -> list:
    """configure the planner at once (engine loaded, warmed up), activate it (tasks accepted) when it
    reaches inactive from configuring — a later deactivate by the user is not undone."""

    def change(transition: int) -> EmitEvent:
        return EmitEvent(
            event=ChangeState(lifecycle_node_matcher=matches_action(planner), transition_id=transition)
        )

    activated = {"once": False}

    def activate_once(context) -> list:
        """Only the start-up configure is followed by activate: a user's own configure (after a
        cleanup, to re-point the planner) leaves the activate to the user, as ros2 lifecycle expects."""
        if activated["once"]:
            return []
        activated["once"] = True
        return [change(Transition.TRANSITION_ACTIVATE)]

    return [
        RegisterEventHandler(
            OnStateTransition(
                target_lifecycle_node=planner,
                start_state="configuring",
                goal_state="inactive",
                entities=[OpaqueFunction(function=activate_once)],
            )
        ),
        change(Transition.TRANSITION_CONFIGURE),
    ]


def _stop_without_planner(planner) -> list:
    """Shut the launch down, naming why, when the planner process exits or when the configure or
    activate transition this file drives fails (the node falls back to unconfigured / inactive; its own
    log line above gives the cause). Once the planner has been active, a failed transition is the
    user's (cleanup, ``ros2 param set``, configure with another model): the fleet keeps running and
    the planner stays unconfigured for the next try. A planner exit during a shutdown already under
    way (Ctrl-C, the workload finished) adds nothing."""
    started = {"active": False}

    def stop(reason: str) -> list:
        return [LogInfo(msg=f"stopping the fleet: {reason}"), Shutdown(reason=reason)]

    def exited(event, context) -> list:
        if context.is_shutdown:
            return []
        return stop(f"the planner exited with status {event.returncode}; see its error above")

    def became_active(context) -> list:
        started["active"] = True
        return []

    def failed(transition: str, start: str, goal: str) -> RegisterEventHandler:
        def check(context) -> list:
            if started["active"]:
                return [LogInfo(msg=f"the planner's {transition} failed; it waits for the next transition")]
            return stop(f"the planner's {transition} transition failed at start-up; see its error above")

        return RegisterEventHandler(
            OnStateTransition(
                target_lifecycle_node=planner,
                start_state=start,
                goal_state=goal,
                entities=[OpaqueFunction(function=check)],
            )
        )

    return [
        RegisterEventHandler(OnProcessExit(target_action=planner, on_exit=exited)),
        RegisterEventHandler(
            OnStateTransition(
                target_lifecycle_node=planner,
                goal_state="active",
                entities=[OpaqueFunction(function=became_active)],
            )
        ),
        failed("configure", "configuring", "unconfigured"),
        failed("activate", "activating", "inactive"),
    ]


def generate_launch_description():
    share = get_package_share_directory(PACKAGE)
    localhost = LaunchConfiguration("localhost")
    defaults = {"config": os.path.join(share, "config", "fleet.yaml")}
    return LaunchDescription(
        [
            *(
                DeclareLaunchArgument(name, default_value=defaults.get(name, default), description=text)
                for name, default, text in ARGUMENTS
            ),
            SetEnvironmentVariable(
                "ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST", condition=IfCondition(localhost)
            ),
            SetEnvironmentVariable(
                "FASTDDS_DEFAULT_PROFILES_FILE",
                os.path.join(share, "config", "fastdds_localhost.xml"),
                condition=IfCondition(localhost),
            ),
            OpaqueFunction(function=_fleet_nodes),
        ]
    )
