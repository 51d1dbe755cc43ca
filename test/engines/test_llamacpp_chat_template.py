"""Any GGUF's own chat template: the shipped SmolLM2 GGUF is copied with *another* template in its
metadata (the ``gguf`` package rewrites it), and the engine's prompts follow that template; a model
without one runs with a clear warning; a template without a system role gets the prefix in the user
turn; llama.cpp's device options are accepted and reported.
"""

from __future__ import annotations

import logging
import subprocess
import sys
from pathlib import Path

import pytest
from llamacpp_guard import require_llamacpp

from timely_llm_ros.engines.base import EngineError

require_llamacpp()

from timely_llm_ros.engines.chat_template import ChatTemplateError, split_template  # noqa: E402
from timely_llm_ros.engines.llamacpp import LlamaCppEngine  # noqa: E402
from timely_llm_ros.engines.llamacpp_native import default_model_path  # noqa: E402

pytestmark = pytest.mark.slow

# Zephyr's template (HuggingFaceH4/zephyr-7b-beta), not ChatML: other role markers, </s> ends a turn.
ZEPHYR = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'system' %}\n"
    "{{ '<|system|>\\n' + message['content'] + eos_token }}\n{% elif message['role'] == 'assistant' %}\n"
    "{{ '<|assistant|>\\n'  + message['content'] + eos_token }}\n{% endif %}\n"
    "{% if loop.last and add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}"
)
# A Gemma-style template: no system role (it raises), turns marked <start_of_turn>.
NO_SYSTEM = (
    "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'system' %}"
    "{{ raise_exception('System role not supported') }}{% endif %}"
    "{{ '<start_of_turn>' + m['role'] + '\\n' + m['content'] + '<end_of_turn>\\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}"
)
PREFIX, TASK = "You fly a drone. Answer with a plan.\n", "Go up 50 cm.\nResponse: "


def _rewrite(tmp: Path, name: str, *args: str) -> Path:
    out = tmp / name
    res = subprocess.run(
        [
            sys.executable,
            "-m",
            "gguf.scripts.gguf_new_metadata",
            *args,
            "--force",
            str(default_model_path()),
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    tmp = tmp_path_factory.mktemp("gguf")
    return {
        "zephyr": _rewrite(tmp, "zephyr.gguf", "--chat-template", ZEPHYR),
        "none": _rewrite(tmp, "none.gguf", "--remove-metadata", "tokenizer.chat_template"),
    }


def _engine(path: Path, **kw) -> LlamaCppEngine:
    return LlamaCppEngine(path, n_ctx=512, n_seq_max=2, n_threads=1, grammar=None, **kw)


def _rendered(eng: LlamaCppEngine, prefix: str = PREFIX, task: str = TASK) -> str:
    pre = eng.tokenize(prefix)
    ids, plen = eng.wrapped_prompt(pre + eng.tokenize(task), len(pre))
    nat = eng.native
    # control tokens (<|im_start|>, <|im_end|>) have no text piece: show their vocabulary text
    text = b"".join(nat.piece(t) or nat.token_text(t).encode() for t in ids).decode()
    return text, ids, plen


def test_a_non_chatml_model_is_prompted_with_its_own_template(models):
    eng = _engine(models["zephyr"])
    try:
        assert eng.chat_template == "model" and eng.info.extra["chat_template"] == "model"
        assert "chat_template_warning" not in eng.info.extra
        text, ids, plen = _rendered(eng)
        assert text == f"<|system|>\n{PREFIX}<|im_end|>\n<|user|>\n{TASK}<|im_end|>\n<|assistant|>\n"
        assert "<|im_start|>" not in text  # nothing of SmolLM2's own ChatML
        # the shared prefix ends after the user header: every task shares those ids (prefix KV)
        assert ids[:plen] == _rendered(eng, task="Turn around.\nResponse: ")[1][:plen]
        # and it generates through the template
        eng.admit(
            1, eng.tokenize(PREFIX) + eng.tokenize(TASK), max_tokens=4, prefix_len=len(eng.tokenize(PREFIX))
        )
        got = []
        for _ in range(20):
            got += [o for o in eng.step() if o.gen_id == 1]
            if any(o.finished for o in got):
                break
        assert got and got[-1].finished
    finally:
        eng.close()


def test_the_shipped_chatml_model_renders_as_before(models):
    eng = _engine(default_model_path())
    try:
        text = _rendered(eng)[0]
        assert eng.chat_template == "model"
        assert text == (
            f"<|im_start|>system\n{PREFIX}<|im_end|>\n<|im_start|>user\n{TASK}<|im_end|>\n"
            "<|im_start|>assistant\n"
        )
    finally:
        eng.close()


def test_a_model_without_a_template_runs_with_a_clear_warning(models, caplog):
    with caplog.at_level(logging.WARNING, logger="timely_llm_ros.engines.llamacpp"):
        eng = _engine(models["none"])
    try:
        assert eng.chat_template == "none"
        warning = eng.info.extra["chat_template_warning"]
        assert "none.gguf has no chat template" in warning and "chat_template: chatml" in warning
        assert any("has no chat template" in r.getMessage() for r in caplog.records)
        assert _rendered(eng)[0] == PREFIX + TASK
    finally:
        eng.close()
    override = _engine(models["none"], chat_template="chatml")  # the way out the warning names
    try:
        assert override.chat_template == "chatml" and "chat_template_warning" not in override.info.extra
        assert _rendered(override)[0].startswith("<|im_start|>system\n")
    finally:
        override.close()


def test_a_jinja_file_overrides_and_a_template_without_system_role_merges(models, tmp_path):
    path = tmp_path / "gemma_like.jinja"
    path.write_text(NO_SYSTEM)
    eng = _engine(models["zephyr"], chat_template=str(path))
    try:
        assert eng.chat_template == str(path) and eng.template_system_merged
        # bos_token is SmolLM2's <|im_start|>, which the template writes first
        assert _rendered(eng)[0] == (
            f"<|im_start|><start_of_turn>user\n{PREFIX}\n\n{TASK}<end_of_turn>\n<start_of_turn>model\n"
        )
    finally:
        eng.close()


def test_unusable_templates_and_options_are_refused_with_reasons(models, tmp_path):
    with pytest.raises(ChatTemplateError, match="does not render"):
        split_template("{% for m in messages %}{{ m.content }")
    with pytest.raises(ChatTemplateError, match="exactly once"):
        split_template("{{ messages[0].content }}{{ messages[0].content }}")
    bad = tmp_path / "bad.jinja"
    bad.write_text("{% if %}")
    with pytest.raises(EngineError, match="bad.jinja cannot be used: the chat template does not render"):
        _engine(models["zephyr"], chat_template=str(bad))
    with pytest.raises(EngineError, match="chat_template must be 'auto'"):
        _engine(models["zephyr"], chat_template="llama2")
    for kw, match in (
        ({"flash_attn": "yes"}, "flash_attn must be one of auto, on, off"),
        ({"cache_type_k": "q3"}, "cache_type_k must be one of f32, f16"),
        ({"n_gpu_layers": -2}, "n_gpu_layers must be an integer >= -1"),
    ):
        with pytest.raises(EngineError, match=match):
            _engine(models["zephyr"], **kw)


def test_device_options_reach_llama_cpp(models):
    eng = _engine(
        models["zephyr"], flash_attn="on", cache_type_k="q8_0", cache_type_v="q8_0", n_gpu_layers=-1
    )
    try:
        extra = eng.info.extra
        assert (extra["flash_attn"], extra["cache_type_k"], extra["cache_type_v"]) == ("on", "q8_0", "q8_0")
        # q8_0 K and V take 34/32 bytes per value instead of 2 (f16): the KV budget's bytes shrink
        f16 = _engine(models["zephyr"])
        try:
            assert extra["kv_bytes_per_token"] == f16.info.extra["kv_bytes_per_token"] * 34 // 64
        finally:
            f16.close()
        text = _rendered(eng)[0]
        assert text.startswith("<|system|>")
    finally:
        eng.close()
