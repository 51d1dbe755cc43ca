"""The reference plans the planner node's *simulated* engine emits (no ROS here).

The real-time simulated engine itself is :mod:`timely_llm_ros.engines.sim_realtime` (the registry
builds it for ``engine:=sim``).

**Reference plans.** The simulated engine emits a scripted plan per task (``TaskSpec.reference_plan``),
but a ``Task`` message carries no plan (a real robot has none to give). :class:`PlanTable` holds the
plans the simulated planner may emit, keyed by (skill set, instruction, scene); sources are
``catalog`` (the LRTrace benchmark tasks, config/tasks/lrtrace_tasks.yaml) and any workload spec
``resolve_workload`` accepts (preset, public sample, file — custom tasks with a ``plan:``).

**Any other instruction** still gets a plan, so a user's own task (the README's example, a
``ros2 topic pub`` typed by hand) runs on the default fleet: :meth:`PlanTable.lookup` falls back to
the *closest known plan* of that skill set — the reference plans of the sources above and the worked
examples of the skill-set file — by word overlap of the instruction (tags like ``[A]`` and the
``Scene: … Task:`` wrapper ignored), and for a skill set without any, to a one-statement plan built
from its grammar (its first action skill with in-range arguments; a chatbot set answers with one
sentence). The simulated engine models *timing*, not understanding: the fallback only has to be a
valid program of the robot's skill set, which every candidate is (skill-set examples are parsed
when the file is loaded; :func:`grammar_plan` is parsed before it is returned).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable

from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.core.skills.model import SkillParseError
from timely_llm_ros.core.skills.skillset import SkillSet
from timely_llm_ros.core.task import TaskSpec

CATALOG = "catalog"


class PlanTable:
    """Reference plans for the simulated engine, by (skill_set, instruction, scene).

    ``lookup`` answers with the exact plan when the instruction is known and otherwise with the
    closest known plan (module docstring); ``fallback=False`` restores the strict table.
    """

    def __init__(self, fallback: bool = True) -> None:
        self._exact: dict[tuple[str, str, str], str] = {}
        self._loose: dict[tuple[str, str], str | None] = {}  # None: several scenes, different plans
        self.sources: list[str] = []
        self.fallback = fallback
        self.fallbacks = 0  # lookups answered by the closest plan, not an exact one

    def __len__(self) -> int:
        return len(self._exact)

    def add(self, skill_set: str, instruction: str, scene: str, plan: str) -> None:
        key = (skill_set.strip(), instruction.strip())
        self._exact[(*key, scene.strip())] = plan
        if key in self._loose and self._loose[key] not in (None, plan):
            self._loose[key] = None
        else:
            self._loose.setdefault(key, plan)

    def add_tasks(self, tasks: Iterable[TaskSpec]) -> int:
        n = 0
        for t in tasks:
            if t.reference_plan:
                self.add(t.skill_set, t.instruction, t.scene or "", t.reference_plan)
                n += 1
        return n

    def load(self, source: str) -> int:
        """Add the plans of one source (``catalog`` or a workload spec); raises with a reason."""
        source = source.strip()
        if source == CATALOG:
            from timely_llm_ros.workload.tasks import load_catalog

            n = 0
            for task in load_catalog():
                for v in task.all_variants():
                    self.add(v.skill_set, v.instruction, v.scene, v.plan)
                    n += 1
        else:
            from timely_llm_ros.workload.fileformat import resolve_workload

            n = self.add_tasks(resolve_workload(source).tasks)
        self.sources.append(source)
        return n

    def lookup(self, skill_set: str, instruction: str, scene: str = "") -> str | None:
        """The plan for this task: exact, else (with ``fallback``) the closest one; None if none."""
        key = (skill_set.strip(), instruction.strip())
        plan = self._exact.get((*key, scene.strip()))
        if plan is None:
            plan = self._loose.get(key)
        if plan is None and self.fallback:
            plan = self.closest(skill_set, instruction)
            if plan is not None:
                self.fallbacks += 1
        return plan

    def closest(self, skill_set: str, instruction: str) -> str | None:
        """The known plan of ``skill_set`` whose instruction shares the most words with this one.

        Candidates: the table's plans of that skill set, then the skill-set file's examples (ties go
        to the earlier one, so the answer is deterministic); without any, :func:`grammar_plan`.
        """
        name = skill_set.strip()
        candidates = [(instr, plan) for (sset, instr, _scene), plan in self._exact.items() if sset == name]
        try:
            sset = load_skill_set(name)
        except (KeyError, ValueError):  # unknown or broken skill set: the planner rejects the task
            sset = None
        if sset is not None:
            candidates += [(ex["task"], ex["plan"]) for ex in sset.examples]
        if not candidates:
            return grammar_plan(sset, instruction) if sset is not None else None
        words = instruction_words(instruction)
        best = max(
            range(len(candidates)), key=lambda i: (_overlap(words, instruction_words(candidates[i][0])), -i)
        )
        return candidates[best][1]


_TAGS_RE = re.compile(r"^\s*(?:Scene:\s*\[.*?\]\s*,?\s*Task:)?\s*(?:\[[A-Z]\])?", re.DOTALL)
_WORD_RE = re.compile(r"[a-z0-9]+")


def instruction_words(text: str) -> frozenset[str]:
    """Lower-case words of an instruction without the ``Scene: [...] Task: [A]`` wrapper."""
    return frozenset(_WORD_RE.findall(_TAGS_RE.sub("", text, count=1).lower()))


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    """Jaccard similarity of two word sets (0 when both are empty)."""
    union = a | b
    return len(a & b) / len(union) if union else 0.0


def grammar_plan(sset: SkillSet, instruction: str) -> str | None:
    """A one-statement plan from the skill set's grammar alone (no examples to imitate).

    Chatbot sets answer with one sentence naming the request; robot sets call their first action
    skill (``query: false``) with each argument at its lower bound (ints/floats) or a placeholder
    text. Returns None when the result does not parse (a skill set whose first action cannot be
    called with such arguments).
    """
    if sset.language == "chatbot":
        words = " ".join(_TAGS_RE.sub("", instruction, count=1).split()[:12])
        return f"Here is my answer to your request: {words.rstrip('.?!')}."
    action = next((s for s in sset.skills.values() if not s.query), None)
    if action is None:
        return None
    args = []
    for a in action.args:
        if a.type in ("int", "float"):
            lo = a.min if a.min is not None else (a.max if a.max is not None and a.max < 0 else 0)
            args.append(str(math.ceil(lo)) if a.type == "int" else repr(float(lo)))
        elif a.type == "bool":
            args.append("True")
        else:
            args.append("'target'")
    plan = f"{action.abbr}({', '.join(args)});"
    try:
        sset.parse_plan(plan)
    except SkillParseError:
        return None
    return plan
