"""The engine interface as engines see it: a re-export of the port in :mod:`timely_llm_ros.core.engine`.

Why a re-export and not the definitions: the core (planner, admission) drives engines, so the port
belongs to the core and the dependency points from engines down to core. Engine modules and user
plug-ins keep importing ``timely_llm_ros.engines.base``; the classes are the very same objects.
"""

from timely_llm_ros.core.engine import (
    Context,
    Engine,
    EngineError,
    EngineInfo,
    EngineOutOfMemory,
    MemoryInfo,
    SpeedMeter,
    TokenOut,
    check_admission,
    check_replays,
    plan_kwargs,
    script_kwargs,
)

__all__ = [
    "Context",
    "Engine",
    "EngineError",
    "EngineInfo",
    "EngineOutOfMemory",
    "MemoryInfo",
    "SpeedMeter",
    "TokenOut",
    "check_admission",
    "check_replays",
    "plan_kwargs",
    "script_kwargs",
]
