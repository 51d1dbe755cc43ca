"""Small modules are the rule: a package module over ~600 lines needs its reason in
docs/architecture.md ("Modules over ~600 lines, and why"), so the next growth is a decision, not drift."""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
PACKAGE = REPO_ROOT / "timely_llm_ros"
LIMIT = 600


def _documented() -> set[str]:
    text = (REPO_ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    section = text.split("## Modules over ~600 lines, and why", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+\.py)` \|", section, flags=re.MULTILINE))


def test_every_module_over_the_limit_has_its_reason_written():
    large = {
        str(p.relative_to(PACKAGE)): n
        for p in PACKAGE.rglob("*.py")
        if (n := len(p.read_text(encoding="utf-8").splitlines())) > LIMIT
    }
    missing = sorted(set(large) - _documented())
    assert not missing, f"modules over {LIMIT} lines without a reason in docs/architecture.md: {missing}"
