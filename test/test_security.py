"""Secure-fleet path: the fleet's SROS2 policy, enclave wiring of every node, `timely-llm security init`.

What runs here: the policy's content (who may publish / read what), the enclave and ROS_SECURITY_*
wiring of `timely-llm fleet`, and rcl resolving each node's enclave in a keystore. What cannot run
here: DDS-Security itself (the PyPI Fast DDS is built without it; see test_rcl_finds_each_enclave).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from timely_llm_ros.fleet import FleetError, fleet_nodes, load_fleet
from timely_llm_ros.ros.secure_dds import ENV, has_security, preload_env
from timely_llm_ros.security import enclave, policy_xml

REPO = Path(__file__).resolve().parents[1]
AGENTS = ["drone_1", "drone_2", "drone_3", "arm_1"]


def _fleet(tmp_path: Path, security: dict | None = None, name: str = "fleet.yaml") -> Path:
    data = yaml.safe_load((REPO / "config" / "fleet.yaml").read_text())
    if security is not None:
        data["security"] = security
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def _rules(xml: str) -> dict[str, dict[tuple[str, str], set[str]]]:
    """enclave path -> {(kind, permission): names}."""
    root = ET.fromstring(xml)
    assert root.tag == "policy" and root.get("version") == "0.2.0"
    out = {}
    for enc in root.find("enclaves"):
        rules: dict[tuple[str, str], set[str]] = {}
        for prof in enc.find("profiles"):
            assert prof.get("ns", "").startswith("/") and prof.get("node")
            for group in prof:
                ((perm, value),) = group.attrib.items()
                assert value == "ALLOW"
                rules.setdefault((group.tag, perm), set()).update(e.text for e in group)
        out[enc.get("path")] = rules
    return out


def test_the_policy_lets_only_the_planner_send_segments_and_each_robot_read_only_its_own():
    nodes = fleet_nodes(load_fleet(REPO / "config" / "fleet.yaml"))
    assert sorted(n.params["agent_id"] for n in nodes if n.role == "robot") == sorted(AGENTS)
    rules = _rules(policy_xml(nodes))
    segs = {f"/{a}/skill_segments" for a in AGENTS}
    planner = rules["/timely_llm_ros/planner"]
    assert segs | {"/task_status", "/trace_events"} <= planner[("topics", "publish")]
    assert {"/tasks", "/segment_feedback", "/robot_heartbeat"} <= planner[("topics", "subscribe")]
    assert (
        "/plan_task" in planner[("actions", "execute")] and "/cancel_task" in planner[("services", "reply")]
    )
    for path, r in rules.items():
        published = r.get(("topics", "publish"), set())
        if path != "/timely_llm_ros/planner":  # nobody else may send a robot a segment, or a status
            assert not published & (segs | {"/task_status"}), path
    for agent in AGENTS:
        robot = rules[f"/timely_llm_ros/robots/{agent}"]
        assert {"/segment_feedback", "/robot_heartbeat"} <= robot[("topics", "publish")]
        read = robot[("topics", "subscribe")]
        assert read & segs == {f"/{agent}/skill_segments"}  # no other robot's nonces
        assert "/segment_feedback" not in read  # nor the nonces other robots echo
        assert "/tasks" not in robot[("topics", "publish")]
    recorder = rules["/timely_llm_ros/recorder"]
    assert segs | {"/segment_feedback"} <= recorder[("topics", "subscribe")]
    client = rules["/timely_llm_ros/client"]
    assert client[("topics", "publish")] >= {"/tasks"} and "/plan_task" in client[("actions", "call")]


def test_a_namespaced_fleet_gets_namespaced_enclaves_and_topics():
    nodes = fleet_nodes(load_fleet(REPO / "config" / "fleet.yaml"), "/fleet_a")
    rules = _rules(policy_xml(nodes, "/fleet_a"))
    assert enclave("robot", "/fleet_a", "drone_1") == "/fleet_a/timely_llm_ros/robots/drone_1"
    robot = rules["/fleet_a/timely_llm_ros/robots/drone_1"]
    assert "/fleet_a/drone_1/skill_segments" in robot[("topics", "subscribe")]
    assert "/fleet_a/segment_feedback" in robot[("topics", "publish")]


def test_security_on_gives_every_node_its_enclave_and_the_ros_security_environment(tmp_path):
    cfg = load_fleet(_fleet(tmp_path, {"enabled": True, "keystore": "keys", "strategy": "Enforce"}))
    nodes = fleet_nodes(cfg)
    for node in nodes:
        cmd = node.command(Path("p.yaml"))
        assert cmd[cmd.index("--enclave") + 1] == node.enclave
        assert node.env["ROS_SECURITY_ENABLE"] == "true"
        assert node.env["ROS_SECURITY_STRATEGY"] == "Enforce"
        assert node.env["ROS_SECURITY_KEYSTORE"] == str(tmp_path / "keys")  # relative to the fleet file
    robot = next(n for n in nodes if n.role == "robot")
    assert robot.enclave == f"/timely_llm_ros/robots/{robot.params['agent_id']}"
    off = fleet_nodes(load_fleet(_fleet(tmp_path, {"enabled": False, "keystore": "keys"}, "off.yaml")))
    assert all("--enclave" not in n.command(Path("p.yaml")) and not n.enclave for n in off)
    assert all("ROS_SECURITY_ENABLE" not in n.env for n in off)
    for bad, why in (
        ({"enabled": True}, "security.keystore is required"),
        ({"keystore": "k", "strategy": "Lenient"}, "strategy"),
    ):
        with pytest.raises(FleetError, match=why):
            load_fleet(_fleet(tmp_path, bad, "bad.yaml"))


def _security_init(fleet: Path, cwd: Path, path: list[str]) -> subprocess.CompletedProcess[str]:
    """`timely-llm security init FLEET` with only ``path`` on PATH (which tools it may find)."""
    return subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.cli", "security", "init", str(fleet)],
        capture_output=True,
        text=True,
        env=dict(os.environ, PATH=os.pathsep.join(path)),
        timeout=300,
        cwd=cwd,
    )


def test_security_init_writes_the_policy_and_says_how_to_make_the_keystore(tmp_path):
    fleet = _fleet(tmp_path, {"enabled": True, "keystore": "keys"})
    out = _security_init(fleet, tmp_path, [os.path.dirname(sys.executable)])  # no `ros2` here
    assert out.returncode == 0, out.stderr
    policy = tmp_path / "keys_policy.xml"
    assert f"policy: {policy}" in out.stdout
    assert f"ros2 security generate_artifacts -k {tmp_path / 'keys'} -p {policy}" in out.stdout
    assert "/timely_llm_ros/robots/drone_1" in _rules(policy.read_text())


@pytest.mark.skipif(shutil.which("openssl") is None, reason="the openssl command is not installed")
def test_security_init_makes_the_keystore_with_openssl_where_sros2_is_missing(tmp_path):
    """Without sros2, `timely-llm security init` makes the keystore itself: sros2's layout, one CA,
    each enclave's certificate named after it, permissions signed by the CA and mangled as the RMW
    names DDS topics — drone_1 may read only its own segments and may not read /segment_feedback."""
    fleet = _fleet(tmp_path, {"enabled": True, "keystore": "keys"})
    out = _security_init(
        fleet, tmp_path, [os.path.dirname(sys.executable), os.path.dirname(shutil.which("openssl"))]
    )
    assert out.returncode == 0, out.stderr
    keys = tmp_path / "keys"
    assert f"keystore: {keys} (8 enclaves, made with openssl" in out.stdout
    ca = keys / "public" / "ca.cert.pem"
    drone = keys / "enclaves" / "timely_llm_ros" / "robots" / "drone_1"
    for f in ("identity_ca.cert.pem", "cert.pem", "key.pem", "permissions_ca.cert.pem", "governance.p7s"):
        assert (drone / f).is_file(), f
    subject = subprocess.run(
        ["openssl", "x509", "-in", str(drone / "cert.pem"), "-noout", "-subject"],
        capture_output=True,
        text=True,
    )
    assert subject.stdout.strip().replace(" ", "") == "subject=CN=/timely_llm_ros/robots/drone_1"
    verify = subprocess.run(
        ["openssl", "smime", "-verify", "-text", "-in", str(drone / "permissions.p7s"), "-CAfile", str(ca)],
        capture_output=True,
        text=True,
    )
    assert verify.returncode == 0, verify.stderr
    grant = ET.fromstring(verify.stdout).find("permissions/grant")
    assert grant.findtext("subject_name") == "CN=/timely_llm_ros/robots/drone_1"
    rule = grant.find("allow_rule")
    pub = {t.text for t in rule.find("publish").iter("topic")}
    sub = {t.text for t in rule.find("subscribe").iter("topic")}
    assert {"rt/segment_feedback", "rt/robot_heartbeat", "ros_discovery_info"} <= pub
    assert "rt/drone_1/skill_segments" in sub and "rt/drone_2/skill_segments" not in sub
    assert "rt/segment_feedback" not in sub and not any("skill_segments" in t for t in pub)
    assert grant.findtext("default") == "DENY"
    planner = (keys / "enclaves" / "timely_llm_ros" / "planner" / "permissions.xml").read_text()
    assert (
        "<topic>rt/drone_2/skill_segments</topic>" in planner
        and "rq/plan_task/_action/send_goalRequest" in planner
    )


@pytest.mark.ros
def test_rcl_finds_each_enclave_of_the_keystore_layout(tmp_path, subprocess_env):
    """rcl resolves ``<keystore>/enclaves/<enclave>`` for the names the fleet gives; the DDS then
    refuses: the PyPI Fast DDS has no security plugins (a ROS 2 distribution's Fast DDS has)."""
    keystore = tmp_path / "keys"
    node = next(n for n in fleet_nodes(load_fleet(REPO / "config" / "fleet.yaml")) if n.role == "robot")
    name = enclave("robot", "/", node.params["agent_id"])
    files = (
        "identity_ca.cert.pem",
        "cert.pem",
        "key.pem",
        "permissions_ca.cert.pem",
        "governance.p7s",
        "permissions.p7s",
    )
    where = keystore / "enclaves" / name.strip("/")
    where.mkdir(parents=True)
    for f in files:
        (where / f).write_text("placeholder\n")
    env = dict(subprocess_env, ROS_SECURITY_KEYSTORE=str(keystore), ROS_SECURITY_ENABLE="true")
    env["ROS_SECURITY_STRATEGY"] = "Enforce"
    probe = "import rclpy, sys; rclpy.init(args=sys.argv); rclpy.create_node('probe')"

    def start(enc: str) -> str:
        out = subprocess.run(
            [sys.executable, "-c", probe, "--ros-args", "--enclave", enc],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
        )
        assert out.returncode != 0
        return out.stderr

    assert "does not exist" in start("/timely_llm_ros/robots/nobody")  # not in the keystore
    err = start(name)
    assert "does not exist" not in err  # rcl found the enclave: what is left is the DDS
    assert "security" in err.lower()


@pytest.mark.ros
def test_a_node_with_security_on_and_a_dds_without_it_says_so_in_one_line(tmp_path, subprocess_env):
    """The wheels' Fast DDS has no DDS-Security: rmw refuses the node; the node must say why and what
    to do (one line, exit 2), not print a traceback."""
    lib = Path(sys.prefix) / "lib" / "libfastdds.so.3.2"
    if not lib.exists() or has_security(lib):
        pytest.skip(f"{lib} is not the wheels' Fast DDS without security")
    keys = tmp_path / "keys"
    where = keys / "enclaves" / "timely_llm_ros" / "robots" / "drone_1"
    where.mkdir(parents=True)
    for f in ("identity_ca.cert.pem", "cert.pem", "key.pem", "permissions_ca.cert.pem", "governance.p7s"):
        (where / f).write_text("placeholder\n")
    (where / "permissions.p7s").write_text("placeholder\n")
    env = dict(subprocess_env, ROS_SECURITY_KEYSTORE=str(keys), ROS_SECURITY_ENABLE="true")
    env["ROS_SECURITY_STRATEGY"] = "Enforce"
    env.pop(ENV, None)
    cmd = [sys.executable, "-m", "timely_llm_ros.nodes.drone", "--ros-args", "--enclave"]
    cmd += ["/timely_llm_ros/robots/drone_1", "-r", "__ns:=/drone_1", "-p", "agent_id:=drone_1"]
    out = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert out.returncode == 2, out.stderr
    assert (
        "drone: error: ROS_SECURITY_ENABLE=true, but the Fast DDS this process loaded is built without"
        in out.stderr
    )
    assert "tools/build_secure_fastdds.py" in out.stderr and "Traceback" not in out.stderr


def test_secure_fastdds_prefix_is_checked_before_it_is_preloaded(tmp_path):
    assert preload_env({"A": "1"}) == {"A": "1"}  # not asked for: nothing changes
    with pytest.raises(ValueError, match="does not exist"):
        preload_env({ENV: str(tmp_path)})
    lib = tmp_path / "lib" / "libfastdds.so.3.2"
    lib.parent.mkdir()
    lib.write_bytes(b"\0" * (1 << 20) + b"no security here")
    with pytest.raises(ValueError, match="built without DDS-Security"):
        preload_env({ENV: str(tmp_path)})
    lib.write_bytes(b"\0" * ((1 << 20) - 5) + b"builtin.PKI-DH\0")  # the marker across a read boundary
    env = preload_env({ENV: str(tmp_path), "LD_PRELOAD": "/x.so"})
    assert env["LD_PRELOAD"] == f"{lib}:/x.so"


def test_dds_security_through_a_profile_keeps_the_loopback_profile_and_names_the_enclave_files(tmp_path):
    import xml.etree.ElementTree as ET

    from timely_llm_ros.ros.secure_dds import NS, PLUGINS, SECURITY_FILES, enclave_arg, security_profile

    assert enclave_arg(["x", "--ros-args", "-r", "a:=b", "--enclave", "/e/f"], {}) == "/e/f"
    assert enclave_arg(["x", "--ros-args", "-e", "/g"], {}) == "/g"
    assert enclave_arg(["x", "--enclave", "/not_ros"], {}) == "/"
    assert enclave_arg(["x"], {"ROS_SECURITY_ENCLAVE_OVERRIDE": "/o"}) == "/o"
    where = tmp_path / "enclaves" / "timely_llm_ros" / "planner"
    root = ET.fromstring(security_profile(str(REPO / "config" / "fastdds_localhost.xml"), where))
    q = f"{{{NS}}}"
    (part,) = [p for p in root.iter(f"{q}participant") if p.get("is_default_profile") == "true"]
    assert part.find(f"{q}rtps/{q}useBuiltinTransports").text == "false"  # loopback kept
    props = {p.findtext(f"{q}name"): p.findtext(f"{q}value") for p in part.iter(f"{q}property")}
    assert {k: props[k] for k in PLUGINS} == PLUGINS
    assert props["dds.sec.auth.builtin.PKI-DH.private_key"] == f"file://{where / 'key.pem'}"
    assert set(SECURITY_FILES) <= set(props)
    assert ET.fromstring(security_profile("", where)).find(f"{q}profiles/{q}participant") is not None


def test_security_through_a_profile_only_with_a_secure_library_loaded(tmp_path):
    from timely_llm_ros.ros.secure_dds import apply_security

    env = {"ROS_SECURITY_ENABLE": "false"}
    assert apply_security(["x"], env) is None and env == {"ROS_SECURITY_ENABLE": "false"}
    env = {"ROS_SECURITY_ENABLE": "true", "ROS_SECURITY_KEYSTORE": str(tmp_path)}
    assert apply_security(["x"], env) is None  # this process runs no Fast DDS with security
    assert env["ROS_SECURITY_ENABLE"] == "true"  # left to rmw (which refuses: explain())
