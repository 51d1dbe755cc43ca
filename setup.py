"""Pure-Python install of timely_llm_ros (``pip install .``): the core, simulator, benchmarks and
the ``timely-llm`` command work without ROS. The ROS message interfaces are NOT built here; they
come from the CMake build (``make`` with the PyPI ROS 2 wheels, or ``colcon build`` with a distro),
which installs the same Python modules next to the generated ``timely_llm_ros.msg``/``.srv``.

The version is read from package.xml so that the ROS and Python metadata cannot disagree.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from setuptools import find_packages, setup

HERE = Path(__file__).resolve().parent
PACKAGE = "timely_llm_ros"
README = HERE / "README.md"


def package_version() -> str:
    match = re.search(r"<version>\s*([^<\s]+)\s*</version>", (HERE / "package.xml").read_text())
    if not match:
        raise RuntimeError("package.xml has no <version>")
    return match.group(1)


def share_files(directory: str) -> list[tuple[str, list[str]]]:
    """data_files entries that install ``directory`` (recursively) under share/timely_llm_ros/."""
    entries = []
    root = HERE / directory
    if not root.is_dir():
        return entries
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = Path(folder).relative_to(HERE)
        if files:
            sources = sorted(f"{rel.as_posix()}/{f}" for f in files)
            entries.append((f"share/{PACKAGE}/{rel.as_posix()}", sources))
    return entries


setup(
    name=PACKAGE,
    version=package_version(),
    description="TimelyLLM for ROS 2: segmented, time-utility-aware LLM planning for robot fleets",
    long_description=README.read_text(encoding="utf-8") if README.exists() else "",
    long_description_content_type="text/markdown",
    license="Apache-2.0",
    python_requires=">=3.10",
    packages=find_packages(include=[PACKAGE, f"{PACKAGE}.*"]),
    # the public TimelyLLM traces (CC BY 4.0, attribution in data/timelyllm/README.md)
    package_data={
        PACKAGE: ["data/timelyllm/*.json", "data/timelyllm/README.md", "data/timelyllm/DATA_LICENSE"]
    },
    install_requires=["PyYAML>=6", "numpy>=1.24", "jsonschema>=4.17"],
    extras_require={
        "plot": ["matplotlib>=3.7"],
        "bags": ["rosbags>=0.11"],
        "viz": ["PyQt5>=5.15", "python_qt_binding>=0.3.4"],
        "test": ["pytest>=7"],
    },
    data_files=[
        ("share/ament_index/resource_index/packages", [f"resource/{PACKAGE}"]),
        (f"share/{PACKAGE}", ["package.xml", "plugin.xml"]),
        *share_files("launch"),
        *share_files("config"),
    ],
    entry_points={
        "console_scripts": ["timely-llm = timely_llm_ros.cli:main"],
        # robot types and backends by name (timely_llm_ros/robots/plugins.py): a plugin package adds
        # its own entries to these groups; the built-ins are declared the same way
        "timely_llm_ros.robot_types": [
            "drone = timely_llm_ros.robots.plugins:DRONE",
            "arm = timely_llm_ros.robots.plugins:ARM",
        ],
        "timely_llm_ros.robot_backends": [
            "sim = timely_llm_ros.robots.plugins:sim_backend",
            "tello = timely_llm_ros.robots.plugins:tello_backend",
            "ros = timely_llm_ros.robots.plugins:ros_backend",
        ],
    },
    zip_safe=False,
)
