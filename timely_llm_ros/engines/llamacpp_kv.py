"""KV memory of the llama.cpp engine: sequence ids, room for a step, spill to host memory.

Why apart: which suspended generation leaves the context, where its KV goes (host memory or
nowhere) and how it comes back are one policy (:mod:`timely_llm_ros.core.options.kv_policy`) applied to one
resource, the cells and sequence ids of the one llama.cpp context; the batching only asks for room.

When a step needs more cells than ``kv_budget`` allows, suspended generations are evicted in the
``eviction`` order: their private cells (the shared prefix excluded) are saved with
``llama_state_seq_get_data`` into host memory and removed; on resume they are restored with
``llama_state_seq_set_data`` and re-linked to the prefix. If the host budget (``host_kv_budget``)
is exhausted the KV is discarded instead and re-prefilled on resume.

:class:`KVMemory` is a part of :class:`~.llamacpp.LlamaCppEngine` (a mixin): the state it works on
is the engine's, declared below.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from timely_llm_ros.core.engine import EngineError, EngineOutOfMemory, MemoryInfo
from timely_llm_ros.core.options.kv_policy import DROP, KVOptions, evict_destination
from timely_llm_ros.core.profile import EngineProfile
from timely_llm_ros.engines.llamacpp_native import NativeModel
from timely_llm_ros.engines.llamacpp_seq import LlamaSeq, Prefix, StepInfo
from timely_llm_ros.engines.sequences import (
    DEVICE,
    DISCARDED,
    FINISHED,
    HOST,
    PENDING_ADMIT,
    RUNNING,
    SUSPENDED,
    SequenceTable,
)

# Placeholder costs for the rules that do not weigh them (evict / discard / swap with host-first):
# never consulted there; lamps and threshold require a real cost profile (checked by the config).
NO_COSTS = EngineProfile(name="none")


class KVMemory:
    """The KV-moving methods of the llama.cpp engine."""

    native: NativeModel | None
    kv: KVOptions
    kv_budget: int
    host_kv_budget: int | None
    stats: dict[str, float]
    _costs: EngineProfile | None
    _table: SequenceTable[LlamaSeq]
    _prefixes: dict[tuple[int, ...], Prefix]
    _free_ids: list[int]
    _nat: Callable[[], NativeModel]

    # -- public: what is where, explicit moves (benchmarks, tests, a memory-aware caller) ---------
    def memory(self) -> MemoryInfo:
        running = susp_dev = host = 0
        for seq in self._table:
            if seq.state == FINISHED:
                continue
            if seq.location == HOST:
                host += seq.private
            elif seq.location == DEVICE and seq.seq_id is not None:
                if seq.state == SUSPENDED:
                    susp_dev += seq.private
                else:
                    running += seq.private
        prefix = sum(len(p.ids) for p in self._prefixes.values())
        return MemoryInfo(
            capacity=self.kv_budget,
            running=running,
            prefix=prefix,
            suspended_device=susp_dev,
            suspended_host=host,
            pinned=susp_dev if self.kv.policy == "keep" else 0,
        )

    def spill(self, gen_id: int) -> int:
        """Move a suspended generation's KV to host memory now; returns the bytes saved."""
        seq = self._table.get(gen_id)
        if seq.state != SUSPENDED or seq.location != DEVICE:
            raise EngineError(f"generation {gen_id} is not suspended with its KV in the context")
        self._evict(seq, to_host=True)
        return len(seq.host or b"")

    def discard(self, gen_id: int) -> None:
        """Drop a suspended generation's KV; its resumption re-prefills prompt + generated ids."""
        seq = self._table.get(gen_id)
        if seq.state != SUSPENDED:
            raise EngineError(f"generation {gen_id} is not suspended")
        if seq.location == HOST:
            self.stats["host_bytes"] -= len(seq.host or b"")
            seq.host = None
            seq.location = DISCARDED
            seq.kv_len = seq.shared
            self.stats["discard"] += 1
        elif seq.location == DEVICE:
            self._evict(seq, to_host=False)

    # -- internals ------------------------------------------------------------------------------
    def _used_cells(self) -> int:
        used = sum(len(p.ids) for p in self._prefixes.values())
        return used + sum(s.private for s in self._table if s.location == DEVICE and s.seq_id is not None)

    def _victims(self) -> list[LlamaSeq]:
        """Suspended generations holding device KV, the first to evict first."""
        if self.kv.policy == "keep":  # always preserve: suspended contexts are never evicted
            return []
        return [s for s in self._table.suspended_on_device(self.kv) if s.seq_id is not None]

    def _host_room(self, n: int) -> bool:
        host_used = sum(s.private for s in self._table if s.location == HOST)
        return self.host_kv_budget is None or host_used + n <= self.host_kv_budget

    def _make_room(self, info: StepInfo) -> dict[tuple[int, ...], list[LlamaSeq]]:
        """Evict suspended contexts until this step's new cells and sequence ids fit; give ids."""
        need_cells = need_ids = 0
        new_prefix: dict[tuple[int, ...], list[LlamaSeq]] = {}
        for seq in self._table.active.values():
            if seq.state == PENDING_ADMIT:
                if seq.prefix_ids and seq.prefix_ids not in self._prefixes:
                    if seq.prefix_ids not in new_prefix:
                        need_cells += seq.shared
                        need_ids += 1
                    new_prefix.setdefault(seq.prefix_ids, []).append(seq)
                need_cells += len(seq.ids) - seq.shared
                need_ids += seq.seq_id is None
            elif seq.location == DEVICE and seq.seq_id is not None:
                need_cells += len(seq.ids) - seq.kv_len
            else:  # restored from host or re-prefilled: all private cells come back
                need_cells += len(seq.ids) - seq.shared
                need_ids += 1
        used = self._used_cells()
        victims = self._victims()
        while (used + need_cells > self.kv_budget or need_ids > len(self._free_ids)) and victims:
            v = victims.pop(0)
            used -= v.private
            self._evict(v, to_host=self._evict_to_host(v))
            info.evicted.append(v.gen_id)
        if used + need_cells > self.kv_budget:
            raise EngineOutOfMemory(
                f"this step needs {need_cells} new KV cells, {self.kv_budget - used} "
                f"of the budget {self.kv_budget} are free and nothing is evictable"
            )
        if need_ids > len(self._free_ids):
            raise EngineOutOfMemory(
                f"this step needs {need_ids} llama.cpp sequence ids, {len(self._free_ids)} are free"
            )
        for seq in self._table.active.values():
            if seq.seq_id is None:
                seq.seq_id = self._free_ids.pop()
        return new_prefix

    def _evict_one(self, info: StepInfo) -> bool:
        victims = self._victims()
        if not victims:
            return False
        self._evict(victims[0], to_host=self._evict_to_host(victims[0]))
        info.evicted.append(victims[0].gen_id)
        return True

    def _evict_to_host(self, seq: LlamaSeq) -> bool:
        """Destination of a context evicted under memory pressure (``reload``)."""
        return (
            evict_destination(seq.private, self._host_room(seq.private), self.kv, self._costs or NO_COSTS)
            != DROP
        )

    def _evict(self, seq: LlamaSeq, to_host: bool) -> None:
        """Save (``to_host`` and room in the host budget) or drop a suspended sequence's cells."""
        nat = self._nat()
        sid = seq.seq_id
        assert sid is not None
        if to_host and self._host_room(seq.private):
            if seq.shared:
                nat.seq_rm(sid, 0, seq.shared)  # the prefix cells stay, owned by the prefix sequence
            seq.host = nat.seq_save(sid)
            seq.location = HOST
            self.stats["swap_out"] += 1
            self.stats["host_bytes"] += len(seq.host)
        else:
            seq.location = DISCARDED
            seq.kv_len = seq.shared
            self.stats["discard"] += 1
        nat.seq_rm(sid)
        self._free_ids.append(sid)
        seq.seq_id = None

    def _bring_in(self, seq: LlamaSeq, info: StepInfo) -> None:
        """Give an admitted/resumed sequence its prefix and restored cells before the batch."""
        nat = self._nat()
        sid = seq.seq_id
        assert sid is not None
        if seq.state == PENDING_ADMIT:
            pre = self._prefixes.get(seq.prefix_ids) if seq.prefix_ids else None
            if pre is not None and seq.kv_len == 0:  # cached prefix (a new one is in this batch)
                nat.seq_cp(pre.seq_id, sid)
                seq.kv_len = seq.shared
        elif seq.location != DEVICE:
            pre = self._prefixes.get(seq.prefix_ids) if seq.prefix_ids else None
            if seq.prefix_ids and pre is None:
                raise EngineError(f"shared prefix of generation {seq.gen_id} is gone")
            if seq.location == HOST:
                self._restore(nat, seq, sid, info)
            else:
                seq.kv_len = seq.shared
                self.stats["reprefill"] += 1
                self.stats["reprefill_tokens"] += len(seq.ids) - seq.shared - 1  # beyond a resume's one
                info.reprefilled.append(seq.gen_id)
            if pre is not None:
                nat.seq_cp(pre.seq_id, sid)
            seq.location = DEVICE
        seq.state = RUNNING

    def _restore(self, nat: NativeModel, seq: LlamaSeq, sid: int, info: StepInfo) -> None:
        """Load a spilled sequence's cells back from host memory into sequence ``sid``."""
        assert seq.host is not None
        t_in = time.perf_counter()
        nat.seq_load(seq.host, sid)
        info.restore_s += time.perf_counter() - t_in
        if nat.seq_pos_max(sid) != seq.kv_len - 1:
            raise EngineError(
                f"restored KV of generation {seq.gen_id} ends at position "
                f"{nat.seq_pos_max(sid)}, expected {seq.kv_len - 1}"
            )
        self.stats["host_bytes"] -= len(seq.host)
        seq.host = None
        self.stats["swap_in"] += 1
        info.restored.append(seq.gen_id)

    def _free_seq(self, seq: LlamaSeq) -> None:
        """Give back a finished or released generation's cells, sequence id, host bytes, grammar."""
        if seq.seq_id is not None and self.native is not None:
            self.native.seq_rm(seq.seq_id)
            self._free_ids.append(seq.seq_id)
        seq.seq_id = None
        if seq.host is not None:
            self.stats["host_bytes"] -= len(seq.host)
            seq.host = None
        if seq.grammar is not None:
            seq.grammar.free()
            seq.grammar = None
