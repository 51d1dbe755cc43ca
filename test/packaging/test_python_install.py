"""A pure-Python `pip install .` works without ROS: the core imports and `timely-llm` is declared."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.build

REPO_ROOT = Path(__file__).resolve().parents[2]
SKIP = shutil.ignore_patterns(
    ".git",
    ".venv",
    "build",
    "install",
    "log",
    ".stamps",
    "__pycache__",
    "*.egg-info",
    ".pytest_cache",
    ".ruff_cache",
    "results",
    "bags",
)


def test_wheel_installs_core_entry_point_and_share_files(tmp_path):
    pytest.importorskip("setuptools")
    pytest.importorskip("wheel")
    src = tmp_path / "src"
    shutil.copytree(REPO_ROOT, src, ignore=SKIP)  # keep setuptools' build/ out of the checkout
    dist = tmp_path / "dist"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "--disable-pip-version-check",
            "-q",
            "-w",
            str(dist),
            str(src),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    (wheel,) = dist.glob("timely_llm_ros-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    data = f"{wheel.name.split('-')[0]}-{wheel.name.split('-')[1]}.data/data/share"
    assert f"{data}/timely_llm_ros/package.xml" in names
    assert f"{data}/ament_index/resource_index/packages/timely_llm_ros" in names
    assert f"{data}/timely_llm_ros/config/fastdds_localhost.xml" in names
    assert not any("/msg/" in n and n.startswith("timely_llm_ros/") for n in names), "no ROS messages here"
    traces = {
        "data_sample_1.json",
        "data_sample_2.json",
        "data_sample_robotarm_fltrnn.json",
        "DATA_LICENSE",
        "README.md",
    }
    assert {f"timely_llm_ros/data/timelyllm/{n}" for n in traces} <= names  # CC BY 4.0 + attribution
    assert f"{data}/timely_llm_ros/config/schema/skill_set.schema.json" in names
    (eps,) = [n for n in names if n.endswith(".dist-info/entry_points.txt")]
    eps_text = zipfile.ZipFile(wheel).read(eps).decode()  # built-in robots are registered like plugins
    assert (
        "[timely_llm_ros.robot_types]" in eps_text
        and "drone = timely_llm_ros.robots.plugins:DRONE" in eps_text
    )

    target = tmp_path / "target"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--no-deps",
            "--disable-pip-version-check",
            "-q",
            "--target",
            str(target),
            str(wheel),
        ],
        check=True,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert (target / "bin" / "timely-llm").exists()
    probe = (
        "import importlib.metadata as md, timely_llm_ros.core.tuf as t, timely_llm_ros.cli as c;"
        "(ep,) = md.entry_points(group='console_scripts', name='timely-llm');"
        "print(t.__file__); print(ep.value); print(t.NORMAL_TUF(2.0))"
    )
    # -S: no site-packages, so nothing can come from the venv or the source tree.
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=tmp_path,
        env={"PYTHONPATH": str(target)},
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.splitlines()
    assert Path(out[0]).is_relative_to(target)
    assert out[1] == "timely_llm_ros.cli:main"
    assert float(out[2]) == -1.0
    # the public traces resolve from the installed package, not from a checkout
    probe = (
        "from timely_llm_ros.workload.fileformat import data_dir, resolve_workload;"
        "print(data_dir()); print(len(resolve_workload('sample1').tasks))"
    )
    env = {
        "PYTHONPATH": f"{target}{os.pathsep}{_site_dir('yaml')}",
        # --target puts data_files under target/share, not sys.prefix/share where config is looked up
        "TIMELY_LLM_CONFIG": str(target / "share" / "timely_llm_ros" / "config"),
    }
    out = subprocess.run(
        [sys.executable, "-S", "-c", probe],
        cwd=tmp_path,
        env=env,
        check=True,
        capture_output=True,
        text=True,
        timeout=120,
    ).stdout.splitlines()
    assert Path(out[0]).is_relative_to(target) and int(out[1]) > 500


def _site_dir(module: str) -> str:
    """The site-packages folder a third-party module is imported from (PyYAML for the probe)."""
    import importlib

    return str(Path(importlib.import_module(module).__file__).resolve().parents[1])
