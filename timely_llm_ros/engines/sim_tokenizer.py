"""Deterministic tokenizer for the simulated engine.

The simulator needs token streams whose *lengths* and *boundaries* look like a real LLM's, so that
segment lengths (≈ 20 tokens for a drone plan, ≈ 100 for an arm plan: paper §6) and the per-token
stop check behave realistically — but it must not depend on a model download. This tokenizer is
documented and deterministic instead of learned:

1. **Pre-tokenisation** into GPT-like pieces with one regular expression, tried in this order:
   an English contraction after a letter (``'s``, ``'t``, ``'re``, ``'ve``, ``'m``, ``'ll``,
   ``'d``); a run of letters with an optional leading space (`` cat``); 1–3 digits with an
   optional leading space (numbers split in chunks of three, as GPT-4/Llama 3 do); one or two
   symbols (punctuation or ``_``) with an optional leading space (`` ('``, ``');``); whitespace
   (a run before a non-space keeps its last space for the next piece, like GPT-2); finally any
   single character, so the pieces always cover the whole text.
2. **Ids** are a hash of the piece's UTF-8 bytes (BLAKE2b, 48 bits) offset past the special ids.
   Each tokenizer keeps an id → piece table and checks every new piece against it; on a collision
   the piece is re-hashed with a salt until a free id is found. With 48-bit ids a collision is
   practically impossible, so ids are stable across runs and processes; only after a collision does
   the id of the *later* piece depend on the order pieces were seen (``bits`` can be lowered to test
   this).
3. **Decoding is exact**: the pieces of ``encode(text)`` concatenate to ``text`` (checked), and
   ``decode`` joins the pieces of the ids. Special tokens decode to "".

Resumed generations keep their token ids (paper §4.1); nothing here re-tokenises generated text.
"""

from __future__ import annotations

import hashlib
import re

BOS_ID = 1
EOS_ID = 2
N_SPECIAL = 16  # ids below this are reserved for special tokens

_PIECE = re.compile(
    r"(?<=[^\W\d_])'(?:s|t|re|ve|m|ll|d)(?![^\W\d_])"  # contraction after a letter
    r"| ?[^\W\d_]+"  # letters
    r"| ?\d{1,3}"  # digits, chunks of <= 3
    r"| ?(?:[^\s\w]|_){1,2}"  # one or two symbols
    r"|\s+(?!\S)|\s+"  # whitespace
    r"|[\s\S]",  # anything else, one character
)


class TokenizerError(ValueError):
    """An id that this tokenizer never produced, or a non-string input."""


class SimTokenizer:
    """Regex pre-tokeniser with hashed, collision-checked ids (see module docstring)."""

    def __init__(self, bits: int = 48) -> None:
        if not 4 <= bits <= 62:
            raise ValueError(f"bits must be in 4..62, got {bits}")
        self._space = (1 << bits) - N_SPECIAL
        self._digest = (bits + 7) // 8
        self._piece_of: dict[int, str] = {BOS_ID: "", EOS_ID: ""}
        self._id_of: dict[str, int] = {}
        if self._space < 64:  # tiny spaces exist only to test collisions; keep them usable
            self._space = 64

    def _hash(self, data: bytes) -> int:
        h = hashlib.blake2b(data, digest_size=self._digest).digest()
        return N_SPECIAL + int.from_bytes(h, "big") % self._space

    def piece_id(self, piece: str) -> int:
        """Id of one piece, assigning it on first sight (with the collision check)."""
        tid = self._id_of.get(piece)
        if tid is not None:
            return tid
        raw = piece.encode("utf-8")
        tid = self._hash(raw)
        salt = 0
        while tid in self._piece_of:
            salt += 1
            if salt > 10 * self._space:
                raise TokenizerError("tokenizer id space exhausted")
            tid = self._hash(raw + b"\x00" + str(salt).encode())
        self._piece_of[tid] = piece
        self._id_of[piece] = tid
        return tid

    @staticmethod
    def pieces(text: str) -> list[str]:
        """Pre-tokenise ``text``; the pieces concatenate back to ``text``."""
        if not isinstance(text, str):
            raise TokenizerError(f"text must be str, got {type(text).__name__}")
        out = _PIECE.findall(text)
        if "".join(out) != text:  # cannot happen with the catch-all branch; keep the promise checked
            raise TokenizerError("pre-tokenisation lost characters")
        return out

    def encode(self, text: str) -> list[int]:
        """Token ids of ``text`` (no BOS/EOS added)."""
        return [self.piece_id(p) for p in self.pieces(text)]

    def token_text(self, token_id: int) -> str:
        """Text of one id ("" for special tokens)."""
        try:
            return self._piece_of[token_id]
        except KeyError:
            raise TokenizerError(f"unknown token id {token_id}") from None

    def decode(self, ids: list[int]) -> str:
        """Exact inverse of :meth:`encode`."""
        return "".join(self.token_text(i) for i in ids)

    def __len__(self) -> int:
        """Number of distinct pieces seen so far (plus the special ids)."""
        return len(self._piece_of)
