"""Where the package's data files (skill sets, time models, profiles, workloads) are found.

The shipped files sit in ``config/`` next to the Python package in a source checkout, or under
``<prefix>/share/timely_llm_ros/config`` after an ament/colcon or pip install.

Users add to them without copying anything: the **config search path** is a list of directories
with the same layout (``skills/``, ``exec_time/``, ``profiles/``, ``workloads/``, ``tasks/``), searched
in order, the shipped directory last. A file in an earlier directory overrides the file with the same
name in a later one; every other file is still found. The path is made of, in order:

1. ``TIMELY_LLM_CONFIG`` — directories separated by ``os.pathsep`` (``:``), e.g.
   ``TIMELY_LLM_CONFIG=~/my_robot/config``; the fleet file's ``config_path`` sets it for every node of
   a fleet, so planner and robots always agree on the skill sets;
2. directories added in-process with :func:`add_config_dirs` (the CLI's ``--config-path``);
3. directories contributed by installed packages through the entry-point group
   ``timely_llm_ros.config`` (value ``module:attr``; ``attr`` is a path or a function returning one),
   so a robot plugin package ships its skill set and time model with its code;
4. the shipped ``config/``.

A directory on the path that does not exist is an error (a typo must not silently fall back to the
shipped files). This module is pure Python (no ROS import).
"""

from __future__ import annotations

import importlib
import os
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache
from importlib import metadata
from pathlib import Path

PACKAGE = "timely_llm_ros"
ENV_VAR = "TIMELY_LLM_CONFIG"
CONFIG_GROUP = "timely_llm_ros.config"
_added: list[Path] = []


class ConfigPathError(FileNotFoundError):
    """A config search path entry that cannot be used (the message names where it came from)."""


def shipped_config_dir() -> Path:
    """The package's own ``config`` directory (source checkout or install prefix)."""
    here = Path(__file__).resolve().parents[2]  # the checkout, or site-packages / a --target dir
    candidates = [here / "config", here / "share" / PACKAGE / "config"]  # the latter: pip --target
    for prefix in [sys.prefix, *os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep)]:
        if prefix:
            candidates.append(Path(prefix) / "share" / PACKAGE / "config")
    for candidate in candidates:
        if (candidate / "skills").is_dir():
            return candidate
    raise ConfigPathError(
        "timely_llm_ros config directory not found; looked in " + ", ".join(str(c) for c in candidates)
    )


def add_config_dirs(dirs: list[str | Path]) -> None:
    """Search ``dirs`` (in order) after ``TIMELY_LLM_CONFIG`` and before plugins, for this process."""
    for d in dirs:
        p = _checked(Path(d).expanduser(), "--config-path")
        if p not in _added:
            _added.append(p)


@contextmanager
def extra_config_dirs(dirs: list[str | Path]) -> Iterator[None]:
    """:func:`add_config_dirs` for the duration of a ``with`` block (a CLI command, a test)."""
    before = list(_added)
    try:
        add_config_dirs(dirs)
        yield
    finally:
        _added[:] = before


def _checked(p: Path, origin: str) -> Path:
    if not p.is_dir():
        raise ConfigPathError(
            f"config directory {str(p)!r} (from {origin}) does not exist or is not a directory"
        )
    return p.resolve()


@cache
def plugin_config_dirs() -> tuple[tuple[str, Path], ...]:
    """(distribution/entry name, directory) of every loadable ``timely_llm_ros.config`` entry point.

    A broken one (its module does not import, it names no directory) is left out with a warning
    that says which and why (:func:`plugin_config_problems`): one broken plugin package must not
    take every skill set, time model and workload of the others down with it."""
    out = []
    problems = []
    for ep in sorted(metadata.entry_points(group=CONFIG_GROUP), key=lambda e: e.name):
        origin = f"entry point {ep.name!r} = {ep.value!r} of group {CONFIG_GROUP}"
        try:
            module, _, attr = ep.value.partition(":")
            obj = importlib.import_module(module.strip())
            for part in attr.strip().split(".") if attr.strip() else []:
                obj = getattr(obj, part)
            value = obj() if callable(obj) else obj
            if not isinstance(value, (str, os.PathLike)):
                raise ConfigPathError(f"{origin}: gives {value!r}, expected a directory path")
            out.append((ep.name, _checked(Path(value), origin)))
        except ConfigPathError as exc:
            problems.append(str(exc))
        except Exception as exc:  # noqa: BLE001 - any error of a plugin's module: say which and why
            problems.append(f"{origin}: cannot be loaded: {type(exc).__name__}: {exc}")
    _plugin_problems[:] = problems
    for text in problems:
        warnings.warn(f"{text} (its config directory is skipped)", RuntimeWarning, stacklevel=2)
    return tuple(out)


_plugin_problems: list[str] = []


def plugin_config_problems() -> list[str]:
    """Why each broken ``timely_llm_ros.config`` entry point was skipped (empty when none is)."""
    plugin_config_dirs()
    return list(_plugin_problems)


def config_dirs() -> list[Path]:
    """The config search path, most specific first, the shipped directory last (module doc)."""
    dirs: list[Path] = []
    for entry in os.environ.get(ENV_VAR, "").split(os.pathsep):
        if entry.strip():
            dirs.append(_checked(Path(entry.strip()).expanduser(), f"${ENV_VAR}"))
    dirs += _added
    dirs += [d for _, d in plugin_config_dirs()]
    try:
        dirs.append(shipped_config_dir().resolve())
    except ConfigPathError:
        if not dirs:  # nothing to search at all (a broken install)
            raise
    out: list[Path] = []
    for d in dirs:
        if d not in out:
            out.append(d)
    return out


def config_files(kind: str, suffix: str = ".yaml") -> dict[str, Path]:
    """``{name: file}`` of every ``<dir>/<kind>/<name><suffix>`` on the path; earlier dirs win."""
    found: dict[str, Path] = {}
    for d in config_dirs():
        sub = d / kind
        if sub.is_dir():
            for f in sorted(sub.glob(f"*{suffix}")):
                found.setdefault(f.name[: -len(suffix)], f)
    return dict(sorted(found.items()))


def config_path(*parts: str) -> Path:
    """The first ``<dir>/<parts...>`` that exists on the search path (else the shipped one's path)."""
    dirs = config_dirs()
    for d in dirs:
        p = d.joinpath(*parts)
        if p.exists():
            return p
    return dirs[-1].joinpath(*parts)


def config_dir() -> Path:
    """The shipped config directory (kept for callers that need the package's own files only)."""
    return shipped_config_dir()


def describe_search_path() -> str:
    """One line for error messages: where names were looked up."""
    return ", ".join(str(d) for d in config_dirs())
