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
