"""Load a script of tools/ as a module (they are scripts, not a package), once per name."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

TOOLS = Path(__file__).resolve().parents[2] / "tools"


def load_tool(script: str, module_name: str) -> ModuleType:
    """``tools/<script>`` imported as ``module_name`` (registered in sys.modules, so dataclasses and
    pickling inside it resolve their module)."""
    spec = importlib.util.spec_from_file_location(module_name, TOOLS / script)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module
