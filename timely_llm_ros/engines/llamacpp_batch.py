"""The batch of one llama.cpp engine step, and the sampling of its tokens.

One :meth:`~.llamacpp.LlamaCppEngine.step` builds **one** ``llama_batch`` with, for every running
generation, the tokens whose KV is not in the cache yet — the last sampled token for a decoding
generation, (a chunk of) the prompt for a new one, nothing else — plus the ids of a shared prefix
seen for the first time (each prefix token tagged with the prefix sequence and every admission that
uses it). It decodes the batch (split into ``n_batch``-token calls only when a long prompt overflows
one call) and samples one token per generation whose last id was fed.

:class:`Batching` is a part of :class:`~.llamacpp.LlamaCppEngine` (a mixin): the state it works on
is the engine's, declared below.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from timely_llm_ros.core.engine import EngineError, EngineOutOfMemory, TokenOut
from timely_llm_ros.engines.llamacpp_native import NativeBatch, NativeModel
from timely_llm_ros.engines.llamacpp_seq import LlamaSeq, Prefix, StepInfo
from timely_llm_ros.engines.prompt_rule import PromptRule, prompt_takes
from timely_llm_ros.engines.sequences import DEVICE, PENDING_ADMIT, SequenceTable


@dataclass
class _Rows:
    """The rows of one step's batch, column by column."""

    tokens: list[int] = field(default_factory=list)
    pos: list[int] = field(default_factory=list)
    tags: list[tuple[int, ...]] = field(default_factory=list)  # llama.cpp sequence ids of the row
    want: list[bool] = field(default_factory=list)  # logits wanted (a generation's last fed id)
    owner: list[LlamaSeq | None] = field(default_factory=list)  # None: a shared-prefix row

    def add(self, token: int, pos: int, tag: tuple[int, ...], want: bool, owner: LlamaSeq | None) -> None:
        self.tokens.append(token)
        self.pos.append(pos)
        self.tags.append(tag)
        self.want.append(want)
        self.owner.append(owner)


class Batching:
    """The batch-building, decoding and sampling methods of the llama.cpp engine."""

    native: NativeModel | None
    prefill_chunk: int | None
    prefill_fast_batch: int | None
    temperature: float
    ignore_eos: bool
    newline_ends_plan: bool
    stats: dict[str, float]
    _table: SequenceTable[LlamaSeq]
    _prefixes: dict[tuple[int, ...], Prefix]
    _free_ids: list[int]
    _batch: NativeBatch | None
    _planner_budget: bool
    _step_budget: int | None
    _eog: np.ndarray
    _pos_limit: int
    _nat: Callable[[], NativeModel]
    _evict_one: Callable[[StepInfo], bool]
    _bring_in: Callable[[LlamaSeq, StepInfo], None]
    now: Callable[[], float]

    def _run_batch(
        self, nat: NativeModel, new_prefix: dict[tuple[int, ...], list[LlamaSeq]], info: StepInfo
    ) -> list[tuple[LlamaSeq, np.ndarray]]:
        """Build this step's rows, decode them, return each sequence's logits row (nothing sampled yet,
        so a failure leaves every generation's ids untouched)."""
        rows = _Rows()
        self._prefix_rows(rows, new_prefix, info)
        partial = self._sequence_rows(rows, info)
        info.n_tokens = len(rows.tokens)
        out = self._decode(nat, rows, info)
        for seq, n in partial:  # a chunk of the prompt is in the KV now; no token yet
            seq.kv_len = n
        return out

    def _prefix_rows(
        self, rows: _Rows, new_prefix: dict[tuple[int, ...], list[LlamaSeq]], info: StepInfo
    ) -> None:
        """Rows of the shared prefixes first seen in this step, tagged with the prefix's own sequence
        and every admission that uses it."""
        for pids, users in new_prefix.items():
            pseq = self._free_ids.pop()
            self._prefixes[pids] = Prefix(pids, pseq)
            tag = (pseq, *(u.seq_id for u in users))
            for p, tok in enumerate(pids):
                rows.add(tok, p, tag, False, None)  # type: ignore[arg-type]  # a prefix row has no owning sequence
            for u in users:
                u.kv_len = u.shared
            info.prefix_tokens += len(pids)

    def _sequence_rows(self, rows: _Rows, info: StepInfo) -> list[tuple[LlamaSeq, int]]:
        """Rows of the running generations (one-token rows first: their logits come from the first
        decode call); returns the prompts fed only in part, with how far."""
        singles: list[LlamaSeq] = []
        multi: list[LlamaSeq] = []
        for seq in self._table.active.values():
            self._bring_in(seq, info)
            (singles if len(seq.ids) - seq.kv_len == 1 else multi).append(seq)
        feed = [(seq, len(seq.ids)) for seq in singles] + self._prompt_rows(singles, multi)
        partial: list[tuple[LlamaSeq, int]] = []
        for seq, n in feed:
            sid = (seq.seq_id,)
            info.tokens_by_gen[seq.gen_id] = n - seq.kv_len
            info.kv_tokens += n
            if n < len(seq.ids):
                partial.append((seq, n))
            for p in range(seq.kv_len, n):
                rows.add(seq.ids[p], p, sid, p == len(seq.ids) - 1, seq)  # type: ignore[arg-type]  # the owning sequence of a token row
        return partial

    def _decode(self, nat: NativeModel, rows: _Rows, info: StepInfo) -> list[tuple[LlamaSeq, np.ndarray]]:
        """Decode the rows in ``n_batch``-token calls; the logits row of every wanted row."""
        tokens = rows.tokens
        out: list[tuple[LlamaSeq, np.ndarray]] = []
        batch = self._batch
        assert batch is not None
        start = 0
        while start < len(tokens):
            end = min(len(tokens), start + nat.n_batch)
            batch.fill(tokens[start:end], rows.pos[start:end], rows.tags[start:end], rows.want[start:end])
            code = nat.decode(batch)
            info.decode_calls += 1
            if code == 1 and self._evict_one(info):
                continue  # llama.cpp left the memory as before the call: retry with more room
            if code == 1:
                raise EngineOutOfMemory(nat.failure_reason(code))
            if code != 0:
                raise EngineError(nat.failure_reason(code))
            last = end == len(tokens)  # later calls overwrite the logits buffer: copy those rows
            for i in range(start, end):
                if rows.want[i]:
                    row = nat.logits(i - start)
                    out.append((rows.owner[i], row if last else row.copy()))  # type: ignore[arg-type]  # rows that want logits have an owner
            start = end
        return out

    def _prompt_rows(self, singles: list[LlamaSeq], multi: list[LlamaSeq]) -> list[tuple[LlamaSeq, int]]:
        """(sequence, feed up to this id) of this step's multi-token rows: the shared engine-side rule
        (:func:`~.prompt_rule.prompt_takes`: pending prompts in priority order, none ranked strictly
        after a decoding generation or after a prompt that completes in this step, at most
        ``prefill_chunk`` tokens in all or one ``prefill_fast_batch``; None: whole prompts)."""
        rule = PromptRule(self.prefill_chunk, self.prefill_fast_batch)
        pending = [(s.priority, s.order, len(s.ids) - s.kv_len) for s in multi]
        takes = prompt_takes(
            rule,
            (s.priority for s in singles),
            pending,
            self._step_budget,
            planner_budget=self._planner_budget,
        )
        return [(multi[i], multi[i].kv_len + take) for i, take in takes]

    def _rollback(self, new_prefix: dict[tuple[int, ...], list[LlamaSeq]]) -> None:
        """After a failed step: forget this step's new prefixes and make every batched generation
        re-prefill its ids (prompt + generated, unchanged) on its next step."""
        nat = self.native
        for pids in new_prefix:
            pre = self._prefixes.pop(pids, None)
            if pre is not None:
                if nat is not None:
                    nat.seq_rm(pre.seq_id)
                self._free_ids.append(pre.seq_id)
        for seq in self._table.active.values():
            if seq.seq_id is not None and nat is not None:
                nat.seq_rm(seq.seq_id)
            if seq.host is not None:
                self.stats["host_bytes"] -= len(seq.host)
                seq.host = None
            seq.kv_len = 0
            seq.location = DEVICE
            seq.state = PENDING_ADMIT

    # -- sampling -------------------------------------------------------------------------------
    def _pick(self, seq: LlamaSeq, logits: np.ndarray) -> int:
        if self.temperature <= 0 or seq.rng is None:
            return int(np.argmax(logits))
        z = logits.astype(np.float64) / self.temperature
        z -= z.max()
        p = np.exp(z)
        p /= p.sum()
        return int(seq.rng.choice(len(p), p=p))

    def _emit(self, seq: LlamaSeq, row: np.ndarray) -> TokenOut:
        """Sample the next token of ``seq`` from its logits row and record it."""
        nat = self._nat()
        logits = row
        if seq.n_gen == 0 or self.ignore_eos:
            logits = row.copy()
            logits[self._eog] = -np.inf
        tok = self._pick(seq, logits)
        g = seq.grammar
        if g is not None and not g.allows(tok):
            logits = g.mask(logits)
            if not np.isfinite(logits).any():  # the grammar only allows an end we masked: end here
                tok = nat.eos_id
            else:
                tok = self._pick(seq, logits)
        if (
            g is not None
            and self.newline_ends_plan
            and seq.n_gen > 0
            and not nat.is_eog(tok)
            and b"\n" in nat.piece(tok)
            and g.allows(nat.eos_id)
        ):
            tok = nat.eos_id  # a complete one-line plan followed by a line break: the plan ends here
        if g is not None and not nat.is_eog(tok):
            g.accept(tok)
        seq.kv_len = len(seq.ids)  # every fed id is in the KV now; the new one is not
        seq.ids.append(tok)
        seq.n_gen += 1
        t = self.now()
        if nat.is_eog(tok):
            return TokenOut(seq.gen_id, tok, "", t, True, "eos")
        text = seq.decoder.decode(nat.piece(tok))
        if seq.spent or len(seq.ids) >= self._pos_limit:
            return TokenOut(seq.gen_id, tok, text + seq.decoder.decode(b"", final=True), t, True, "length")
        return TokenOut(seq.gen_id, tok, text, t, False)
