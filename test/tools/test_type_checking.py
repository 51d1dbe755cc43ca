"""The type checker is part of the lint (``make lint``, ``make test`` and so CI), strict on the core and
the engine port, and every ``# type: ignore`` left in the package names its error code and says why.

mypy itself runs in ``make lint`` / ``make test`` (seconds with its cache); this test keeps the wiring
and the habit from eroding without running it again.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "timely_llm_ros"
IGNORE = re.compile(r"#\s*type:\s*ignore(?P<code>\[[a-z, -]+\])?(?P<rest>.*)$")

# Modules whose ignores are tolerated without a reason; empty: keep it so (the list only shrinks).
WAIVED: set[str] = set()


def test_make_lint_and_make_test_run_mypy() -> None:
    makefile = (REPO / "Makefile").read_text(encoding="utf-8")
    for target in ("lint", "test"):
        body = re.search(rf"^{target}:.*\n((?:\t.*\n)+)", makefile, re.M)
        assert body and "$(VENV)/bin/mypy" in body.group(1), f"make {target} does not run mypy"
    assert "make test" in (REPO / ".ci" / "run").read_text(encoding="utf-8")


def test_the_core_and_the_engine_port_are_checked_strictly() -> None:
    tomllib = pytest.importorskip("tomllib", reason="tomllib: Python >= 3.11")
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert cfg["files"] == ["timely_llm_ros"]
    strict = [o for o in cfg["overrides"] if "timely_llm_ros.core.*" in o["module"]]
    assert len(strict) == 1 and "timely_llm_ros.engines.base" in strict[0]["module"]
    for flag in (
        "disallow_untyped_defs",
        "disallow_any_generics",
        "warn_return_any",
        "disallow_untyped_calls",
    ):
        assert strict[0][flag] is True, flag
    waived = {m for o in cfg["overrides"] if "disable_error_code" in o for m in o["module"]}
    assert not any(m.startswith("timely_llm_ros.core") for m in waived)


def test_every_type_ignore_names_its_code_and_its_reason() -> None:
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = path.relative_to(REPO).as_posix()
        if rel in WAIVED:
            continue
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            m = IGNORE.search(line)
            if m and not (m["code"] and re.match(r"\s*#\s*\S", m["rest"])):
                bad.append(f"{rel}:{n}: {line.strip()}")
    assert not bad, "a type: ignore needs [code] and a '# reason' after it:\n" + "\n".join(bad)
