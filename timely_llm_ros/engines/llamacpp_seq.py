"""What the llama.cpp engine keeps per generation, per shared prefix and per step.

The life cycle of a generation (pending, running, suspended, ...) is the engine-independent
:class:`~timely_llm_ros.engines.sequences.Sequence`; a llama.cpp sequence adds where its KV is in the
one context (a llama.cpp sequence id, how many leading ids have KV, the bytes spilled to host
memory), its shared prefix, its grammar sampler, its RNG and its UTF-8 decoder.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field

import numpy as np

from timely_llm_ros.engines.llamacpp_native import GrammarConstraint
from timely_llm_ros.engines.sequences import Sequence


@dataclass
class StepInfo:
    """What one :meth:`LlamaCppEngine.step` did (for tests, benchmarks and the profiler)."""

    n_seqs: int = 0  # generations that received a token
    n_tokens: int = 0  # tokens submitted to llama_decode (prefix rows counted once)
    tokens_by_gen: dict[int, int] = field(default_factory=dict)  # rows submitted per generation
    prefix_tokens: int = 0  # rows prefilled into a new shared-prefix sequence
    decode_calls: int = 0
    restored: list[int] = field(default_factory=list)  # generations restored from host memory
    reprefilled: list[int] = field(default_factory=list)  # generations whose KV had been discarded
    evicted: list[int] = field(default_factory=list)  # suspended generations spilled/discarded
    kv_tokens: int = 0  # Σ KV length of the sequences decoded (for the profile's p term)
    restore_s: float = 0.0  # seconds spent restoring contexts from host memory
    duration: float = 0.0  # seconds, whole step

    @property
    def pure_decode(self) -> bool:
        """Only one-token rows, no restore, no eviction: a decode-speed measurement."""
        return (
            self.n_tokens == self.n_seqs and not self.restored and not self.evicted and not self.reprefilled
        )


class Prefix:
    """A shared prompt prefix prefilled once into its own llama.cpp sequence (never evicted)."""

    __slots__ = ("ids", "seq_id")

    def __init__(self, ids: tuple[int, ...], seq_id: int) -> None:
        self.ids = ids
        self.seq_id = seq_id


class LlamaSeq(Sequence):
    """A generation in the llama.cpp context."""

    __slots__ = ("prefix_ids", "shared", "grammar", "seq_id", "kv_len", "host", "decoder", "rng")

    def __init__(
        self,
        gen_id: int,
        ids: list[int],
        prefix_ids: tuple[int, ...],
        max_tokens: int,
        grammar: GrammarConstraint | None,
        order: int,
        rng: np.random.Generator | None,
    ) -> None:
        super().__init__(gen_id, ids, max_tokens, order)  # ids: template-wrapped prompt + generated
        self.prefix_ids = prefix_ids  # () when the prompt shares nothing
        self.shared = len(prefix_ids)
        self.grammar = grammar
        self.seq_id: int | None = None
        self.kv_len = 0  # leading ids whose KV exists (in the context, or saved in ``host``)
        self.host: bytes | None = None
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.rng = rng

    @property
    def private(self) -> int:
        """KV cells this sequence holds outside the shared prefix."""
        return max(0, self.kv_len - self.shared)
