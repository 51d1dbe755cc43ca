"""Simulated multi-sequence engine on a virtual clock (no sleeping, fully deterministic).

Timing follows an :class:`~timely_llm_ros.core.profile.EngineProfile`. One :meth:`SimEngine.step`:

1. makes room: if the running generations (+1 token each), the pinned prefix cache and the
   suspended contexts still on the device exceed the KV capacity, suspended contexts are evicted
   one by one in the ``eviction`` order and each swapped to host memory (priced at device→host
   bandwidth) or discarded as ``reload`` says (:mod:`timely_llm_ros.core.options.kv_policy`; default: the
   context whose ``resume_hint`` — expected resumption time given at :meth:`suspend` — lies furthest
   ahead first, in the spirit of LAMPS (paper 003) swapping requests that pause for long external
   calls, to host while the host budget lasts, else discarded). With ``kv_policy`` other than
   ``evict`` the context's fate may be decided at suspension instead (kept and never evicted,
   swapped, discarded, or LAMPS' least waste); a swap-out decided at suspension is charged to the
   next step (it stalls the engine like any transfer);
2. prices the iteration as up to two forward passes plus transfers:
   * one batched prefill pass ``c + Σ (a·N_i² + b·N_i)`` over new admissions (N_i = prompt tokens
     not covered by the shared-prefix cache; the first generation with a given ``prefix_key``
     prefills the whole prompt and pins the prefix) and over resumed contexts that were discarded
     (re-prefill of their private tokens — prompt suffix + generated — with the prefix cached). The
     constant ``c`` is paid once per pass, not per sequence (:meth:`EngineProfile.prefill_batch_time`);
     the prefill yields each of these sequences' next token (paper Table 1: token 0 costs the prefill);
   * one decode pass ``q + p·ΣN_kv + r·B`` over the B sequences that already had their last token's
     KV pending (running ones and resumptions from device or host memory). Prefill and decode are
     separate passes (as in HF Transformers, paper Table 1);
   * host→device transfers of swapped-out contexts being resumed, and device→host transfers of
     contexts evicted to make room.

   With ``chunked_prefill`` the engine fuses prompt work into the decode pass, as vLLM's and
   llama.cpp's chunked prefill do: a chunk of ``c`` tokens at prompt offset ``o`` adds
   ``a·((o + c)² − o²) + b·c`` to the decode pass (the pass constant is paid once; a step with no
   decoding sequence pays ``c`` as its own pass), and :meth:`set_prefill_budget` caps the prompt
   tokens of the next step (paper 004's token budget), given to pending prompts in
   :meth:`set_priority` order (then admission order). A sequence emits its first token in the step
   that completes its prompt.
   With ``prompt_rule`` (:mod:`timely_llm_ros.engines.prompt_rule`, the llama.cpp engine's rule) the
   step feeds prompt work the way the llama.cpp engine does — ``chunk`` tokens or one ``fast``
   batch, most urgent first, held back behind more urgent decoding generations — and prices it as
   that engine's one batch costs on a CPU: the chunks' ``a·((o+n)² − o²) + b·n`` plus the pass
   constant ``c`` once, added to the decoding iteration. Every prompt chunk also pays
   ``prefill_kv`` per cached prefix token in front of it, every emitted token
   ``token_overhead`` and every step ``step_overhead`` (profile terms learned on a real engine; 0 in
   the GPU profiles). ``template_tokens`` pads each prompt as a real engine's chat template does
   (tokens added to the shared prefix, to the private part), so prompt lengths match the real run's.
3. advances the clock by that time and emits one token per sequence that finished its prompt: the
   next id of its script, then EOS; ``finished`` at EOS or when ``max_tokens`` generated ids are
   reached.

Only steps without prefill, restore or swap count for :meth:`speed` (:class:`SpeedMeter`).
The shared prefix cache is never evicted (a deployment has a handful of skill sets).
"""

from __future__ import annotations

import math

from timely_llm_ros.core.engine import (
    Context,
    Engine,
    EngineError,
    EngineInfo,
    EngineOutOfMemory,
    MemoryInfo,
    SpeedMeter,
    TokenOut,
)
from timely_llm_ros.core.options.kv_policy import HOST, KVOptions, at_suspension, evict_destination
from timely_llm_ros.core.profile import EngineProfile, load_profile
from timely_llm_ros.engines.prompt_rule import PromptRule, prompt_takes

# the shared state machine (sequences.py); the underscore names are this module's own spelling
from timely_llm_ros.engines.sequences import (
    DEVICE as _DEVICE,
)
from timely_llm_ros.engines.sequences import (
    DISCARDED as _DISCARDED,
)
from timely_llm_ros.engines.sequences import (
    FINISHED as _FINISHED,
)
from timely_llm_ros.engines.sequences import (
    HOST as _HOST,
)
from timely_llm_ros.engines.sequences import (
    PENDING_ADMIT as _PENDING_ADMIT,
)
from timely_llm_ros.engines.sequences import (
    PENDING_RESUME as _PENDING_RESUME,
)
from timely_llm_ros.engines.sequences import (
    RUNNING as _RUNNING,
)
from timely_llm_ros.engines.sequences import (
    SUSPENDED as _SUSPENDED,
)
from timely_llm_ros.engines.sequences import Sequence, SequenceTable
from timely_llm_ros.engines.sim_tokenizer import EOS_ID, SimTokenizer


class _Seq(Sequence):
    """A generation of the simulated engine: the shared state plus its script and prefill progress."""

    __slots__ = ("prefix_key", "prefix_len", "script", "private", "todo", "done", "front")

    def __init__(
        self,
        gen_id: int,
        ids: list[int],
        prefix_key: str | None,
        prefix_len: int,
        script: list[int],
        max_tokens: int,
        order: int,
    ) -> None:
        super().__init__(gen_id, ids, max_tokens, order)
        self.prefix_key = prefix_key
        self.prefix_len = prefix_len
        self.script = script
        self.private = 0  # KV tokens this sequence holds outside the shared prefix
        self.todo = 0  # prompt tokens still to prefill (chunked prefill)
        self.done = 0  # prompt tokens of the current prefill already in the KV (chunk offset)
        self.front = 0  # cached prefix tokens in front of the current prefill


class SimEngine(Engine):
    """Deterministic simulated engine; see the module docstring for the timing model.

    ``kv``: what happens to suspended contexts (:class:`~timely_llm_ros.core.options.kv_policy.KVOptions`;
    default: the profile's ``eviction`` order, host first). ``chunked_prefill``: fuse prompt chunks
    into the decode pass and honour :meth:`set_prefill_budget`."""

    needs_script = True

    def __init__(
        self,
        profile: EngineProfile | str = "llama3-8b-fp16-rtx4090",
        tokenizer: SimTokenizer | None = None,
        start_time: float = 0.0,
        kv: KVOptions | None = None,
        chunked_prefill: bool = False,
        prompt_rule: PromptRule | None = None,
        template_tokens: tuple[int, int] = (0, 0),
    ) -> None:
        self.profile = load_profile(profile) if isinstance(profile, str) else profile
        self.rule = prompt_rule
        if len(template_tokens) != 2 or any(
            isinstance(n, bool) or not isinstance(n, int) or n < 0 for n in template_tokens
        ):
            raise EngineError(f"template_tokens must be two integers >= 0, got {template_tokens!r}")
        self.template_tokens = (int(template_tokens[0]), int(template_tokens[1]))
        self.tokenizer = tokenizer or SimTokenizer()
        self.info = EngineInfo(
            name=f"sim:{self.profile.name}", context_limit=self.profile.context_limit, eos_id=EOS_ID
        )
        self.kv = kv or KVOptions(eviction=self.profile.eviction)
        self.chunked = bool(chunked_prefill)
        self._budget: int | None = None
        self._now = float(start_time)
        self._table: SequenceTable[_Seq] = SequenceTable()
        self._seqs = self._table.seqs
        self._active = self._table.active  # pending admissions/resumes + running, in admission order
        self._prefix: dict[str, int] = {}  # prefix key -> cached length
        self._prefix_tokens = 0
        self._mem_running = 0
        self._mem_susp_dev = 0
        self._mem_host = 0
        self._owed = 0.0  # transfer time decided between steps (swap-out at suspension), paid next step
        self._meter = SpeedMeter(self.profile.speed_window)
        self.stats = {
            "steps": 0,
            "prefill_tokens": 0,
            "swap_out": 0,
            "swap_in": 0,
            "discard": 0,
            "reprefill": 0,
            "reprefill_tokens": 0,
            "busy_time": 0.0,
        }

    # -- Engine API -----------------------------------------------------------------------------
    def tokenize(self, text: str) -> list[int]:
        return self.tokenizer.encode(text)

    def now(self) -> float:
        return self._now

    def cost_profile(self) -> EngineProfile:
        return self.profile

    def advance_to(self, t: float) -> None:
        """Jump the virtual clock forward (the simulator does this while the engine is idle)."""
        if not math.isfinite(t):
            raise EngineError(f"cannot advance the clock to {t!r}")
        if t > self._now:
            self._now = t

    def running(self) -> int:
        return len(self._active)

    def speed(self) -> float | None:
        return self._meter.speed()

    def memory(self) -> MemoryInfo:
        return MemoryInfo(
            capacity=self.profile.kv_capacity_tokens,
            running=self._mem_running,
            prefix=self._prefix_tokens,
            suspended_device=self._mem_susp_dev,
            suspended_host=self._mem_host,
            pinned=self._mem_susp_dev if self.kv.policy == "keep" else 0,
        )

    def set_priority(self, gen_id: int, priority: float) -> None:
        self._table.set_priority(gen_id, priority)

    def set_importance(self, gen_id: int, importance: float) -> None:
        self._table.set_importance(gen_id, importance)

    def set_prefill_budget(self, tokens: int | None) -> None:
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
            raise EngineError(f"prefill budget must be a positive integer or None, got {tokens!r}")
        self._budget = tokens

    def admit(
        self,
        gen_id: int,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        prefix_key: str | None = None,
        prefix_len: int = 0,
        script: list[int] | None = None,
    ) -> None:
        """The port's ``admit`` plus this engine's own ``script``: the ids it emits (then EOS) in place
        of a model's output (``needs_script``; the planner passes it through ``script_kwargs``)."""
        if gen_id in self._seqs:
            raise EngineError(f"generation {gen_id} already admitted")
        if not prompt_ids:
            raise EngineError("empty prompt")
        if len(prompt_ids) >= self.profile.context_limit:
            raise EngineError(
                f"prompt of {len(prompt_ids)} tokens does not fit the context ({self.profile.context_limit})"
            )
        if max_tokens <= 0:
            raise EngineError("max_tokens must be positive")
        if not 0 <= prefix_len <= len(prompt_ids):
            raise EngineError("prefix_len outside the prompt")
        if prefix_key is None:
            prefix_len = 0
        prompt_ids, prefix_len = self._wrap(list(prompt_ids), prefix_len)
        seq = _Seq(
            gen_id,
            prompt_ids,
            prefix_key,
            prefix_len,
            list(script or ()),
            max_tokens,
            self._table.next_order(),
        )
        self._table.add(seq)

    def _wrap(self, ids: list[int], prefix_len: int) -> tuple[list[int], int]:
        """The prompt as long as a real engine's chat template makes it (``template_tokens``)."""
        head, tail = self.template_tokens
        if not (head or tail):
            return ids, prefix_len
        if len(ids) + head + tail >= self.profile.context_limit:
            raise EngineError(
                f"prompt of {len(ids)} tokens (+{head + tail} template) does not fit the context "
                f"({self.profile.context_limit})"
            )
        fill = ids[0]
        return [fill] * head + ids + [fill] * tail, prefix_len + head if prefix_len > 0 else 0

    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        self._table.resume(self._table.suspended(gen_id, context), max_tokens)

    def resumes_mid_segment(self, gen_id: int) -> bool:
        """Always: a scripted output goes on where it stopped."""
        return True

    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        seq = self._table.get(gen_id)
        if seq.state != _RUNNING or seq.todo > 0:
            raise EngineError(f"generation {gen_id} is not running (cannot suspend)")
        self._table.suspend(seq, resume_hint, self._now)
        seq.location = _DEVICE
        self._mem_running -= seq.private
        self._mem_susp_dev += seq.private
        pause = (resume_hint - self._now) if resume_hint is not None else math.inf
        action = at_suspension(
            self.kv, seq.private, self._mem_running, pause, self.profile, self._host_room(seq.private)
        )
        if action != "keep":
            self._owed += self._evict(seq, action)
        return self._table.context(seq)

    def release(self, gen_id: int) -> None:
        seq = self._table.forget(gen_id)
        if seq is None:
            return
        if seq.state == _RUNNING:
            self._mem_running -= seq.private
        elif seq.state in (_SUSPENDED, _PENDING_RESUME):
            if seq.location == _DEVICE:
                self._mem_susp_dev -= seq.private
            elif seq.location == _HOST:
                self._mem_host -= seq.private
        seq.state = _FINISHED

    def close(self) -> None:
        """Forget every generation (the simulator holds no model, thread or connection)."""
        for gen_id in list(self._seqs):
            self.release(gen_id)

    def step(self) -> list[TokenOut]:
        if not self._active:
            return []
        prof = self.profile
        # 1. memory after this step: running + admissions + resumptions + one new token each
        need = self._mem_running + len(self._active) + self._prefix_tokens
        susp_dev = self._mem_susp_dev
        new_prefix: set[str] = set()
        for seq in self._active.values():
            if seq.state == _PENDING_ADMIT:
                key = seq.prefix_key
                cached = key is not None and (key in self._prefix or key in new_prefix)
                need += seq.n_prompt - seq.prefix_len if cached else seq.n_prompt
                if key is not None and not cached and seq.prefix_len > 0:
                    new_prefix.add(key)
            elif seq.state == _PENDING_RESUME:
                need += seq.private
                if seq.location == _DEVICE:
                    susp_dev -= seq.private
        dt = self._make_room(need, susp_dev) + self._owed
        self._owed = 0.0
        pure = dt == 0.0
        # 2. bring admissions and resumptions in; price the iteration
        decode_b = 0
        decode_kv = 0
        for seq in self._active.values():
            st = seq.state
            if st != _RUNNING:
                pure = False
                dt += self._bring_in(seq)
            if seq.todo == 0:
                decode_b += 1
                decode_kv += len(seq.ids)
        decoding = [s.priority for s in self._active.values() if s.todo == 0]
        prefill_ns, fronts, fused = self._prompt_work(decoding)
        if prefill_ns or fused:
            pure = False
        dt += prof.prefill_batch_time(prefill_ns, fronts)
        if self.rule is not None and fused > 0.0:
            dt += fused + prof.prefill_c  # llama.cpp on a CPU: the constant of a multi-row batch
        elif self.chunked and fused > 0.0:
            dt += fused if decode_b else fused + prof.prefill_c
        dt += prof.decode_time(decode_b, decode_kv)
        emitting = sum(1 for s in self._active.values() if s.todo == 0)
        dt += prof.step_overhead + prof.token_overhead * emitting
        self._now += dt
        self.stats["steps"] += 1
        self.stats["busy_time"] += dt
        self._meter.record(dt, pure)
        return self._emit_tokens()

    # -- internals ------------------------------------------------------------------------------
    def _bring_in(self, seq: _Seq) -> float:
        """Admission or resumption of ``seq`` before this step; returns transfer time. Sets ``todo``
        (prompt tokens to prefill: uncached prompt, or the private tokens of a discarded context)."""
        dt = 0.0
        if seq.state == _PENDING_ADMIT:
            key = seq.prefix_key
            if key is not None and key in self._prefix:
                n = seq.n_prompt - seq.prefix_len
            else:
                n = seq.n_prompt
                if key is not None and seq.prefix_len > 0:
                    self._prefix[key] = seq.prefix_len
                    self._prefix_tokens += seq.prefix_len
            seq.private = seq.n_prompt - seq.prefix_len
            seq.todo, seq.done = n, 0
            seq.front = seq.n_prompt - n
        elif seq.location == _DEVICE:  # resumed from device memory: free, joins the decode batch
            self._mem_susp_dev -= seq.private
        elif seq.location == _HOST:  # restore from host, then decode
            self._mem_host -= seq.private
            dt += self.profile.swap_in_time(seq.private)
            self.stats["swap_in"] += 1
        else:  # discarded: re-prefill the private tokens (the shared prefix is still cached)
            seq.todo, seq.done = seq.private, 0
            seq.front = seq.prefix_len if seq.prefix_key is not None else 0
            self.stats["reprefill"] += 1
            self.stats["reprefill_tokens"] += seq.private
        self._mem_running += seq.private
        seq.location = _DEVICE
        seq.state = _RUNNING
        return dt

    def _prompt_work(self, decoding: list[float]) -> tuple[list[int], list[int], float]:
        """This step's prompt work: (token counts and cached fronts of a separate prefill pass, fused
        chunk time).

        Without chunked prefill or a prompt rule every pending prompt is prefilled whole in one pass.
        With ``prompt_rule`` the llama.cpp engine's rule picks the chunks (``decoding``: priorities
        of the generations that decode this step). With chunked prefill the budget (None:
        unlimited) goes to pending prompts in priority order. Chunks are priced at their offset
        (module docstring)."""
        pending = [s for s in self._active.values() if s.todo > 0]
        if not pending:
            return [], [], 0.0
        if self.rule is None and not self.chunked:
            ns = [s.todo for s in pending]
            fronts = [s.front for s in pending]
            for s in pending:
                self.stats["prefill_tokens"] += s.todo
                s.done += s.todo
                s.todo = 0
            return ns, fronts, 0.0
        if self.rule is not None:
            takes = prompt_takes(
                self.rule,
                decoding,
                [(s.priority, s.order, s.todo) for s in pending],
                self._budget,
                planner_budget=self._budget is not None,
            )
            chunks = [(pending[i], c) for i, c in takes]
        else:
            chunks = []
            budget = self._budget
            for s in sorted(pending, key=lambda x: (x.priority, x.order)):
                if budget is not None and budget <= 0:
                    break
                c = s.todo if budget is None else min(s.todo, budget)
                chunks.append((s, c))
                if budget is not None:
                    budget -= c
        fused = 0.0
        for s, c in chunks:
            fused += self.profile.chunk_time(s.done, c, s.front)
            s.done += c
            s.todo -= c
            self.stats["prefill_tokens"] += c
        return [], [], fused

    def _emit_tokens(self) -> list[TokenOut]:
        now = self._now
        text_of = self.tokenizer.token_text
        out: list[TokenOut] = []
        done: list[int] = []
        for seq in self._active.values():
            if seq.todo > 0:  # its prompt is not complete yet: no token this step
                continue
            k = seq.n_gen
            tok = seq.script[k] if k < len(seq.script) else EOS_ID
            seq.ids.append(tok)
            seq.n_gen = k + 1
            seq.private += 1
            self._mem_running += 1
            if tok == EOS_ID:
                out.append(TokenOut(seq.gen_id, tok, "", now, True, "eos"))
                done.append(seq.gen_id)
            elif seq.spent:
                out.append(TokenOut(seq.gen_id, tok, text_of(tok), now, True, "length"))
                done.append(seq.gen_id)
            else:
                out.append(TokenOut(seq.gen_id, tok, text_of(tok), now, False))
        for gid in done:  # a finished sequence stops running and frees its KV
            seq = self._active[gid]
            self._table.finish(seq)
            self._mem_running -= seq.private
            seq.private = 0
        return out

    def _host_room(self, n: int) -> bool:
        return self._mem_host + n <= self.profile.host_kv_capacity_tokens

    def _evict(self, seq: _Seq, action: str) -> float:
        """Move a suspended context off the device (``host`` if there is room, else ``drop``);
        returns the transfer time."""
        self._mem_susp_dev -= seq.private
        if action == HOST and self._host_room(seq.private):
            seq.location = _HOST
            self._mem_host += seq.private
            self.stats["swap_out"] += 1
            return self.profile.swap_out_time(seq.private)
        seq.location = _DISCARDED
        self.stats["discard"] += 1
        return 0.0

    def _make_room(self, need_running: int, susp_dev: int) -> float:
        """Evict suspended contexts until running + prefix + suspended fit; return the swap time."""
        cap = self.profile.kv_capacity_tokens
        if need_running > cap:
            raise EngineOutOfMemory(f"running generations need {need_running} KV tokens, capacity {cap}")
        if need_running + susp_dev <= cap:
            return 0.0
        if self.kv.policy == "keep":
            raise EngineOutOfMemory(
                f"running generations need {need_running} KV tokens and kept suspended "
                f"contexts hold {susp_dev} of the capacity {cap} (kv_policy keep)"
            )
        victims = self._table.suspended_on_device(self.kv)
        dt = 0.0
        for seq in victims:
            if need_running + susp_dev <= cap:
                break
            susp_dev -= seq.private
            dest = evict_destination(seq.private, self._host_room(seq.private), self.kv, self.profile)
            dt += self._evict(seq, dest)
        return dt
