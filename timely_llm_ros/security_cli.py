"""``timely-llm security init``: write a fleet's SROS2 policy and create the keystore and enclaves from
it — with ``ros2 security`` (sros2) where it is installed, else with ``openssl``
(:mod:`timely_llm_ros.security_keystore`); see :mod:`timely_llm_ros.security`."""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
from pathlib import Path

from timely_llm_ros.security import enclave, policy_xml


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="action", required=True)
    init = sub.add_parser(
        "init", help="write the fleet's SROS2 policy; create the keystore + enclaves (sros2 or openssl)"
    )
    init.add_argument("fleet", help="fleet YAML (its robots get one enclave each)")
    init.add_argument(
        "--keystore",
        default="",
        help="keystore directory (default: the fleet file's security.keystore, else ./keystore)",
    )
    init.add_argument("--policy", default="", help="policy file to write (default: <keystore>_policy.xml)")
    init.add_argument("--namespace", default="/", help="fleet namespace (as for timely-llm fleet)")


def _sros2() -> bool:
    """``ros2 security`` is available (ros2cli with sros2, e.g. a sourced ROS 2 distribution)."""
    ros2 = shutil.which("ros2")
    if ros2 is None:
        return False
    try:
        out = subprocess.run([ros2, "security", "--help"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return out.returncode == 0


def run(args: argparse.Namespace) -> int:
    from timely_llm_ros.fleet import FleetError, fleet_nodes, load_fleet

    try:
        cfg = load_fleet(args.fleet)
        nodes = fleet_nodes(cfg, args.namespace)
    except FleetError as exc:
        print(f"timely-llm security: error: {exc}", file=sys.stderr)
        return 2
    given = (cfg.get("security") or {}).get("keystore") if isinstance(cfg.get("security"), dict) else None
    if not args.keystore and isinstance(given, str) and given.strip():
        keystore = (Path(cfg["_dir"]) / Path(given).expanduser()).resolve()
    else:
        keystore = Path(args.keystore or "keystore").expanduser().resolve()
    policy = Path(args.policy or f"{keystore}_policy.xml").expanduser().resolve()
    try:
        policy.parent.mkdir(parents=True, exist_ok=True)
        policy.write_text(policy_xml(nodes, args.namespace), encoding="utf-8")
    except OSError as exc:
        print(f"timely-llm security: error: cannot write {policy}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    enclaves = sorted({enclave(n.role, args.namespace, n.params.get("agent_id", "")) for n in nodes})
    enclaves.append(enclave("client", args.namespace))  # task senders outside the fleet file
    print(f"policy: {policy} ({len(enclaves)} enclaves: {', '.join(enclaves)})")
    steps = [
        ["ros2", "security", "create_keystore", str(keystore)],
        ["ros2", "security", "generate_artifacts", "-k", str(keystore), "-p", str(policy)],
    ]
    sros2 = _sros2()
    if not sros2 and shutil.which("openssl"):  # made here (security_keystore): sros2's layout
        from timely_llm_ros.security_keystore import KeystoreError, create_keystore

        try:
            made = create_keystore(keystore, policy.read_text(encoding="utf-8"))
        except (KeystoreError, OSError) as exc:
            print(
                f"timely-llm security: error: cannot create the keystore {keystore}: {exc}", file=sys.stderr
            )
            print("or run these where ROS 2 with sros2 is installed:", file=sys.stderr)
            for step in steps:
                print("    " + " ".join(step), file=sys.stderr)
            return 1
        print(f"keystore: {keystore} ({len(made)} enclaves, made with openssl; sros2 not installed)")
        print(
            "start the fleet with security on (fleet file: security: {enabled: true, keystore: "
            f"{keystore}}}); the nodes need a Fast DDS built with DDS-Security (README: tools/build_secure_fastdds.py)"
        )
        return 0
    if not sros2:
        print("`ros2 security` (sros2) is not installed here: run these where ROS 2 with sros2 is installed:")
        for step in steps:
            print("    " + " ".join(step))
        print(
            "then start the fleet with security on (fleet file: security: {enabled: true, keystore: "
            f"{keystore}}}); the nodes need a DDS built with DDS-Security (the PyPI ROS wheels' Fast DDS is not)"
        )
        return 0
    for step in steps:
        if step[2] == "create_keystore" and keystore.exists():
            continue
        done = subprocess.run(step, capture_output=True, text=True)
        if done.returncode != 0:
            last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
            print(f"timely-llm security: error: {' '.join(step)} failed: {last[0]}", file=sys.stderr)
            return 1
    print(f"keystore: {keystore} (enclaves and signed permissions from the policy)")
    return 0
