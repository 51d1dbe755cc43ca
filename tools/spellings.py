"""One spelling per public name: where a name of ``timely_llm_ros`` is imported from a module that
does not define it, read from the source with ``ast`` (nothing is imported or run).

Why a tool of its own: a name that reaches its users by two import paths (a module that re-exports
another's names "because callers import them here") leaves a reader two homes to search and a
refactor two places to keep; the same object under two names also hides which module a caller
really depends on. The rule, kept by ``test/tools/test_spellings.py``:

* every name has **one home**, the module that defines it (a ``def``, ``class`` or assignment at
  module level);
* ``from M import n`` and ``M.n`` (``M`` bound to a module of the package) must find ``n`` defined
  in ``M`` (or ``n`` is a submodule of the package ``M``);
* the one exception are the **faces** of :data:`FACES`: a package's ``__init__.py`` that lists its
  public API in ``__all__`` (as ``rosbags`` does), and ``engines/base.py``, the documented shim that
  external engine plug-ins import the engine port from. Users and tests may import through a face;
  the package's own modules never do (they import each name from its home, so the faces add no
  import cycle and a reader of a module sees where each name lives).

Usage::

    python tools/spellings.py            # every import of a name from a module that is not its home
    python tools/spellings.py --faces    # also the faces and the names they list
"""

from __future__ import annotations

import argparse
import ast
import sys
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import import_graph as ig

PACKAGE = ig.PACKAGE
REPO = ig.REPO
# Folders outside the package whose imports are checked too (users' view of the package).
USER_DIRS = ("test", "tools", "examples", "launch")

# module -> why it may hand out names it does not define. A face must have a literal ``__all__``.
FACES: dict[str, str] = {
    f"{PACKAGE}.core": "the core's face: the paper's algorithms, the engine port, the wings' main names",
    f"{PACKAGE}.core.sched": "the scheduler's parts",
    f"{PACKAGE}.core.options": "the optional mechanisms beyond the paper",
    f"{PACKAGE}.core.skills": "skill sets: model, parser, loader",
    f"{PACKAGE}.engines": "the engine registry and the engine classes",
    f"{PACKAGE}.engines.base": "the engine port for external engine plug-ins (docs/architecture.md)",
    f"{PACKAGE}.lrtrace": "bags and timelines without rclpy",
    f"{PACKAGE}.workload": "LRTrace workloads",
}


@dataclass(frozen=True)
class Module:
    """What the checks need of one module of the package."""

    name: str
    path: Path
    defines: frozenset[str]  # names bound at module level by def/class/assignment
    exports: tuple[str, ...] | None  # the literal ``__all__``, if any


@dataclass(frozen=True)
class Misuse:
    """``where`` reads ``name`` through ``module``, which does not define it."""

    where: str  # a dotted module name (package) or a path relative to the repository (users)
    line: int
    module: str
    name: str
    via_face: bool  # ``module`` is a face listing ``name`` (allowed outside the package)

    def __str__(self) -> str:
        short = self.module.removeprefix(PACKAGE + ".")
        how = "through the face" if self.via_face else "not defined in"
        return f"{self.where}:{self.line}: {self.name} {how} {short}"


def _is_alias(node: ast.stmt, imported: set[str]) -> bool:
    """``name = module.name`` with ``module`` an imported name: the same object under the same name,
    a re-export in disguise (``to_stamp = ADAPTER.to_stamp`` binds a new method: a definition)."""
    return (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
        and isinstance(node.value, ast.Attribute)
        and isinstance(node.value.value, ast.Name)
        and node.value.value.id in imported
        and node.value.attr == node.targets[0].id
    )


def _defines(body: Iterable[ast.stmt], out: set[str], imported: set[str]) -> None:
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            out.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            if _is_alias(node, imported):
                continue  # ``make_typestore = ts.make_typestore``: another module's name, handed out
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                out.update(n.id for n in ast.walk(target) if isinstance(n, ast.Name))
        elif isinstance(node, ast.Import):  # a module object (``mcap.os`` for a test's monkeypatch)
            out.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, ast.If | ast.Try | ast.With):
            _defines(node.body, out, imported)
            _defines(getattr(node, "orelse", []), out, imported)
            _defines(getattr(node, "finalbody", []), out, imported)
            for handler in getattr(node, "handlers", []):
                _defines(handler.body, out, imported)


def _assigned(tree: ast.Module, name: str) -> ast.expr | None:
    """The value of a module-level ``name = ...`` (or ``name: T = ...``), if any."""
    for node in tree.body:
        if isinstance(node, ast.Assign):
            targets = node.targets
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            targets = [node.target]
        else:
            continue
        for target in targets:
            names = target.elts if isinstance(target, ast.Tuple) else [target]
            if any(isinstance(n, ast.Name) and n.id == name for n in names):
                return node.value
    return None


def _exports(tree: ast.Module) -> tuple[str, ...] | None:
    """A module's public names: its literal ``__all__``, or for a lazy face (``core/face.py``) the
    names of its literal ``_HOMES`` table (home module -> names)."""
    for name in ("__all__", "_HOMES"):
        value = _assigned(tree, name)
        if value is None:
            continue
        try:
            data = ast.literal_eval(value)
        except ValueError:
            continue
        if isinstance(data, dict):
            return tuple(n for names in data.values() for n in names)
        return tuple(data)
    return None


def read_package(root: Path = REPO) -> dict[str, Module]:
    """Every module of the package with the names it defines and exports."""
    out = {}
    for name, path in ig.module_files(root).items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        imported = {
            (a.asname or a.name).split(".")[0]
            for node in tree.body
            if isinstance(node, ast.Import | ast.ImportFrom)
            for a in node.names
        }
        defines: set[str] = set()
        _defines(tree.body, defines, imported)
        out[name] = Module(name, path, frozenset(defines), _exports(tree))
    return out


def _uses(
    tree: ast.Module, where: str, is_pkg: bool, modules: dict[str, Module]
) -> list[tuple[int, str, str]]:
    """(line, module, name) of every name read from a package module: ``from M import n`` and
    ``M.n`` where a local name is bound to module ``M`` (``import a.b as M``, ``from a import M``)."""
    uses: list[tuple[int, str, str]] = []
    bound: dict[str, set[str]] = {}  # local name -> package modules it is bound to somewhere in the file
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            src = ig._resolve_from(node, where, is_pkg) if where in modules else (node.module or "")
            if src not in modules:
                continue
            for alias in node.names:
                sub = f"{src}.{alias.name}"
                if sub in modules:
                    bound.setdefault(alias.asname or alias.name, set()).add(sub)
                elif alias.name != "*":
                    uses.append((node.lineno, src, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname and alias.name in modules:
                    bound.setdefault(alias.asname, set()).add(alias.name)
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in bound:
            targets = bound[node.value.id]
            if not any(node.attr in modules[t].defines or f"{t}.{node.attr}" in modules for t in targets):
                # a name bound to several modules (in different functions) counts for the first one
                uses.append((node.lineno, sorted(targets)[0], node.attr))
    return uses


def misuses(root: Path = REPO, user_dirs: Iterable[str] = USER_DIRS) -> list[Misuse]:
    """Every read of a name from a module that does not define it, package and user files alike."""
    modules = read_package(root)
    sources: list[tuple[str, Path, bool]] = [
        (m.name, m.path, m.path.name == "__init__.py") for m in modules.values()
    ]
    for folder in user_dirs:
        for path in sorted((root / folder).rglob("*.py")) if (root / folder).is_dir() else ():
            sources.append((str(path.relative_to(root)), path, False))
    out = []
    for where, path, is_pkg in sources:
        for line, module, name in _uses(ast.parse(path.read_text(encoding="utf-8")), where, is_pkg, modules):
            mod = modules[module]
            if name in mod.defines or name.startswith("__"):
                continue
            face = module in FACES and name in (mod.exports or ())
            out.append(Misuse(where, line, module, name, face))
    return sorted(out, key=lambda m: (m.where, m.line, m.name))


def violations(root: Path = REPO, user_dirs: Iterable[str] = USER_DIRS) -> list[Misuse]:
    """The misuses that break the rule: any outside a face, and any in the package through a face
    (a face's own ``__init__`` reading its submodules is where the face is made, so it counts not)."""
    out = []
    for m in misuses(root, user_dirs):
        in_package = "/" not in m.where and not m.where.endswith(".py")
        if not m.via_face or (in_package and m.where != m.module):
            out.append(m)
    return out


def face_problems(root: Path = REPO) -> list[str]:
    """Faces without ``__all__``, and names in any module's ``__all__`` that it neither defines nor,
    for a face, imports from the package (a re-export outside a face)."""
    modules = read_package(root)
    out = []
    for name in sorted(FACES):
        if name not in modules:
            out.append(f"{name}: listed as a face but not a module")
        elif modules[name].exports is None:
            out.append(f"{name}: a face needs a literal __all__")
    for name in sorted(FACES):
        tree = ast.parse(modules[name].path.read_text(encoding="utf-8")) if name in modules else None
        homes = _assigned(tree, "_HOMES") if tree is not None else None
        table = ast.literal_eval(homes) if homes is not None else {}
        for home, names in table.items():
            missing = [n for n in names if home not in modules or n not in modules[home].defines]
            if missing:
                out.append(f"{name}: _HOMES lists names that {home} does not define: {', '.join(missing)}")
    for mod in modules.values():
        if mod.name in FACES:
            continue
        extra = [n for n in mod.exports or () if n not in mod.defines and f"{mod.name}.{n}" not in modules]
        if extra:
            out.append(f"{mod.name}: __all__ lists names it does not define: {', '.join(extra)}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=REPO, help="repository root (default: this checkout)")
    ap.add_argument("--faces", action="store_true", help="also list the faces and their names")
    args = ap.parse_args(argv)
    bad = violations(args.root)
    problems = face_problems(args.root)
    for m in bad:
        print(m)
    for p in problems:
        print(p)
    if args.faces:
        modules = read_package(args.root)
        for name, why in FACES.items():
            names = modules[name].exports if name in modules else None
            print(f"face {name} ({why}): {len(names or ())} names")
    print(f"names read from a module that is not their home: {len(bad)}; face problems: {len(problems)}")
    return 1 if bad or problems else 0


if __name__ == "__main__":
    sys.exit(main())
