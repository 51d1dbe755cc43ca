"""A robot's skill set: its plan language, fixed prompt, skills and segment rule (one YAML file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from timely_llm_ros.core.segmenter import SegmentChecker, SegmentRule, split_segments
from timely_llm_ros.core.skills.model import SkillCall, SkillParseError, SkillSpec, Step
from timely_llm_ros.core.skills.parser import Parser, parse_text


@dataclass
class SkillSet:
    """A robot's skill set, plan language, fixed prompt and segment rule (one YAML file)."""

    name: str
    robot_type: str
    language: str
    prompt: str
    max_segment_tokens: int
    segment_gen_estimate_s: float
    skills: dict[str, SkillSpec] = field(default_factory=dict)
    segment_rule: SegmentRule = field(default_factory=lambda: SegmentRule("sentence"))
    request_template: str = "{request}\nResponse: "
    max_loop_count: int = 100
    examples: list[dict[str, str]] = field(default_factory=list)
    source_path: str = ""
    backends: dict[str, Any] = field(default_factory=dict)  # per-backend config (e.g. ros: mapping)

    def new_checker(self) -> SegmentChecker:
        """A fresh stop checker for one generation with this skill set."""
        return SegmentChecker(self.segment_rule)

    def split(self, text: str) -> list[str]:
        """Segments of a whole plan text as the stop checker would cut them (see ``split_segments``)."""
        return split_segments(self.segment_rule, text)

    def skill_names(self) -> set[str]:
        """Call names (abbreviations) of the skills."""
        return set(self.skills)

    def parse(self, text: str) -> list[SkillCall]:
        """Parse one segment (a possibly partial program) into validated skill calls."""
        return parse_text(self, text, stack=None)[0]

    def parse_plan(self, text: str) -> list[SkillCall]:
        """Parse a complete plan; unclosed or unopened blocks are errors."""
        calls, stack = parse_text(self, text, stack=[])
        if stack:
            raise SkillParseError(
                f"block opened by {stack[-1][2]!r} is never closed ('}}' missing)", stack[-1][2]
            )
        return calls

    def steps(self, text: str) -> list[Step]:
        """One segment's calls and block boundaries in source order (validated like :meth:`parse`).

        What a streaming interpreter runs when the segment arrives depends on blocks opened or closed
        in other segments; :func:`timely_llm_ros.core.exectime.executed_calls` replays these steps.
        """
        p = Parser(self, text, stack=None)
        p.run()
        return p.steps

    def parse_segments(self, segments: list[str]) -> list[list[SkillCall]]:
        """Parse a plan's segments in order, carrying open blocks from one segment to the next."""
        stack: list[tuple[str, int, str]] = []
        out = []
        for seg in segments:
            calls, stack = parse_text(self, seg, stack=stack)
            out.append(calls)
        return out

    def format_request(self, task: str, scene: str = "") -> str:
        """The full prompt for one task: the fixed prefix (:attr:`prompt`) + the task-specific part.

        The public TimelyLLM workloads put scene and task in one string (``"Scene: [...] Task: [A]
        ..."``); such a task is used verbatim, otherwise the two are combined in that same form.
        """
        if not isinstance(task, str) or not task.strip():
            raise SkillParseError("task instruction is empty")
        task = task.strip()
        request = task if task.startswith("Scene:") else f"Scene: {scene.strip() or '[]'} Task: {task}"
        return self.prompt + self.request_template.format(request=request)
