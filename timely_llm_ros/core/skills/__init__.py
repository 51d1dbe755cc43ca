"""Robot skill sets as data, and the parser that turns plan text into validated skill calls.

A skill set (``config/skills/<name>.yaml``) is what TimelyLLM assumes users pre-store on the server
(paper §4.1): the fixed part of the planning prompt (language rules, skill list, worked examples),
the skills with their argument types and ranges, and the rule that says when generated text holds an
executable segment. The planner uses the prompt as the shared prefix, feeds generated text to
:meth:`SkillSet.new_checker` and dispatches each segment after :meth:`SkillSet.parse` validated it.

Languages (``language`` field):

* ``minispec`` — TypeFly's drone plan language (grammar as published with TypeFly, Chen et al., 2024):
  statements separated by ``;``, conditionals ``?cond{...}``, loops ``N{...}``, assignments
  ``_1=call``, returns ``->value``, conditions joined with ``&``/``|``, comparators ``> < == !=``,
  single- or double-quoted strings, and no-argument skills without parentheses (``tp``).
  The older 2023 comma form (``mf,100``) is **rejected** with a reason that shows the modern form:
  a comma call has no closing token, so a streaming checker could only end it at the next ``;`` and
  could not tell ``mf,10`` from a half-generated ``mf,100``; TypeFly replaced it in 2024 and the
  public traces only quote it inside task texts, never as generated output.
* ``call`` — flat sequences of parenthesised calls separated by ``;`` or newlines, as in the
  TimelyLLM arm prompts (``sc('red_box'); gt('red_box'); pi('red_box'); dr();``) and FLTRNN
  (``move_to(0.5, 0.2); take('red_box'); drop('red_box');``). No blocks or variables.
* ``chatbot`` — free text; every non-blank segment is one ``say(text)`` call, executed as reading
  time by the execution-time model.

A segment is usually a *partial* program: ``?s('cat')==True{`` opens a block that a later segment
closes. :meth:`SkillSet.parse` accepts such pieces (unclosed blocks at the end, closing braces of
earlier blocks at the start); :meth:`SkillSet.parse_plan` demands a complete, balanced plan;
:meth:`SkillSet.parse_segments` parses a plan's segments in order and carries the open blocks
across them (so calls inside a loop opened in an earlier segment get the right repeat count).

The package's modules, one concern each: :mod:`.model` (skills, calls, errors), :mod:`.lexer`,
:mod:`.parser`, :mod:`.skillset` (:class:`SkillSet`) and :mod:`.loader` (YAML files, the config
search path); every public name is importable from ``timely_llm_ros.core.skills`` as before.
"""

from timely_llm_ros.core.skills.lexer import TOKEN_RE, VAR_RE
from timely_llm_ros.core.skills.loader import (
    available_skill_sets,
    load_skill_set,
    load_skill_set_file,
    skill_list_text,
)
from timely_llm_ros.core.skills.model import (
    ARG_TYPES,
    CHATBOT_SKILL,
    LANGUAGES,
    ArgSpec,
    SkillCall,
    SkillParseError,
    SkillSetError,
    SkillSpec,
    Step,
    UnknownSkillSet,
    Var,
)
from timely_llm_ros.core.skills.parser import check_arg
from timely_llm_ros.core.skills.skillset import SkillSet

__all__ = [
    "ARG_TYPES",
    "CHATBOT_SKILL",
    "LANGUAGES",
    "TOKEN_RE",
    "VAR_RE",
    "ArgSpec",
    "SkillCall",
    "SkillParseError",
    "SkillSet",
    "SkillSetError",
    "SkillSpec",
    "Step",
    "UnknownSkillSet",
    "Var",
    "available_skill_sets",
    "check_arg",
    "load_skill_set",
    "load_skill_set_file",
    "skill_list_text",
]
