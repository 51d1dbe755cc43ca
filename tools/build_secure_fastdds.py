"""Build the venv's Fast DDS version with DDS-Security, ABI-compatible with the ROS wheels' rmw.

Why: the ROS 2 wheels on PyPI ship ``libfastdds`` built without DDS-Security, so SROS2 enclaves
cannot work with them (rmw: "This Fast DDS version doesn't have the security libraries"). This
script builds the *same* Fast DDS release with ``-DSECURITY=ON`` into a prefix of your choice; run
the fleet with ``TIMELY_SECURE_FASTDDS=<prefix>`` (``timely-llm fleet`` then preloads it in every
node; README, "Reliability and security").

ABI: ``HAVE_SECURITY`` changes three things in Fast DDS's public headers that the wheels'
``rmw_fastrtps_cpp`` (compiled without it) depends on: ``DomainParticipantQos`` gains a member
(``security_log_thread``; rmw copies the QoS by value), and ``DomainParticipantListener`` gains a
virtual method in the middle of its vtable (rmw derives its listener from it: every later callback
would be called through the wrong slot). The build removes those two (``WHEEL_ABI_EDITS``): the
security log thread keeps its default settings and the DDS-level authentication callback is not
forwarded (the RTPS-level one, which the security plugins use, is unchanged). Every other class rmw
uses keeps its layout (checked with ``g++ -fdump-lang-class`` against the wheels' headers).

Inputs: the Fast DDS release matching ``<venv>/include/fastdds/config.hpp``, and the asio and
tinyxml2 commits it pins as submodules, downloaded from GitHub (``--src`` takes an unpacked source
tree instead); Fast CDR and foonathan_memory come from the venv (headers, CMake configs, libraries).
Needs cmake, ninja (or make), a C++ compiler and the OpenSSL headers (Debian: ``libssl-dev``).
Persistence (SQLite) and the tools are not built.

Usage::

    python tools/build_secure_fastdds.py --prefix ~/.local/fastdds-secure        # download + build
    TIMELY_SECURE_FASTDDS=~/.local/fastdds-secure timely-llm fleet config/fleet.yaml
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# submodule commits pinned by each Fast DDS release (its .gitmodules + tree at the tag)
PINNED = {
    "3.2.2": {
        "asio": "1f534288b4be0be2dd664aab43882a0aa3106a1d",
        "tinyxml2": "8c8293ba8969a46947606a93ff0cb5a083aab47a",
    },
}
URLS = {
    "fastdds": "https://github.com/eProsima/Fast-DDS/archive/refs/tags/v{v}.tar.gz",
    "asio": "https://github.com/chriskohlhoff/asio/archive/{c}.tar.gz",
    "tinyxml2": "https://github.com/leethomason/tinyxml2/archive/{c}.tar.gz",
}
# (file, text, count): "#if HAVE_SECURITY" there becomes "#if 0" (see the module docstring)
WHEEL_ABI_EDITS = [
    ("include/fastdds/dds/domain/qos/DomainParticipantQos.hpp", "#if HAVE_SECURITY", 3),
    ("include/fastdds/dds/domain/DomainParticipantListener.hpp", "#if HAVE_SECURITY", 1),
    (
        "src/cpp/fastdds/domain/DomainParticipantImpl.cpp",
        "#if HAVE_SECURITY\n    if (!(to.security_log_thread()",
        1,
    ),
    ("src/cpp/fastdds/utils/QosConverters.cpp", "#if HAVE_SECURITY\n    qos.security_log_thread()", 1),
    ("src/cpp/fastdds/utils/QosConverters.cpp", "#if HAVE_SECURITY\n    attr.security_log_thread", 1),
]
LISTENER_CALL = "        participant_->listener_->onParticipantAuthentication(participant_->participant_, std::move(info));\n"
MARK = "timely_llm_ros: ROS wheel ABI"
# GCC 12 -Wmaybe-uninitialized false positives (fastcdr::optional in generated type objects), which
# Fast DDS's -Werror turns into errors (paths relative to src/cpp)
WERROR_FALSE_POSITIVES = (
    "fastdds/xtypes/type_representation/TypeObjectUtils.cpp",
    "statistics/types/monitorservice_typesTypeObjectSupport.cxx",
    "statistics/types/typesTypeObjectSupport.cxx",
)


def venv_version(venv: Path) -> str:
    config = venv / "include" / "fastdds" / "config.hpp"
    m = re.search(r'FASTDDS_VERSION_STR "([0-9.]+)"', config.read_text()) if config.exists() else None
    if m is None:
        raise SystemExit(
            f"build_secure_fastdds: no Fast DDS headers in {config.parent} (is {venv} the ROS venv?)"
        )
    return m.group(1)


def fetch(url: str, dest: Path) -> Path:
    """Download and unpack a GitHub tarball into ``dest``; returns the unpacked folder."""
    print(f"download {url}", flush=True)
    with tempfile.NamedTemporaryFile(suffix=".tar.gz") as tmp:
        with urllib.request.urlopen(url, timeout=120) as resp:
            shutil.copyfileobj(resp, tmp)
        tmp.flush()
        with tarfile.open(tmp.name) as tar:
            top = tar.getnames()[0].split("/")[0]
            tar.extractall(dest, filter="data")
    return dest / top


def prepare(src: Path, third: dict[str, Path]) -> None:
    """Third-party headers in place, tests left out, the wheel-ABI edits applied (idempotent)."""
    asio = src / "thirdparty" / "asio"
    if third.get("asio") and not (asio / "asio" / "include").exists():
        shutil.rmtree(asio, ignore_errors=True)
        shutil.copytree(third["asio"], asio)
    tx = src / "thirdparty" / "tinyxml2"
    if third.get("tinyxml2") and not (tx / "tinyxml2.h").exists():
        shutil.rmtree(tx, ignore_errors=True)
        shutil.copytree(third["tinyxml2"], tx)
    tests = src / "test" / "CMakeLists.txt"
    tests.parent.mkdir(exist_ok=True)
    tests.write_text("# tests not built (timely_llm_ros secure developer build)\n")
    edits = []
    for rel, old, count in WHEEL_ABI_EDITS:  # all checked first: never a half-edited tree
        text = (src / rel).read_text()
        if MARK in text and old not in text:
            continue
        if text.count(old) != count:
            raise SystemExit(
                f"build_secure_fastdds: {rel}: expected {count} x {old!r}; another Fast DDS version?"
            )
        edits.append((rel, old))
    for rel, old in edits:
        path = src / rel
        path.write_text(
            path.read_text().replace(old, old.replace("#if HAVE_SECURITY", f"#if 0 /* {MARK} */"))
        )
    impl = src / "src/cpp/fastdds/domain/DomainParticipantImpl.cpp"
    text = impl.read_text()
    if LISTENER_CALL in text:
        impl.write_text(text.replace(LISTENER_CALL, f"        static_cast<void>(info);  // {MARK}\n"))
    cmake = src / "src/cpp/CMakeLists.txt"
    text = cmake.read_text()
    if MARK not in text:  # GCC 12 false positives under the project's -Werror
        files = " ".join(WERROR_FALSE_POSITIVES)
        cmake.write_text(
            text + f"\n# {MARK}\nset_source_files_properties({files}\n"
            '    PROPERTIES COMPILE_OPTIONS "-Wno-error=maybe-uninitialized")\n'
        )


def build(src: Path, build_dir: Path, prefix: Path, venv: Path, jobs: int) -> float:
    gen = ["-G", "Ninja"] if shutil.which("ninja") else []
    lib = venv / "lib"
    cfg = [
        "cmake", *gen, "-S", str(src), "-B", str(build_dir),
        "-DCMAKE_BUILD_TYPE=Release", f"-DCMAKE_INSTALL_PREFIX={prefix}", f"-DCMAKE_INSTALL_RPATH={lib}",
        f"-Dfastcdr_DIR={lib / 'cmake' / 'fastcdr'}", f"-Dfoonathan_memory_DIR={lib / 'foonathan_memory' / 'cmake'}",
        "-DSECURITY=ON", "-DSQLITE3_SUPPORT=OFF", "-DFASTDDS_STATISTICS=ON",
        "-DTHIRDPARTY_Asio=FORCE", "-DTHIRDPARTY_TinyXML2=FORCE", "-DTHIRDPARTY_UPDATE=OFF",
        "-DCOMPILE_TOOLS=OFF", "-DBUILD_TESTING=OFF", "-DCOMPILE_EXAMPLES=OFF", "-DBUILD_DOCUMENTATION=OFF",
    ]  # fmt: skip
    start = time.monotonic()
    subprocess.run(cfg, check=True)
    subprocess.run(["cmake", "--build", str(build_dir), "-j", str(jobs)], check=True)
    subprocess.run(["cmake", "--install", str(build_dir)], check=True)
    return time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prefix", required=True, help="install prefix (outside the repository)")
    ap.add_argument("--venv", default=sys.prefix, help="the ROS venv (default: this Python's)")
    ap.add_argument("--src", default="", help="an unpacked Fast DDS source tree (default: download)")
    ap.add_argument(
        "--asio", default="", help="asio source tree (its asio/ folder's parent; default: download)"
    )
    ap.add_argument("--tinyxml2", default="", help="tinyxml2 source tree (default: download)")
    ap.add_argument("--work", default="", help="download/build folder (default: <prefix>.build)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 2)
    args = ap.parse_args(argv)
    venv, prefix = Path(args.venv).resolve(), Path(args.prefix).expanduser().resolve()
    if ROOT in prefix.parents or prefix == ROOT:
        raise SystemExit("build_secure_fastdds: choose a --prefix outside the repository")
    version = venv_version(venv)
    work = Path(args.work or f"{prefix}.build").resolve()
    work.mkdir(parents=True, exist_ok=True)
    pins = PINNED.get(version)
    if pins is None and not (args.src and args.asio and args.tinyxml2):
        raise SystemExit(
            f"build_secure_fastdds: Fast DDS {version}: no pinned asio/tinyxml2 commits; pass --src/--asio/--tinyxml2"
        )
    src = Path(args.src).resolve() if args.src else fetch(URLS["fastdds"].format(v=version), work)
    third = {}
    for name in ("asio", "tinyxml2"):
        given = getattr(args, name)
        third[name] = Path(given).resolve() if given else fetch(URLS[name].format(c=pins[name]), work)
    prepare(src, third)
    seconds = build(src, work / "build", prefix, venv, args.jobs)
    lib = prefix / "lib" / "libfastdds.so.3.2"
    sys.path.insert(0, str(ROOT))
    from timely_llm_ros.ros.secure_dds import has_security

    if not has_security(lib):
        raise SystemExit(
            f"build_secure_fastdds: {lib} has no DDS-Security plugins: the build did not turn it on"
        )
    print(f"Fast DDS {version} with DDS-Security: {lib} (build {seconds / 60:.1f} min, {args.jobs} jobs)")
    print(
        f"use it: TIMELY_SECURE_FASTDDS={prefix} timely-llm fleet <fleet.yaml>  (fleet file: security: ...)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
