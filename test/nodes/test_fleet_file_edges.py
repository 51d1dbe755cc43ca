"""Fleet files that cannot describe a fleet: one clear line on stderr and exit status 2.

Before: a binary file gave a UnicodeDecodeError traceback, and an empty or robot-less file started a
lone planner without a word (every task it got was then rejected for want of a robot).
"""

from __future__ import annotations

import subprocess
import sys

import pytest

CASES = {
    "binary": (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe", "not a text file"),
    "latin1": ("robots: [{agent: dr\xf6ne, type: drone}]\n".encode("latin-1"), "not UTF-8 text"),
    "empty": (b"", "the file is empty"),
    "blank": (b"  \n\n# only a comment\n", "no robots"),
    "robotless": (b"planner: {parameters: {policy: timely}}\nrobots: []\n", "no robots"),
    "no robots key": (b"planner: {parameters: {policy: timely}}\n", "no robots"),
}


@pytest.mark.parametrize("name", list(CASES))
def test_a_fleet_file_that_describes_no_fleet_is_one_line_and_exit_2(tmp_path, name):
    content, needle = CASES[name]
    path = tmp_path / "fleet.yaml"
    path.write_bytes(content)
    out = subprocess.run(
        [sys.executable, "-m", "timely_llm_ros.cli", "fleet", "--dry-run", str(path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 2, (out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, out.stderr
    assert needle in lines[0] and str(path) in lines[0]
