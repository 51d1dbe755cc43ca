"""The package's imports point down the layers (core at the bottom) and form no cycles.

The graph is read from the source with ``ast`` by ``tools/import_graph.py`` (module-level and
function-level imports alike), so nothing is imported here and no ROS is needed. A known violation
is tolerated only while it is listed below with its reason and the step that removes it; a listed
violation that has gone must leave the list too, so the lists only ever shrink.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import import_graph as ig

P = "timely_llm_ros."

# core -> outside core, still tolerated (importer, imported). Empty: keep it so.
CORE_OUTSIDE_ALLOWED: frozenset[tuple[str, str]] = frozenset()

# Import cycles (strongly connected components, sorted), still tolerated. Empty: keep it so.
CYCLES_ALLOWED: frozenset[tuple[str, ...]] = frozenset()


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every problem of ``graph`` that the allowlists do not cover, one line each."""
    out = [
        f"core imports outside core: {a} -> {b}"
        for a, b in ig.outside_imports(graph, "core")
        if (a, b) not in CORE_OUTSIDE_ALLOWED
    ]
    out += [
        f"upward import (layers {ig.LAYERS}): {a} -> {b}"
        for a, b in ig.upward_imports(graph)
        if ig.layer_of(a) != "core"
    ]
    out += [f"import cycle: {' <-> '.join(c)}" for c in ig.cycles(graph) if c not in CYCLES_ALLOWED]
    return out


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    return ig.build_graph()


def test_the_graph_is_read_from_the_whole_package(graph: dict[str, set[str]]) -> None:
    # guards against a reader that silently finds nothing (every check below would then pass)
    assert len(graph) > 100
    assert P + "core.engine" in graph[P + "core.planner"]
    assert P + "core.engine" in graph[P + "engines.base"]


def test_layers_point_down_and_no_new_cycles(graph: dict[str, set[str]]) -> None:
    problems = violations(graph)
    assert not problems, (
        "imports that break the layering (docs/architecture.md; `python tools/import_graph.py` "
        "draws them):\n  " + "\n  ".join(problems)
    )


def test_allowlists_only_hold_what_still_exists(graph: dict[str, set[str]]) -> None:
    stale_edges = CORE_OUTSIDE_ALLOWED - set(ig.outside_imports(graph, "core"))
    stale_cycles = CYCLES_ALLOWED - set(ig.cycles(graph))
    assert not stale_edges and not stale_cycles, (
        f"fixed, so delete from the allowlists in {Path(__file__).name}: {sorted(stale_edges | stale_cycles)}"
    )


def _package(tmp_path: Path, files: dict[str, str]) -> dict[str, set[str]]:
    """Graph of a synthetic ``timely_llm_ros`` tree written under ``tmp_path`` (modules that the real
    package also has are overridden by the real ones when the two graphs are merged)."""
    for rel, text in files.items():
        path = tmp_path / "timely_llm_ros" / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return ig.build_graph(tmp_path)


def test_a_new_core_to_engines_import_fails(graph: dict[str, set[str]], tmp_path: Path) -> None:
    synthetic = _package(
        tmp_path,
        {
            "__init__.py": "",
            "core/__init__.py": "",
            "core/newthing.py": "def f():\n    from ..engines import sim\n    return sim\n",  # lazy + relative
            "core/other.py": "import timely_llm_ros.engines.base\n",
            "core/typed.py": "from timely_llm_ros.msg import Task\n",  # generated interfaces are not core
            "engines/__init__.py": "",
            "engines/base.py": "",
            "engines/sim.py": "",
        },
    )
    problems = violations({**synthetic, **graph})  # the real package plus the new modules
    assert f"core imports outside core: {P}core.newthing -> {P}engines.sim" in problems
    assert f"core imports outside core: {P}core.other -> {P}engines.base" in problems
    assert f"core imports outside core: {P}core.typed -> {P}msg" in problems


def test_a_new_cycle_and_an_upward_import_fail(graph: dict[str, set[str]], tmp_path: Path) -> None:
    synthetic = _package(
        tmp_path,
        {
            "__init__.py": "",
            "lrtrace/__init__.py": "",
            "lrtrace/x.py": "from timely_llm_ros.lrtrace import y\n",
            "lrtrace/y.py": "def g():\n    from . import x\n    return x\n",
            "engines/__init__.py": "",
            "engines/up.py": "from timely_llm_ros.nodes.planner import main\n",
            "nodes/__init__.py": "",
            "nodes/planner.py": "",
        },
    )
    problems = violations({**synthetic, **graph})
    assert f"import cycle: {P}lrtrace.x <-> {P}lrtrace.y" in problems
    assert any(p.endswith(f"{P}engines.up -> {P}nodes.planner") for p in problems)


def test_relative_imports_resolve_like_python() -> None:
    known = {P[:-1], P + "core", P + "core.a", P + "core.b", P + "engines", P + "engines.sim"}
    assert ig.imports_of("from . import b\nfrom .b import thing\n", P + "core.a", known) == {P + "core.b"}
    assert ig.imports_of("from ..engines.sim import SimEngine\n", P + "core.a", known) == {P + "engines.sim"}
    # inside a package's __init__, "." is the package itself
    assert ig.imports_of("from .a import x\n", P + "core", known, is_pkg=True) == {P + "core.a"}


def test_engine_port_reexport_is_the_same_objects() -> None:
    # engines and user plug-ins keep importing engines.base; isinstance/except must still match
    from timely_llm_ros.core import engine as port
    from timely_llm_ros.engines import base

    assert base.__all__ == port.__all__
    for name in port.__all__:
        assert getattr(base, name) is getattr(port, name)


def test_the_planner_service_needs_no_ros(graph: dict[str, set[str]]) -> None:
    """The service layer sits above robots and ros in the layer order (nodes build on it), but it is
    the ROS-free half of the planner: no rclpy, no message classes, no ROS adapter, no robot."""
    service = [m for m in graph if ig.layer_of(m) == "service"]
    assert P + "service.planner_service" in service
    forbidden = {"ros", "robots"} | set(ig.GENERATED)
    bad = sorted(
        (m, dep)
        for m in service
        for dep in graph[m]
        if ig.layer_of(dep) in forbidden or dep.split(".")[1] in ig.GENERATED
    )
    assert not bad, f"service imports ROS-side modules: {bad}"
    files = ig.module_files()
    rclpy = re.compile(r"^\s*(import|from)\s+rclpy\b", re.M)
    assert not [m for m in service if rclpy.search(files[m].read_text())], "service imports rclpy"
