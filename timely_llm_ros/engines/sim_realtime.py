"""The simulated engine on the wall clock: what ``engine:=sim`` runs in the planner node.

:class:`~timely_llm_ros.engines.sim.SimEngine` keeps a virtual clock: ``step()`` prices one
decoding iteration from the engine profile and advances the clock by that amount instantly. The
planner node works in wall time (robots execute for real), so :class:`RealtimeSimEngine` drives the
same model in real time: before every step the virtual clock is moved up to "now" (``advance_to``:
the engine was idle or the planner was busy in between), the step is priced as usual, and then the
call *sleeps until the modelled end of the step* before it returns the tokens — so tokens, segment
cuts and dispatches happen at the wall times the profile predicts, exactly as they would with a real
GPU in lock-step. ``now()`` is the wall clock. The sleep watches a stop event so shutdown is never
delayed by more than one step.

The registry (:mod:`.registry`) builds it for the name ``sim`` wherever an engine runs on the wall
clock (``create_engine("sim", wall_clock=True)``: the planner node), so the node and the registry
build the same class for the same name. Its options are the ``engine_options`` of ``engine:=sim``
(the names the llama.cpp engine uses for the same switches).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from timely_llm_ros.core.engine import EngineError, TokenOut
from timely_llm_ros.core.options.kv_policy import KVOptions
from timely_llm_ros.engines.sim import SimEngine

__all__ = ["RealtimeSimEngine"]


class RealtimeSimEngine(SimEngine):
    """SimEngine whose steps take their modelled duration in wall time (see module docstring).

    ``kv_policy`` / ``eviction`` / ``reload``: what happens to suspended contexts
    (:mod:`timely_llm_ros.core.options.kv_policy`; an unset one keeps the profile's default);
    ``chunked_prefill``: fuse prompt chunks into the decode pass. ``stop``: set on shutdown, ends a
    step's sleep at once.
    """

    def __init__(
        self,
        profile: str = "llama3-8b-fp16-rtx4090",
        *,
        kv_policy: str | None = None,
        eviction: str | None = None,
        reload: str | None = None,
        chunked_prefill: bool = False,
        clock: Callable[[], float] = time.monotonic,
        stop: threading.Event | None = None,
        max_sleep: float = 5.0,
    ) -> None:
        if not isinstance(chunked_prefill, bool):
            raise EngineError(f"chunked_prefill must be true or false, got {chunked_prefill!r}")
        self._clock = clock
        self._stop = stop or threading.Event()
        self._max_sleep = float(max_sleep)
        super().__init__(profile, start_time=clock(), chunked_prefill=chunked_prefill)
        given = {"policy": kv_policy, "eviction": eviction, "reload": reload}
        kv = {k: v for k, v in given.items() if v is not None}
        if kv:  # over the profile's eviction order (the engine's default KV options)
            self.kv = KVOptions(**{"eviction": self.kv.eviction, **kv})
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
