"""package.xml declares what the product imports: every third-party module imported by the package or
its launch files maps to an exec_depend (rosdep key), or is one of the pip-only packages the README's
distro section tells users to install (they have no rosdep key)."""

from __future__ import annotations

import ast
import sys
import xml.etree.ElementTree as ET

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
    "lz4": "python3-lz4",
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
# Python >= 3.14 standard library, backports.zstd its fallback that rosbags already pulls in
PIP_ONLY = {
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
