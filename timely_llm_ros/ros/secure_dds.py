"""Which Fast DDS a node loads, and whether it has DDS-Security (no ROS import).

The ROS 2 wheels on PyPI carry a Fast DDS built without DDS-Security. ``tools/build_secure_fastdds.py``
builds the same Fast DDS version with it (and with the wheels' public ABI, so the wheels'
``rmw_fastrtps_cpp`` runs on it) into a prefix; ``TIMELY_SECURE_FASTDDS=<prefix>`` then makes
``timely-llm fleet`` (and anything started through :func:`preload_env`) load that library first via
``LD_PRELOAD`` — ``LD_LIBRARY_PATH`` cannot do it reliably, because the wheels' start-up hook
re-executes Python with the venv's library folders in an arbitrary order.

A node started with ``ROS_SECURITY_ENABLE=true`` on a Fast DDS without security fails in rmw
("This Fast DDS version doesn't have the security libraries"); :func:`explain` turns that into one
line that says what to do instead of a traceback.
"""

from __future__ import annotations

import os
from pathlib import Path

ENV = "TIMELY_SECURE_FASTDDS"  # prefix of a Fast DDS built with tools/build_secure_fastdds.py
SONAME = "libfastdds.so.3.2"  # the soname the wheels' rmw_fastrtps_cpp links against
MARKER = b"builtin.PKI-DH"  # the authentication plugin's name: only in a library built with security
RMW_MISSING = "doesn't have the security libraries"


def secure_library(prefix: str | os.PathLike[str]) -> Path:
    """The Fast DDS library under a build prefix (``<prefix>/lib/libfastdds.so.3.2``)."""
    return Path(prefix).expanduser() / "lib" / SONAME


def has_security(library: str | os.PathLike[str]) -> bool:
    """Whether a Fast DDS library file was built with DDS-Security (it names the PKI-DH plugin)."""
    chunk = 1 << 20
    tail = b""
    with open(library, "rb") as f:
        while block := f.read(chunk):
            if MARKER in tail + block:
                return True
            tail = block[-len(MARKER) :]
    return False


def preload_env(env: dict[str, str]) -> dict[str, str]:
    """``env`` plus ``LD_PRELOAD`` of the secure Fast DDS named by ``TIMELY_SECURE_FASTDDS`` (if set).

    Raises ``ValueError`` with a clear reason when the variable names no secure library."""
    prefix = env.get(ENV, "")
    if not prefix:
        return env
    lib = secure_library(prefix)
    if not lib.is_file():
        raise ValueError(
            f"{ENV}={prefix}: {lib} does not exist (build it: python tools/build_secure_fastdds.py)"
        )
    if not has_security(lib):
        raise ValueError(f"{ENV}={prefix}: {lib} is a Fast DDS built without DDS-Security")
    out = dict(env)
    preload = [p for p in env.get("LD_PRELOAD", "").split(":") if p and p != str(lib)]
    out["LD_PRELOAD"] = ":".join([str(lib), *preload])
    return out


def explain(exc: BaseException, env: dict[str, str] | os._Environ[str] = os.environ) -> str | None:
    """One clear line for a node that could not start because security is on and the DDS lacks it."""
    if RMW_MISSING not in str(exc):
        return None
    where = env.get(ENV) or "not set"
    return (
        "ROS_SECURITY_ENABLE=true, but the Fast DDS this process loaded is built without DDS-Security "
        f"(the PyPI ROS wheels' is; {ENV}: {where}). Build one with `python tools/build_secure_fastdds.py "
        f"--prefix DIR` and start the fleet with {ENV}=DIR (README, Reliability and security), or turn "
        "security off."
    )


# ----------------------------------------------------------------------- security through a profile
SECURITY_FILES = {  # Fast DDS property -> enclave file (the properties rmw_fastrtps sets itself)
    "dds.sec.auth.builtin.PKI-DH.identity_ca": "identity_ca.cert.pem",
    "dds.sec.auth.builtin.PKI-DH.identity_certificate": "cert.pem",
    "dds.sec.auth.builtin.PKI-DH.private_key": "key.pem",
    "dds.sec.access.builtin.Access-Permissions.permissions_ca": "permissions_ca.cert.pem",
    "dds.sec.access.builtin.Access-Permissions.governance": "governance.p7s",
    "dds.sec.access.builtin.Access-Permissions.permissions": "permissions.p7s",
}
PLUGINS = {
    "dds.sec.auth.plugin": "builtin.PKI-DH",
    "dds.sec.access.plugin": "builtin.Access-Permissions",
    "dds.sec.crypto.plugin": "builtin.AES-GCM-GMAC",
}
NS = "http://www.eprosima.com"


def loaded_fastdds() -> Path | None:
    """The Fast DDS library mapped into this process (by ``LD_PRELOAD`` from the start), if any."""
    try:
        maps = Path("/proc/self/maps").read_text()
    except OSError:
        return None
    for line in maps.splitlines():
        path = line.split()[-1] if line.split() else ""
        if "/libfastdds.so" in path:
            return Path(path)
    return None


def enclave_arg(argv: list[str], env: dict[str, str] | os._Environ[str] = os.environ) -> str:
    """The enclave rcl would use: ``ROS_SECURITY_ENCLAVE_OVERRIDE``, else ``--enclave``/``-e`` in the
    ``--ros-args`` of ``argv``, else ``/``."""
    if env.get("ROS_SECURITY_ENCLAVE_OVERRIDE"):
        return env["ROS_SECURITY_ENCLAVE_OVERRIDE"]
    ros = False
    for i, arg in enumerate(argv):
        if arg == "--ros-args":
            ros = True
        elif arg == "--":
            ros = False
        elif ros and arg in ("--enclave", "-e") and i + 1 < len(argv):
            return argv[i + 1]
        elif ros and arg.startswith("--enclave="):
            return arg.split("=", 1)[1]
    return "/"


def security_profile(base: str, enclave_dir: Path) -> str:
    """A Fast DDS XML profile: ``base`` (the loopback profile, say; may be empty) with DDS-Security
    properties for ``enclave_dir`` added to its default participant profile."""
    import xml.etree.ElementTree as ET

    ET.register_namespace("", NS)
    q = f"{{{NS}}}"
    if base:
        root = ET.parse(base).getroot()
    else:
        root = ET.Element(f"{q}dds")
    profiles = root.find(f"{q}profiles")
    if profiles is None:
        profiles = ET.SubElement(root, f"{q}profiles")
    part = next(
        (p for p in profiles.findall(f"{q}participant") if p.get("is_default_profile") == "true"), None
    )
    if part is None:
        part = ET.SubElement(profiles, f"{q}participant", profile_name="timely_llm_ros_secure")
        part.set("is_default_profile", "true")
    rtps = part.find(f"{q}rtps")
    if rtps is None:
        rtps = ET.SubElement(part, f"{q}rtps")
    props = ET.SubElement(ET.SubElement(rtps, f"{q}propertiesPolicy"), f"{q}properties")
    values = dict(PLUGINS)
    values.update({k: f"file://{enclave_dir / f}" for k, f in SECURITY_FILES.items()})
    for name, value in values.items():
        prop = ET.SubElement(props, f"{q}property")
        ET.SubElement(prop, f"{q}name").text = name
        ET.SubElement(prop, f"{q}value").text = value
    return ET.tostring(root, encoding="unicode")


def apply_security(argv: list[str], env: os._Environ[str] = os.environ) -> str | None:
    """Security on (``ROS_SECURITY_ENABLE=true``) and this process runs a Fast DDS built with it
    (``TIMELY_SECURE_FASTDDS`` preloaded): configure DDS-Security through a Fast DDS profile.

    Why: the wheels' ``rmw_fastrtps_cpp`` was compiled without security and refuses
    ``ROS_SECURITY_ENABLE`` whatever library it runs on; the participant properties it would set
    (PKI-DH authentication, Access-Permissions, AES-GCM-GMAC) are the same when they come from the
    default participant profile. So this writes that profile (the enclave's files from
    ``ROS_SECURITY_KEYSTORE``/``enclaves/<enclave>``, on top of ``FASTDDS_DEFAULT_PROFILES_FILE``),
    points Fast DDS to it and turns rcl's own security lookup off. Must run before ``rclpy.init``.
    Returns a line to log, or None when nothing was done. Raises ``ValueError`` (clear reason) when
    the enclave is incomplete — Enforce and Permissive alike: a secure participant without its
    files could not join the fleet anyway."""
    if env.get("ROS_SECURITY_ENABLE", "").lower() != "true":
        return None
    lib = loaded_fastdds()
    if lib is None or not has_security(lib):
        return None  # rmw refuses; explain() says why
    keystore = env.get("ROS_SECURITY_KEYSTORE", "")
    name = enclave_arg(argv, env)
    where = Path(keystore) / "enclaves" / name.strip("/")
    missing = [f for f in SECURITY_FILES.values() if not (where / f).is_file()]
    if not keystore or missing:
        raise ValueError(
            f"security enclave {name!r}: {where} lacks {', '.join(missing) or 'a keystore'} "
            "(timely-llm security init makes them)"
        )
    import tempfile

    fd, path = tempfile.mkstemp(prefix="timely_dds_security_", suffix=".xml")
    with os.fdopen(fd, "w", encoding="utf-8") as f:
        f.write(security_profile(env.get("FASTDDS_DEFAULT_PROFILES_FILE", ""), where))
    env["FASTDDS_DEFAULT_PROFILES_FILE"] = path
    env["ROS_SECURITY_ENABLE"] = "false"  # rcl/rmw: the profile carries the security settings
    return f"DDS-Security on (enclave {name}, {lib.name}): {path}"
