"""tools/build_llama_server.py installs a rebuilt server even while the old one is running."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from tool_loader import load_tool


def _load():
    return load_tool("build_llama_server.py", "timely_build_llama_server")


def test_install_replaces_a_running_binary(tmp_path: Path):
    """Copying onto a running executable fails with ETXTBSY; the install must not."""
    sleep = shutil.which("sleep")
    true = shutil.which("true")
    assert sleep and true
    target = tmp_path / "llama-server"
    shutil.copy2(sleep, target)
    running = subprocess.Popen([str(target), "30"])
    try:
        _load().install_binary(Path(true), target)
        assert target.read_bytes() == Path(true).read_bytes()
        assert subprocess.run([str(target)]).returncode == 0
        assert running.poll() is None  # the old server keeps running from its old inode
        assert not (tmp_path / ".llama-server.new").exists()
    finally:
        running.kill()
        running.wait()
