"""Validation and prompt preparation of incoming tasks (the planner's front door).

Every reason a task cannot be planned is found here, before it touches the scheduler or the
engine, and reported as :class:`TaskRejected` with a reason meant for the robot: malformed
:class:`TaskSpec` fields (``TaskSpec.validate``), TUF numbers that cannot describe a non-increasing
utility (NaN / negative ERT, alpha > 0, beta ≤ 0 — re-checked because a TUF object may have been
built around its own validation), an unknown skill set, a prompt that does not fit the engine's
context, and (simulated engine) a missing reference plan.

The prompt is the skill set's fixed prompt — tokenised once per skill set and passed to the engine
as a shared prefix (paper §4.1: users pre-store the fixed part of requests on the server) — followed
by the task's own text, tokenised separately and appended as ids.

A task resumed after a planner restart (:mod:`.journal`) passes ``seed``: the plan text its robot
already received. It is appended to the prompt as the beginning of the answer, so the engine
re-plans only the rest of the plan, consistently with what the robot executes (for the simulated
engine: the rest of the reference plan, which must start with the seed).
"""

from __future__ import annotations

from dataclasses import dataclass

from timely_llm_ros.core.engine import Engine, EngineError
from timely_llm_ros.core.skills import SkillParseError, SkillSet, load_skill_set
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import TUF, InvalidTUF


@dataclass(slots=True)
class PreparedTask:
    skill_set: SkillSet
    prompt_ids: list[int]
    prefix_len: int  # the first prefix_len ids are the skill set's shared prompt
    max_tokens: int  # the task's budget, capped by what is left of the context
    script: list[int] | None  # simulated engine: the reference plan's ids


class Intake:
    """Validates tasks and builds their prompts for one engine (caches prefix tokenisations)."""

    def __init__(self, engine: Engine) -> None:
        self.engine = engine
        self._prefix_ids: dict[str, list[int]] = {}

    def prefix_ids(self, sset: SkillSet) -> list[int]:
        """Token ids of a skill set's fixed prompt (tokenised once per engine, then shared)."""
        prefix = self._prefix_ids.get(sset.name)
        if prefix is None:
            prefix = self._prefix_ids[sset.name] = self.engine.tokenize(sset.prompt)
        return prefix

    def prepare(self, spec: TaskSpec, seed: str = "") -> PreparedTask:
        """Raise :class:`TaskRejected` with a reason, or return the prepared prompt (``seed``: see the
        module docstring)."""
        spec.validate()
        tuf = spec.tuf
        try:
            TUF(tuf.ert, tuf.alpha, tuf.beta)
        except InvalidTUF as exc:
            raise TaskRejected(f"invalid TUF: {exc}") from None
        try:
            sset = load_skill_set(spec.skill_set)
        except KeyError as exc:  # UnknownSkillSet: its message lists the available sets
            raise TaskRejected(str(exc)) from None
        try:
            full = sset.format_request(spec.instruction, spec.scene)
        except SkillParseError as exc:
            raise TaskRejected(exc.reason) from None
        try:  # a remote engine (engine: openai) tokenizes on its server, which may be unreachable
            prefix = self.prefix_ids(sset)
            prompt = prefix + self.engine.tokenize(full[len(sset.prompt):] + seed)
        except EngineError as exc:
            raise TaskRejected(f"the engine cannot tokenize the prompt: {exc}") from None
        limit = self.engine.info.context_limit
        if len(prompt) >= limit:
            raise TaskRejected(f"prompt of {len(prompt)} tokens does not fit the engine context of "
                               f"{limit} tokens")
        script = None
        if self.engine.needs_script:
            if not spec.reference_plan:
                raise TaskRejected("the simulated engine needs a reference_plan to emit")
            plan = spec.reference_plan
            if not plan.startswith(seed):
                raise TaskRejected("cannot resume: the plan sent before the restart is not the start of the "
                                   "reference plan")
            script = self.engine.tokenize(plan[len(seed):])
        return PreparedTask(sset, prompt, len(prefix), min(spec.max_tokens, limit - len(prompt)), script)
