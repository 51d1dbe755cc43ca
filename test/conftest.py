"""Test-wide set-up: import the SOURCE tree, and keep every ROS 2 process on loopback.

Imports: the repository root goes first on ``sys.path`` (and ``PYTHONPATH`` for subprocesses), so
tests exercise the working tree, not a stale installed copy. The generated ``timely_llm_ros.msg``
/ ``.srv`` modules exist only in the install prefix (the venv, built by ``make``);
``timely_llm_ros/__init__.py`` extends the package ``__path__`` over every ``timely_llm_ros``
directory on ``sys.path``, so both halves import as one package.

DDS: set before any test (and inherited by every subprocess): loopback-only discovery and
transports (config/fastdds_localhost.xml), and a random ROS_DOMAIN_ID per test session so that
parallel runs on one machine do not see each other. ``TIMELY_TEST_DOMAIN_ID`` pins the domain.

Tests marked ``ros`` need rclpy and the generated interfaces. Outside the project venv they are
skipped with the reason; with ``TIMELY_REQUIRE_ROS=1`` (set by the Makefile, so `make test` and
CI) they fail instead, so a broken interface build can never pass as "skipped". Tests marked
``vllm`` likewise need the vLLM environment: skipped with the reason elsewhere, failed under
``TIMELY_REQUIRE_VLLM=1`` (make test-vllm); `make test` deselects them.
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def _prepend_env_path(var: str, entry: str) -> None:
    parts = [p for p in os.environ.get(var, "").split(os.pathsep) if p and p != entry]
    os.environ[var] = os.pathsep.join([entry, *parts])


def _configure_environment() -> None:
    if str(REPO_ROOT) in sys.path:
        sys.path.remove(str(REPO_ROOT))
    sys.path.insert(0, str(REPO_ROOT))
    _prepend_env_path("PYTHONPATH", str(REPO_ROOT))
    # The test tree mirrors the package (test/<subpackage>/); shared helper modules (robot_testkit,
    # viz_testlib, planner_testkit, ...) live beside the tests that wrote them first and import from
    # any folder (their names are unique across the tree).
    for folder in sorted(Path(__file__).resolve().parent.iterdir()):
        if folder.is_dir() and folder.name not in ("data", "__pycache__") and str(folder) not in sys.path:
            sys.path.append(str(folder))

    os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    os.environ["FASTDDS_DEFAULT_PROFILES_FILE"] = str(REPO_ROOT / "config" / "fastdds_localhost.xml")
    os.environ.setdefault("RMW_IMPLEMENTATION", "rmw_fastrtps_cpp")
    # 1..101: the range whose Fast DDS ports stay below Linux's ephemeral ports.
    domain = os.environ.get("TIMELY_TEST_DOMAIN_ID") or str(random.SystemRandom().randint(1, 101))
    os.environ["ROS_DOMAIN_ID"] = domain
    if (Path(sys.prefix) / "share" / "ament_index").is_dir():
        _prepend_env_path("AMENT_PREFIX_PATH", sys.prefix)
    # ROS logs of this session's nodes go to a scratch folder, not ~/.ros/log.
    log_dir = tempfile.mkdtemp(prefix="timely-test-roslog-")
    os.environ["ROS_LOG_DIR"] = log_dir
    atexit.register(shutil.rmtree, log_dir, ignore_errors=True)
    # ... and the planners' crash-recovery journals ($ROS_HOME/timely_llm_ros) too
    ros_home = tempfile.mkdtemp(prefix="timely-test-roshome-")
    os.environ["ROS_HOME"] = ros_home
    atexit.register(shutil.rmtree, ros_home, ignore_errors=True)


_configure_environment()

_ros_reason: list[str | None] = []


def ros_unavailable_reason() -> str | None:
    """Why the ROS tests cannot run in this interpreter (None when they can); computed once."""
    if not _ros_reason:
        try:
            import rclpy  # noqa: F401

            from timely_llm_ros.msg import Task  # noqa: F401
            from timely_llm_ros.srv import EstimateExecTime  # noqa: F401
        except ImportError as exc:
            _ros_reason.append(
                f"rclpy or the generated timely_llm_ros interfaces are not importable ({exc}); "
                "run the tests with the project venv: make test"
            )
        else:
            _ros_reason.append(None)
    return _ros_reason[0]


def vllm_unavailable_reason() -> str | None:
    """Why tests marked ``vllm`` cannot run here (None when they can): vLLM and a model directory.

    Needs nothing of ROS: the vLLM tests run from a plain source checkout with pytest + vllm
    (``TIMELY_VLLM_MODEL=DIR python -m pytest -m vllm test/engines``), e.g. on a GPU machine.
    """
    import importlib.util

    if importlib.util.find_spec("vllm") is None:
        return "vLLM is not installed here (make vllm for the CPU build, pip install vllm on a GPU)"
    from timely_llm_ros.engines.base import EngineError
    from timely_llm_ros.engines.vllm_config import default_model

    try:
        model = Path(default_model())
    except EngineError as exc:
        return str(exc)
    if not (model / "config.json").is_file():
        return f"TIMELY_VLLM_MODEL={model} is not a model directory (no config.json)"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("vllm") is not None:
        reason = vllm_unavailable_reason()
        if reason is not None:
            if os.environ.get("TIMELY_REQUIRE_VLLM") == "1":
                pytest.fail(f"TIMELY_REQUIRE_VLLM=1 but {reason}", pytrace=False)
            pytest.skip(reason)
    if item.get_closest_marker("ros") is None:
        return
    reason = ros_unavailable_reason()
    if reason is None:
        return
    if os.environ.get("TIMELY_REQUIRE_ROS") == "1":
        pytest.fail(f"TIMELY_REQUIRE_ROS=1 but {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    """Environment for child processes: this session's DDS settings and source-tree imports.

    It is a copy of ``os.environ``, which matters with the PyPI ROS wheels: their
    ``ros_wheels_bootstrapper`` .pth hook re-executes each new Python once with LD_LIBRARY_PATH
    extended and sets ``_ROS_WHEELS_BOOTSTRAP_COMPLETE``; a child that inherits that guard but
    not the extended LD_LIBRARY_PATH cannot load rclpy. Extend this dict, never start from {}.
    """
    return dict(os.environ)
