"""Where a run's time goes: a per-task, per-phase account of one run, real engine next to simulator.

Why: ``timely-llm realbench`` compares a real engine's response times with the simulator's
prediction of the same run; a gap alone does not say what the simulator leaves out. This module
splits every task's response time W(s₀) (arrival → first action start) into phases that add up to
it exactly, and the run's wall time into engine steps, planner work between steps and idle time, so
the real and the simulated run can be read side by side:

* ``pickup``: arrival → the planner saw the task (a task arriving during an engine step waits for the
  step to end, as in a lock-step server; ``ADMIT`` event);
* ``queued``: → its generation entered the engine (first ``GEN_START``);
* ``prefill``: → its first token (prompt fed, in one pass or in chunks between other work);
* ``decode``: → its first segment was complete (``SEGMENT_READY`` of segment 0);
* ``to_robot``: → the robot started it (network latency; a robot busy with its previous task).

and over the whole task: ``suspended`` (Σ suspension → resumption), ``resume`` (Σ resumption → first
token after it), ``decode_later`` (the other segments' generation after their first token).

Per run, from every ``engine.step()``: the steps' count and time, what the engine spent inside the
forward pass (``llama_decode``; engines that say so) and in sampling (grammar checks and masks), the
planner's own work outside the steps (the Python loop: scheduling, segment checks, parsing,
dispatch; zero on the simulator's virtual clock) and idle waiting. ``profile_s`` prices every real
step with the profile the simulator uses, from what that step really fed (prompt rows, decoding
sequences, KV): real step time ÷ profile price is the profile's fit on the run itself, separate from
the overheads around it.

Nothing here changes what a run does; :class:`PhaseTap` only observes (the planner's event sink, its
token callback and a timing wrapper around ``engine.step``) and works on any clock, which is how it
is tested (virtual clock, no timing asserts).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.profile import EngineProfile

#: Phases of W(s₀), in order; they add up to the response time.
RESPONSE_PHASES = ("pickup", "queued", "prefill", "decode", "to_robot")
#: Phases after the first segment (whole task).
LATER_PHASES = ("suspended", "resume", "decode_later")
PHASES = RESPONSE_PHASES + LATER_PHASES


@dataclass
class StepSample:
    """One ``engine.step()``: clock before/after, what it fed, and the engine-side split if known."""

    t0: float
    t1: float
    emitted: int  # tokens that came out (one per sequence that decoded or finished its prompt)
    prompt_rows: int = 0  # prompt tokens fed (new prompts, chunks, shared prefixes, re-prefills)
    decode_rows: int = 0  # one-token rows (sequences decoding)
    kv_tokens: int = 0  # Σ KV length of the sequences fed
    forward_s: float = math.nan  # inside the forward pass(es) (nan: the engine does not say)
    sample_s: float = math.nan  # sampling + grammar (nan: the engine does not say)
    # prompt chunks fed: (private offset, rows, cached prefix in front); KV of the decoding rows
    chunks: list[tuple[int, int, int]] = field(default_factory=list)
    decode_kv: int = 0

    @property
    def duration(self) -> float:
        return self.t1 - self.t0


@dataclass
class PhaseTap:
    """Observes one :func:`~timely_llm_ros.bench.realbench.drive` run (see the module docstring).

    ``clock``: the run's clock (the engine's ``now``). Hook it up with :meth:`attach` before the run;
    ``loop`` (the driver's own bookkeeping) adds busy time outside steps via :meth:`busy`."""

    clock: Callable[[], float]
    events: list[ev.TraceEvent] = field(default_factory=list)
    first_tokens: dict[str, list[float]] = field(default_factory=dict)  # task -> token time after each start
    steps: list[StepSample] = field(default_factory=list)
    loop_busy: float = 0.0  # clock time the driver loop spent outside engine steps while work was open
    idle: float = 0.0  # clock time waiting for the next event with no work
    _awaiting: set[str] = field(default_factory=set)

    # -- hooks ----------------------------------------------------------------------------------
    def sink(self, e: ev.TraceEvent) -> None:
        """The planner's event sink."""
        self.events.append(e)
        if e.kind == ev.GEN_START:
            self._awaiting.add(e.task_id)

    def token(self, task_id: str, t: float) -> None:
        """A token of ``task_id``'s generation came out at ``t``."""
        if task_id in self._awaiting:
            self._awaiting.discard(task_id)
            self.first_tokens.setdefault(task_id, []).append(t)

    def attach(self, engine: Any) -> None:
        """Time every ``engine.step()`` (and, on engines that have them, its forward pass and its
        sampling) by wrapping the instance's methods; the engine's behaviour is unchanged."""
        step = engine.step
        split = _EngineSplit(engine)

        def timed_step() -> list:
            split.reset()
            t0 = self.clock()
            outs = step()
            t1 = self.clock()
            s = StepSample(t0, t1, len(outs))
            split.fill(s, engine)
            self.steps.append(s)
            return outs

        engine.step = timed_step

    def detach(self, engine: Any) -> None:
        """Undo :meth:`attach` (the engine serves the next run unobserved)."""
        for name in ("step", "_decode", "_emit"):
            engine.__dict__.pop(name, None)

    def busy(self, seconds: float) -> None:
        self.loop_busy += seconds

    def wait(self, seconds: float) -> None:
        self.idle += seconds

    # -- the account ----------------------------------------------------------------------------
    def tasks(self) -> dict[str, dict[str, float]]:
        """Per task: each phase's seconds (nan where the task never got there) and ``response``."""
        by_task: dict[str, list[ev.TraceEvent]] = {}
        for e in self.events:
            by_task.setdefault(e.task_id, []).append(e)
        return {tid: task_phases(evs, self.first_tokens.get(tid, [])) for tid, evs in by_task.items()}

    def run_account(self, profile: EngineProfile | None = None) -> dict[str, float]:
        """The run's time by kind of work (seconds) and the steps' price under ``profile``."""
        steps = self.steps
        out: dict[str, float] = {
            "steps": float(len(steps)),
            "step_s": sum(s.duration for s in steps),
            "forward_s": _nansum(s.forward_s for s in steps),
            "sample_s": _nansum(s.sample_s for s in steps),
            "planner_s": self.loop_busy,
            "idle_s": self.idle,
            "tokens": float(sum(s.emitted for s in steps)),
            "prompt_rows": float(sum(s.prompt_rows for s in steps)),
        }
        if profile is not None and steps and all(not math.isnan(s.forward_s) for s in steps):
            out["profile_s"] = sum(price_step(profile, s) for s in steps)
            # how much slower (> 1) the engine ran than the profile says: the machine's load drift
            out["speed_ratio"] = out["step_s"] / out["profile_s"] if out["profile_s"] > 0 else math.nan
            out["step_fit_err"] = step_fit_error(profile, steps, out["speed_ratio"])
        return out

    def step_rows(self) -> list[list[Any]]:
        """Every step as ``[t0, duration, emitted, prompt_rows, decode_rows, kv_tokens, forward_s,
        sample_s, chunks, decode_kv]`` (compact, for the JSON and for refitting a profile on a run)."""
        return [
            [
                s.t0,
                s.duration,
                s.emitted,
                s.prompt_rows,
                s.decode_rows,
                s.kv_tokens,
                s.forward_s,
                s.sample_s,
                [list(c) for c in s.chunks],
                s.decode_kv,
            ]
            for s in self.steps
        ]


def task_phases(events: list[ev.TraceEvent], first_tokens: list[float]) -> dict[str, float]:
    """Seconds per phase of one task from its events (in emission order) and the time of the first
    token after each (re)start of its generation. Response phases add up to W(s₀)."""
    nan = math.nan
    out = dict.fromkeys(PHASES, nan)
    out["response"] = nan

    def first(kind: str, seg: int | None = None) -> float:
        for e in events:
            if e.kind == kind and (seg is None or e.seg == seg):
                return e.t
        return nan

    arrival, admit = first(ev.ARRIVAL), first(ev.ADMIT)
    starts = [e.t for e in events if e.kind == ev.GEN_START]
    ready0, exec0 = first(ev.SEGMENT_READY, 0), first(ev.EXEC_START, 0)
    tok0 = first_tokens[0] if first_tokens else nan
    start0 = starts[0] if starts else nan
    marks = [arrival, admit, start0, tok0, ready0, exec0]
    for i, name in enumerate(RESPONSE_PHASES):
        out[name] = marks[i + 1] - marks[i]
    out["response"] = exec0 - arrival
    # later segments: suspension -> resumption -> first token -> end of that generation span
    suspends = [e.t for e in events if e.kind == ev.SUSPEND]
    stops = [e.t for e in events if e.kind == ev.GEN_STOP]
    susp = res = later = 0.0
    for k in range(1, len(starts)):
        if k - 1 < len(suspends):
            susp += starts[k] - suspends[k - 1]
        if k < len(first_tokens):
            res += first_tokens[k] - starts[k]
            if k < len(stops):
                later += stops[k] - first_tokens[k]
    if stops and math.isfinite(ready0):  # the first span's tail after segment 0 (unsegmented plans)
        later += max(0.0, stops[0] - ready0)
    if math.isfinite(tok0):
        out["suspended"], out["resume"], out["decode_later"] = susp, res, later
    return out


def price_step(profile: EngineProfile, s: StepSample) -> float:
    """The profile's price of what one real step fed, as the simulated engine prices a step under
    the llama.cpp prompt rule: its prompt chunks at their offsets behind their cached prefixes plus
    the pass constant, one decoding iteration over its one-token rows, and the per-token overhead
    (the per-step overhead is the planner's, outside the step)."""
    t = 0.0
    if s.chunks:
        t += profile.prefill_c + sum(profile.chunk_time(o, n, f) for o, n, f in s.chunks)
    elif s.prompt_rows:  # an engine that does not say how its prompt rows were cut
        t += profile.prefill_time(s.prompt_rows)
    if s.decode_rows:
        t += profile.decode_time(s.decode_rows, s.decode_kv or s.kv_tokens)
    return t + profile.token_overhead * s.emitted


class _EngineSplit:
    """Times a llama.cpp-like engine's forward pass (``_decode``) and sampling (``_emit``) per step
    by wrapping the instance's methods; engines without them leave the split unknown (nan)."""

    def __init__(self, engine: Any) -> None:
        self.forward = self.sample = 0.0
        self.known = callable(getattr(engine, "_decode", None)) and callable(getattr(engine, "_emit", None))
        if not self.known:
            return
        decode, emit, clock = engine._decode, engine._emit, _perf

        def timed_decode(*a: Any, **k: Any) -> Any:
            t0 = clock()
            try:
                return decode(*a, **k)
            finally:
                self.forward += clock() - t0

        def timed_emit(*a: Any, **k: Any) -> Any:
            t0 = clock()
            try:
                return emit(*a, **k)
            finally:
                self.sample += clock() - t0

        engine._decode = timed_decode
        engine._emit = timed_emit

    def reset(self) -> None:
        self.forward = self.sample = 0.0

    def fill(self, s: StepSample, engine: Any) -> None:
        info = getattr(engine, "last_step", None)
        by_gen = getattr(info, "tokens_by_gen", None)
        if isinstance(by_gen, dict):
            s.decode_rows = sum(1 for n in by_gen.values() if n == 1)
            s.prompt_rows = int(getattr(info, "n_tokens", 0)) - s.decode_rows
            s.kv_tokens = int(getattr(info, "kv_tokens", 0))
            seqs = getattr(engine, "_seqs", {})
            s.decode_kv = s.kv_tokens
            for gid, n in by_gen.items():
                seq = seqs.get(gid)
                if n <= 1 or seq is None:
                    continue
                start = seq.kv_len - n  # kv_len: ids whose KV exists after this step
                if start < 0:  # finished and freed in this step (a one-token generation)
                    continue
                shared = getattr(seq, "shared", 0)
                s.chunks.append((max(0, start - shared), n, shared if start >= shared else start))
                s.decode_kv -= seq.kv_len
        if self.known:
            s.forward_s, s.sample_s = self.forward, self.sample


def step_fit_error(profile: EngineProfile, steps: list[StepSample], ratio: float = 1.0) -> float:
    """Mean |real − ratio·price| / real over the steps: how well the profile's form describes the
    run's steps once their overall speed (``ratio``) is taken as measured."""
    errs = [abs(s.duration - ratio * price_step(profile, s)) / s.duration for s in steps if s.duration > 0]
    return statistics.fmean(errs) if errs else math.nan


def _perf() -> float:
    import time

    return time.perf_counter()


def _nansum(xs: Any) -> float:
    vals = [x for x in xs if not math.isnan(x)]
    return sum(vals) if vals else math.nan


# -- side by side ---------------------------------------------------------------------------------
def compare_phases(real: dict[str, dict[str, float]], sim: dict[str, dict[str, float]]) -> dict[str, Any]:
    """Per phase: the mean over tasks present in both runs (real, sim, real − sim), and per task."""
    common = [t for t in real if t in sim]
    rows = {}
    for ph in (*PHASES, "response"):
        pairs = [(real[t][ph], sim[t][ph]) for t in common]
        pairs = [(r, s) for r, s in pairs if math.isfinite(r) and math.isfinite(s)]
        if not pairs:
            rows[ph] = {"real": math.nan, "sim": math.nan, "diff": math.nan, "n": 0}
            continue
        r = statistics.fmean(p[0] for p in pairs)
        s = statistics.fmean(p[1] for p in pairs)
        rows[ph] = {"real": r, "sim": s, "diff": r - s, "n": len(pairs)}
    return {
        "mean": rows,
        "per_task": {t: {"real": real[t], "sim": sim[t]} for t in common},
    }


def phase_table(policy: str, cmp: dict[str, Any]) -> str:
    """The account of one policy's run as text: phases (mean per task) and the run's time split."""
    lines = [f"where the time goes ({policy}): mean s per task, real vs simulated"]
    lines.append(f"  {'phase':13s} {'real':>7s} {'sim':>7s} {'real-sim':>9s}")
    for ph in (*RESPONSE_PHASES, "response", *LATER_PHASES):
        row = cmp["mean"][ph]
        lines.append(f"  {ph:13s} {row['real']:7.3f} {row['sim']:7.3f} {row['diff']:+9.3f}")
    lines.append(
        f"  run: {'':8s} {'steps':>6s} {'step s':>7s} {'fwd s':>7s} {'sample s':>8s} {'planner s':>9s} {'price s':>7s}"
    )
    for side in ("real", "sim"):
        acc = cmp["run"][side]
        lines.append(
            f"  {side:13s} {acc['steps']:6.0f} {acc['step_s']:7.2f} {acc['forward_s']:7.2f} "
            f"{acc['sample_s']:8.2f} {acc['planner_s']:9.2f} {acc.get('profile_s', math.nan):7.2f}"
        )
    return "\n".join(lines)
