"""Where the package's data files (``config/``) live.

In a source checkout they sit next to the Python package; after an ament/colcon or pip
install they are under ``<prefix>/share/timely_llm_ros/config``. ``TIMELY_LLM_CONFIG`` overrides
both, so users can point the planner at their own skill sets and profiles.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PACKAGE = "timely_llm_ros"


def config_dir() -> Path:
    """Return the directory that holds skill sets, time models, profiles and workloads."""
    override = os.environ.get("TIMELY_LLM_CONFIG")
    if override:
        return Path(override)
    candidates = [Path(__file__).resolve().parents[2] / "config"]
    for prefix in [sys.prefix, *os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)]:
        if prefix:
            candidates.append(Path(prefix) / "share" / PACKAGE / "config")
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        "timely_llm_ros config directory not found; looked in "
        + ", ".join(str(c) for c in candidates)
        + " (set TIMELY_LLM_CONFIG to override)"
    )


def config_path(*parts: str) -> Path:
    """Path of one file under :func:`config_dir`."""
    return config_dir().joinpath(*parts)
