"""Where one planner step's time goes on the vLLM engine (``vllm_bench``'s per-step breakdown).

The planner's loop (:class:`~timely_llm_ros.core.planner.PlannerCore`) runs B tello_minispec tasks
under the skill grammar as in production: scheduling, ``VllmEngine.step()`` (one vLLM iteration),
the segmenter on every token, suspension and resumption at every segment boundary, dispatch (the
robot's feedback is given at once). Timers are put around the parts we call and, where this vLLM
has them, around the engine core's own phases (instance attributes shadowing the methods for the
run, then removed):

* ``LLMEngine.step`` — one vLLM iteration, of which: ``scheduler.schedule``,
  ``scheduler.get_grammar_bitmask`` (structured outputs; on a GPU it runs while the forward pass
  is in flight), ``scheduler.update_from_output``, ``output_processor.process_outputs``
  (detokenization, stop checks of vLLM); the remainder is the forward pass, sampling and the rest
  of vLLM's step;
* ``VllmEngine.step`` minus ``LLMEngine.step`` — our conversion of the outputs (and the idle wait
  while a grammar compiles, which a steady state does not have);
* ``SegmentChecker.feed`` / ``cut`` — the segmenter (the paper's stop checks);
* ``VllmEngine.suspend`` / ``resume`` — abort and re-submission at segment boundaries;
* the rest of ``PlannerCore.step`` — scheduling (TUF priorities), parsing, dispatch.

Only steps in which the engine produced tokens count. Nothing here imports vLLM.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.segmenter import SegmentChecker

#: (label, object path from the VllmEngine, method) of the vLLM phases timed where they exist.
VLLM_PHASES = (
    ("schedule", ("llm", "engine_core", "engine_core", "scheduler"), "schedule"),
    ("grammar bitmask", ("llm", "engine_core", "engine_core", "scheduler"), "get_grammar_bitmask"),
    ("update from output", ("llm", "engine_core", "engine_core", "scheduler"), "update_from_output"),
    ("output processor", ("llm", "output_processor"), "process_outputs"),
)


class Timers:
    """Sums of the wall time spent in wrapped callables, by label."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def _timed(self, label: str, fn: Callable) -> Callable:
        def wrapper(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **kw)
            finally:
                self.total[label] = self.total.get(label, 0.0) + time.perf_counter() - t0

        return wrapper

    def wrap(self, obj: Any, name: str, label: str) -> bool:
        """Time ``obj.name`` (an instance attribute shadows the method until :meth:`restore`)."""
        fn = getattr(obj, name, None)
        if obj is None or not callable(fn):
            return False
        had = name in getattr(obj, "__dict__", {})
        setattr(obj, name, self._timed(label, fn))
        self._undo.append((lambda: setattr(obj, name, fn)) if had else (lambda: delattr(obj, name)))
        self.total.setdefault(label, 0.0)
        return True

    def wrap_class(self, cls: type, name: str, label: str) -> None:
        fn = cls.__dict__[name]
        setattr(cls, name, self._timed(label, fn))
        self._undo.append(lambda: setattr(cls, name, fn))
        self.total.setdefault(label, 0.0)

    def restore(self) -> None:
        while self._undo:
            self._undo.pop()()

    def snapshot(self) -> dict[str, float]:
        return dict(self.total)


def _walk(root: Any, path: tuple[str, ...]) -> Any:
    for attr in path:
        root = getattr(root, attr, None)
    return root


def planner_tasks(batch: int, first: int, instructions: list[str], max_tokens: int) -> list[Any]:
    from timely_llm_ros.core.task import TaskSpec
    from timely_llm_ros.core.tuf import NORMAL_TUF

    return [
        TaskSpec(
            task_id=f"bd{first + i}",
            agent_id=f"d{i}",
            robot_type="drone",
            skill_set="tello_minispec",
            instruction=instructions[i % len(instructions)],
            tuf=NORMAL_TUF,
            max_tokens=max_tokens,
        )
        for i in range(batch)
    ]


def step_breakdown(
    eng: Any, batch: int, instructions: list[str], *, max_tokens: int = 48, rounds: int = 2
) -> dict[str, Any]:
    """Mean milliseconds per planner step of each part (module docstring) over ``rounds`` waves of
    ``batch`` concurrent tasks."""
    from timely_llm_ros.core.planner import PlannerCore

    t = Timers()
    vllm_phases = [label for label, path, meth in VLLM_PHASES if t.wrap(_walk(eng, path), meth, label)]
    t.wrap(eng.llm, "step", "LLMEngine.step")
    t.wrap(eng, "step", "VllmEngine.step")
    t.wrap(eng, "suspend", "suspend")
    t.wrap(eng, "resume", "resume")
    t.wrap_class(SegmentChecker, "feed", "segmenter")
    t.wrap_class(SegmentChecker, "cut", "segmenter cut")
    tokens = [0]
    timed_step = eng.step

    def counting_step() -> list:
        outs = timed_step()
        tokens[0] += len(outs)
        return outs

    eng.step = counting_step  # the planner calls this; undone with the timers
    sums: dict[str, float] = {}
    steps = 0
    states: dict[str, int] = {}
    try:
        for r in range(rounds):
            sent: list = []
            planner = PlannerCore(eng, "timely", dispatch=sent.append, network_latency=0.0)
            planner.warm_up(["tello_minispec"])
            recs = [planner.submit(s) for s in planner_tasks(batch, 1000 * r, instructions, max_tokens)]
            deadline = time.monotonic() + 600.0
            while (planner.has_work() or sent) and time.monotonic() < deadline:
                before, n0 = t.snapshot(), tokens[0]
                t0 = time.perf_counter()
                planner.step()
                dt = time.perf_counter() - t0
                while sent:  # the robot starts and finishes each segment at once
                    d = sent.pop(0)
                    planner.on_feedback(d.task_id, d.seg, ev.STARTED, planner.clock())
                    planner.on_feedback(d.task_id, d.seg, ev.DONE, planner.clock())
                if tokens[0] == n0:  # nothing decoded (waiting for a grammar, only feedback)
                    continue
                steps += 1
                sums["planner step"] = sums.get("planner step", 0.0) + dt
                for k, v in t.snapshot().items():
                    sums[k] = sums.get(k, 0.0) + v - before.get(k, 0.0)
            planner.abort_all("breakdown done")
            for rec in recs:
                states[rec.state] = states.get(rec.state, 0) + 1
    finally:
        eng.step = timed_step  # t.restore() removes it
        t.restore()
    return summarize(sums, steps, vllm_phases, batch) | {"task_states": states}


def summarize(sums: dict[str, float], steps: int, vllm_phases: list[str], batch: int) -> dict[str, Any]:
    """Per-step means (ms) of the parts, the derived remainders, and their shares of the step."""
    if not steps:
        return {"batch": batch, "steps": 0, "parts_ms": {}, "share_pct": {}}
    ms = {k: 1e3 * v / steps for k, v in sums.items()}
    total = ms["planner step"]
    llm = ms.get("LLMEngine.step", 0.0)
    parts = {
        **{p: ms.get(p, 0.0) for p in vllm_phases},
        "forward, sampling, rest of vLLM": llm - sum(ms.get(p, 0.0) for p in vllm_phases),
        "our output conversion (VllmEngine.step - LLMEngine.step)": ms.get("VllmEngine.step", 0.0) - llm,
        "segmenter (stop checks)": ms.get("segmenter", 0.0) + ms.get("segmenter cut", 0.0),
        "suspend + resume": ms.get("suspend", 0.0) + ms.get("resume", 0.0),
    }
    outside = ms.get("VllmEngine.step", 0.0) + parts["segmenter (stop checks)"] + parts["suspend + resume"]
    parts["planner rest (scheduling, parsing, dispatch)"] = total - outside
    return {
        "batch": batch,
        "steps": steps,
        "step_ms": total,
        "llm_engine_step_ms": llm,
        "parts_ms": parts,
        "share_pct": {k: 100 * v / total for k, v in parts.items()},
    }


def table(bd: dict[str, Any]) -> str:
    """The breakdown as text lines."""
    if not bd.get("steps"):
        return f"per-step breakdown at batch {bd.get('batch')}: no decoding step measured"
    lines = [
        f"per-step breakdown at batch {bd['batch']} ({bd['steps']} planner steps, grammar + segmenter): "
        f"{bd['step_ms']:.2f} ms per step, of which vLLM's LLMEngine.step {bd['llm_engine_step_ms']:.2f} ms"
    ]
    for k, v in bd["parts_ms"].items():
        lines.append(f"  {k:58s} {v:8.3f} ms  {bd['share_pct'][k]:5.1f} %")
    return "\n".join(lines)
