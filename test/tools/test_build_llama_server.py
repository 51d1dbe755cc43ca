"""tools/build_llama_server.py installs a rebuilt server even while the old one is running."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "tools" / "build_llama_server.py"


def _load():
    spec = importlib.util.spec_from_file_location("timely_build_llama_server", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["timely_build_llama_server"] = module
    spec.loader.exec_module(module)
    return module


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
