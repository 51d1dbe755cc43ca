"""The engine port for external engine plug-ins: the one documented shim of the package.

Every other public name of ``timely_llm_ros`` has one import path, its defining module (a test,
``test/tools/test_spellings.py``, keeps it so). This module is the exception on purpose: engine
plug-ins written outside this repository import the port from ``timely_llm_ros.engines.base``, the
path they have always used, and get the very same objects as :mod:`timely_llm_ros.core.engine`.

Why the port is defined in core and not here: the core (planner, admission) drives engines, so the
port belongs to the core and the dependency points from engines down to core. Code inside this
package imports the port from :mod:`timely_llm_ros.core.engine`, never from here.
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
