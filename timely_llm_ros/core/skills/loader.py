"""Loading skill sets from YAML (``config/skills/<name>.yaml`` on the config search path), checked
field by field so that a malformed file fails with its path, the field and the reason."""

from __future__ import annotations

import math
import re
from functools import cache
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.paths import config_files
from timely_llm_ros.core.schema import SchemaError
from timely_llm_ros.core.schema import validate as validate_schema
from timely_llm_ros.core.segmenter import SegmentRule
from timely_llm_ros.core.skills.model import (
    ARG_TYPES,
    CHATBOT_SKILL,
    LANGUAGES,
    ArgSpec,
    SkillParseError,
    SkillSetError,
    SkillSpec,
    UnknownSkillSet,
    fmt_number,
)
from timely_llm_ros.core.skills.skillset import SkillSet

_SKILL_PLACEHOLDER = "<<SKILLS>>"


def _field(data: dict[str, Any], key: str, path: str, kind: type | tuple[type, ...], where: str = "") -> Any:
    if key not in data:
        raise SkillSetError(f"{path}: missing field {where}{key!r}")
    value = data[key]
    if isinstance(value, bool) and kind is not bool:
        raise SkillSetError(f"{path}: field {where}{key!r} must be {_kind_name(kind)}, got {value!r}")
    if not isinstance(value, kind):
        raise SkillSetError(f"{path}: field {where}{key!r} must be {_kind_name(kind)}, got {value!r}")
    return value


def _kind_name(kind: type | tuple[type, ...]) -> str:
    if isinstance(kind, tuple):
        return " or ".join(k.__name__ for k in kind)
    return kind.__name__


def _load_arg(raw: Any, path: str, where: str) -> ArgSpec:
    if not isinstance(raw, dict):
        raise SkillSetError(f"{path}: {where} must be a mapping, got {raw!r}")
    name = _field(raw, "name", path, str, where)
    typ = _field(raw, "type", path, str, where)
    if typ not in ARG_TYPES:
        raise SkillSetError(f"{path}: field {where}'type' must be one of {', '.join(ARG_TYPES)}, got {typ!r}")
    lo, hi = raw.get("min"), raw.get("max")
    for key, val in (("min", lo), ("max", hi)):
        if val is None:
            continue
        if typ not in ("int", "float"):
            raise SkillSetError(f"{path}: field {where}{key!r} only applies to int/float arguments")
        if isinstance(val, bool) or not isinstance(val, (int, float)) or not math.isfinite(val):
            raise SkillSetError(f"{path}: field {where}{key!r} must be a finite number, got {val!r}")
    if lo is not None and hi is not None and lo > hi:
        raise SkillSetError(f"{path}: {where}min {lo} is above max {hi}")
    nonempty = raw.get("nonempty", False)
    if not isinstance(nonempty, bool):
        raise SkillSetError(f"{path}: field {where}'nonempty' must be true or false")
    return ArgSpec(name, typ, lo, hi, nonempty)


def _load_skill(raw: Any, path: str, idx: int) -> SkillSpec:
    where = f"skills[{idx}]."
    if not isinstance(raw, dict):
        raise SkillSetError(f"{path}: skills[{idx}] must be a mapping, got {raw!r}")
    abbr = _field(raw, "abbr", path, str, where)
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_]*", abbr):
        raise SkillSetError(f"{path}: field {where}'abbr' {abbr!r} is not an identifier")
    name = _field(raw, "name", path, str, where)
    raw_args = raw.get("args", [])
    if not isinstance(raw_args, list):
        raise SkillSetError(f"{path}: field {where}'args' must be a list")
    args = tuple(_load_arg(a, path, f"{where}args[{j}].") for j, a in enumerate(raw_args))
    returns = _field(raw, "returns", path, str, where)
    query = _field(raw, "query", path, bool, where)
    desc = _field(raw, "description", path, str, where)
    return SkillSpec(abbr, name, args, returns, query, desc.strip())


def skill_list_text(skills: dict[str, SkillSpec]) -> str:
    """The skill list as it appears in the prompt: ``abbr:name(arg:type[min-max]) -> ret: meaning``."""
    lines = []
    for s in skills.values():
        parts = []
        for a in s.args:
            rng = ""
            if a.min is not None or a.max is not None:
                rng = f"[{fmt_number(a.min) if a.min is not None else ''}-{fmt_number(a.max) if a.max is not None else ''}]"
            parts.append(f"{a.name}:{a.type}{rng}")
        ret = f" -> {s.returns}" if s.returns != "none" else ""
        lines.append(f"{s.abbr}:{s.name}({', '.join(parts)}){ret}: {s.description}")
    return "\n".join(lines)


def _read_yaml(path: Path) -> dict[str, Any]:
    """The file's top-level mapping, checked against config/schema/skill_set.schema.json."""
    p = str(path)
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise SkillSetError(f"{p}: not valid YAML: {exc}") from exc
    except OSError as exc:
        raise SkillSetError(f"{p}: cannot read: {exc}") from exc
    if not isinstance(data, dict):
        raise SkillSetError(f"{p}: top level must be a mapping")
    try:  # structure first (config/schema/skill_set.schema.json): file, field path, reason
        validate_schema(data, "skill_set", p)
    except SchemaError as exc:
        raise SkillSetError(str(exc)) from None
    return data


def _load_skills(data: dict[str, Any], p: str, language: str) -> dict[str, SkillSpec]:
    raw_skills = _field(data, "skills", p, list)
    skills: dict[str, SkillSpec] = {}
    for i, raw in enumerate(raw_skills):
        spec = _load_skill(raw, p, i)
        if spec.abbr in skills:
            raise SkillSetError(f"{p}: skills[{i}].abbr {spec.abbr!r} is defined twice")
        skills[spec.abbr] = spec
    if not skills:
        raise SkillSetError(f"{p}: field 'skills' is empty")
    if language == "chatbot" and set(skills) != {CHATBOT_SKILL}:
        raise SkillSetError(f"{p}: a chatbot skill set has exactly one skill, {CHATBOT_SKILL!r}")
    return skills


def _segment_rule(data: dict[str, Any], p: str, language: str, skills: dict[str, SkillSpec]) -> SegmentRule:
    seg = data.get("segment", {})
    if not isinstance(seg, dict):
        raise SkillSetError(f"{p}: field 'segment' must be a mapping")
    mode = seg.get("mode", "statement" if language != "chatbot" else "sentence")
    min_chars = seg.get("min_chars", 0)
    if isinstance(min_chars, bool) or not isinstance(min_chars, int) or min_chars < 0:
        raise SkillSetError(f"{p}: field 'segment.min_chars' must be a non-negative int, got {min_chars!r}")
    expected_modes = ("statement",) if language != "chatbot" else ("sentence", "paragraph")
    if mode not in expected_modes:
        raise SkillSetError(
            f"{p}: field 'segment.mode' must be {' or '.join(expected_modes)} "
            f"for language {language!r}, got {mode!r}"
        )
    return SegmentRule(mode, frozenset(skills), bare_calls=language == "minispec", min_chars=min_chars)


def _request_template(data: dict[str, Any], p: str) -> str:
    template = data.get("request_template", "{request}\nResponse: ")
    if not isinstance(template, str) or "{request}" not in template:
        raise SkillSetError(f"{p}: field 'request_template' must be a string containing '{{request}}'")
    try:
        template.format(request="")
    except (KeyError, IndexError, ValueError) as exc:
        raise SkillSetError(f"{p}: field 'request_template' has a bad placeholder: {exc}") from exc
    return template


def _loop_limit_and_examples(data: dict[str, Any], p: str) -> tuple[int, list[dict[str, str]]]:
    max_loop = data.get("max_loop_count", 100)
    if isinstance(max_loop, bool) or not isinstance(max_loop, int) or max_loop < 1:
        raise SkillSetError(f"{p}: field 'max_loop_count' must be a positive int, got {max_loop!r}")
    examples = data.get("examples", [])
    if not isinstance(examples, list) or not all(
        isinstance(e, dict) and isinstance(e.get("task"), str) and isinstance(e.get("plan"), str)
        for e in examples
    ):
        raise SkillSetError(f"{p}: field 'examples' must be a list of {{task: str, plan: str}}")
    return max_loop, [dict(e) for e in examples]


def load_skill_set_file(path: str | Path) -> SkillSet:
    """Load and validate one skill-set YAML file (not cached)."""
    path = Path(path)
    p = str(path)
    data = _read_yaml(path)
    name = _field(data, "name", p, str)
    robot_type = _field(data, "robot_type", p, str)
    language = _field(data, "language", p, str)
    if language not in LANGUAGES:
        raise SkillSetError(f"{p}: field 'language' must be one of {', '.join(LANGUAGES)}, got {language!r}")
    prompt = _field(data, "prompt", p, str)
    mst = _field(data, "max_segment_tokens", p, int)
    if mst <= 0:
        raise SkillSetError(f"{p}: field 'max_segment_tokens' must be positive, got {mst}")
    gen = _field(data, "segment_gen_estimate_s", p, (int, float))
    if not math.isfinite(gen) or gen <= 0:
        raise SkillSetError(f"{p}: field 'segment_gen_estimate_s' must be a positive number, got {gen}")
    skills = _load_skills(data, p, language)
    rule = _segment_rule(data, p, language, skills)
    template = _request_template(data, p)
    max_loop, examples = _loop_limit_and_examples(data, p)
    if _SKILL_PLACEHOLDER in prompt:
        prompt = prompt.replace(_SKILL_PLACEHOLDER, skill_list_text(skills))
    sset = SkillSet(
        name,
        robot_type,
        language,
        prompt,
        mst,
        float(gen),
        skills,
        rule,
        template,
        max_loop,
        examples,
        p,
        dict(data.get("backends") or {}),
    )
    for i, ex in enumerate(sset.examples):
        try:
            sset.parse_plan(ex["plan"])
        except SkillParseError as exc:
            raise SkillSetError(f"{p}: examples[{i}].plan does not parse: {exc}") from exc
    return sset


def available_skill_sets() -> list[str]:
    """Names of the skill sets on the config search path (shipped ones and users' overlays)."""
    return sorted(config_files("skills"))


@cache
def _load_cached(path: str, mtime_ns: int) -> SkillSet:
    return load_skill_set_file(path)


def load_skill_set(name: str) -> SkillSet:
    """The skill set ``skills/<name>.yaml`` found first on the config search path (cached per file)."""
    files = config_files("skills")
    if not isinstance(name, str) or name not in files:
        raise UnknownSkillSet(str(name), sorted(files))
    path = files[name]
    sset = _load_cached(str(path), path.stat().st_mtime_ns)
    if sset.name != name:
        raise SkillSetError(
            f"{sset.source_path}: field 'name' is {sset.name!r}, expected {name!r} (file name)"
        )
    return sset
