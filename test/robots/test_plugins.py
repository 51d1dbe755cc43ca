"""The robot plugin registry without ROS: built-ins registered like plugins, an installed package's
entry points found by name, and broken plugins refused with which one and why."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest

from timely_llm_ros.core import paths
from timely_llm_ros.robots import plugins
from timely_llm_ros.robots.plugins import PluginError, RobotType


@pytest.fixture
def installed(tmp_path, monkeypatch):
    """A fake installed distribution (a dist-info with entry points, as pip writes it) on sys.path."""

    def install(entry_points: str, module: str = "") -> None:
        dist = tmp_path / "boatpkg-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: boatpkg\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(entry_points)
        if module:
            (tmp_path / "boatpkg.py").write_text(module)
        monkeypatch.syspath_prepend(str(tmp_path))
        importlib.invalidate_caches()
        plugins._entry_points.cache_clear()
        paths.plugin_config_dirs.cache_clear()

    yield install
    sys.modules.pop("boatpkg", None)
    plugins._entry_points.cache_clear()
    paths.plugin_config_dirs.cache_clear()


def test_builtins_are_registered_like_plugins():
    assert {"drone", "arm"} <= set(plugins.registered_types())
    assert plugins.robot_type("drone") is plugins.DRONE and plugins.robot_type("arm").backends == (
        "sim",
        "ros",
    )
    assert {"sim", "tello", "ros"} <= set(plugins.registered_backends())
    assert callable(plugins.backend_factory("ros").check_skill_set)
    assert plugins.robot_type("timely_llm_ros.robots.plugins:ARM") is plugins.ARM  # module:attr form


def test_an_installed_package_adds_a_type_and_its_config_dir(installed, tmp_path):
    (tmp_path / "boat_config" / "skills").mkdir(parents=True)
    installed(
        "[timely_llm_ros.robot_types]\nboat = boatpkg:BOAT\n"
        "[timely_llm_ros.config]\nboatpkg = boatpkg:CONFIG\n",
        "from timely_llm_ros.robots.plugins import RobotType\n"
        f"CONFIG = {str(tmp_path / 'boat_config')!r}\n"
        "BOAT = RobotType('boat', 'boat_skills', ('ros',))\n",
    )
    assert plugins.robot_type("boat") == RobotType("boat", "boat_skills", ("ros",))
    dirs = paths.config_dirs()
    assert dirs.index(tmp_path / "boat_config") < dirs.index(paths.shipped_config_dir().resolve())


@pytest.mark.parametrize(
    "entry,module,fragment",
    [
        (
            "ghost = no_such_module:GHOST",
            "",
            "robot type 'ghost': cannot load 'no_such_module:GHOST': ModuleNotFoundError",
        ),
        ("ghost = boatpkg:GHOST", "GHOST = 3\n", "robot type 'ghost': 'boatpkg:GHOST' is a int, expected"),
        (
            "ghost = boatpkg:GHOST",
            "from timely_llm_ros.robots.plugins import RobotType\nGHOST = RobotType('ghost boat', 'x')\n",
            "cannot load 'boatpkg:GHOST': PluginError: robot type name 'ghost boat' is not an identifier",
        ),
    ],
)
def test_broken_type_plugins_say_which_and_why(installed, entry, module, fragment):
    installed(f"[timely_llm_ros.robot_types]\n{entry}\n", module)
    with pytest.raises(PluginError) as err:
        plugins.robot_type("ghost")
    assert fragment in str(err.value)


def test_a_config_entry_point_naming_no_directory_is_skipped_with_a_warning(installed, tmp_path):
    installed(
        "[timely_llm_ros.config]\nboatpkg = boatpkg:CONFIG\n", f"CONFIG = {str(tmp_path / 'nowhere')!r}\n"
    )
    with pytest.warns(RuntimeWarning, match=r"entry point 'boatpkg' = 'boatpkg:CONFIG' .*does not exist"):
        dirs = paths.config_dirs()
    assert paths.shipped_config_dir().resolve() in dirs  # the other config is still found
    assert any("does not exist" in p for p in paths.plugin_config_problems())


def test_a_config_plugin_that_does_not_import_leaves_the_rest_working(installed):
    """E.g. an editable install whose import hook is not loaded: the plugin is registered, its module
    is missing. Its directory is skipped with the reason; shipped workloads still resolve."""
    installed("[timely_llm_ros.config]\nboatpkg = boatpkg_gone:CONFIG\n")
    with pytest.warns(RuntimeWarning, match=r"'boatpkg_gone:CONFIG' .*cannot be loaded: ModuleNotFoundError"):
        assert "tello_minispec" in paths.config_files("skills")
    assert paths.plugin_config_problems()


def test_unknown_names_list_the_known_ones():
    with pytest.raises(PluginError, match="unknown robot type 'submarine'; known: .*arm, drone"):
        plugins.robot_type("submarine")
    with pytest.raises(PluginError, match="unknown robot backend 'warp'; known: .*ros, sim, tello"):
        plugins.backend_factory("warp")
    with pytest.raises(PluginError, match="backend 'tello' is not one of robot type 'arm''s backends"):
        plugins.check_robot("arm", "tello", None)


def test_source_tree_entry_points_match_the_builtin_table():
    text = (Path(__file__).resolve().parents[2] / "setup.py").read_text()
    for name, target in {**plugins.BUILTIN_TYPES, **plugins.BUILTIN_BACKENDS}.items():
        assert f'"{name} = {target}"' in text, name
