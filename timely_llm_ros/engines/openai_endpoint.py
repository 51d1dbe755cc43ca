"""One OpenAI-compatible inference server (llama.cpp's ``llama-server`` or vLLM) as an :class:`Engine`.

The planner's engine protocol is lock-step; a server streams asynchronously. How the mapping stays
honest:

* **admit / resume** only queue a submission; the next :meth:`step` sends it — then the planner's
  :meth:`set_priority` (the segment deadline) is known and becomes vLLM's ``priority``. The prompt is
  always token ids (template-wrapped planner ids; a resumption sends prompt + every generated id the
  planner has seen), never text, so nothing is re-tokenised.
* **step** returns at most **one token per generation**: the oldest token that arrived since the last
  step, stamped with its arrival time (the per-token timestamp). With nothing arrived it waits up to
  ``step_wait`` seconds for the first one, so the planner neither spins nor waits long for admissions.
  One token per step keeps the protocol exact: when the planner cuts a segment at token k, tokens
  k+1… that already arrived are dropped by :meth:`suspend`, never half-delivered. A step therefore is
  *not* a server iteration; see "estimates" below.
* **suspend** closes the stream (the server cancels the request: llama.cpp when its next write fails,
  vLLM on disconnect). The KV of prompt + generated tokens stays in the server's prefix cache (llama.cpp
  ``cache_prompt`` + its RAM prompt cache; vLLM automatic prefix caching), so **resume** re-submits the
  ids and the server recomputes only what it lost: on vLLM at most the last partial KV block (16
  tokens on GPUs, 128 with its CPU backend), on llama.cpp one token while the slot still holds them
  (this engine picks the slot, :meth:`_pick_slot`). Each resumption's hit is recorded from the
  server's own count where it streams one (:attr:`OpenAIEndpointEngine.resume_log`: llama.cpp on every
  chunk; vLLM only in a request's final chunk — its ``/metrics`` prefix-cache counters,
  :meth:`server_state`, cover the others).
* **grammar**: the skill set's GBNF in the server's field (:mod:`.openai_protocol`); a resumed request
  is a new derivation and gets :func:`~.skill_grammar.continuation_gbnf`. ``grammar: None`` turns it off
  explicitly (the segment parser still gates every segment). **Replay mode** (``admit(...,
  plan=text)``): the grammar is the literal (:func:`~timely_llm_ros.core.options.replay.gbnf_literal`) — on
  a resumption the rest of it after the text delivered so far — and no stop strings apply (the literal
  ends the plan); text that leaves the literal fails the generation with the reason.

Scheduler estimates that become approximate over HTTP: :meth:`speed` is the mean gap between streamed
tokens of recent generations (not a lock-step iteration time: it includes the server's batching and
the loopback/network delay); :meth:`memory` is the token count of our own generations against the
capacity the server states (llama.cpp: slots × per-slot context from ``/props``; vLLM: KV blocks ×
block size from ``/metrics``), so other clients of the same server are invisible; a server with a
fixed number of slots (llama.cpp ``--parallel``) reports no free memory while all slots hold our
generations, so waiting generations stay in the planner's priority queue instead of the server's FIFO.
Faults (:class:`~.openai_http.HttpFailure`) are not turned into failed tasks here: :meth:`take_faults`
hands them to the replica set (:mod:`.replicas`), which re-places the generation elsewhere.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import queue
import threading
import time
from collections import deque
from collections.abc import Callable

from timely_llm_ros.core.engine import (
    Context,
    Engine,
    EngineError,
    EngineInfo,
    MemoryInfo,
    SpeedMeter,
    TokenOut,
    check_admission,
)
from timely_llm_ros.core.options.replay import PlanLiteral, ReplayError, gbnf_literal
from timely_llm_ros.engines.openai_config import OpenAIConfig
from timely_llm_ros.engines.openai_gen import Detached, Fault, ResumeRecord, ServerGen
from timely_llm_ros.engines.openai_http import Endpoint, HttpFailure, Stream, StreamEvent
from timely_llm_ros.engines.openai_protocol import (
    Chunk,
    completion_body,
)
from timely_llm_ros.engines.openai_server import UNKNOWN_CAPACITY, ServerFacts
from timely_llm_ros.engines.sequences import (
    DEVICE,
    FINISHED,
    PENDING_ADMIT,
    PENDING_RESUME,
    RUNNING,
    SUSPENDED,
    SequenceTable,
)
from timely_llm_ros.engines.skill_grammar import GrammarTexts

log = logging.getLogger(__name__)

_PENDING = (PENDING_ADMIT, PENDING_RESUME)  # a submission is queued: the next step sends it


class OpenAIEndpointEngine(ServerFacts, Engine):
    """Engine over one server (see the module docstring).

    ``base_url``: ``http://127.0.0.1:8080`` (a trailing ``/v1`` is accepted); ``model``: the served
    model name (None: the server's only/first model). The options are the fields of
    :class:`~.openai_config.OpenAIConfig` (keyword arguments, or ``config`` with keyword arguments
    over it; the replica-set fields are the replica set's): ``server``, ``api_key_env``,
    ``grammar``, ``chat_template``, ``stop`` (a line break ends a one-line plan, as the embedded
    engine does), ``kv_capacity``/``max_running`` (override what the server states), ...
    ``connect=False`` defers the first contact to :meth:`connect` (a replica that is down at
    start-up). ``admit(..., plan=text)``: replay mode, the generation writes exactly ``text``.
    """

    replays_plans = True

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        config: OpenAIConfig | None = None,
        connect: bool = True,
        wake: Callable[[], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
        **options: object,
    ) -> None:
        cfg = OpenAIConfig.from_options(options, config).validate()
        self.config = cfg
        self.endpoint = Endpoint.parse(base_url, cfg.api_key_env)
        self.url = self.endpoint.url
        self.model = model
        self.kind = cfg.server if cfg.server != "auto" else ""
        self.temperature = float(cfg.temperature)
        self.seed = int(cfg.seed)
        self.stop = cfg.stops()
        self.step_wait = float(cfg.step_wait)
        self.timeouts = cfg.timeouts()
        self._kv_override = cfg.kv_capacity
        self._max_running_override = cfg.max_running
        self.capacity = cfg.kv_capacity or UNKNOWN_CAPACITY
        self.max_running = cfg.max_running
        self._grammars = GrammarTexts(cfg.grammar)
        self._template_mode = cfg.chat_template
        self._template: tuple[list[int], list[int], list[int]] | None = None
        self._clock = clock
        self._t0 = clock()
        self._events: queue.Queue[StreamEvent] = queue.Queue()
        self._wake_flag = threading.Event()
        self._external_wake = wake
        self._table: SequenceTable[ServerGen] = SequenceTable()
        self._gens = self._table.seqs  # every generation on this server by id
        self._slot_owner: dict[int, int] = {}  # llama.cpp slot -> generation that used it last
        self._slot_used: dict[int, float] = {}  # llama.cpp slot -> when it was last given out
        self._faults: list[Fault] = []
        self._tok_cache: dict[tuple[str, bool], list[int]] = {}
        self._meter = SpeedMeter(cfg.speed_window)
        self._prefill_tps: float | None = None
        self.last_token_at = -math.inf  # engine clock of the last streamed token (estimates' freshness)
        self._admissions = 0
        self.connected = False
        self.info = EngineInfo(
            name=f"openai:{self.url}", context_limit=1 << 30, eos_id=-1, extra={"url": self.url}
        )
        self.resume_log: list[ResumeRecord] = []
        self.stats = {
            "submissions": 0,
            "resubmits": 0,
            "closed_streams": 0,
            "faults": 0,
            "cached_tokens": 0,
            "tokens": 0,
            "prefix_cached_resumes": 0,
            "slot_pins": 0,
            "replayed": 0,
        }
        if connect:
            self.connect()

    # -- Engine API -------------------------------------------------------------------------------
    def now(self) -> float:
        return self._clock()

    def running(self) -> int:
        return len(self._table.active)

    def speed(self) -> float | None:
        return self._meter.speed()

    def prefill_speed(self) -> float | None:
        """Uncached prompt tokens per second, from the time to first token of recent submissions."""
        return self._prefill_tps

    def memory(self) -> MemoryInfo:
        running = sum(len(g.ids) for g in self._table.active.values())
        suspended = sum(len(g.ids) for g in self._gens.values() if g.state == SUSPENDED)
        if self.max_running is not None and self.running() >= self.max_running:
            running = max(running, self.capacity)  # no free slot: nothing more fits (module docstring)
        return MemoryInfo(
            capacity=self.capacity,
            running=min(running, self.capacity),
            prefix=0,
            suspended_device=suspended,
            suspended_host=0,
        )

    def admit(
        self,
        gen_id: int,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        prefix_key: str | None = None,
        prefix_len: int = 0,
        plan: str | None = None,
    ) -> None:
        check_admission(gen_id in self._gens, gen_id, prompt_ids, max_tokens)
        self._need_connection()
        ids = self._wrap(list(prompt_ids), prefix_len if prefix_key is not None else 0)
        self._check_fits(len(ids))
        gen = ServerGen(gen_id, ids, len(ids), max_tokens, prefix_key, self._table.next_order())
        gen.plan = PlanLiteral(plan) if plan is not None else None
        self._table.add(gen)

    def adopt(
        self,
        gen_id: int,
        context: Context,
        *,
        max_tokens: int,
        prefix_key: str | None,
        boundary: int | None = None,
        replay_text: str = "",
        plan: PlanLiteral | None = None,
    ) -> None:
        """Continue on this server a generation that another replica started.

        ``boundary``: where the interrupted submission began (a segment boundary: the grammar of a
        new submission is valid there, not in the middle of a statement). The generation restarts
        from there and the ids after it — already delivered to the planner, with ``replay_text`` — are
        regenerated and *verified* instead of delivered again: greedy decoding of the same model
        gives the same tokens; a different one fails the generation with the reason (never a spliced
        plan). None: the context ends at a boundary (a suspended generation), nothing to replay.
        """
        if gen_id in self._gens:
            raise EngineError(f"generation {gen_id} already on {self.url}")
        self._need_connection()
        self._check_fits(len(context.token_ids))
        ids = list(context.token_ids)
        cut = len(ids) if boundary is None else max(context.n_prompt, min(boundary, len(ids)))
        gen = ServerGen(gen_id, ids[:cut], context.n_prompt, max_tokens, prefix_key, self._table.next_order())
        gen.replay_ids = deque(ids[cut:])
        gen.replay_text = replay_text if gen.replay_ids else ""
        gen.plan = plan.at(plan.done) if plan is not None else None
        if len(ids) - context.n_prompt >= max_tokens:
            raise EngineError(f"generation {gen_id} has no token budget left")
        self._table.add(gen)

    def _check_fits(self, n: int) -> None:
        if n >= self.info.context_limit:
            raise EngineError(
                f"context overflow: prompt of {n} tokens does not fit the server's context of "
                f"{self.info.context_limit} tokens"
            )

    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        self._table.resume(self._table.resumable(gen_id, context, max_tokens), max_tokens)

    def resumes_mid_segment(self, gen_id: int) -> bool:
        """As vLLM: a resumed request is a new server request, so only a replayed literal (its rest)
        or an unconstrained generation goes on mid-statement; the skill grammar's continuation
        assumes a complete statement before it."""
        gen = self._table.seqs.get(gen_id)
        if gen is None:
            return False
        return gen.plan is not None or self._grammars.get(gen.key, True) is None

    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        gen = self._table.running_one(gen_id, RUNNING, *_PENDING)
        self._close(gen)
        self._table.suspend(gen, resume_hint, self._clock())
        gen.location = DEVICE  # in the server's prefix cache
        ctx = self._table.context(gen)
        ctx.kv = self.url
        return ctx

    def detach(self, gen_id: int) -> Detached:
        """Take a generation off this server (for re-placement): what :meth:`adopt` needs elsewhere."""
        gen = self._table.forget(gen_id)
        if gen is None:
            raise KeyError(gen_id)
        self._close(gen)
        ids = list(gen.ids) + list(gen.replay_ids)  # ids still being verified: the planner has them
        return Detached(
            Context(gen_id=gen_id, token_ids=ids, n_prompt=gen.n_prompt, kv=None, location="discarded"),
            gen.max_tokens,
            gen.key,
            gen.sub_start,
            "".join(gen.sub_text),
            gen.plan.at(gen.plan_start) if gen.plan is not None else None,
        )

    def plan_of(self, gen_id: int) -> PlanLiteral | None:
        """A copy of a generation's literal at the text delivered so far (replay mode; else None)."""
        gen = self._gens.get(gen_id)
        return gen.plan.at(gen.plan.done) if gen is not None and gen.plan is not None else None

    def release(self, gen_id: int) -> None:
        gen = self._table.forget(gen_id)
        if gen is not None:
            self._close(gen)
            gen.state = FINISHED

    def set_priority(self, gen_id: int, priority: float) -> None:
        self._table.set_priority(gen_id, priority)

    def take_faults(self) -> list[Fault]:
        """Generations whose stream failed since the last call (they are no longer running here)."""
        out, self._faults = self._faults, []
        return out

    def holds(self, gen_id: int) -> bool:
        return gen_id in self._gens

    def close(self) -> None:
        """Close every stream and forget every generation (the port's contract; the replica set
        calls it for each server). The stream threads end once their sockets are closed."""
        for gen in list(self._gens.values()):
            self._close(gen)
            self._table.forget(gen.gen_id)
            gen.state = FINISHED

    # -- step -------------------------------------------------------------------------------------
    def step(self) -> list[TokenOut]:
        deadline = self._clock() + self.step_wait
        while True:
            self._wake_flag.clear()
            outs = self.poll()
            if outs or self._faults or not self.running():
                return outs
            remaining = deadline - self._clock()
            if remaining <= 0 or not self._wake_flag.wait(remaining):
                return self.poll()

    def poll(self) -> list[TokenOut]:
        """Send queued submissions, take in what arrived, deliver one token per generation; no waiting."""
        for gen in list(self._gens.values()):
            if gen.state in _PENDING:
                self._send(gen)
        while True:
            try:
                event = self._events.get_nowait()
            except queue.Empty:
                break
            self._feed(event)
        out: list[TokenOut] = []
        for gen in list(self._gens.values()):
            if gen.state != RUNNING:
                continue
            if gen.buf:
                out.append(self._deliver(gen))
            elif gen.fault is not None:
                self._fault(gen)
        return out

    def _wake(self) -> None:
        self._wake_flag.set()
        if self._external_wake is not None:
            self._external_wake()

    def _send(self, gen: ServerGen) -> None:
        resumed = gen.n_gen > 0
        if self.caps.priority:
            prio = (
                int(max(-(2**31), min(2**31 - 1, (gen.priority - self._t0) * 1000)))
                if math.isfinite(gen.priority)
                else self._admissions
            )
        else:
            prio = None
        self._admissions += 1
        body = completion_body(
            self.kind,
            model=str(self.model),
            prompt_ids=gen.ids,
            max_tokens=gen.max_tokens - gen.n_gen,
            temperature=self.temperature,
            seed=self.seed + gen.gen_id,
            grammar=gbnf_literal(gen.plan.rest())
            if gen.plan is not None
            else self._grammars.get(gen.key, resumed),
            priority=prio,
            stop=self.stop if gen.plan is None else [],
            first=not resumed,
        )
        slot = self._pick_slot(gen)
        if slot is not None:
            body["id_slot"] = slot
        if (
            self.kind == "vllm"
            and "structured_outputs" in body
            and self._structured_field != "structured_outputs"
        ):
            body[self._structured_field] = body.pop("structured_outputs")["grammar"]
        self._begin(gen)
        if resumed:
            gen.record = ResumeRecord(gen.gen_id, len(gen.ids))
            self.resume_log.append(gen.record)
            self.stats["resubmits"] += 1
        self.stats["submissions"] += 1
        gen.stream = Stream(
            self.endpoint,
            self.kind,
            body,
            (gen.gen_id, gen.sub),
            self._events,
            self._clock,
            wake=self._wake,
            **self.timeouts,
        )
        gen.state = RUNNING
        gen.stream.start()

    def _begin(self, gen: ServerGen) -> None:
        """Per-submission state: a new submission number (late events of the old one are ignored),
        the segment boundary it starts at, and what a failover replay still has to verify."""
        gen.sub += 1
        gen.sub_start = len(gen.ids)
        gen.plan_start = gen.plan.done if gen.plan is not None else 0
        if not gen.replay_ids:  # a replay only ever covers the submission that adopt() restarted
            gen.replay_text = ""
        gen.sub_text = [gen.replay_text] if gen.replay_text else []
        gen.replay_seen = ""
        gen.buf.clear()
        gen.fault = None
        gen.text_carry = ""
        gen.last_t = math.nan
        gen.sent_at = self._clock()
        gen.uncached = len(gen.ids)
        gen.record = None
        gen.state = RUNNING

    def _feed(self, ev: StreamEvent) -> None:
        gen = self._gens.get(ev.key[0])
        if gen is None or gen.sub != ev.key[1] or gen.state != RUNNING:
            return  # a closed submission's late event
        if ev.failure is not None:
            gen.fault = ev.failure
            return
        ch = ev.chunk
        if ch is None:
            return
        if ch.cached is not None:
            if gen.record is not None and gen.record.cached_tokens is None:
                gen.record.cached_tokens = ch.cached
                self.stats["cached_tokens"] += ch.cached
                if ch.cached >= gen.record.prompt_tokens - 16:
                    self.stats["prefix_cached_resumes"] += 1
            if math.isnan(gen.last_t):
                gen.uncached = max(0, len(gen.ids) - ch.cached)
        if ch.error:
            gen.fault = HttpFailure(f"{self.url}: {ch.error}", transport=False)
            return
        if gen.replay_ids or len(gen.replay_seen) < len(gen.replay_text):
            ch = self._replay(gen, ch)
            if ch is None:
                return
        if ch.ids:
            if math.isnan(gen.last_t):  # first token: prefill (+ queueing) time
                ttft = ev.t - gen.sent_at
                if ttft > 0 and gen.uncached > 32:
                    tps = gen.uncached / ttft
                    self._prefill_tps = tps if self._prefill_tps is None else 0.5 * (self._prefill_tps + tps)
            else:
                gap = (ev.t - gen.last_t) / len(ch.ids)
                for _ in ch.ids:
                    self._meter.record(gap, pure_decode=True)
            gen.last_t = ev.t
            self.last_token_at = ev.t
            for tok in ch.ids:
                gen.buf.append([tok, "", ev.t, ""])
            gen.buf[-1][1] = gen.text_carry + ch.text
            gen.text_carry = ""
        elif ch.text:
            if gen.buf:
                gen.buf[-1][1] += ch.text
            else:  # text released later than its token (a held-back stop-string prefix)
                gen.text_carry += ch.text
        if ch.finish:
            if ch.finish == "error":
                gen.fault = HttpFailure(f"{self.url}: {ch.error}", transport=False)
                return
            if gen.buf:
                gen.buf[-1][3] = ch.finish
                gen.buf[-1][1] += gen.text_carry
            else:
                gen.buf.append([None, gen.text_carry, ev.t, ch.finish])
            gen.text_carry = ""

    def _replay(self, gen: ServerGen, ch: Chunk) -> Chunk | None:
        """Verify regenerated tokens/text against what the planner already has (see :meth:`adopt`);
        return the chunk's new part, or None after a divergence (the generation then fails)."""
        new_ids = []
        for tok in ch.ids:
            if not gen.replay_ids:
                new_ids.append(tok)
            elif tok == gen.replay_ids[0]:
                gen.push(gen.replay_ids.popleft())  # verified; the planner has it already
                self.stats["replayed"] += 1
            else:
                gen.fault = HttpFailure(
                    f"{self.url}: after a failover the server regenerated token {tok} where "
                    f"{gen.replay_ids[0]} had been delivered; the plan cannot be continued "
                    "consistently",
                    transport=False,
                )
                return None
        seen = gen.replay_seen + ch.text
        want = gen.replay_text
        if not (want.startswith(seen) if len(seen) <= len(want) else seen.startswith(want)):
            gen.fault = HttpFailure(
                f"{self.url}: after a failover the regenerated text {seen[:60]!r} differs from "
                f"the delivered {want[:60]!r}",
                transport=False,
            )
            return None
        if gen.plan is not None:  # verified text is the planner's already: the literal moves past it
            gen.plan.feed(seen[: len(want)][len(gen.replay_seen) :])
        gen.replay_seen = seen[: len(want)]
        if not gen.replay_ids and len(seen) >= len(want):  # replay complete: back to normal delivery
            gen.replay_text = gen.replay_seen = ""
        return dataclasses.replace(ch, ids=new_ids, text=seen[len(want) :])

    def _deliver(self, gen: ServerGen) -> TokenOut:
        tok, text, t, finish = gen.buf.popleft()
        if tok is not None:
            gen.push(int(tok))
            self.stats["tokens"] += 1
        if text:
            gen.sub_text.append(text)
            if gen.plan is not None:
                try:
                    gen.plan.feed(text)
                except ReplayError as exc:  # the server ignored the constraint: never another plan
                    self._finish(gen)
                    return TokenOut(gen.gen_id, -1, f"{self.url}: {exc}", t, True, "error")
        if not finish and gen.spent:
            finish = "length"
        if finish:
            self._finish(gen)
        return TokenOut(
            gen.gen_id, int(tok) if tok is not None else self.info.eos_id, text, t, bool(finish), finish
        )

    def _fault(self, gen: ServerGen) -> None:
        fault = gen.fault
        assert fault is not None
        self._finish(gen)  # the replica set re-places it (detach) or fails it
        self.stats["faults"] += 1
        log.warning("generation %d on %s: %s", gen.gen_id, self.url, fault)
        self._faults.append(Fault(gen.gen_id, str(fault), fault.transport))

    def _finish(self, gen: ServerGen) -> None:
        """The generation ended here (its last token, a fault): its stream closes, it leaves the batch."""
        self._close(gen)
        if gen.gen_id in self._table.active:
            self._table.finish(gen)
        gen.state = FINISHED

    def _close(self, gen: ServerGen) -> None:
        if gen.stream is not None:
            gen.stream.close()
            gen.stream = None
            self.stats["closed_streams"] += 1
        gen.buf.clear()
        gen.text_carry = ""
