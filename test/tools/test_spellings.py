"""One spelling per public name: every name is read from the module that defines it, except through
the listed faces (a package ``__init__`` with its public API, and ``engines/base.py`` for plug-ins),
and the package itself never reads through a face.

The check is ``tools/spellings.py`` (``ast`` only, nothing imported); the faces are also imported
here to prove every listed name resolves and that a face loads nothing heavy before it is asked.
"""

from __future__ import annotations

import importlib
import pkgutil
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import spellings as sp

P = "timely_llm_ros."


def test_every_name_is_read_from_its_home() -> None:
    bad = sp.violations()
    assert not bad, (
        "names read from a module that does not define them (import them from their home module; "
        "`python tools/spellings.py` lists them):\n  " + "\n  ".join(map(str, bad))
    )
    assert not sp.face_problems()


def test_the_check_reads_the_whole_package_and_its_users() -> None:
    # guards against a reader that silently finds nothing: the real package's faces are seen
    modules = sp.read_package()
    assert len(modules) > 100
    assert "Scheduler" in modules[P + "core.sched.scheduler"].defines
    assert "TUF" in (modules[P + "core"].exports or ())  # a lazy face's table
    assert any(m.via_face and m.where.startswith("test/") for m in sp.misuses())  # tests may use faces


def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return tmp_path


def test_a_re_export_and_a_read_through_a_face_inside_the_package_fail(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "timely_llm_ros/__init__.py": "",
            "timely_llm_ros/core/__init__.py": '__all__ = ["TUF"]\nfrom timely_llm_ros.core.tuf import TUF\n',
            "timely_llm_ros/core/tuf.py": "class TUF: ...\n",
            # the old habit: a module hands out a name it only imported
            "timely_llm_ros/core/sched.py": "from timely_llm_ros.core.tuf import TUF\n",
            "timely_llm_ros/nodes/__init__.py": "",
            "timely_llm_ros/nodes/a.py": "from timely_llm_ros.core.sched import TUF\n",
            "timely_llm_ros/nodes/b.py": "from timely_llm_ros.core import TUF\n",  # through a face
            "timely_llm_ros/nodes/c.py": "from timely_llm_ros.core import tuf\n\ndef f():\n    return tuf.TUF, tuf.nope\n",
            # a re-export in disguise: the same object under the same name
            "timely_llm_ros/nodes/d.py": "from timely_llm_ros.core import tuf\n\nTUF = tuf.TUF\n",
            "timely_llm_ros/nodes/e.py": "from timely_llm_ros.nodes.d import TUF\n",
            "test/test_user.py": "from timely_llm_ros.core import TUF\nfrom timely_llm_ros.core.sched import TUF as T\n",
        },
    )
    found = {str(m).split(":", 2)[0] + ":" + str(m).split(": ", 1)[1] for m in sp.violations(root, ("test",))}
    assert found == {
        f"{P}nodes.a:TUF not defined in core.sched",
        f"{P}nodes.b:TUF through the face core",
        f"{P}nodes.c:nope not defined in core.tuf",
        f"{P}nodes.e:TUF not defined in nodes.d",
        "test/test_user.py:TUF not defined in core.sched",  # users may use the face, not a re-export
    }


def test_an_all_that_lists_foreign_names_outside_a_face_fails(tmp_path: Path) -> None:
    root = _tree(
        tmp_path,
        {
            "timely_llm_ros/__init__.py": "",
            "timely_llm_ros/ros/__init__.py": "",
            "timely_llm_ros/ros/convert.py": 'from timely_llm_ros.ros.qos import X  # noqa\n__all__ = ["X", "f"]\ndef f(): ...\n',
            "timely_llm_ros/ros/qos.py": "X = 1\n",
        },
    )
    assert f"{P}ros.convert: __all__ lists names it does not define: X" in sp.face_problems(root)


@pytest.mark.parametrize("face", sorted(sp.FACES))
def test_every_name_a_face_lists_resolves(face: str) -> None:
    module = importlib.import_module(face)
    assert len(module.__all__) == len(set(module.__all__)), "a name listed twice"
    for name in module.__all__:
        assert getattr(module, name) is not None
    if hasattr(module, "__path__"):  # a cached name must never shadow a submodule
        subs = {m.name for m in pkgutil.iter_modules(module.__path__)}
        assert not subs & set(module.__all__)


def test_the_lazy_faces_load_nothing_before_a_name_is_read() -> None:
    code = (
        "import sys\n"
        "import timely_llm_ros.core, timely_llm_ros.engines, timely_llm_ros.lrtrace\n"
        "from timely_llm_ros.core import tuf\n"
        "heavy = [m for m in ('numpy', 'rosbags', 'llama_cpp', 'vllm', 'timely_llm_ros.core.planner') if m in sys.modules]\n"
        "from timely_llm_ros.core import PlannerCore\n"
        "from timely_llm_ros.engines import SimEngine\n"
        "print(heavy, 'timely_llm_ros.core.planner' in sys.modules, SimEngine.__module__)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["[]", "True", P + "engines.sim"]
