"""tools/constraints.txt pins the whole resolved set of the set-up's requirements.

bootstrap.py installs tools/requirements*.txt with ``-c constraints.txt`` so that a fresh machine
gets exactly the versions that were tested. A dependency missing from constraints.txt (added to a
requirements file without ``make freeze``, or pulled in by a new pinned package) is resolved to
whatever the registry has that day. This walks the installed dependency tree of the set-up's
requirement files (what the venv running the tests holds) and names every package left unpinned.
"""

import re
from importlib import metadata
from pathlib import Path

import pytest

packaging_requirements = pytest.importorskip("packaging.requirements")
packaging_utils = pytest.importorskip("packaging.utils")

TOOLS = Path(__file__).resolve().parents[2] / "tools"
# The files bootstrap.py installs into .venv (tools/bootstrap.py REQUIREMENTS + NODEPS); the vLLM and
# cmake files go to other environments or only where the system lacks cmake.
REQUIREMENT_FILES = ("requirements-ros.txt", "requirements.txt", "requirements-dev.txt")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==")


def _pinned() -> set[str]:
    lines = (TOOLS / "constraints.txt").read_text().splitlines()
    return {packaging_utils.canonicalize_name(m.group(1)) for m in map(PIN.match, lines) if m}


def _roots() -> list:
    roots = []
    for name in REQUIREMENT_FILES:
        for line in (TOOLS / name).read_text().splitlines():
            line = line.split("#", 1)[0].strip()
            if line and not line.startswith("-"):
                roots.append(packaging_requirements.Requirement(line))
    return roots


def _closure(roots: list) -> set[str]:
    """Canonical names of the installed distributions the requirements pull in (extras followed)."""
    seen: set[str] = set()
    todo = [(r.name, set(r.extras)) for r in roots]
    while todo:
        name, extras = todo.pop()
        key = packaging_utils.canonicalize_name(name)
        try:
            dist = metadata.distribution(name)
        except metadata.PackageNotFoundError:
            continue  # not in this environment: the set-up's own check reports it
        seen.add(key)
        for text in dist.requires or []:
            req = packaging_requirements.Requirement(text)
            envs = [{"extra": e} for e in extras] or [{"extra": ""}]
            if req.marker is not None and not any(req.marker.evaluate(env) for env in envs):
                continue
            if packaging_utils.canonicalize_name(req.name) not in seen:
                todo.append((req.name, set(req.extras)))
    return seen


def test_every_installed_dependency_of_the_requirements_is_pinned():
    roots = _roots()
    try:
        metadata.distribution(roots[0].name)
    except metadata.PackageNotFoundError:
        pytest.skip("the set-up's packages are not installed in this Python (run from make / .venv)")
    unpinned = sorted(_closure(roots) - _pinned())
    assert not unpinned, (
        f"installed by tools/requirements*.txt but not pinned in tools/constraints.txt: {unpinned}; "
        "run `make freeze`"
    )
