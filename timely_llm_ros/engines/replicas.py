"""Several engine replicas behind one planner: one scheduler, generations placed on replicas.

:class:`ReplicaSetEngine` is itself an :class:`~.base.Engine`, so :class:`~timely_llm_ros.core.planner.
PlannerCore` (one scheduler, one priority queue, one admission decision per step) is unchanged. What
the composition decides:

* **placement** — a new generation goes to the healthy replica where it is estimated to finish its
  first segment soonest (:meth:`ReplicaSetEngine.estimate`: the replica's backlog, the uncached part
  of its prompt at the replica's prefill speed — a replica that already holds the skill prompt skips
  it — and ``placement_tokens`` decode steps at the replica's per-sequence speed with one more
  sequence running); a **resumed** generation goes back to the replica that holds its prefix (its
  KV), unless that replica is down.
* **faults** (HTTP replicas): a replica whose stream is refused (HTTP 429/5xx), times out, is dropped
  or cannot be reached is marked down; each of its generations is re-placed on another healthy
  replica from its token ids (a re-prefill there, never re-tokenised text): a suspended one resumes
  there at its segment boundary; a running one restarts its interrupted segment at the segment's
  start and the tokens the planner already has are regenerated and verified, not delivered twice
  (:meth:`~.openai_endpoint.OpenAIEndpointEngine.adopt`). With no healthy replica the generation waits (``failover_timeout`` seconds) and
  then ends with an ``error`` token and a reason in :attr:`ReplicaSetEngine.failures`, which the
  planner turns into a FAILED task: the planner never hangs and never loses a task. A down replica
  is probed with exponential backoff (``retry_base`` … ``retry_max`` seconds) and used again once it
  answers. A request the server rejects as invalid (HTTP 4xx) fails that task only.
* **what the scheduler sees**: :meth:`speed` = the slowest busy replica's per-sequence speed (the
  admission checks stay conservative); :meth:`memory` = the replica with the most free KV (what one
  more admission can get); the policy's maximum batch is for the whole set (``timely@b16`` for two
  8-slot replicas).

Virtual time: replicas with a virtual clock (the simulated engine, ``advance_to``) are stepped as a
conservative discrete-event simulation — each :meth:`step` advances the busy replica whose clock is
earliest; :meth:`now` is the earliest busy clock (never decreasing). Real replicas (HTTP) run in
parallel: :meth:`step` collects what every replica streamed, waiting up to ``step_wait`` seconds
for the first token.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from timely_llm_ros.core.engine import (
    Context,
    Engine,
    EngineError,
    EngineInfo,
    MemoryInfo,
    TokenOut,
    plan_kwargs,
    script_kwargs,
)

if TYPE_CHECKING:
    from timely_llm_ros.core.profile import EngineProfile
    from timely_llm_ros.engines.sim import SimEngine

log = logging.getLogger(__name__)


@dataclass
class _Replica:
    engine: Engine
    name: str
    healthy: bool = True
    error: str = ""
    down_since: float = math.nan
    backoff: float = 0.0
    next_probe: float = 0.0
    probing: bool = False
    probe_ok: bool | None = None
    prefixes: set = field(default_factory=set)  # prefix keys this replica has prefilled
    placed: int = 0
    failovers: int = 0


@dataclass
class _Meta:
    prompt_len: int
    prefix_key: str | None
    prefix_len: int
    max_tokens: int
    plan: str | None = None  # replay mode: the literal the generation was admitted with


@dataclass
class _Orphan:
    """A generation waiting for a healthy replica (admission, resumption or failover)."""

    deadline: float
    reason: str
    prompt_ids: list[int] | None = None  # not admitted anywhere yet
    script: list[int] | None = None
    context: Context | None = None  # had run somewhere: continue from these ids
    boundary: int | None = None  # ... restarting at this segment boundary (verified replay)
    replay_text: str = ""
    plan: object = None  # replay mode: the literal (PlanLiteral) positioned where it restarts


@dataclass
class Placement:
    """One placement decision (for tests, benches and the report)."""

    t: float
    gen_id: int
    replica: str
    kind: str  # admit | resume | failover | orphan-admit | orphan-resume
    estimate: float = math.nan


class ReplicaSetEngine(Engine):
    """Engine over ``replicas`` (see the module docstring). ``names``: one label per replica."""

    def __init__(
        self,
        replicas: Sequence[Engine],
        *,
        names: list[str] | None = None,
        step_wait: float = 0.1,
        retry_base: float = 0.5,
        retry_max: float = 30.0,
        failover_timeout: float = 60.0,
        placement_tokens: int = 32,
        stale_after: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not replicas:
            raise EngineError("a replica set needs at least one replica")
        names = list(names) if names is not None else [f"r{i}" for i in range(len(replicas))]
        if len(names) != len(replicas):
            raise EngineError("one name per replica")
        self.replicas = [_Replica(e, n) for e, n in zip(replicas, names)]
        self.virtual = all(hasattr(e, "advance_to") for e in replicas)
        self.needs_script = replicas[0].needs_script
        self.replays_plans = all(r.replays_plans for r in replicas)
        self.step_wait = float(step_wait)
        self.retry_base = float(retry_base)
        self.retry_max = float(retry_max)
        self.failover_timeout = float(failover_timeout)
        self.placement_tokens = int(placement_tokens)
        self.stale_after = float(stale_after)
        self._clock = clock
        self._t = max(e.now() for e in replicas) if self.virtual else 0.0
        self._where: dict[int, int] = {}
        self._meta: dict[int, _Meta] = {}
        self._orphans: dict[int, _Orphan] = {}
        self._errors: list[TokenOut] = []
        self._wake = threading.Event()
        self.failures: dict[int, str] = {}
        self._warmed: set[str] = set()
        self.warm_log: list[tuple[str, dict[str, float]]] = []
        self.down_log: list[tuple[float, str, str]] = []  # (time, replica, why) each time one went down
        self.placements: list[Placement] = []
        self._refresh_info()

    # -- facts ------------------------------------------------------------------------------------
    def _refresh_info(self) -> None:
        live = [r.engine for r in self.replicas if getattr(r.engine, "connected", True)] or [
            self.replicas[0].engine
        ]
        first = live[0]
        self.info = EngineInfo(
            name=f"replicas[{len(self.replicas)}]:{first.info.name}",
            context_limit=min(e.info.context_limit for e in live),
            eos_id=first.info.eos_id,
            extra={"replicas": [r.name for r in self.replicas], **first.info.extra},
        )
        self.profile = getattr(first, "profile", None)

    @property
    def stats(self) -> dict:
        """Per-replica engine statistics summed (numbers only) + placement counts."""
        out: dict = {}
        for r in self.replicas:
            for k, v in getattr(r.engine, "stats", {}).items():
                if isinstance(v, (int, float)):
                    out[k] = out.get(k, 0) + v
        out["failovers"] = sum(r.failovers for r in self.replicas)
        out["placed"] = {r.name: r.placed for r in self.replicas}
        return out

    def status(self) -> list[dict]:
        """Health of every replica (names, running generations, last error)."""
        return [
            {
                "name": r.name,
                "healthy": r.healthy,
                "running": r.engine.running(),
                "placed": r.placed,
                "failovers": r.failovers,
                "error": r.error,
            }
            for r in self.replicas
        ]

    # -- Engine API -------------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        errors = []
        for r in self._healthy() or self.replicas:
            try:
                return r.engine.tokenize(text)
            except EngineError as exc:
                if not getattr(exc, "transport", False):
                    raise
                self._mark_down(r, str(exc))
                errors.append(f"{r.name}: {exc}")
        raise EngineError(f"no replica could tokenize: {'; '.join(errors)}")

    def now(self) -> float:
        if not self.virtual:
            return self._clock()
        busy = [r.engine.now() for r in self.replicas if r.engine.running()]
        t = min(busy) if busy else max(r.engine.now() for r in self.replicas)
        self._t = max(self._t, t)
        return self._t

    def advance_to(self, t: float) -> None:
        """Virtual time only: move idle replicas' clocks forward (the simulator calls this)."""
        for r in self.replicas:
            if not r.engine.running():
                r.engine.advance_to(t)  # type: ignore[attr-defined]  # virtual-clock replicas (simulated engines) only
        self._t = max(self._t, t)

    def running(self) -> int:
        return sum(r.engine.running() for r in self.replicas) + len(self._orphans)

    def speed(self) -> float | None:
        speeds = [r.engine.speed() for r in self._healthy() if r.engine.running()]
        busy = [s for s in speeds if s]
        if busy:
            return min(busy)
        known = [s for s in (r.engine.speed() for r in self.replicas) if s]
        return min(known) if known else None

    def memory(self) -> MemoryInfo:
        pool = self._healthy() or self.replicas
        return max((r.engine.memory() for r in pool), key=lambda m: m.free)

    def set_priority(self, gen_id: int, priority: float) -> None:
        idx = self._where.get(gen_id)
        if idx is not None:
            self.replicas[idx].engine.set_priority(gen_id, priority)

    def admit(
        self,
        gen_id: int,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        prefix_key: str | None = None,
        prefix_len: int = 0,
        script: list[int] | None = None,
        plan: str | None = None,
    ) -> None:
        """The port's ``admit``; ``script`` only for a set of scripted (simulated) replicas
        (``needs_script``), kept for re-admitting the generation elsewhere after a failover; ``plan``
        (replay mode) for replicas that replay plans, kept likewise."""
        if gen_id in self._meta:
            raise EngineError(f"generation {gen_id} already admitted")
        meta = _Meta(
            len(prompt_ids), prefix_key, prefix_len if prefix_key is not None else 0, max_tokens, plan
        )
        if prefix_key is not None and meta.prefix_len > 0 and prefix_key not in self._warmed:
            self.warm_prefix(list(prompt_ids[: meta.prefix_len]), prefix_key)
        self._meta[gen_id] = meta
        try:
            self._place_new(gen_id, prompt_ids, script, meta, "admit")
        except EngineError:
            self._meta.pop(gen_id, None)
            raise

    def warm_prefix(self, prefix_ids: list[int], prefix_key: str) -> dict[str, float]:
        """Prefill a new shared prefix on every healthy replica that can (in parallel; blocking).

        Called on the first admission with a new ``prefix_key`` (the planner's warm-up at start-up,
        else the first task of a skill set), so later placements find the skill prompt cached on
        whichever replica — and, on llama.cpp, whichever slot — they land. A replica that fails here
        is marked down (it is probed and warmed again when it comes back: the key is forgotten then).
        """
        self._warmed.add(prefix_key)
        took: dict[str, float] = {}
        errors: dict[str, str] = {}

        def warm(r: _Replica) -> None:
            try:
                took[r.name] = r.engine.warm_prefix(prefix_ids, len(prefix_ids))  # type: ignore[attr-defined]  # replicas that keep prefixes (checked by the caller)
                r.prefixes.add(prefix_key)
            except EngineError as exc:
                errors[r.name] = str(exc)

        threads = [
            threading.Thread(target=warm, args=(r,), daemon=True)
            for r in self._healthy()
            if hasattr(r.engine, "warm_prefix")
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for r in self.replicas:
            if r.name in errors:
                self._mark_down(r, f"warm-up: {errors[r.name]}")
        if took:
            log.info(
                "skill prompt %r prefilled on %s",
                prefix_key,
                ", ".join(f"{k} ({v:.1f} s)" for k, v in took.items()),
            )
        self.warm_log.append((prefix_key, took))
        return took

    def _place_new(
        self, gen_id: int, prompt_ids: list[int], script: list[int] | None, meta: _Meta, kind: str
    ) -> bool:
        def run(r: _Replica) -> None:
            r.engine.admit(
                gen_id,
                prompt_ids,
                max_tokens=meta.max_tokens,
                prefix_key=meta.prefix_key,
                prefix_len=meta.prefix_len,
                **script_kwargs(r.engine, script),
                **plan_kwargs(r.engine, meta.plan),
            )

        return self._place(
            gen_id, meta, set(), run, _Orphan(0.0, "", prompt_ids=list(prompt_ids), script=script), kind
        )

    def _place(
        self,
        gen_id: int,
        meta: _Meta,
        exclude: set[int],
        run: Callable[[_Replica], None],
        orphan: _Orphan,
        kind: str,
    ) -> bool:
        """Run ``run`` on the best healthy replica; one that fails in transport is marked down and
        the next one tried; with none left the generation waits as ``orphan``. Request errors raise."""
        tried = set(exclude)
        while True:
            idx, est = self._choose(meta, tried)
            if idx is None:
                orphan.deadline, orphan.reason = self.now() + self.failover_timeout, self._why_none()
                self._orphans[gen_id] = orphan
                return False
            r = self.replicas[idx]
            self._sync(r)
            try:
                run(r)
            except EngineError as exc:
                if not getattr(exc, "transport", False):
                    raise
                self._mark_down(r, str(exc))
                tried.add(idx)
                continue
            self._placed(gen_id, idx, kind, est)
            return True

    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        idx = self._where.get(gen_id)
        meta = self._meta.get(gen_id)
        if idx is None or meta is None:
            raise EngineError(f"generation {gen_id} is not suspended here")
        meta.max_tokens = max_tokens
        r = self.replicas[idx]
        if r.healthy:
            self._sync(r)
            r.engine.resume(gen_id, context, max_tokens=max_tokens)
            self._placed(gen_id, idx, "resume", math.nan, count=False)
            return
        # the replica holding its KV is down: continue elsewhere from the ids
        context.check_matches(gen_id, context.token_ids, context.n_prompt)
        plan_of = getattr(r.engine, "plan_of", None)
        plan = plan_of(gen_id) if plan_of is not None else None  # replay: where the literal stands
        r.engine.release(gen_id)
        del self._where[gen_id]
        self._adopt(gen_id, context, meta, exclude={idx}, kind="failover", plan=plan)

    def _adopt(
        self,
        gen_id: int,
        context: Context,
        meta: _Meta,
        exclude: set[int],
        kind: str,
        boundary: int | None = None,
        replay_text: str = "",
        plan: object = None,
    ) -> None:
        def run(r: _Replica) -> None:
            adopt = getattr(r.engine, "adopt", None)
            if adopt is None:
                raise EngineError(f"replica {r.name} cannot continue a generation started elsewhere")
            adopt(
                gen_id,
                context,
                max_tokens=meta.max_tokens,
                prefix_key=meta.prefix_key,
                boundary=boundary,
                replay_text=replay_text,
                **({"plan": plan} if plan is not None else {}),
            )
            r.failovers += 1

        self._place(
            gen_id,
            meta,
            exclude,
            run,
            _Orphan(0.0, "", context=context, boundary=boundary, replay_text=replay_text, plan=plan),
            kind,
        )

    def resumes_mid_segment(self, gen_id: int) -> bool:
        """Only for simulated replicas, and then what the one holding it says: a failover (HTTP
        replicas) re-places a suspended generation at its segment boundary, which a partial segment
        does not have."""
        idx = self._where.get(gen_id)
        return self.needs_script and idx is not None and self.replicas[idx].engine.resumes_mid_segment(gen_id)

    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        idx = self._where.get(gen_id)
        if idx is None:
            raise EngineError(f"generation {gen_id} is not running on a replica")
        return self.replicas[idx].engine.suspend(gen_id, resume_hint)

    def release(self, gen_id: int) -> None:
        self._orphans.pop(gen_id, None)
        self._meta.pop(gen_id, None)
        idx = self._where.pop(gen_id, None)
        if idx is not None:
            self.replicas[idx].engine.release(gen_id)

    def close(self) -> None:
        """Close every replica (each one's contract: idempotent, releases its streams or model)."""
        self._orphans.clear()
        self._meta.clear()
        self._where.clear()
        for r in self.replicas:
            r.engine.close()

    # -- step -------------------------------------------------------------------------------------
    def step(self) -> list[TokenOut]:
        if self.virtual:
            busy = [r for r in self.replicas if r.engine.running()]
            if not busy:
                return []
            r = min(busy, key=lambda x: x.engine.now())
            return r.engine.step()
        deadline = self._clock() + self.step_wait
        while True:
            self._wake.clear()
            outs = self._poll()
            if outs or not self.running():
                return outs
            remaining = deadline - self._clock()
            if remaining <= 0:
                return outs
            self._wake.wait(remaining)

    def _poll(self) -> list[TokenOut]:
        self._housekeeping()
        outs: list[TokenOut] = []
        for idx, r in enumerate(self.replicas):
            poll = getattr(r.engine, "poll", r.engine.step)
            if r.engine.running():
                got = poll()
                if got:
                    r.backoff = 0.0  # it serves tokens: healthy for real, the next fault starts afresh
                outs.extend(got)
            take = getattr(r.engine, "take_faults", None)
            if take is not None:
                for fault in take():
                    self._on_fault(idx, fault)
        outs.extend(self._errors)
        self._errors = []
        return outs

    def _on_fault(self, idx: int, fault: object) -> None:
        r = self.replicas[idx]
        gen_id = fault.gen_id  # type: ignore[attr-defined]  # an EndpointFault of a network replica
        message = fault.message  # type: ignore[attr-defined]  # an EndpointFault of a network replica
        det = r.engine.detach(gen_id)  # type: ignore[attr-defined]  # network replicas (OpenAIEndpointEngine) detach
        self._where.pop(gen_id, None)
        meta = self._meta.get(gen_id)
        if meta is None:
            return
        meta.max_tokens = det.max_tokens
        if not fault.transport:  # type: ignore[attr-defined]  # an EndpointFault of a network replica
            self._fail(gen_id, f"replica {r.name}: {message}")
            return
        self._mark_down(r, message)
        # restart the interrupted submission at its segment boundary elsewhere, verifying the replay
        self._adopt(
            gen_id,
            det.context,
            meta,
            exclude={idx},
            kind="failover",
            boundary=det.boundary,
            replay_text=det.text,
            plan=getattr(det, "plan", None),
        )

    def _fail(self, gen_id: int, reason: str) -> None:
        log.error("generation %d failed: %s", gen_id, reason)
        self.failures[gen_id] = reason
        self._errors.append(TokenOut(gen_id, -1, reason, self.now(), True, "error"))

    def _housekeeping(self) -> None:
        now = self._clock()
        for r in self.replicas:
            if r.healthy:
                continue
            if r.probe_ok is not None:
                ok, r.probe_ok = r.probe_ok, None
                r.probing = False
                if ok:
                    log.warning("replica %s is back after %.1f s", r.name, now - r.down_since)
                    r.healthy, r.error = True, ""
                    r.prefixes.clear()  # a restarted server has lost its cache: warm again
                    self._warmed.clear()
                    self._refresh_info()
                else:
                    r.backoff = min(self.retry_max, max(self.retry_base, r.backoff * 2))
                    r.next_probe = now + r.backoff
            elif not r.probing and now >= r.next_probe:
                r.probing = True
                threading.Thread(
                    target=self._probe, args=(r,), daemon=True, name=f"replica-probe-{r.name}"
                ).start()
        for gen_id, orphan in list(self._orphans.items()):
            meta = self._meta.get(gen_id)
            if meta is None:
                self._orphans.pop(gen_id)
                continue
            if self._healthy():
                del self._orphans[gen_id]
                if orphan.context is not None:
                    self._adopt(
                        gen_id,
                        orphan.context,
                        meta,
                        exclude=set(),
                        kind="orphan-resume",
                        boundary=orphan.boundary,
                        replay_text=orphan.replay_text,
                        plan=orphan.plan,
                    )
                else:
                    self._place_new(gen_id, orphan.prompt_ids or [], orphan.script, meta, "orphan-admit")
            elif now >= orphan.deadline:
                del self._orphans[gen_id]
                self._fail(gen_id, f"no healthy replica for {self.failover_timeout:g} s ({orphan.reason})")

    def _probe(self, r: _Replica) -> None:
        ok = False
        try:
            health = getattr(r.engine, "health", None)
            ok = bool(health()) if health is not None else True
            if ok and not getattr(r.engine, "connected", True):
                r.engine.connect()  # type: ignore[attr-defined]  # a replica that reports `connected` has connect()
        except Exception as exc:  # noqa: BLE001 - any failure keeps the replica down
            r.error = f"probe: {type(exc).__name__}: {exc}"
            ok = False
        r.probe_ok = ok
        self._wake.set()

    # -- placement --------------------------------------------------------------------------------
    def _mean_speed(self, what: str) -> float | None:
        """Mean of the replicas' measured ``speed`` or ``prefill_speed`` (None before any)."""
        known = [v for v in (getattr(r.engine, what, lambda: None)() for r in self.replicas) if v]
        return sum(known) / len(known) if known else None

    def _healthy(self) -> list[_Replica]:
        return [r for r in self.replicas if r.healthy]

    def _why_none(self) -> str:
        return "; ".join(f"{r.name}: {r.error or 'down'}" for r in self.replicas)

    def _mark_down(self, r: _Replica, error: str) -> None:
        if r.healthy:
            log.warning("replica %s is down: %s", r.name, error)
            r.down_since = self._clock()
            # a replica that fails again before serving a token waits longer (no fast flapping)
            r.backoff = min(self.retry_max, max(self.retry_base, r.backoff * 2))
            r.next_probe = self._clock() + r.backoff
            self.down_log.append((self.now(), r.name, error))
        r.healthy = False
        r.error = error

    def _sync(self, r: _Replica) -> None:
        if self.virtual and not r.engine.running():
            r.engine.advance_to(self.now())  # type: ignore[attr-defined]  # virtual-clock replicas (simulated engines) only

    def _placed(self, gen_id: int, idx: int, kind: str, est: float, count: bool = True) -> None:
        r = self.replicas[idx]
        self._where[gen_id] = idx
        meta = self._meta[gen_id]
        if meta.prefix_key is not None:
            r.prefixes.add(meta.prefix_key)
        if count:
            r.placed += 1
        self.placements.append(Placement(self.now(), gen_id, r.name, kind, est))

    def _choose(self, meta: _Meta, exclude: set[int]) -> tuple[int | None, float]:
        best, best_est = None, math.inf
        usable = [i for i, r in enumerate(self.replicas) if i not in exclude and r.healthy]
        # a replica with room now beats one that would queue the request (slots full)
        roomy = [i for i in usable if self.replicas[i].engine.memory().free > 0]
        for idx in roomy or usable:
            r = self.replicas[idx]
            est = self.estimate(r, meta)
            if best is None or est < best_est:
                best, best_est = idx, est
        return best, best_est

    def estimate(self, r: _Replica, meta: _Meta) -> float:
        """Seconds until a generation placed on ``r`` would finish ``placement_tokens`` tokens."""
        e = r.engine
        cached = meta.prefix_key is not None and meta.prefix_key in r.prefixes
        uncached = meta.prompt_len - (meta.prefix_len if cached else 0)
        n_tok = min(self.placement_tokens, meta.max_tokens)
        running = e.running()
        mem = e.memory()
        prof = getattr(e, "profile", None)
        if prof is not None and self.virtual:  # the simulated engine: its own timing model
            backlog = max(0.0, e.now() - self.now())
            kv = mem.running + mem.prefix + meta.prompt_len
            return (
                backlog
                + prof.prefill_batch_time([uncached])
                + n_tok * prof.decode_time(running + 1, kv + running * n_tok)
            )
        # Replicas serve one model. A replica's own measurements count while they are fresh; one that
        # has streamed nothing for ``stale_after`` seconds (or never) is assumed as fast as the set's
        # mean — else one slow spell would keep an idle replica out of every later placement.
        fresh = self._clock() - getattr(e, "last_token_at", -math.inf) <= self.stale_after
        speed = (e.speed() if fresh else None) or self._mean_speed("speed") or 10.0
        prefill = (
            (getattr(e, "prefill_speed", lambda: None)() if fresh else None)
            or self._mean_speed("prefill_speed")
            or 200.0
        )
        # CPU/GPU decode is shared by the running sequences: aggregate throughput ≈ speed × running
        per_seq = speed * max(1, running) / (running + 1)
        wait = 0.0
        slots = getattr(e, "max_running", None)
        if slots is not None and running >= slots:
            wait = n_tok / speed  # a slot frees up when one of the running ones finishes a segment
        return wait + uncached / prefill + n_tok / per_seq


def simulated_replicas(
    profile: EngineProfile | str, n: int, tokenizer: Any = None, **sim_options: Any
) -> SimEngine | ReplicaSetEngine:
    """``n`` simulated engines with ``profile`` (one engine when ``n == 1``) on one virtual clock;
    ``tokenizer``: shared by all (default: a new :class:`~timely_llm_ros.engines.sim_tokenizer.SimTokenizer`);
    ``sim_options``: passed to each :class:`~timely_llm_ros.engines.sim.SimEngine` (KV policy, chunked prefill)."""
    from timely_llm_ros.engines.sim import SimEngine
    from timely_llm_ros.engines.sim_tokenizer import SimTokenizer

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise EngineError(f"replicas must be a positive integer, got {n!r}")
    tok = tokenizer or SimTokenizer()  # one vocabulary: ids tokenized on one replica, emitted by another
    if n == 1:
        return SimEngine(profile, tokenizer=tok, **sim_options)
    return ReplicaSetEngine([SimEngine(profile, tokenizer=tok, **sim_options) for _ in range(n)])
