"""JSON Schemas of the YAML formats (``config/schema/*.schema.json``), used by the loaders.

Every YAML format users write has a shipped JSON Schema (draft 2020-12): editors with a YAML
language server validate and complete a file that starts with
``# yaml-language-server: $schema=<path to config/schema/skill_set.schema.json>``, and the loaders
call :func:`validate` first, so a structural mistake is reported as *file: field path: reason* —
e.g. ``my_rover.yaml: skills[2].args[0].type: must be one of int, float, str, bool, got 'text'`` —
before the loader's own checks (ranges that depend on each other, examples that must parse, ...).

Schemas: ``skill_set``, ``exec_time``, ``profile``, ``fleet``, ``workload``. The schemas are the package's own
(the shipped directory, never an overlay: a user file must not redefine the format).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

from timely_llm_ros.core.paths import ConfigPathError, config_path, shipped_config_dir

SCHEMAS = ("skill_set", "exec_time", "profile", "fleet", "workload")


class SchemaError(ValueError):
    """A document that does not have the structure its format requires (file, path, reason)."""


def schema_path(name: str) -> Path:
    """Path of the shipped schema ``name`` (``config/schema/<name>.schema.json``)."""
    if name not in SCHEMAS:
        raise KeyError(f"no schema {name!r}; known: {', '.join(SCHEMAS)}")
    try:
        return shipped_config_dir() / "schema" / f"{name}.schema.json"
    except ConfigPathError:  # an install whose config is only reachable through the search path
        return config_path("schema", f"{name}.schema.json")


@cache
def _validator(name: str) -> Any:
    import jsonschema

    schema = json.loads(schema_path(name).read_text(encoding="utf-8"))
    cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema)


def format_path(parts: Any) -> str:
    """``['skills', 2, 'args']`` → ``skills[2].args`` (``<top level>`` for the root)."""
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out or "<top level>"


def _reason(err: Any) -> tuple[list[Any], str]:
    """(path, reason) of one jsonschema error, worded like the loaders' own messages."""
    path = list(err.absolute_path)
    v, inst, arg = err.validator, err.instance, err.validator_value
    custom = err.schema.get("x-error") if isinstance(err.schema, dict) else None
    if custom and v in ("oneOf", "anyOf"):
        return path, custom
    if v in ("oneOf", "anyOf", "allOf") and err.context:
        from jsonschema.exceptions import best_match

        return _reason(best_match(err.context))
    if v == "required":
        missing = [k for k in arg if isinstance(inst, dict) and k not in inst]
        return path, f"missing field {missing[0]!r}" if missing else err.message
    if v == "additionalProperties" and isinstance(inst, dict):
        known = sorted(err.schema.get("properties", {}))
        extra = sorted(k for k in inst if k not in err.schema.get("properties", {}))
        return path, (
            f"unknown field(s) {', '.join(map(repr, extra))}"
            + (f"; known: {', '.join(known)}" if known else "")
        )
    if v == "enum":
        return path, f"must be one of {', '.join(map(str, arg))}, got {inst!r}"
    if v == "const":
        return path, f"must be {arg!r}, got {inst!r}"
    if v == "type":
        kinds = arg if isinstance(arg, list) else [arg]
        names = {
            "integer": "int",
            "number": "number",
            "string": "str",
            "boolean": "bool",
            "object": "mapping",
            "array": "list",
            "null": "null",
        }
        return path, f"must be {' or '.join(names.get(k, str(k)) for k in kinds)}, got {inst!r}"
    if v in ("minimum", "exclusiveMinimum", "maximum", "exclusiveMaximum"):
        op = {"minimum": ">=", "exclusiveMinimum": ">", "maximum": "<=", "exclusiveMaximum": "<"}[v]
        return path, f"must be {op} {arg}, got {inst!r}"
    if v == "pattern":
        return path, f"{inst!r} is not valid here (must match {arg})"
    if v in ("minItems", "minProperties"):
        return path, "must not be empty" if arg == 1 else err.message
    if v == "propertyNames":
        return path, f"key {inst!r} is not valid: {err.message}"
    return path, err.message


def problems(doc: Any, name: str) -> list[str]:
    """Every structural problem of ``doc`` as ``field path: reason`` (empty: valid)."""
    errors = sorted(
        _validator(name).iter_errors(doc), key=lambda e: (list(map(str, e.absolute_path)), e.validator)
    )
    out = []
    for err in errors:
        path, reason = _reason(err)
        line = f"{format_path(path)}: {reason}" if path else reason
        if line not in out:
            out.append(line)
    return out


def validate(doc: Any, name: str, source: str) -> None:
    """Raise :class:`SchemaError` ``source: path: reason`` (+ how many more) when ``doc`` is malformed."""
    found = problems(doc, name)
    if found:
        more = f" (and {len(found) - 1} more problem(s))" if len(found) > 1 else ""
        raise SchemaError(f"{source}: {found[0]}{more}")
