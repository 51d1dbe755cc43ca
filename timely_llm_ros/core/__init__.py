"""Pure-Python TimelyLLM core: nothing in this package imports ROS, so the same code drives the
simulator, the real engines and the ROS nodes, and can be tested on a virtual clock.

What is where (a newcomer reads the first group first):

**The paper's algorithms and values** (TimelyLLM, paper 000), in this folder:

* :mod:`.tuf` — time-utility functions (Eq. 1, segment TUFs, deadlines, zero-utility time);
* :mod:`.task` — :class:`~.task.TaskSpec`, what a robot asks for; :mod:`.generation` — requests,
  segments and their timestamps (§4.2); :mod:`.events` — trace events and task states;
* :mod:`.segmenter` — where a generation is suspended (§4.1); :mod:`.exectime` — per-skill robot
  execution-time models (§4.3); :mod:`.profile` — an engine's timing and memory profile;
* :mod:`.planner` — :class:`~.planner.PlannerCore`, the segmented-generation loop (§3, §4.1–4.4);
  :mod:`.engine` — the engine port it drives (engines implement it);
* :mod:`.metrics` — per-task and per-class metrics (§7.1); :mod:`.skills` — skill sets and plans.

**The scheduler's parts** — :mod:`timely_llm_ros.core.sched`: priorities (PUD, EDF, FCFS), the
robust ``timely`` policy and its index, admission checks, the closed set of policies, the
:class:`~timely_llm_ros.core.sched.scheduler.Scheduler`, the per-robot task queue.

**Optional mechanisms beyond the paper** — :mod:`timely_llm_ros.core.options`: the planner options
(urgency classes, length predictor, overrun strategies, token budget, replay of reference plans)
and the engines' KV policy for suspended generations (related papers 001–004).

**Plumbing** (checks at the boundary, files, helpers), in this folder: :mod:`.intake` (the
planner's front door), :mod:`.limits` (field limits of anything received), :mod:`.feedback` (which
robot feedback is believed), :mod:`.robot_liveness` (heartbeats), :mod:`.motion_budget` (how far
one plan may move a robot), :mod:`.grammar` (GBNF of a skill set), :mod:`.exectime_fit`
(refitting time models), :mod:`.robot_sim` (simulated robots), :mod:`.paths` and :mod:`.schema`
(data files and their JSON Schemas).

This face lists the core's public API (``from timely_llm_ros.core import TUF, PlannerCore``),
grouped below by the module that defines each name, and imports a module only when one of its names
is first read (:mod:`.face`), so importing one small module of the core stays cheap. The two wings
have faces of their own (``timely_llm_ros.core.sched``, ``timely_llm_ros.core.options``). Inside
the package every name is imported from its home module, never through a face.
"""

from timely_llm_ros.core.face import lazy_face

_HOMES: dict[str, tuple[str, ...]] = {
    "timely_llm_ros.core.tuf": (
        "TUF",
        "InvalidTUF",
        "NORMAL_TUF",
        "URGENT_TUF",
        "utility",
        "utilities",
        "segment_deadline",
        "utility_span",
        "zero_utility_time",
        "is_urgent",
        "tuf_class",
    ),
    "timely_llm_ros.core.task": ("TaskSpec", "TaskRejected", "task_class"),
    "timely_llm_ros.core.generation": ("Generation", "Request", "Segment", "TaskRecord", "Dispatch"),
    "timely_llm_ros.core.events": ("TraceEvent", "EVENT_KINDS", "TASK_STATES", "TERMINAL_STATES"),
    "timely_llm_ros.core.segmenter": ("SegmentChecker", "SegmentRule", "SegmentRuleError", "split_segments"),
    "timely_llm_ros.core.exectime": (
        "ExecTimeModel",
        "ExecTimeError",
        "UnknownRobotType",
        "load_exec_time_model",
    ),
    "timely_llm_ros.core.profile": ("EngineProfile", "ProfileError", "load_profile", "available_profiles"),
    "timely_llm_ros.core.planner": ("PlannerCore",),
    "timely_llm_ros.core.engine": (
        "Engine",
        "Context",
        "TokenOut",
        "MemoryInfo",
        "EngineInfo",
        "EngineError",
        "EngineOutOfMemory",
    ),
    "timely_llm_ros.core.metrics": ("ClassMetrics", "summarize", "task_utility"),
    "timely_llm_ros.core.skills.skillset": ("SkillSet",),
    "timely_llm_ros.core.skills.loader": ("load_skill_set", "available_skill_sets"),
    "timely_llm_ros.core.skills.model": ("SkillCall", "SkillParseError", "SkillSetError", "UnknownSkillSet"),
    "timely_llm_ros.core.sched.scheduler": ("Scheduler",),
    "timely_llm_ros.core.sched.policies": (
        "Policy",
        "PolicyName",
        "UnknownPolicy",
        "make_policy",
        "parse_policy",
    ),
    "timely_llm_ros.core.options.planner_options": ("PlannerOptions",),
}
__all__, __getattr__, __dir__ = lazy_face(__name__, _HOMES)
