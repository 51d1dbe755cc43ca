"""package.xml declares what the product imports: every third-party module imported by the package or
its launch files maps to an exec_depend (rosdep key), or is one of the pip-only packages the README's
distro section tells users to install (they have no rosdep key)."""

from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ET

import yaml

# import name -> rosdep key
ROSDEP = {
    "rclpy": "rclpy",
    "rcl_interfaces": "rcl_interfaces",
    "rosgraph_msgs": "rosgraph_msgs",
    "builtin_interfaces": "builtin_interfaces",
    "std_msgs": "std_msgs",
    "ament_index_python": "ament_index_python",
    "launch": "launch",
    "launch_ros": "launch_ros",
    "yaml": "python3-yaml",
    "ruamel": "python3-ruamel.yaml",
    "numpy": "python3-numpy",
    "matplotlib": "python3-matplotlib",
    "python_qt_binding": "python_qt_binding",
    "rqt_gui_py": "rqt_gui_py",
    "jsonschema": "python3-jsonschema",
    "jinja2": "python3-jinja2",
    "action_msgs": "action_msgs",
    "lifecycle_msgs": "lifecycle_msgs",
    "diagnostic_msgs": "diagnostic_msgs",
}
# import name -> the pip distribution the README names (no rosdep key); compression is the
# Python >= 3.14 standard library, backports.zstd its fallback and lz4 (no rosdep key either), both
# pulled in by rosbags and imported only for compressed MCAP chunks (lrtrace/mcap.py)
PIP_ONLY = {
    "lz4": "rosbags",
    "rosbags": "rosbags",
    "llama_cpp": "llama-cpp-python",
    "djitellopy": "djitellopy",
    "backports": "rosbags",
    "compression": "rosbags",
}


def _imports(repo_root) -> set[str]:
    names: set[str] = set()
    files = [*(repo_root / "timely_llm_ros").rglob("*.py"), *(repo_root / "launch").glob("*.py")]
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
    return names - set(sys.stdlib_module_names) - {"__future__", "timely_llm_ros"}


def test_every_imported_package_is_declared(repo_root):
    root = ET.parse(repo_root / "package.xml").getroot()
    declared = {e.text.strip() for e in root if e.tag in ("depend", "exec_depend") and e.text}
    imported = _imports(repo_root)
    unknown = sorted(imported - set(ROSDEP) - set(PIP_ONLY))
    assert not unknown, f"imported but neither a rosdep key nor a documented pip package: {unknown}"
    missing = sorted(ROSDEP[m] for m in imported & set(ROSDEP) if ROSDEP[m] not in declared)
    assert not missing, f"package.xml lacks exec_depend {missing}"
    readme = (repo_root / "README.md").read_text(encoding="utf-8")
    for module in sorted(imported & set(PIP_ONLY)):
        assert PIP_ONLY[module] in readme, (
            f"README does not tell distro users to pip install {PIP_ONLY[module]}"
        )


DEP_TAGS = ("depend", "build_depend", "buildtool_depend", "exec_depend", "test_depend")


def test_every_dependency_key_resolves_in_rosdistro(repo_root):
    """`rosdep install --from-paths src` stops at the first key it cannot resolve. Every key must be in
    the list checked against ros/rosdistro (rosdep/base.yaml, rosdep/python.yaml, the released
    packages of each target distro) that tools/rosdep_keys.py wrote, with its commit and date."""
    checked = yaml.safe_load((repo_root / "test" / "packaging" / "rosdep_keys.yaml").read_text())
    assert checked["rosdistro_commit"] and checked["rosdistro_date"]
    known = checked["keys"]
    root = ET.parse(repo_root / "package.xml").getroot()
    keys = sorted({e.text.strip() for e in root if e.tag in DEP_TAGS and e.text})
    unchecked = [k for k in keys if k not in known]
    assert not unchecked, (
        f"package.xml keys not checked against rosdistro: {unchecked}; run "
        "python3 tools/rosdep_keys.py <rosdistro checkout> and commit test/packaging/rosdep_keys.yaml"
    )
    unresolved = [k for k in keys if not known[k].get("rosdep") and not known[k].get("ros_package")]
    assert not unresolved, f"no rosdep key and no released ROS package: {unresolved}"
    partial = [
        k
        for k in keys
        if 0 < len(known[k].get("ros_package") or checked["distros"]) < len(checked["distros"])
    ]
    assert not partial, f"ROS packages not released in every target distro {checked['distros']}: {partial}"


def test_key_resolver_marks_a_key_rosdistro_lacks(tmp_path, repo_root):
    """tools/rosdep_keys.py (which wrote the list) finds rosdep keys and released packages, and marks
    a key found in neither (python3-lz4, once in package.xml) unresolved."""
    sys.path.insert(0, str(repo_root / "tools"))
    try:
        import rosdep_keys
    finally:
        sys.path.pop(0)
    (tmp_path / "rosdep").mkdir()
    (tmp_path / "rosdep" / "base.yaml").write_text("cmake: {debian: [cmake]}\n")
    (tmp_path / "rosdep" / "python.yaml").write_text("python3-yaml: {debian: [python3-yaml]}\n")
    for distro in rosdep_keys.DISTROS:
        (tmp_path / distro).mkdir()
        (tmp_path / distro / "distribution.yaml").write_text(
            "repositories:\n  rclpy: {release: {}}\n  ros2cli: {release: {packages: [ros2cli, ros2topic]}}\n"
        )
    got = rosdep_keys.resolve(["python3-yaml", "rclpy", "ros2topic", "python3-lz4"], tmp_path)
    assert got["python3-yaml"] == {"rosdep": "rosdep/python.yaml"}
    assert got["rclpy"] == got["ros2topic"] == {"ros_package": list(rosdep_keys.DISTROS)}
    assert got["python3-lz4"] == {"unresolved": True}
