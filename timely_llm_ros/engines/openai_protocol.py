"""What each OpenAI-compatible inference server takes and returns (pure functions, no I/O).

The planner needs four things from a server that the plain OpenAI completions API does not promise:
token-id prompts (so a resumed generation is *exactly* the ids it had, never re-tokenised text), the
generated token ids in the stream (same reason), a grammar field (constrained decoding keeps a small
model inside the skill language) and, where the server has one, a request priority. Each server kind
spells them differently; :data:`CAPS` records how, and :func:`completion_body` /
:func:`parse_chunk` are the only places that know.

=========  ============  ====================================  =====================  =========
kind       prompt ids    generated ids in the stream           grammar                priority
=========  ============  ====================================  =====================  =========
llamacpp   yes           ``n_probs: 1`` → logprobs.content.id  ``grammar`` (GBNF)     no
vllm       yes           ``return_tokens_as_token_ids`` +      ``structured_outputs:  ``priority``
                         ``logprobs`` → ``"token_id:N"``       {grammar}``
=========  ============  ====================================  =====================  =========

``llamacpp`` is llama.cpp's C++ ``llama-server`` (not llama-cpp-python's Python server, which takes no
token-id prompts and returns no ids: :func:`detect_kind` refuses it with that reason). Cached-prompt
counts: llama.cpp reports ``timings.cache_n`` on every chunk with ``timings_per_token``; vLLM reports
``usage.prompt_tokens_details.cached_tokens`` on every chunk with ``stream_options.continuous_usage_stats``
(and ``--enable-prompt-tokens-details`` on the server).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

KINDS = ("llamacpp", "vllm")

# OpenAI finish reasons -> the engine protocol's ("stop" covers EOS and stop strings)
_FINISH = {"stop": "eos", "length": "length", "eos": "eos"}


@dataclass(frozen=True)
class ServerCaps:
    """How one server kind takes the planner's requests (see the module table)."""

    kind: str
    grammar_field: str  # where the GBNF goes
    priority: bool  # per-request priority (smaller first)
    metrics_hint: str  # where memory/speed facts come from (docs, status)


CAPS: dict[str, ServerCaps] = {
    "llamacpp": ServerCaps("llamacpp", "grammar", False, "/props + /slots"),
    "vllm": ServerCaps("vllm", "structured_outputs", True, "/metrics"),
}


@dataclass
class Chunk:
    """One streamed ``/v1/completions`` chunk, reduced to what the engine uses."""

    ids: list[int] = field(default_factory=list)
    text: str = ""
    finish: str = ""  # "" while running; "eos" | "length" | "error"
    cached: int | None = None  # prompt tokens the server took from its prefix cache
    prompt_tokens: int | None = None
    error: str = ""


class ProtocolError(ValueError):
    """A chunk or a server answer that does not have the expected shape."""


def detect_kind(models: dict | None, props: dict | None, version: dict | None) -> str:
    """Server kind from what ``/v1/models``, ``/props`` and ``/version`` answered (None: no answer).

    llama.cpp's server answers ``/props`` with ``default_generation_settings``; vLLM answers
    ``/version`` with ``{"version": ...}`` and names itself in ``owned_by``. llama-cpp-python's server
    (``owned_by: "me"``) is refused: it takes no token-id prompts and streams no ids.
    """
    if isinstance(props, dict) and "default_generation_settings" in props:
        return "llamacpp"
    owners = {str(m.get("owned_by", "")) for m in (models or {}).get("data", []) if isinstance(m, dict)}
    if "vllm" in owners or (isinstance(version, dict) and "version" in version and not props):
        return "vllm"
    if "me" in owners:
        raise ProtocolError(
            "this is llama-cpp-python's server: it takes no token-id prompts and streams "
            "no token ids, so a suspended generation could only be resumed from "
            "re-tokenised text; run llama.cpp's llama-server (or vLLM) instead"
        )
    raise ProtocolError(
        f"unrecognised server (model owners {sorted(owners) or 'none'}); pass server: "
        f"one of {', '.join(KINDS)} if it speaks that dialect"
    )


def completion_body(
    kind: str,
    *,
    model: str,
    prompt_ids: list[int],
    max_tokens: int,
    temperature: float,
    seed: int | None,
    grammar: str | None,
    priority: int | None,
    stop: list[str],
    first: bool,
) -> dict:
    """JSON body of one streamed ``POST /v1/completions`` for server ``kind``.

    ``first``: nothing generated yet (vLLM then requires at least one token: an empty plan is useless).
    ``priority`` is dropped for servers without one (the planner's scheduler still orders admissions).
    """
    body: dict = {
        "model": model,
        "prompt": list(prompt_ids),
        "max_tokens": int(max_tokens),
        "temperature": float(temperature),
        "stream": True,
    }
    if stop:
        body["stop"] = list(stop)
    if temperature > 0 and seed is not None:
        body["seed"] = int(seed)
    if kind == "llamacpp":
        body.update(n_probs=1, cache_prompt=True, timings_per_token=True)
        if grammar:
            body["grammar"] = grammar
    elif kind == "vllm":
        body.update(
            logprobs=1,
            return_tokens_as_token_ids=True,
            skip_special_tokens=True,
            stream_options={"include_usage": True, "continuous_usage_stats": True},
        )
        if first:
            body["min_tokens"] = 1
        if grammar:
            body["structured_outputs"] = {"grammar": grammar}
        if priority is not None:
            body["priority"] = int(priority)
    else:
        raise ProtocolError(f"unknown server kind {kind!r}; known: {', '.join(KINDS)}")
    return body


def parse_chunk(kind: str, data: str) -> Chunk | None:
    """Parse one SSE ``data:`` payload; None for ``[DONE]``. Raises :class:`ProtocolError`."""
    data = data.strip()
    if data == "[DONE]":
        return None
    try:
        obj = json.loads(data)
    except json.JSONDecodeError as exc:
        raise ProtocolError(f"stream chunk is not JSON: {data[:120]!r}") from exc
    if not isinstance(obj, dict):
        raise ProtocolError(f"stream chunk is not an object: {data[:120]!r}")
    if "error" in obj:
        err = obj["error"]
        msg = err.get("message", err) if isinstance(err, dict) else err
        return Chunk(finish="error", error=str(msg))
    out = Chunk()
    _usage(kind, obj, out)
    choices = obj.get("choices") or []
    if not choices:  # a usage-only chunk (vLLM include_usage)
        return out
    ch = choices[0]
    out.text = ch.get("text") or ""
    lp = ch.get("logprobs")
    if kind == "llamacpp":
        for entry in (lp or {}).get("content") or []:
            out.ids.append(int(entry["id"]))
    else:
        for tok in (lp or {}).get("tokens") or []:
            if not isinstance(tok, str) or not tok.startswith("token_id:"):
                raise ProtocolError(
                    f"vLLM streamed token {tok!r} without its id (return_tokens_as_token_ids is needed)"
                )
            out.ids.append(int(tok.split(":", 1)[1]))
    fin = ch.get("finish_reason")
    if fin:
        out.finish = _FINISH.get(str(fin), "error")
        if out.finish == "error":
            out.error = f"server ended the generation: finish_reason {fin!r}"
    return out


def _usage(kind: str, obj: dict, out: Chunk) -> None:
    if kind == "llamacpp":
        timings = obj.get("timings")
        if isinstance(timings, dict) and "cache_n" in timings:
            out.cached = int(timings["cache_n"])
            out.prompt_tokens = out.cached + int(timings.get("prompt_n", 0))
    usage = obj.get("usage")
    if isinstance(usage, dict):
        if usage.get("prompt_tokens") is not None:
            out.prompt_tokens = int(usage["prompt_tokens"])
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and details.get("cached_tokens") is not None:
            out.cached = int(details["cached_tokens"])


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Samples of a Prometheus text exposition: name -> [(labels, value)] (for vLLM's ``/metrics``)."""
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, labels = line, {}
        if "{" in line:
            name, rest = line.split("{", 1)
            body, _, value_part = rest.rpartition("}")
            for item in _split_labels(body):
                k, _, v = item.partition("=")
                labels[k.strip()] = v.strip().strip('"')
            value = value_part.strip().split()[0] if value_part.strip() else ""
        else:
            parts = line.split()
            if len(parts) < 2:
                continue
            name, value = parts[0], parts[1]
        try:
            out.setdefault(name.strip(), []).append((labels, float(value)))
        except ValueError:
            continue
    return out


def _split_labels(body: str) -> list[str]:
    items: list[str] = []
    cur: list[str] = []
    quoted = False
    for c in body:
        if c == '"':
            quoted = not quoted
        if c == "," and not quoted:
            items.append("".join(cur))
            cur = []
        else:
            cur.append(c)
    if "".join(cur).strip():
        items.append("".join(cur))
    return items


def vllm_kv_blocks(metrics: dict[str, list[tuple[dict[str, str], float]]]) -> tuple[int, int] | None:
    """(number of KV blocks, block size in tokens) from vLLM's ``cache_config_info``; the block size is
    what a resumption may recompute at most (16 on GPUs by default, 128 with vLLM's CPU backend)."""
    for labels, _ in metrics.get("vllm:cache_config_info", []):
        try:
            return int(labels["num_gpu_blocks"]), int(labels["block_size"])
        except (KeyError, ValueError):
            continue
    return None


def vllm_kv_capacity(metrics: dict[str, list[tuple[dict[str, str], float]]]) -> int | None:
    """KV capacity in tokens from vLLM's ``cache_config_info`` (num_gpu_blocks × block_size)."""
    blocks = vllm_kv_blocks(metrics)
    return blocks[0] * blocks[1] if blocks else None


def prefix_cache_counters(
    metrics: dict[str, list[tuple[dict[str, str], float]]],
) -> tuple[float, float] | None:
    """vLLM's cumulative prefix-cache (queried, hit) token counters, summed over engines."""
    q = metrics.get("vllm:prefix_cache_queries_total")
    h = metrics.get("vllm:prefix_cache_hits_total")
    if q is None or h is None:
        return None
    return sum(v for _, v in q), sum(v for _, v in h)
