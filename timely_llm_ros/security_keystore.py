"""A DDS-Security keystore for a fleet's SROS2 policy, made with the ``openssl`` command (no sros2).

Why: ``ros2 security`` (sros2) is not installable from PyPI, so a machine with only the ROS wheels
could write the policy (:mod:`timely_llm_ros.security`) but not the keystore. This module makes the
same keystore layout sros2 does (the one rcl and ``rmw_security_common`` look up):

* ``public/ca.cert.pem`` (+ ``identity_ca.cert.pem``, ``permissions_ca.cert.pem``): one self-signed
  ECDSA P-256 CA acting as identity and permissions CA; its key in ``private/``;
* ``enclaves/governance.xml`` and its S/MIME signature ``governance.p7s`` (DDS-Security 1.1 §9.4.1.2:
  no unauthenticated participants, join access control, discovery/liveliness/data encrypted,
  read/write access control on every topic) — the rules sros2 writes by default;
* per enclave ``enclaves/<path>/``: ``key.pem``, ``cert.pem`` (subject ``CN=<enclave path>``, signed
  by the CA), copies of the CA certificates and ``governance.p7s``, ``permissions.xml`` and its
  signature ``permissions.p7s``.

The permissions are the DDS form of the policy (deny by default), with ROS names mangled as the RMW
does: topic ``/x`` is DDS topic ``rt/x``; a service ``/s`` is ``rq/sRequest`` + ``rr/sReply``; an
action ``/a`` is the services ``/a/_action/{send_goal,cancel_goal,get_result}`` and topics
``/a/_action/{feedback,status}``; ``~/x`` is relative to the node. Every participant may also read and
write ``ros_discovery_info`` (the RMW's graph topic).
"""

from __future__ import annotations

import datetime as dt
import shutil
import subprocess
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from xml.sax.saxutils import escape

CA_FILES = ("identity_ca.cert.pem", "permissions_ca.cert.pem")
DOMAINS = "<domains><id_range><min>0</min><max>232</max></id_range></domains>"
VALID_DAYS = 3650
GOVERNANCE = f"""<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_governance.xsd">
  <domain_access_rules>
    <domain_rule>
      {DOMAINS}
      <allow_unauthenticated_participants>false</allow_unauthenticated_participants>
      <enable_join_access_control>true</enable_join_access_control>
      <discovery_protection_kind>ENCRYPT</discovery_protection_kind>
      <liveliness_protection_kind>ENCRYPT</liveliness_protection_kind>
      <rtps_protection_kind>SIGN</rtps_protection_kind>
      <topic_access_rules>
        <topic_rule>
          <topic_expression>*</topic_expression>
          <enable_discovery_protection>true</enable_discovery_protection>
          <enable_liveliness_protection>true</enable_liveliness_protection>
          <enable_read_access_control>true</enable_read_access_control>
          <enable_write_access_control>true</enable_write_access_control>
          <metadata_protection_kind>ENCRYPT</metadata_protection_kind>
          <data_protection_kind>ENCRYPT</data_protection_kind>
        </topic_rule>
      </topic_access_rules>
    </domain_rule>
  </domain_access_rules>
</dds>
"""


class KeystoreError(RuntimeError):
    """The keystore cannot be made (no openssl, a command failed): the message says which and why."""


def _openssl(*args: str, cwd: Path | None = None) -> None:
    exe = shutil.which("openssl")
    if exe is None:
        raise KeystoreError("the openssl command is not installed (Debian/Ubuntu: apt install openssl)")
    done = subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True)
    if done.returncode != 0:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        raise KeystoreError(f"openssl {args[0]} failed: {last[0]}")


def _expand(name: str, ns: str, node: str) -> str:
    """``~/x`` → ``/<ns>/<node>/x``; other names are fleet-absolute already."""
    if name.startswith("~"):
        return f"{ns.rstrip('/')}/{node}/{name[1:].lstrip('/')}"
    return name


def dds_topics(rules: dict[tuple[str, str], set[str]], ns: str, node: str) -> tuple[set[str], set[str]]:
    """The DDS topics (publish, subscribe) that one policy profile's rules allow."""
    pub: set[str] = set()
    sub: set[str] = set()

    def service(name: str, server: bool) -> None:
        req, rep = f"rq{name}Request", f"rr{name}Reply"
        (sub if server else pub).add(req)
        (pub if server else sub).add(rep)

    for (kind, perm), names in rules.items():
        for raw in names:
            name = _expand(raw, ns, node)
            if kind == "topics":
                (pub if perm == "publish" else sub).add(f"rt{name}")
            elif kind == "services":
                service(name, server=perm == "reply")
            elif kind == "actions":
                server = perm == "execute"
                for srv in ("send_goal", "cancel_goal", "get_result"):
                    service(f"{name}/_action/{srv}", server)
                for top in ("feedback", "status"):
                    (pub if server else sub).add(f"rt{name}/_action/{top}")
    pub.add("ros_discovery_info")
    sub.add("ros_discovery_info")
    return pub, sub


def parse_policy(policy: str) -> dict[str, tuple[str, str, dict[tuple[str, str], set[str]]]]:
    """SROS2 policy XML → enclave path → (ns, node, {(kind, permission): names}) (one profile each,
    as :func:`timely_llm_ros.security.policy_xml` writes)."""
    out = {}
    for enc in ET.fromstring(policy).iter("enclave"):
        rules: dict[tuple[str, str], set[str]] = {}
        ns = node = ""
        for prof in enc.iter("profile"):
            ns, node = prof.get("ns", "/"), prof.get("node", "")
            for group in prof:
                for perm, value in group.attrib.items():
                    if value == "ALLOW":
                        rules.setdefault((group.tag, perm), set()).update(e.text or "" for e in group)
        out[enc.get("path", "")] = (ns, node, rules)
    return out


def permissions_xml(path: str, pub: set[str], sub: set[str], now: dt.datetime) -> str:
    """The DDS permissions document of one enclave (DDS-Security 1.1 §9.4.1.3), deny by default."""

    def topics(names: set[str]) -> str:
        return "".join(f"<topic>{escape(n)}</topic>" for n in sorted(names))

    end = now + dt.timedelta(days=VALID_DAYS)
    fmt = "%Y-%m-%dT%H:%M:%S"
    return f"""<?xml version="1.0" encoding="UTF-8"?>
<dds xmlns:xsi="http://www.w3.org/2001/XMLSchema-instance"
     xsi:noNamespaceSchemaLocation="http://www.omg.org/spec/DDS-SECURITY/20170901/omg_shared_ca_permissions.xsd">
  <permissions>
    <grant name="{escape(path)}">
      <subject_name>CN={escape(path)}</subject_name>
      <validity><not_before>{now.strftime(fmt)}</not_before><not_after>{end.strftime(fmt)}</not_after></validity>
      <allow_rule>
        {DOMAINS}
        <publish><topics>{topics(pub)}</topics></publish>
        <subscribe><topics>{topics(sub)}</topics></subscribe>
      </allow_rule>
      <default>DENY</default>
    </grant>
  </permissions>
</dds>
"""


def _sign(src: Path, dst: Path, ca: Path, key: Path) -> None:
    """S/MIME (detached, text) signature by the CA — the form Fast DDS verifies (and sros2 writes)."""
    _openssl(
        "smime", "-sign", "-text", "-in", str(src), "-out", str(dst), "-signer", str(ca), "-inkey", str(key)
    )


def _key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))


def _subject(cn: str) -> str:
    return "/CN=" + cn.replace("/", "\\/")


def create_keystore(keystore: Path, policy: str, ca_name: str = "timely_llm_ros fleet CA") -> list[str]:
    """Make (or complete) ``keystore`` for every enclave of ``policy``; returns the enclave paths.

    An existing CA is kept (enclaves added later are signed by the same CA); each enclave's key,
    certificate and permissions are written anew."""
    pub_dir, priv_dir, enc_dir = keystore / "public", keystore / "private", keystore / "enclaves"
    for d in (pub_dir, priv_dir, enc_dir):
        d.mkdir(parents=True, exist_ok=True)
    ca, ca_key = pub_dir / "ca.cert.pem", priv_dir / "ca.key.pem"
    if not (ca.exists() and ca_key.exists()):
        _key(ca_key)
        ca_key.chmod(0o600)
        days = str(VALID_DAYS)
        _openssl("req", "-new", "-x509", "-sha256", "-key", str(ca_key), "-out", str(ca), "-days", days,
                 "-subj", _subject(ca_name))  # fmt: skip
    for name in CA_FILES:
        shutil.copyfile(ca, pub_dir / name)
        shutil.copyfile(ca_key, priv_dir / name.replace(".cert.", ".key."))
    (enc_dir / "governance.xml").write_text(GOVERNANCE, encoding="utf-8")
    _sign(enc_dir / "governance.xml", enc_dir / "governance.p7s", ca, ca_key)
    now = dt.datetime.now(dt.UTC).replace(microsecond=0) - dt.timedelta(days=1)
    made = []
    for path, (ns, node, rules) in parse_policy(policy).items():
        d = enc_dir / path.strip("/")
        d.mkdir(parents=True, exist_ok=True)
        _key(d / "key.pem")
        (d / "key.pem").chmod(0o600)
        with tempfile.TemporaryDirectory() as tmp:
            csr = Path(tmp) / "req.csr"
            _openssl(
                "req",
                "-new",
                "-sha256",
                "-key",
                str(d / "key.pem"),
                "-out",
                str(csr),
                "-subj",
                _subject(path),
            )
            _openssl("x509", "-req", "-sha256", "-in", str(csr), "-CA", str(ca), "-CAkey", str(ca_key),
                     "-CAcreateserial", "-CAserial", str(Path(tmp) / "ca.srl"), "-days", str(VALID_DAYS),
                     "-out", str(d / "cert.pem"))  # fmt: skip
        for name in CA_FILES:
            shutil.copyfile(ca, d / name)
        shutil.copyfile(enc_dir / "governance.p7s", d / "governance.p7s")
        pub, sub = dds_topics(rules, ns, node)
        (d / "permissions.xml").write_text(permissions_xml(path, pub, sub, now), encoding="utf-8")
        _sign(d / "permissions.xml", d / "permissions.p7s", ca, ca_key)
        made.append(path)
    return made
