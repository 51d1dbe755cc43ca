"""``timely-llm fleet CONFIG.yaml``: start a fleet's node graph as OS processes from one YAML file.

The same file drives ``ros2 launch timely_llm_ros fleet.launch.py config:=CONFIG.yaml``; both use
:func:`fleet_nodes`, so the two start the same nodes with the same names, namespaces and
parameters. File format (``config/fleet.yaml`` is the commented reference)::

    planner:   {parameters: {engine: sim, policy: timely}}
    robots:                                   # one node per robot, in namespace <fleet>/<agent>
      - {agent: drone_1, type: drone, parameters: {backend: sim}}
      - {agent: arm_1, type: arm}
      - {agent: rover_1, type: rover}         # a type from an installed plugin (or module:attr)
    robot_defaults: {drone: {backend: sim}}   # parameters for every robot of a type (optional)
    config_path: [my_config]                  # overlay config dirs (relative to this file), optional
    timemodel: {enabled: true, parameters: {}}
    recorder:  {enabled: true, parameters: {output: bags/fleet}}
    workload:  {enabled: false, parameters: {workload: wid1}}

Filled in unless given explicitly: the planner's ``agent_types``, the workload's and the recorder's
``agents`` (from ``robots``), the workload's ``wait_for_nodes`` (recorder and time model, so neither
misses the first task), each robot's ``agent_id``, and — for the simulated engine, or replay mode
(``plan_source: reference``), with a workload — the planner's ``sim_plans`` (``catalog`` + the workload). A ``workload`` that names a file relative to the
YAML file is made absolute.

Robot types are looked up by name (:mod:`timely_llm_ros.robots.plugins`: built-ins and installed
plugins); every robot runs as ``python -m timely_llm_ros.nodes.robot TYPE``. Before anything starts,
each robot's type, backend, skill set and the backend's mapping are checked, and ``config_path``
entries must exist: a malformed plugin, skill set or mapping stops the fleet at start-up with the
file, field and reason — never a robot mid-run. ``config_path`` is passed to every node as
``TIMELY_LLM_CONFIG`` (before any directories the environment already names), so the planner and the
robots see the same skill sets (:mod:`timely_llm_ros.core.paths`).

Processes: ``python -m timely_llm_ros.nodes.<module> --ros-args -r __node:=… -r __ns:=…
--params-file …`` (parameters written as ``/**: ros__parameters:`` files), each in its own process
group. The planner is a managed (lifecycle) node (``autostart: false``): once every process is
started, the fleet drives it through configure (engine loaded, warmed up) and activate (tasks
accepted) with :mod:`timely_llm_ros.ros.lifecycle_client`, as fleet.launch.py does with launch_ros. The fleet stops on SIGINT/SIGTERM, after ``--duration``, when the workload node exits (with
``exit_when_done``), or when any node dies; it then sends SIGINT to every group in reverse start
order (the recorder last, so it records the final statuses), SIGKILL after ``--stop-timeout``. A
fleet process that is killed outright (SIGKILL) takes its nodes with it: each gets SIGTERM from the
kernel (:mod:`timely_llm_ros.ros.parent_watch`).
After a workload ran to its end, the fleet prints the run's per-task-type summary from the recorder's
bag — the table ``timely-llm demo`` prints (:func:`timely_llm_ros.viz.report.print_summary`); a recorder without an
``output`` gets ``lrtrace_<date>_<time>`` in the working directory, named here so the fleet knows it.
DDS: the environment is inherited; ``--localhost`` adds the loopback-only settings used by tests and
the demo (``ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST`` + config/fastdds_localhost.xml).
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.ros.parent_watch import parent_env

PACKAGE = "timely_llm_ros"
ROBOT_MODULE = "robot"  # every robot type runs as timely_llm_ros.nodes.robot TYPE
SINGLETONS = ("planner", "timemodel", "recorder", "workload")
_TOP_KEYS = {
    "planner",
    "robots",
    "robot_defaults",
    "timemodel",
    "recorder",
    "workload",
    "config_path",
    "security",
}


class FleetError(ValueError):
    """A fleet file that cannot describe a graph (message names the file and the field)."""


@dataclass
class NodeSpec:
    """One node of the graph: ``module`` under timely_llm_ros.nodes, ``executable`` in lib/<pkg>."""

    role: str
    module: str
    name: str
    namespace: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    arguments: list[str] = field(default_factory=list)  # before --ros-args (a robot's type)
    env: dict[str, str] = field(default_factory=dict)  # added to the node's environment
    enclave: str = ""  # SROS2 enclave (security on: --ros-args --enclave, timely_llm_ros/security.py)

    @property
    def executable(self) -> str:
        return self.module

    @property
    def kind(self) -> str:
        """The module, or a robot's type (``config/params/<kind>.yaml`` holds its parameter defaults)."""
        return self.arguments[0] if self.role == "robot" and self.arguments else self.module

    def command(self, params_file: Path, python: str = sys.executable) -> list[str]:
        cmd = [
            python,
            "-m",
            f"{PACKAGE}.nodes.{self.module}",
            *self.arguments,
            "--ros-args",
            "-r",
            f"__node:={self.name}",
        ]
        if self.namespace:
            cmd += ["-r", f"__ns:=/{self.namespace}"]
        if self.enclave:
            cmd += ["--enclave", self.enclave]
        return cmd + ["--params-file", str(params_file)]


def _mapping(value: Any, where: str) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FleetError(f"{where}: expected a mapping, got {value!r}")
    return value


def load_fleet(path: str | Path) -> dict[str, Any]:
    """Read and check a fleet file; returns its data with ``_dir`` (the file's directory)."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as exc:
        raise FleetError(f"{p}: cannot read: {exc.strerror or exc}") from None
    # a binary file (an image, an archive, a bag) must give one line, never a decoder traceback
    if b"\x00" in raw:
        raise FleetError(f"{p}: not a text file (it holds NUL bytes); a fleet file is YAML text")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise FleetError(f"{p}: not UTF-8 text (byte {exc.start}); a fleet file is YAML text") from None
    if not text.strip():
        raise FleetError(
            f"{p}: the file is empty; a fleet file names at least one robot (see config/fleet.yaml)"
        )
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise FleetError(f"{p}: not valid YAML: {' '.join(str(exc).split())}") from None
    data = _mapping(data, str(p))
    from timely_llm_ros.core.schema import SchemaError, validate

    try:  # structure (config/schema/fleet.schema.json): file, field path, reason
        validate(data, "fleet", str(p))
    except SchemaError as exc:
        raise FleetError(str(exc)) from None
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise FleetError(f"{p}: unknown key(s) {unknown}; known: {sorted(_TOP_KEYS)}")
    if not data.get("robots"):  # a planner without robots rejects every task: say so at start
        raise FleetError(
            f"{p}: no robots: 'robots' must list at least one robot (agent + type; see config/fleet.yaml)"
        )
    data["_dir"] = str(p.resolve().parent)
    data["_path"] = str(p)
    nodes = fleet_nodes(data)  # validates the graph's shape
    check_robots(data, nodes)  # and what each robot will load, before anything starts
    check_planner(data, nodes)  # and the planner's parameters (engine: simm), as the node checks them
    return data


def config_dirs(cfg: dict[str, Any]) -> list[str]:
    """The fleet's ``config_path`` entries as absolute directories (relative to the fleet file)."""
    src = cfg.get("_path", "<fleet>")
    raw = cfg.get("config_path") or []
    if isinstance(raw, str):
        raw = [raw]
    if not isinstance(raw, list) or not all(isinstance(d, str) and d.strip() for d in raw):
        raise FleetError(f"{src}: config_path must be a directory or a list of directories")
    out = []
    for d in raw:
        path = Path(cfg.get("_dir", ".")) / Path(d).expanduser()
        if not path.is_dir():
            raise FleetError(f"{src}: config_path entry {d!r} is not a directory ({path})")
        out.append(str(path.resolve()))
    return out


def fleet_env(cfg: dict[str, Any], env: dict[str, str]) -> dict[str, str]:
    """Environment additions for every node: the config search path (``TIMELY_LLM_CONFIG``)."""
    from timely_llm_ros.core.paths import ENV_VAR

    dirs = config_dirs(cfg)
    if not dirs:
        return {}
    rest = [e for e in env.get(ENV_VAR, "").split(os.pathsep) if e.strip()]
    return {ENV_VAR: os.pathsep.join(dirs + rest)}


def check_robots(cfg: dict[str, Any], nodes: list[NodeSpec]) -> None:
    """Resolve every robot's type, backend, skill set and mapping as its node will (FleetError if not)."""
    from timely_llm_ros.core import paths
    from timely_llm_ros.robots.plugins import check_robot

    src = cfg.get("_path", "<fleet>")
    extra = fleet_env(cfg, dict(os.environ))
    saved = os.environ.get(paths.ENV_VAR)
    try:
        if extra:
            os.environ[paths.ENV_VAR] = extra[paths.ENV_VAR]
        for i, node in (pair for pair in enumerate(n for n in nodes if n.role == "robot")):
            params = node.params
            try:
                check_robot(node.arguments[0], params.get("backend"), params.get("skill_set"))
            except (ValueError, KeyError, OSError) as exc:
                msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
                raise FleetError(f"{src}: robots[{i}] ({node.namespace}): {msg}") from None
    finally:
        if saved is None:
            os.environ.pop(paths.ENV_VAR, None)
        else:
            os.environ[paths.ENV_VAR] = saved


def check_planner(cfg: dict[str, Any], nodes: list[NodeSpec]) -> None:
    """Check the planner's parameters as the node will at start-up — names, types, ranges, allowed
    values (``engine: simm`` names the accepted engines) — so ``--dry-run`` and a start fail early with
    the file and the reason. Without rclpy (a pure-Python install) the node's own check is the only one."""
    try:
        from timely_llm_ros.nodes.planner_params import MAPPING_PARAMS, PARAMS
    except ImportError:
        return
    src = cfg.get("_path", "<fleet>")
    table = {p.name: p for p in PARAMS}
    for node in nodes:
        if node.role != "planner":
            continue
        for name, value in node.params.items():
            if name.split(".")[0] in MAPPING_PARAMS and (isinstance(value, dict) or "." in name):
                continue  # a nested mapping: the engine / PlannerOptions check it at configure
            spec = table.get(name)
            if spec is None:
                if name == "use_sim_time":
                    continue  # declared by rclpy; the planner refuses true with its own reason
                raise FleetError(
                    f"{src}: planner.parameters.{name}: not a planner parameter; known: {', '.join(sorted(table))}"
                )
            problem = spec.validate(value)
            if problem:
                raise FleetError(f"{src}: planner.parameters.{name}: {problem}")


def fleet_nodes(cfg: dict[str, Any], namespace: str = "/") -> list[NodeSpec]:
    """The graph of a loaded fleet file, in start order (see the module docstring).

    ``namespace``: the fleet namespace (``/`` or e.g. ``/fleet_a``): every fleet-level node runs in
    it and each robot in ``<namespace>/<agent>``, so two fleets in different namespaces share a ROS
    domain without seeing each other's topics (all names are relative, :mod:`timely_llm_ros.interfaces.topics`).
    """
    src = cfg.get("_path", "<fleet>")
    from timely_llm_ros.interfaces.topics import join, normalize_namespace

    try:
        fleet_ns = normalize_namespace(namespace)
    except ValueError as exc:
        raise FleetError(f"--namespace: {exc}") from None
    prefix = fleet_ns.strip("/")  # NodeSpec.namespace has no leading '/'
    in_fleet = (lambda name: f"{prefix}/{name}") if prefix else (lambda name: name)
    robots_raw = cfg.get("robots") or []
    if not isinstance(robots_raw, list):
        raise FleetError(f"{src}: 'robots' must be a list")
    defaults = _mapping(cfg.get("robot_defaults"), f"{src}: robot_defaults")
    from timely_llm_ros.interfaces.topics import valid_agent_id  # no rclpy import: topics.py is plain Python
    from timely_llm_ros.robots.plugins import registered_types  # no ROS import either

    robots: list[NodeSpec] = []
    type_names: list[str] = []
    seen: set[str] = set()
    for i, r in enumerate(robots_raw):
        r = _mapping(r, f"{src}: robots[{i}]")
        agent, rtype = r.get("agent"), r.get("type")
        if not isinstance(agent, str) or not valid_agent_id(agent):
            raise FleetError(
                f"{src}: robots[{i}].agent must be a ROS name token (letters, digits, '_'), got {agent!r}"
            )
        if agent in seen:
            raise FleetError(f"{src}: robots[{i}]: agent {agent!r} appears twice")
        seen.add(agent)
        if not isinstance(rtype, str) or not (rtype in registered_types() or ":" in rtype):
            raise FleetError(
                f"{src}: robots[{i}].type must be a robot type ({', '.join(sorted(registered_types()))}, "
                f"or module:attr of a RobotType), got {rtype!r}"
            )
        params = {
            **_mapping(defaults.get(rtype), f"{src}: robot_defaults.{rtype}"),
            **_mapping(r.get("parameters"), f"{src}: robots[{i}].parameters"),
        }
        params.setdefault("agent_id", agent)
        try:
            tname = _type_name(rtype)
        except ValueError as exc:
            raise FleetError(f"{src}: robots[{i}].type: {exc}") from None
        type_names.append(tname)
        robots.append(
            NodeSpec("robot", ROBOT_MODULE, str(r.get("name") or tname), in_fleet(agent), params, [rtype])
        )
    agents = [n.params["agent_id"] for n in robots]
    agent_types = [f"{a}:{t}" for a, t in zip(agents, type_names)]

    parts: dict[str, dict[str, Any] | None] = {}
    for role in SINGLETONS:
        section = _mapping(cfg.get(role), f"{src}: {role}")
        enabled = section.get("enabled", role == "planner" or role in cfg)
        if not isinstance(enabled, bool):
            raise FleetError(f"{src}: {role}.enabled must be true or false")
        params = dict(_mapping(section.get("parameters"), f"{src}: {role}.parameters"))
        parts[role] = params if enabled else None
    if parts["planner"] is None:
        raise FleetError(f"{src}: the planner cannot be disabled")
    workload = parts["workload"]
    if workload is not None:
        wl = workload.get("workload")
        if not isinstance(wl, str) or not wl.strip():
            raise FleetError(f"{src}: workload.parameters.workload is required when the workload is enabled")
        candidate = Path(cfg.get("_dir", ".")) / wl
        if not Path(wl).is_absolute() and candidate.is_file():
            workload["workload"] = str(candidate)
        workload.setdefault("agents", agent_types)
        # observers that must see the first task (/tasks is volatile): the workload waits for them
        workload.setdefault(
            "wait_for_nodes",
            [join(fleet_ns, role) for role in ("recorder", "timemodel") if parts[role] is not None],
        )
        workload.setdefault("planner_node", join(fleet_ns, "planner"))
    planner = parts["planner"]
    planner.setdefault("agent_types", agent_types)
    # Robots simulated faster than real time (time_scale < 1) finish a segment sooner than its
    # minimum execution time: the planner's plausibility check for DONE scales with the fastest one.
    scales = [r.params.get("time_scale", 1.0) for r in robots]
    fastest = min([float(x) for x in scales if isinstance(x, (int, float))] or [1.0])
    if fastest < 1.0:
        planner.setdefault("feedback_min_exec_fraction", round(0.5 * fastest, 6))
    if parts["recorder"] is not None:  # record the robots' segment topics from the very start
        parts["recorder"].setdefault("agents", agents)
        parts["recorder"].setdefault("policy", str(planner.get("policy", "timely")))
    replay = planner.get("plan_source") == "reference"  # a real engine writes the reference plans
    if workload is not None and (planner.get("engine", "sim") == "sim" or replay):
        planner.setdefault("sim_plans", ["catalog", workload["workload"]])

    env = fleet_env(cfg, dict(os.environ))
    from timely_llm_ros import security

    try:
        sec = security.security_section(cfg, src)
    except security.SecurityConfigError as exc:
        raise FleetError(str(exc)) from None
    if sec is not None:
        env.update(security.security_env(sec))
        from timely_llm_ros.ros.secure_dds import ENV, preload_env

        try:  # TIMELY_SECURE_FASTDDS: every node loads the Fast DDS built with security
            pre = preload_env({k: v for k, v in os.environ.items() if k in (ENV, "LD_PRELOAD")})
        except ValueError as exc:
            raise FleetError(str(exc)) from None
        if ENV in pre:
            env["LD_PRELOAD"] = pre["LD_PRELOAD"]
    out: list[NodeSpec] = []
    if parts["timemodel"] is not None:
        out.append(NodeSpec("timemodel", "timemodel", "timemodel", prefix, parts["timemodel"]))
    if parts["recorder"] is not None:
        out.append(NodeSpec("recorder", "recorder", "recorder", prefix, parts["recorder"]))
    out += robots
    out.append(NodeSpec("planner", "planner", "planner", prefix, planner))
    if workload is not None:
        out.append(NodeSpec("workload", "workload", "workload", prefix, workload))
    for node in out:
        node.env.update(env)
        if sec is not None:
            agent = node.params.get("agent_id", "") if node.role == "robot" else ""
            node.enclave = security.enclave(node.role, fleet_ns, agent)
    return out


def _type_name(rtype: str) -> str:
    """The robot type name of a fleet ``type:`` (a ``module:attr`` entry is resolved)."""
    if ":" not in rtype:
        return rtype
    from timely_llm_ros.robots.plugins import robot_type

    return robot_type(rtype).name


def localhost_env(env: dict[str, str]) -> dict[str, str]:
    """Loopback-only DDS (tests and demos; a real fleet keeps ROS's default discovery)."""
    from timely_llm_ros.core.paths import config_path

    out = dict(env)
    out["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    out["FASTDDS_DEFAULT_PROFILES_FILE"] = str(config_path("fastdds_localhost.xml"))
    return out


# --------------------------------------------------------------------------------------- processes
class Fleet:
    """The running processes of one graph."""

    def __init__(self, nodes: list[NodeSpec], env: dict[str, str], workdir: Path) -> None:
        self.nodes = nodes
        self.env = env
        self.workdir = workdir
        self.procs: list[tuple[NodeSpec, subprocess.Popen]] = []
        self.managed: list[NodeSpec] = []  # lifecycle nodes to configure + activate after the start

    def start(self) -> None:
        for i, node in enumerate(self.nodes):
            ns = node.namespace.replace("/", "_") or "root"
            pfile = self.workdir / f"{i:02d}_{ns}_{node.name}.yaml"
            params = dict(node.params)
            if node.role == "planner" and "autostart" not in params:  # managed: drive_lifecycle() starts it
                params["autostart"] = False
                self.managed.append(node)
            pfile.write_text(yaml.safe_dump({"/**": {"ros__parameters": params}}, sort_keys=False))
            # parent_env: the node stops when this process dies, even by SIGKILL (ros.parent_watch)
            env = {**self.env, **node.env, **parent_env()}
            proc = subprocess.Popen(node.command(pfile), env=env, start_new_session=True)
            self.procs.append((node, proc))
            print(f"[fleet] started {label(node)} (pid {proc.pid})", flush=True)

    def drive_lifecycle(self, timeout: float, interrupted: Any = lambda: False) -> str | None:
        """configure + activate every managed node (the planner), as fleet.launch.py does; runs
        timely_llm_ros.ros.lifecycle_client with the fleet's environment (its DDS settings)."""
        for node in self.managed:
            cmd = [
                sys.executable,
                "-m",
                f"{PACKAGE}.ros.lifecycle_client",
                label(node),
                "configure",
                "activate",
                "--timeout",
                str(timeout),
            ]
            env = {**self.env, **node.env}
            if node.enclave:  # security on: a task sender's rights, the fleet's client enclave
                env["ROS_SECURITY_ENCLAVE_OVERRIDE"] = node.enclave.rsplit("/", 1)[0] + "/client"
            client = subprocess.Popen(cmd, env=env, stderr=subprocess.PIPE, text=True)
            while client.poll() is None:  # a node dying meanwhile ends the wait
                ended = self.first_exit()
                if ended is not None or interrupted():
                    client.terminate()
                    client.wait()
                    if ended is None:
                        return "interrupted"
                    return (
                        f"{label(ended[0])} exited with status {ended[1]} while {label(node)} was configured"
                    )
                time.sleep(0.2)
            if client.returncode != 0:
                return (
                    client.stderr.read() if client.stderr else ""
                ).strip() or f"{label(node)}: lifecycle failed"
        return None

    def first_exit(self) -> tuple[NodeSpec, int] | None:
        for node, proc in self.procs:
            rc = proc.poll()
            if rc is not None:
                return node, rc
        return None

    def stop(self, timeout: float) -> None:
        for node, proc in reversed(self.procs):
            if proc.poll() is None:
                _signal_group(proc, signal.SIGINT)
                try:
                    proc.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    print(
                        f"[fleet] {label(node)} did not stop within {timeout:.0f} s: killing it", flush=True
                    )
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
            else:  # its children (if any) go too
                _signal_group(proc, signal.SIGKILL)


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def label(node: NodeSpec) -> str:
    return f"/{node.namespace}/{node.name}" if node.namespace else f"/{node.name}"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("config", help="fleet YAML (see config/fleet.yaml)")
    parser.add_argument(
        "--duration",
        type=float,
        default=0.0,
        help="stop after this many seconds (0 = run until interrupted or the workload is done)",
    )
    parser.add_argument("--localhost", action="store_true", help="keep DDS on loopback (tests, demos)")
    parser.add_argument(
        "--namespace",
        default="/",
        help="fleet namespace, e.g. fleet_a: every topic, "
        "service and action of the fleet lives under it (robots in <namespace>/<agent>), so "
        "several fleets can share one ROS domain",
    )
    parser.add_argument(
        "--stop-timeout",
        type=float,
        default=15.0,
        help="seconds each node gets to exit after SIGINT before it is killed",
    )
    parser.add_argument(
        "--start-timeout",
        type=float,
        default=600.0,
        help="seconds the planner may take for "
        "each lifecycle transition (configure loads and warms up the engine)",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print the commands and parameters, start nothing"
    )


def run(args: argparse.Namespace) -> int:
    try:
        cfg = load_fleet(args.config)
        nodes = fleet_nodes(cfg, args.namespace)
    except FleetError as exc:
        print(f"timely-llm fleet: error: {exc}", file=sys.stderr)
        return 2
    if args.duration < 0 or args.stop_timeout <= 0:
        print("timely-llm fleet: error: --duration must be >= 0 and --stop-timeout > 0", file=sys.stderr)
        return 2
    env = localhost_env(dict(os.environ)) if args.localhost else dict(os.environ)
    bag = _bag_of_workload_run(nodes) if not args.dry_run else None
    if args.dry_run:
        for node in nodes:
            envs = "".join(f"{k}={v} " for k, v in node.env.items())
            print(envs + " ".join(node.command(Path(f"<{node.name}.yaml>"))))
            print("    " + yaml.safe_dump(node.params, default_flow_style=True, sort_keys=False).strip())
        return 0
    stop = []
    previous = {
        sig: signal.signal(sig, lambda signum, _f: stop.append(signum))
        for sig in (signal.SIGINT, signal.SIGTERM)
    }
    status = 0
    workload_done = False
    with tempfile.TemporaryDirectory(prefix="timely-fleet-") as tmp:
        fleet = Fleet(nodes, env, Path(tmp))
        try:
            fleet.start()
            problem = fleet.drive_lifecycle(args.start_timeout, lambda: bool(stop))
            if problem and not stop:
                print(f"[fleet] {problem}: stopping the fleet", flush=True)
                status = 1
            deadline = time.monotonic() + args.duration if args.duration > 0 else None
            while not stop and not problem:
                ended = fleet.first_exit()
                if ended is not None:
                    node, rc = ended
                    if node.role == "workload" and rc == 0:
                        print("[fleet] workload finished: stopping the fleet", flush=True)
                        workload_done = True
                    else:
                        print(
                            f"[fleet] {label(node)} exited with status {rc}: stopping the fleet", flush=True
                        )
                        status = 1 if rc == 0 else rc
                    break
                if deadline is not None and time.monotonic() >= deadline:
                    print(f"[fleet] --duration {args.duration:g} s reached: stopping the fleet", flush=True)
                    break
                time.sleep(0.2)
        finally:
            fleet.stop(args.stop_timeout)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
    if stop:
        print("[fleet] interrupted: fleet stopped", flush=True)
    elif workload_done and bag is not None:
        status = _print_summary(bag) or status
    return status


def _bag_of_workload_run(nodes: list[NodeSpec]) -> Path | None:
    """The recorder's bag directory when the fleet runs a workload with a recorder (its ``output``,
    made absolute; the recorder's own default name when empty), else None."""
    roles = {node.role: node for node in nodes}
    if "workload" not in roles or "recorder" not in roles:
        return None
    params = roles["recorder"].params
    out = str(params.get("output") or "") or time.strftime("lrtrace_%Y%m%d_%H%M%S")
    path = Path(out).expanduser().resolve()
    params["output"] = str(path)
    return path


def _print_summary(bag: Path) -> int:
    """The demo's summary table for the finished workload (0), or why there is none (1)."""
    if not bag.exists():
        print(f"[fleet] no bag was recorded at {bag}: no summary", flush=True)
        return 1
    from timely_llm_ros.viz.report import print_summary

    print(flush=True)
    try:
        return print_summary(bag, None, tag="fleet")
    except (OSError, ValueError) as exc:  # an unreadable bag must not hide the fleet's own status
        print(f"[fleet] cannot summarise the bag {bag}: {exc}", flush=True)
        return 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="timely-llm fleet", description=__doc__.split("\n\n")[0])
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
