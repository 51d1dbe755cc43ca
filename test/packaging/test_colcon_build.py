"""`colcon build` of this package in a workspace, with the wheel-based venv as the ROS 2 underlay.

This is the path of users with a ROS 2 distro (README, "With a ROS 2 distro"): the same
CMakeLists.txt, built by colcon, must give the install layout that `ros2 run` / `ros2 launch`
expect, and `source install/setup.bash` in a fresh shell must chain the underlay by itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.ros, pytest.mark.build, pytest.mark.slow]

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE_FILES = [
    "package.xml",
    "CMakeLists.txt",
    "setup.py",
    "setup.cfg",
    "README.md",
    "msg",
    "srv",
    "action",
    "timely_llm_ros",
    "config",
    "launch",
    "resource",
    "plugin.xml",
]


def _copy_package(dest: Path) -> None:
    dest.mkdir(parents=True)
    for name in PACKAGE_FILES:
        src = REPO_ROOT / name
        if src.is_dir():
            shutil.copytree(src, dest / name, ignore=shutil.ignore_patterns("__pycache__"))
        elif src.exists():
            shutil.copy2(src, dest / name)


def test_colcon_builds_the_package_on_the_venv_underlay(tmp_path, subprocess_env):
    venv = Path(sys.prefix)
    setup = venv / "local_setup.bash"
    if shutil.which("colcon", path=str(venv / "bin")) is None or not setup.exists():
        pytest.fail(f"colcon or {setup} missing in {venv}: run make (tools/bootstrap.py) first")
    ws = tmp_path / "ws"
    _copy_package(ws / "src" / "timely_llm_ros")
    env = {
        k: v
        for k, v in subprocess_env.items()
        if k not in ("PYTHONPATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH", "VIRTUAL_ENV")
    }
    env["COLCON_HOME"] = str(tmp_path / "colcon_home")
    command = f'source "{setup}" && colcon build --base-paths src --event-handlers console_cohesion+'
    build = subprocess.run(
        ["bash", "-c", command], cwd=ws, env=env, capture_output=True, text=True, timeout=900
    )
    assert build.returncode == 0, f"colcon build failed:\n{build.stdout[-6000:]}\n{build.stderr[-3000:]}"

    prefix = ws / "install" / "timely_llm_ros"
    site = prefix / "lib" / f"python{sys.version_info[0]}.{sys.version_info[1]}" / "site-packages"
    for path in [
        prefix / "share" / "ament_index" / "resource_index" / "packages" / "timely_llm_ros",
        prefix / "share" / "timely_llm_ros" / "package.xml",
        prefix / "share" / "timely_llm_ros" / "msg" / "Segment.msg",
        prefix / "share" / "timely_llm_ros" / "config" / "fastdds_localhost.xml",
        prefix / "lib" / "timely_llm_ros" / "timely-llm",
        site / "timely_llm_ros" / "msg" / "_segment.py",
        site / "timely_llm_ros" / "srv" / "_estimate_exec_time.py",
        site / "timely_llm_ros" / "core" / "tuf.py",
        site / "timely_llm_ros" / "cli.py",
        site / "timely_llm_ros" / "data" / "timelyllm" / "data_sample_1.json",  # public traces
        site / "timely_llm_ros" / "data" / "timelyllm" / "DATA_LICENSE",
        site / "timely_llm_ros" / "data" / "timelyllm" / "README.md",
    ]:
        assert path.exists(), f"missing from the colcon install: {path.relative_to(ws)}"

    # A fresh shell: only install/setup.bash, which must source the venv underlay by itself.
    probe = (
        "import timely_llm_ros.msg as m, timely_llm_ros.core.tuf as t;"
        "from timely_llm_ros.msg import Segment; Segment(text='ok');"
        "print(m.__file__); print(t.__file__)"
    )
    fresh = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"}
    run = subprocess.run(
        ["bash", "-c", f'source "{ws}/install/setup.bash" && python -c "{probe}" && timely-llm --version'],
        cwd=tmp_path,
        env=fresh,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    msg_file, core_file, version = run.stdout.splitlines()[-3:]
    assert Path(msg_file).is_relative_to(prefix) and Path(core_file).is_relative_to(prefix)
    assert version.startswith("timely-llm ")
    assert os.access(prefix / "lib" / "timely_llm_ros" / "timely-llm", os.X_OK)
