"""A model's own chat template, cut into the pieces that go around the planner's prompt ids.

The planner hands an engine token ids: the skill set's fixed prompt (the shared prefix, pre-stored
KV) followed by the task. An instruction-tuned model expects them inside its chat template — the
system turn holding the fixed prompt, the user turn holding the task, then the header of the
assistant's turn. Rendering the whole text per task would re-tokenise the prefix and break the
shared-prefix KV, so the template is rendered **once** with two sentinel contents and cut at them::

    sys_head + <prefix ids> + user_head + <task ids> + tail         (a prompt with a prefix)
    user_only_head + <task ids> + user_only_tail                   (a prompt without one)

Any Jinja chat template works (the ``tokenizer.chat_template`` metadata of a GGUF file, or a
``.jinja`` file): it is rendered in a sandbox with the variables Hugging Face / llama.cpp templates
use (``messages``, ``add_generation_prompt``, ``bos_token``, ``eos_token``, ``raise_exception``,
``strftime_now``). A template that refuses a system turn (Gemma's raises "System role not
supported") gets the fixed prompt at the start of the user turn instead, as those models' own
documentation recommends; :attr:`TemplatePieces.system_merged` says so.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass

_SYS = "TLRSYSTEMCONTENTSENTINEL"
_USER = "TLRUSERCONTENTSENTINEL"
CHATML = (
    "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\\n' + m['content'] + '<|im_end|>\\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)


class ChatTemplateError(ValueError):
    """A template that cannot be rendered or cut (the message says why)."""


@dataclass(frozen=True)
class TemplatePieces:
    """Text around the prefix and the task (see the module docstring)."""

    sys_head: str
    user_head: str
    tail: str
    user_only_head: str
    user_only_tail: str
    system_merged: bool = False


def _render(template: str, messages: list[dict[str, str]], bos: str, eos: str) -> str:
    try:
        import jinja2
        from jinja2.sandbox import ImmutableSandboxedEnvironment
    except ImportError as exc:  # pragma: no cover - jinja2 comes with llama-cpp-python
        raise ChatTemplateError(f"rendering a chat template needs jinja2 ({exc})") from None

    def raise_exception(message: str) -> None:
        raise ChatTemplateError(f"the template refused: {message}")

    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=["jinja2.ext.loopcontrols"]
    )
    env.globals.update(
        raise_exception=raise_exception, strftime_now=lambda fmt: datetime.datetime.now().strftime(fmt)
    )
    try:
        return env.from_string(template).render(
            messages=messages, add_generation_prompt=True, bos_token=bos, eos_token=eos
        )
    except ChatTemplateError:
        raise
    except jinja2.TemplateError as exc:
        raise ChatTemplateError(f"the chat template does not render: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - templates run arbitrary (sandboxed) logic: any failure is the template's
        raise ChatTemplateError(f"the chat template failed: {type(exc).__name__}: {exc}") from None


def _cut(text: str, marks: list[str]) -> list[str]:
    parts = []
    for mark in marks:
        if text.count(mark) != 1:
            raise ChatTemplateError("the chat template does not place each message's content exactly once")
        before, text = text.split(mark)
        parts.append(before)
    return [*parts, text]


def split_template(template: str, *, bos_token: str = "", eos_token: str = "") -> TemplatePieces:
    """Cut ``template`` into :class:`TemplatePieces`; ChatTemplateError when it cannot be used."""
    if not isinstance(template, str) or not template.strip():
        raise ChatTemplateError("the chat template is empty")
    user_only = _cut(_render(template, [{"role": "user", "content": _USER}], bos_token, eos_token), [_USER])
    try:
        text = _render(
            template,
            [{"role": "system", "content": _SYS}, {"role": "user", "content": _USER}],
            bos_token,
            eos_token,
        )
        merged = False
    except ChatTemplateError:
        text = _render(template, [{"role": "user", "content": f"{_SYS}\n\n{_USER}"}], bos_token, eos_token)
        merged = True
    head, mid, tail = _cut(text, [_SYS, _USER])
    return TemplatePieces(head, mid, tail, user_only[0], user_only[1], merged)


def wrap_ids(
    pieces: tuple[list[int], list[int], list[int]] | None, prompt: list[int], prefix_len: int
) -> list[int]:
    """A prompt as the model's chat turns, in token ids: ``head + system + mid + user + tail``.

    ``pieces`` are the template's token ids around the two turns (None: plain text, no template);
    the skill set's prompt (the first ``prefix_len`` ids) is the system turn and stays a shared,
    cacheable prefix of every task of that skill set."""
    if pieces is None:
        return prompt
    head, mid, tail = pieces
    return head + prompt[:prefix_len] + mid + prompt[prefix_len:] + tail
