"""Chat-template and grammar glue of the llama.cpp engine.

Why apart from the batching: both turn a skill set and a task into what llama.cpp evaluates — the
token ids of the model's own chat turns around the planner's prompt (:class:`ChatPrompt`), and the
GBNF grammar that keeps every sampled plan a plan of that skill set (:class:`Grammars`) — and both
are decided once per model or per skill set, not per step.
"""

from __future__ import annotations

import logging
from pathlib import Path

from timely_llm_ros.core.engine import EngineError
from timely_llm_ros.engines.chat_template import CHATML, ChatTemplateError, split_template
from timely_llm_ros.engines.llamacpp_native import GrammarConstraint, NativeModel
from timely_llm_ros.engines.skill_grammar import grammar_text

_log = logging.getLogger("timely_llm_ros.engines.llamacpp")


class ChatPrompt:
    """The chat template's pieces as token ids, and the wrapping of a prompt in them.

    ``chat_template`` names where the template comes from; :attr:`source` then says what is used:
    ``model`` (the GGUF's own), ``chatml``, a ``.jinja`` path, or ``none``. With a template, the
    skill set's fixed prompt (the first ``prefix_len`` ids) is the system message and the rest the
    user message; the pieces are tokenised once with special-token parsing and spliced around the
    planner's ids, so the shared prefix (system turn + user header) stays identical across tasks.
    """

    def __init__(self, nat: NativeModel, chat_template: str, model_path: Path) -> None:
        self.warning = ""
        self.system_merged = False
        source = chat_template
        text = ""
        if chat_template == "auto":
            text = nat.chat_template()
            source = "model" if text.strip() else "none"
            if source == "none":
                self.warning = (
                    f"model {model_path.name} has no chat template in its GGUF metadata: prompts are "
                    "sent as plain text, which instruction-tuned models follow poorly (worse plans). "
                    "Give the engine option chat_template: chatml or a path to the model's .jinja "
                    "template"
                )
                _log.warning(self.warning)
        elif chat_template == "chatml":
            text = CHATML
        elif chat_template.endswith(".jinja"):
            try:
                text = Path(chat_template).expanduser().read_text(encoding="utf-8")
            except OSError as exc:
                raise EngineError(f"chat_template {chat_template!r} cannot be read: {exc}") from None
        self.source = source
        bos = [nat.bos_id] if nat.add_bos else []
        if source == "none":
            self.sys_head, self.user_head, self.tail = list(bos), [], []
            self.user_only, self.user_only_tail = list(bos), []
            self.overhead = len(bos)
            return
        try:
            pieces = split_template(
                text, bos_token=nat.token_text(nat.bos_id), eos_token=nat.token_text(nat.eos_id)
            )
        except ChatTemplateError as exc:
            raise EngineError(
                f"chat template of {source if source != 'model' else model_path.name} cannot "
                f"be used: {exc} (chat_template: chatml, none or a .jinja file)"
            ) from None
        self.system_merged = pieces.system_merged

        def ids(head: str) -> list[int]:  # a BOS the template does not write itself is prepended
            out = nat.tokenize(head, special=True)
            return out if (not bos or out[:1] == bos) else bos + out

        self.sys_head, self.user_only = ids(pieces.sys_head), ids(pieces.user_only_head)
        self.user_head, self.tail, self.user_only_tail = (
            nat.tokenize(t, special=True) for t in (pieces.user_head, pieces.tail, pieces.user_only_tail)
        )
        self.overhead = len(self.sys_head) + len(self.user_head) + len(self.tail)

    def wrap(self, prompt: list[int], prefix_len: int) -> tuple[list[int], int]:
        """Template-wrapped ids and how many leading ids form the shareable prefix."""
        if prefix_len > 0:
            head = self.sys_head + prompt[:prefix_len] + self.user_head
            return head + prompt[prefix_len:] + self.tail, len(head)
        return self.user_only + prompt + self.user_only_tail, 0


class Grammars:
    """The GBNF grammar of each prefix key (skill set), compiled once per key.

    ``spec``: ``"auto"`` (the grammar built from the skill set the key names; free-text skill sets
    have none), ``None`` (no grammar) or a mapping key → GBNF text. Each admission clones the
    compiled grammar, so a generation's sampler persists across its suspensions.
    """

    def __init__(self, spec: str | dict[str, str | None] | None) -> None:
        self.spec = spec
        self._compiled: dict[str, GrammarConstraint | None] = {}

    def set(self, nat: NativeModel, prefix_key: str, gbnf: str | None) -> None:
        """Use ``gbnf`` (None: no grammar) for later admissions with ``prefix_key``."""
        old = self._compiled.pop(prefix_key, None)
        if old is not None:
            old.free()
        self._compiled[prefix_key] = GrammarConstraint(nat, gbnf) if gbnf else None

    def get(self, nat: NativeModel, prefix_key: str | None) -> GrammarConstraint | None:
        """The compiled grammar for ``prefix_key`` (None: unconstrained)."""
        if prefix_key is None or self.spec is None:
            return None
        if prefix_key in self._compiled:
            return self._compiled[prefix_key]
        text = grammar_text(self.spec, prefix_key)
        self.set(nat, prefix_key, text)
        return self._compiled[prefix_key]

    def free(self) -> None:
        for g in self._compiled.values():
            if g is not None:
                g.free()
        self._compiled = {}
