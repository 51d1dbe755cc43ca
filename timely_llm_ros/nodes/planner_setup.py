"""The planner node's parameters turned into what its service runs on: the engine, the simulated
engine's reference plans, the planner options, the warmed-up prompts and the crash-recovery journal
(:func:`configure`, the whole of the lifecycle configure transition but its ROS bookkeeping).

Each failure is a :class:`~timely_llm_ros.nodes.common.ParamError` naming the parameter, so a bad
``engine:=`` or a missing model fails the lifecycle configure transition with one clear line.
"""

from __future__ import annotations

import dataclasses
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from timely_llm_ros.core.engine import Engine, EngineError
from timely_llm_ros.core.options.kv_policy import KVPolicyError
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.options.replay import REFERENCE
from timely_llm_ros.engines.registry import create_engine
from timely_llm_ros.nodes.common import ParamError
from timely_llm_ros.nodes.planner_params import engine_options, planner_options
from timely_llm_ros.nodes.sim_support import PlanTable
from timely_llm_ros.service.journal import Journal, JournalError, OpenTask
from timely_llm_ros.service.planner_service import PlannerService

# what the node itself gives the real-time simulated engine (never an engine option)
NODE_SIM_ARGS = ("profile", "clock", "stop")


def make_engine(p: Mapping[str, Any], overrides: Mapping[Any, Any], stop: threading.Event) -> Engine:
    """The engine the ``engine`` / ``engine_options`` / ``profile`` parameters name, built by the
    registry on the wall clock (``engine:=sim``: the real-time simulated engine, timed by the
    ``profile`` parameter; ``stop``: its sleeps end when it is set)."""
    name = p["engine"]
    try:
        options = engine_options(name, p["engine_options"], overrides)
    except ValueError as exc:
        raise ParamError(f"parameter 'engine_options': {exc}") from None
    sim = name == "sim"
    if sim:
        owned = sorted(set(options) & set(NODE_SIM_ARGS))
        if owned:
            raise ParamError(
                f"parameter 'engine_options': {owned} are set by the planner node (the simulated "
                "engine's timing model is the 'profile' parameter)"
            )
        options = {**options, "profile": p["profile"], "clock": time.monotonic, "stop": stop}
    try:
        return create_engine(name, wall_clock=True, **options)
    except Exception as exc:  # noqa: BLE001 - model file missing, GPU library absent, bad option ...
        if sim and isinstance(exc, (KVPolicyError, EngineError)):  # an option it lacks, a bad value
            raise ParamError(f"parameter 'engine_options': {exc}") from None
        if sim and isinstance(exc, (KeyError, ValueError, OSError)):  # the profile did not load
            raise ParamError(f"parameter 'profile': {exc}") from None
        raise ParamError(f"engine {name!r} could not be created: {type(exc).__name__}: {exc}") from None


def make_planner_options(p: Mapping[str, Any], overrides: Mapping[Any, Any]) -> PlannerOptions:
    try:
        opts = planner_options(p["planner_options"], overrides)
    except ValueError as exc:
        raise ParamError(f"parameter 'planner_options': {exc}") from None
    if p["plan_source"] == REFERENCE:  # the parameter, or the planner_options key
        opts = dataclasses.replace(opts, plan_source=REFERENCE)
    return opts


def load_plans(engine: Engine, sources: list[str], log: Any, replay: bool = False) -> PlanTable | None:
    """The reference plans: the simulated engine emits them; in replay mode a real engine writes them."""
    if not (engine.needs_script or replay):
        return None
    plans = PlanTable()
    for source in sources:
        try:
            n = plans.load(source)
        except Exception as exc:  # noqa: BLE001 - WorkloadError, OSError, ...: name the source
            raise ParamError(f"parameter 'sim_plans': cannot load {source!r}: {exc}") from None
        log.info(f"{n} reference plans from {source!r}")
    return plans


def configure(
    svc: PlannerService,
    p: Mapping[str, Any],
    nested: Callable[[str], Mapping[Any, Any]],
    log: Any,
    journal_path: Callable[[], str | Path],
) -> None:
    """The configure transition: engine, plans and options into ``svc``, the skill prompts warmed
    up, the journal opened (its open tasks wait in ``svc.recovered_tasks``). ``nested(name)``: the
    ``<name>.<key>`` parameters; ``journal_path()``: the default journal file of this node."""
    options = make_planner_options(p, nested("planner_options"))
    engine = make_engine(p, nested("engine_options"), svc.new_stop_event())
    plans = load_plans(engine, p["sim_plans"], log, options.plan_source == REFERENCE)
    try:
        svc.configure(engine, plans, options)
    except EngineError as exc:  # plan_source reference on an engine that cannot replay
        raise ParamError(f"parameter 'plan_source': {exc}") from None
    warm_up(svc, p["warmup_skill_sets"], log)
    svc.journal, svc.recovered_tasks = open_journal(p["journal"], journal_path)


def warm_up(svc: PlannerService, skill_sets: list[str], log: Any) -> None:
    """Prefill the named skill prompts now; runs before /tasks is subscribed (see PARAMS)."""
    if not skill_sets or svc.core is None:
        return
    try:
        took = svc.core.warm_up(list(skill_sets))
    except KeyError as exc:
        raise ParamError(f"parameter 'warmup_skill_sets': {exc}") from None
    except EngineError as exc:
        raise ParamError(f"warm-up failed in the engine: {exc}") from None
    for name, seconds in took.items():
        log.info(f"warm-up: prefilled the {name} prompt in {seconds:.2f} s")


def open_journal(where: str, default: Callable[[], str | Path]) -> tuple[Journal | None, list[OpenTask]]:
    """The crash-recovery journal (``journal`` parameter: ``off``, a path, or empty for the default)
    and the tasks it shows open."""
    if where == "off":
        return None, []
    journal = Journal(where or default())
    try:
        return journal, journal.open()
    except JournalError as exc:
        raise ParamError(f"parameter 'journal': {exc}") from None
