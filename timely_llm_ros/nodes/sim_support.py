"""What the planner node needs to run the *simulated* engine on the wall clock (no ROS here).

**Real-time simulated engine.** :class:`~timely_llm_ros.engines.sim.SimEngine` keeps a virtual clock:
``step()`` prices one decoding iteration from the engine profile and advances the clock by that
amount instantly. The planner node works in wall time (robots execute for real), so
:class:`RealtimeSimEngine` drives the same model in real time: before every step the virtual clock
is moved up to "now" (``advance_to``: the engine was idle or the planner was busy in between), the
step is priced as usual, and then the call *sleeps until the modelled end of the step* before it
returns the tokens — so tokens, segment cuts and dispatches happen at the wall times the profile
predicts, exactly as they would with a real GPU in lock-step. ``now()`` is the wall clock. The
sleep watches a stop event so shutdown is never delayed by more than one step.

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
import threading
import time
from collections.abc import Callable, Iterable

from timely_llm_ros.core.options.kv_policy import KVOptions
from timely_llm_ros.core.skills import SkillParseError, SkillSet, load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.engines.base import TokenOut
from timely_llm_ros.engines.sim import SimEngine

CATALOG = "catalog"


# engine_options the simulated engine takes (the names the llama.cpp engine uses for the same switches)
SIM_ENGINE_OPTIONS = ("kv_policy", "eviction", "reload", "chunked_prefill")


def sim_engine_kwargs(options: dict) -> dict:
    """``engine_options`` of ``engine:=sim`` as :class:`RealtimeSimEngine` keywords; ValueError naming
    an option it does not take (never silently ignored). Values are checked by the engine."""
    unknown = sorted(set(options) - set(SIM_ENGINE_OPTIONS))
    if unknown:
        raise ValueError(
            f"the sim engine has no option(s) {unknown}; accepted: {', '.join(SIM_ENGINE_OPTIONS)}"
        )
    kv = {("policy" if k == "kv_policy" else k): v for k, v in options.items() if k != "chunked_prefill"}
    out: dict = {"kv_options": kv}
    if "chunked_prefill" in options:
        if not isinstance(options["chunked_prefill"], bool):
            raise ValueError(f"chunked_prefill must be true or false, got {options['chunked_prefill']!r}")
        out["chunked_prefill"] = options["chunked_prefill"]
    return out


class RealtimeSimEngine(SimEngine):
    """SimEngine whose steps take their modelled duration in wall time (see module docstring)."""

    def __init__(
        self,
        profile: str = "llama3-8b-fp16-rtx4090",
        *,
        clock: Callable[[], float] = time.time,
        stop: threading.Event | None = None,
        max_sleep: float = 5.0,
        kv_options: dict | None = None,
        chunked_prefill: bool = False,
    ) -> None:
        self._clock = clock
        self._stop = stop or threading.Event()
        self._max_sleep = float(max_sleep)
        super().__init__(profile, start_time=clock(), chunked_prefill=chunked_prefill)
        if kv_options:  # over the profile's eviction order (the engine's default KV options)
            self.kv = KVOptions(**{"eviction": self.kv.eviction, **kv_options})
        self.info.name = f"sim-realtime:{self.profile.name}"
        self.late_s = 0.0  # total time steps returned after their modelled end (host too slow)

    def now(self) -> float:
        return self._clock()

    def virtual_now(self) -> float:
        """End of the last modelled step (the parent's virtual clock)."""
        return SimEngine.now(self)

    def step(self) -> list[TokenOut]:
        self.advance_to(self._clock())
        outs = super().step()
        if outs:
            delay = self.virtual_now() - self._clock()
            if delay > 0:
                # a profile never prices one iteration near max_sleep; the cap guards a bad profile
                self._stop.wait(min(delay, self._max_sleep))
            else:
                self.late_s += -delay
        return outs


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
            from timely_llm_ros.workload import resolve_workload

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
