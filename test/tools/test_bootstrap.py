"""tools/bootstrap.py: idempotent (a second run has nothing to install) and clear when it fails."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from tool_loader import load_tool

REPO_ROOT = Path(__file__).resolve().parents[2]
SCRIPT = REPO_ROOT / "tools" / "bootstrap.py"


bootstrap = load_tool("bootstrap.py", "timely_bootstrap")


def _fake_environment(tmp_path: Path):
    """A Bootstrap over a scratch venv/stamps/build dir whose step outputs all exist."""
    boot = bootstrap.Bootstrap(tmp_path / "venv", tmp_path / "stamps", tmp_path / "build" / "cmake", jobs=1)
    for output in [
        boot.py,
        boot.venv / "pyvenv.cfg",
        boot.site_packages() / "rclpy" / "__init__.py",
        boot.build_dir / "CMakeCache.txt",
    ]:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("")
    return boot


def test_finished_steps_are_skipped_and_a_stale_step_reruns_everything_after_it(tmp_path):
    boot = _fake_environment(tmp_path)
    assert boot.plan() == ["venv", "pip", "patch", "configure"]
    for name, key, _ in boot.steps():
        boot.stamps.record(name, key)
    assert boot.plan() == []
    (boot.stamps.directory / "pip").unlink()
    assert boot.plan() == ["pip", "patch", "configure"]


def test_changed_requirements_invalidate_the_pip_step(tmp_path, monkeypatch):
    tools = tmp_path / "tools"
    tools.mkdir()
    for name in [*bootstrap.REQUIREMENTS, bootstrap.CONSTRAINTS, bootstrap.CMAKE_REQUIREMENTS]:
        (tools / name).write_text((bootstrap.TOOLS / name).read_text())
    monkeypatch.setattr(bootstrap, "TOOLS", tools)
    boot = _fake_environment(tmp_path)
    for name, key, _ in boot.steps():
        boot.stamps.record(name, key)
    assert boot.plan() == []
    with (tools / "requirements.txt").open("a") as f:
        f.write("six==1.16.0\n")
    assert boot.plan() == ["pip", "patch", "configure"]
    boot.pip_cmake = True  # machine lost its cmake: the PyPI cmake joins the pip step
    assert "pip" in boot.plan()


def test_a_missing_output_reruns_its_step(tmp_path):
    boot = _fake_environment(tmp_path)
    for name, key, _ in boot.steps():
        boot.stamps.record(name, key)
    (boot.build_dir / "CMakeCache.txt").unlink()
    assert boot.plan() == ["configure"]


def test_baked_build_machine_paths_are_rewritten(tmp_path, monkeypatch):
    pytest.importorskip("numpy")
    import numpy

    boot = _fake_environment(tmp_path)
    monkeypatch.setattr(boot, "py", Path(sys.executable))
    cmake_file = boot.venv / "share" / "std_msgs" / "cmake" / "export_pyExport.cmake"
    cmake_file.parent.mkdir(parents=True)
    cmake_file.write_text(
        'INTERFACE_INCLUDE_DIRECTORIES "/opt/python/cp311-cp311/include/python3.11;'
        '/opt/python/cp311-cp311/lib/python3.11/site-packages/numpy/_core/include"\n'
    )
    boot.do_patch()
    text = cmake_file.read_text()
    assert "/opt/python" not in text
    assert numpy.get_include() in text


def test_a_failing_command_reports_step_log_tail_and_what_to_do(tmp_path):
    """A real pip failure (offline, nonexistent package) becomes a short, actionable report."""
    log = tmp_path / "logs" / "pip.log"
    env = {**os.environ, "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
    cmd = [
        sys.executable,
        "-m",
        "pip",
        "install",
        "--dry-run",
        "--disable-pip-version-check",
        "timely-no-such-package==0.0.0",
    ]
    with pytest.raises(bootstrap.BootstrapError) as info:
        bootstrap.run_logged("pip", cmd, log, "check that PyPI is reachable", env=env)
    report = info.value.report()
    assert report.startswith("bootstrap FAILED at step 'pip'")
    assert "timely-no-such-package" in report  # the tail of pip's own message
    assert "What to do: check that PyPI is reachable" in report
    assert len(report.splitlines()) < bootstrap.LOG_TAIL_LINES + 6


def test_missing_compiler_stops_in_preflight_with_a_clear_message(tmp_path):
    env = {**os.environ, "CC": str(tmp_path / "no-such-cc")}
    proc = subprocess.run(
        [
            sys.executable,
            str(SCRIPT),
            "--check",
            "--venv",
            str(tmp_path / "venv"),
            "--stamps",
            str(tmp_path / "stamps"),
            "--build-dir",
            str(tmp_path / "build"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 2
    assert "FAILED at step 'preflight'" in proc.stderr
    assert "no C compiler" in proc.stderr and "build-essential" in proc.stderr
    assert "Traceback" not in proc.stderr + proc.stdout


@pytest.mark.ros
def test_second_bootstrap_has_nothing_to_install():
    """After `make` set the venv up, the bootstrap (twice, in check mode) finds every step done."""
    venv = REPO_ROOT / ".venv"
    if Path(sys.prefix).resolve() != venv.resolve():
        pytest.skip(f"not running in the bootstrap's venv {venv}")
    for _ in range(2):
        proc = subprocess.run(
            [sys.executable, str(SCRIPT), "--check", "--venv", str(venv)],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "check: up to date" in proc.stdout
