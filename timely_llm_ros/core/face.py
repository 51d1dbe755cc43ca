"""Lazy package faces: a package's public names, imported from their home modules on first use.

Why: a package's ``__init__.py`` that lists its public API (``from timely_llm_ros.core import TUF``,
as ``rosbags`` does) would, written as plain imports, load the whole package whenever *any* module
of it is imported: ``timely_llm_ros.core.tuf`` would pull in the planner and numpy, and
``timely_llm_ros.lrtrace.timeline_model`` the ``rosbags`` library (an optional extra). A lazy face
lists the same names, grouped by the module that defines them, and imports a module only when one of
its names is first read (PEP 562 module ``__getattr__``).

Code inside the package never imports through a face: it names each name's home module
(``test/tools/test_spellings.py`` keeps it so), so a face adds no import edge and no cycle.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_face(
    package: str, homes: Mapping[str, tuple[str, ...]]
) -> tuple[list[str], Callable[[str], object], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` of a face from ``home module -> its public names``.

    A name listed under two modules is an error at import time (it would have two spellings).
    """
    where: dict[str, str] = {}
    for module, names in homes.items():
        for name in names:
            if name in where:
                raise ValueError(f"{package}: {name!r} listed under {where[name]} and {module}")
            where[name] = module

    def __getattr__(name: str) -> object:
        module = where.get(name)
        if module is None:
            # not a listed name: also how ``from package import submodule`` finds a submodule
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module), name)
        setattr(sys.modules[package], name, value)  # the next read is a plain attribute
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return sorted(where), __getattr__, __dir__
