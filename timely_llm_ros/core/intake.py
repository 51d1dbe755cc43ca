"""Validation and prompt preparation of incoming tasks (the planner's front door).

Every reason a task cannot be planned is found here, before it touches the scheduler or the
engine, and reported as :class:`TaskRejected` with a reason meant for the robot: malformed
:class:`TaskSpec` fields (``TaskSpec.validate``), TUF numbers that cannot describe a non-increasing
utility (NaN / negative ERT, alpha > 0, beta ≤ 0 — re-checked because a TUF object may have been
built around its own validation), an unknown skill set, a prompt that does not fit the engine's
context, and (simulated engine) a missing reference plan.

In replay mode (``replay``, planner option ``plan_source: reference``) a task's reference plan is
handed to a generating engine as the exact text to write (:mod:`.options.replay`); its token budget grows to
the literal's length when smaller, so a replay is never cut short. Tasks without one keep the skill
grammar.

The ROS planner node's front door (:mod:`timely_llm_ros.nodes.planner`) runs the checks that must
come before a task is queued for the planner thread from here too, so each check and its text has
one home: :func:`load_task_skill_set` (also used by :meth:`Intake.prepare`), :func:`check_robot_type`,
:func:`overload_reason` and :class:`TaskIds` (assigned ids, duplicates). Field limits and TUF ranges
of a received message are in :mod:`.limits`. A front-door rejection is a :class:`Refused` (a
:class:`TaskRejected` with the kind of check and the id its status is reported under), so the node
maps every one of them to its status and events in one place.

The prompt is the skill set's fixed prompt — tokenised once per skill set and passed to the engine
as a shared prefix (paper §4.1: users pre-store the fixed part of requests on the server) — followed
by the task's own text, tokenised separately and appended as ids.

A task resumed after a planner restart (:mod:`timely_llm_ros.service.journal`) passes ``seed``: the plan text its robot
already received. It is appended to the prompt as the beginning of the answer, so the engine
re-plans only the rest of the plan, consistently with what the robot executes (for the simulated
engine: the rest of the reference plan, which must start with the seed).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from timely_llm_ros.core.engine import Engine, EngineError
from timely_llm_ros.core.limits import RecentIds, tuf_or_reject
from timely_llm_ros.core.options.replay import ReplayError, reference_literal, replay_budget
from timely_llm_ros.core.skills.loader import load_skill_set
from timely_llm_ros.core.skills.model import SkillParseError
from timely_llm_ros.core.skills.skillset import SkillSet
from timely_llm_ros.core.task import TaskRejected, TaskSpec


@dataclass(slots=True)
class PreparedTask:
    skill_set: SkillSet
    prompt_ids: list[int]
    prefix_len: int  # the first prefix_len ids are the skill set's shared prompt
    max_tokens: int  # the task's budget, capped by what is left of the context
    script: list[int] | None  # simulated engine: the reference plan's ids
    plan: str | None = None  # replay mode: the text the engine must write (core/options/replay.py)


class Intake:
    """Validates tasks and builds their prompts for one engine (caches prefix tokenisations)."""

    def __init__(self, engine: Engine, replay: bool = False) -> None:
        self.engine = engine
        self.replay = replay  # plan_source: reference (core/options/replay.py)
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
        assert tuf is not None  # validate() rejects a task without one
        tuf_or_reject(tuf.ert, tuf.alpha, tuf.beta)
        sset = load_task_skill_set(spec.skill_set)
        try:
            full = sset.format_request(spec.instruction, spec.scene)
        except SkillParseError as exc:
            raise TaskRejected(exc.reason) from None
        try:  # a remote engine (engine: openai) tokenizes on its server, which may be unreachable
            prefix = self.prefix_ids(sset)
            prompt = prefix + self.engine.tokenize(full[len(sset.prompt) :] + seed)
        except EngineError as exc:
            raise TaskRejected(f"the engine cannot tokenize the prompt: {exc}") from None
        limit = self.engine.info.context_limit
        if len(prompt) >= limit:
            raise TaskRejected(
                f"prompt of {len(prompt)} tokens does not fit the engine context of {limit} tokens"
            )
        script = None
        if self.engine.needs_script:
            if not spec.reference_plan:
                raise TaskRejected("the simulated engine needs a reference_plan to emit")
            plan = spec.reference_plan
            if not plan.startswith(seed):
                raise TaskRejected(
                    "cannot resume: the plan sent before the restart is not the start of the reference plan"
                )
            script = self.engine.tokenize(plan[len(seed) :])
        budget = spec.max_tokens
        plan_text = None
        if self.replay and not self.engine.needs_script:
            try:
                plan_text = reference_literal(spec.reference_plan, seed)
            except ReplayError as exc:
                raise TaskRejected(f"cannot resume: {exc}") from None
            if plan_text is not None:
                budget = replay_budget(plan_text, budget)
        return PreparedTask(sset, prompt, len(prefix), min(budget, limit - len(prompt)), script, plan_text)


def load_task_skill_set(name: str) -> SkillSet:
    """The skill set a task names, or :class:`TaskRejected` with the reason (an unknown name: the
    message lists the available sets; a broken file: the task cannot be planned)."""
    try:
        return load_skill_set(name)
    except KeyError as exc:  # UnknownSkillSet: str() is its message (a plain KeyError would repr it)
        raise TaskRejected(str(exc.args[0]) if exc.args else str(exc)) from None
    except ValueError as exc:  # SkillSetError: a broken skill-set file
        raise TaskRejected(f"skill set {name!r} cannot be loaded: {exc}") from None


def check_robot_type(spec: TaskSpec, sset: SkillSet, agent_types: Mapping[str, str]) -> None:
    """The task's robot type matches its skill set and, when ``agent_types`` names the agent, the
    type that agent is known to be (a segment for the wrong robot would be unsafe)."""
    if sset.robot_type != spec.robot_type:
        raise TaskRejected(
            f"robot type mismatch: the task is for a {spec.robot_type!r} robot but skill "
            f"set {spec.skill_set!r} is for {sset.robot_type!r} robots"
        )
    expected = agent_types.get(spec.agent_id)
    if expected is not None and expected != spec.robot_type:
        raise TaskRejected(
            f"robot type mismatch: agent {spec.agent_id!r} is a {expected!r} robot, the "
            f"task asks for a {spec.robot_type!r} robot"
        )


def overload_reason(backlog: int, n_open: int, max_inbound: int, max_queued_tasks: int) -> str:
    """Why a new task cannot be taken now ('' = it can), naming the queue state for the sender:
    ``backlog`` tasks received but not yet taken by the planner thread, ``n_open`` open tasks."""
    if backlog >= max_inbound:
        return (
            f"overloaded: {backlog} tasks received but not yet taken by the planner (limit "
            f"max_inbound = {max_inbound}), {n_open} open tasks"
        )
    if n_open >= max_queued_tasks:
        return f"overloaded: {n_open} open tasks (limit max_queued_tasks = {max_queued_tasks})"
    return ""


NOT_ACTIVE = "the planner is not active (lifecycle): it accepts no tasks until it is activated"


class Refused(TaskRejected):
    """A task refused at the front door: ``kind`` names the check (``limits``, ``duplicate``,
    ``inactive``, ``overloaded``, ``invalid``; the key of the rate-limited warning), ``report_as`` the
    task id its REJECTED status and events carry."""

    def __init__(self, reason: str, kind: str, report_as: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.report_as = report_as


@contextmanager
def refusal(kind: str, report_as: str) -> Iterator[None]:
    """Turn a :class:`TaskRejected` raised inside into a :class:`Refused` of ``kind``."""
    try:
        yield
    except Refused:
        raise
    except TaskRejected as exc:
        raise Refused(exc.reason, kind, report_as) from None


class DuplicateTaskId(Refused):
    """A task id in use (or used recently). It is reported as ``<id>#dup<n>``, so the robot of the
    original task is not told its task was rejected."""

    def __init__(self, task_id: str, report_as: str) -> None:
        super().__init__(
            f"duplicate task_id {task_id!r}: that id is in use (or was used recently); "
            f"this rejection is reported as {report_as!r}",
            "duplicate",
            report_as,
        )


class TaskIds:
    """The ids of tasks taken at the front door (bounded memory: :class:`RecentIds`)."""

    def __init__(self, capacity: int) -> None:
        self._seen = RecentIds(capacity)
        self._assigned = itertools.count(1)
        self._duplicates = itertools.count(1)

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._seen

    def claim(self, task_id: str, base: str) -> str:
        """Take ``task_id`` (an empty one is assigned: ``<base>-<n>``, an id not seen recently) and
        return it; raises :class:`DuplicateTaskId` for an id in use."""
        if not task_id:
            task_id = self._new(base)
        elif task_id in self._seen:
            raise DuplicateTaskId(task_id, f"{task_id}#dup{next(self._duplicates)}")
        self._seen.add(task_id)
        return task_id

    def add(self, task_id: str) -> None:
        """An id taken by other means (a task recovered from the journal)."""
        self._seen.add(task_id)

    def _new(self, base: str) -> str:
        while True:
            candidate = f"{base}-{next(self._assigned)}"
            if candidate not in self._seen:
                return candidate
