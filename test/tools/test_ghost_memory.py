"""Planner memory after ghost agents (issue 27 item 5), over real DDS: every per-agent structure of the
planner — heartbeats, liveness, segment timers, nonces, open tasks, warning keys, segment
publishers and rclpy's references to destroyed entities — is back at its baseline size once the
ghosts are gone. Runs ``tools/ghost_memory.py`` (the bench that also prints RSS and tracemalloc) with
a small round; sizes, not RSS, are asserted."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.ros
@pytest.mark.slow
def test_per_agent_structures_return_to_baseline_after_ghosts(subprocess_env, tmp_path):
    out = tmp_path / "ghosts.json"
    cmd = [sys.executable, str(ROOT / "tools" / "ghost_memory.py"), "--rounds", "2", "--ghosts", "15"]
    cmd += ["--frames", "0", "--json", str(out)]
    done = subprocess.run(cmd, env=subprocess_env, capture_output=True, text=True, timeout=220)
    assert done.returncode == 0, f"rc={done.returncode}\n{done.stdout[-1500:]}\n{done.stderr[-1500:]}"
    rows = [r for r in json.loads(out.read_text()) if "label" in r]
    base, last = rows[0]["agent_state"], rows[-1]["agent_state"]
    assert [r["label"] for r in rows] == ["baseline (0 ghosts)", "after 15 ghosts", "after 30 ghosts"]
    assert last == base, f"per-agent state grew: {base} -> {last}"
    assert "RSS MiB" in done.stdout and "after 30 ghosts" in done.stdout
