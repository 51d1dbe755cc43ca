"""Accuracy and added latency of the semantic-urgency classifiers (``timely-llm bench --suite related``).

Test texts: the LRTrace task instructions (catalogue ``config/tasks/lrtrace_tasks.yaml`` and the
distinct ``task_input`` texts of the public traces, labelled by their TUF class) and the labelled
paraphrase set ``config/urgency/labelled.yaml`` (tags ``paraphrase``, ``new``, ``hard``,
``held-out``; the held-out part was written after the lexical cues were fixed).

* ``lexical``: accuracy and the median/p99 CPU time of :meth:`LexicalClassifier.classify`;
* ``llm``: the embedded llama.cpp model classifies every text as the planner's probe generation
  would (cached instruction prefix + the request, one-word grammar), ``batch`` probes at a time;
  latency is the wall time from admission to the deciding token, on this machine, with the engine
  doing nothing else. The default model is the small CPU one (SmolLM2-135M), so the LLM rows say
  what *that* model can do; a bigger GGUF (``--urgency-model``) can be measured the same way.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from timely_llm_ros.core.engine import script_kwargs
from timely_llm_ros.core.metrics import percentile
from timely_llm_ros.core.options.urgency import (
    PROBE_KEY,
    LexicalClassifier,
    LLMClassifier,
    ProbeBook,
    load_urgency_config,
)
from timely_llm_ros.core.paths import config_path
from timely_llm_ros.core.tuf import is_urgent


@dataclass(frozen=True)
class Item:
    text: str
    label: str
    tag: str  # lrtrace | lrtrace-public | paraphrase | new | hard | held-out


def lrtrace_items() -> list[Item]:
    """The catalogue's instructions and the public traces' distinct task texts, with their class."""
    from timely_llm_ros.workload.fileformat import PUBLIC_SAMPLES, resolve_workload
    from timely_llm_ros.workload.tasks import load_catalog

    cfg = load_urgency_config()
    urgent, normal = cfg.urgent, cfg.default
    out: dict[str, Item] = {}
    for task in load_catalog():
        for v in task.all_variants():
            spec = task.to_spec(task_id="0", agent_id="0", arrival=0.0, variant=v)
            lab = urgent if spec.tuf is not None and is_urgent(spec.tuf) else normal
            out.setdefault(spec.instruction, Item(spec.instruction, lab, "lrtrace"))
    for name in PUBLIC_SAMPLES:
        for spec in resolve_workload(name).tasks:
            lab = urgent if spec.tuf is not None and is_urgent(spec.tuf) else normal
            out.setdefault(spec.instruction, Item(spec.instruction, lab, "lrtrace-public"))
    return list(out.values())


def labelled_items(path: str | Path | None = None) -> list[Item]:
    p = Path(path) if path is not None else config_path("urgency", "labelled.yaml")
    data = yaml.safe_load(p.read_text(encoding="utf-8"))
    return [Item(i["text"], i["label"], i["tag"]) for i in data["items"]]


def all_items() -> list[Item]:
    return lrtrace_items() + labelled_items()


def _scores(items: list[Item], labels: list[str], latencies: list[float]) -> dict[str, Any]:
    groups: dict[str, list[tuple[Item, str]]] = {}
    for it, lab in zip(items, labels, strict=True):
        groups.setdefault(it.tag, []).append((it, lab))
        groups.setdefault("all", []).append((it, lab))
    acc = {}
    for tag, pairs in groups.items():
        n = len(pairs)
        ok = sum(it.label == lab for it, lab in pairs)
        urg = [(it, lab) for it, lab in pairs if it.label == "urgent"]
        acc[tag] = {
            "n": n,
            "accuracy_pct": 100.0 * ok / n,
            "urgent_recall_pct": (100.0 * sum(lab == "urgent" for _, lab in urg) / len(urg)) if urg else None,
            "false_urgent": sum(lab == "urgent" and it.label != "urgent" for it, lab in pairs),
        }
    lat = sorted(latencies)
    return {
        "groups": acc,
        "latency_ms": {
            "median": 1000 * percentile(lat, 50),
            "p99": 1000 * percentile(lat, 99),
            "max": 1000 * max(lat),
        },
    }


def measure_lexical(items: list[Item], repeats: int = 20) -> dict[str, Any]:
    clf = LexicalClassifier()
    labels = [clf.classify(it.text).label for it in items]
    lat = []
    for it in items:
        best = math.inf
        for _ in range(repeats):
            t0 = time.perf_counter()
            clf.classify(it.text)
            best = min(best, time.perf_counter() - t0)
        lat.append(best)
    return {"classifier": "lexical", **_scores(items, labels, lat), "misses": _misses(items, labels)}


def classify_on_engine(
    engine, texts: Iterable[str], batch: int = 4, max_steps: int = 64
) -> list[tuple[str, float, str]]:
    """Run the LLM classifier's probes on an otherwise idle engine: (label, seconds, source) per text."""
    clf = LLMClassifier()
    book = ProbeBook(clf)
    book.prepare_engine(engine)
    texts = list(texts)
    max_tok = clf.max_tokens(engine.tokenize) + 1
    out: list[tuple[str, float, str] | None] = [None] * len(texts)
    pending = list(range(len(texts)))
    gid = 1_000_000
    live: dict[int, int] = {}
    while pending or live:
        while pending and len(live) < batch:
            i = pending.pop(0)
            ids, plen = book.probe_prompt(engine, texts[i])
            gid += 1
            script = engine.tokenize(clf.labels[-1]) if engine.needs_script else None
            engine.admit(
                gid,
                ids,
                max_tokens=max_tok,
                prefix_key=PROBE_KEY,
                prefix_len=plen,
                **script_kwargs(engine, script),
            )
            book.start(str(i), gid, engine.now())
            live[gid] = i
        for _ in range(max_steps):
            done = False
            for tok in engine.step():
                res = book.on_token(tok.gen_id, tok.text, tok.finished, tok.t)
                if res is not None:
                    i = live.pop(tok.gen_id)
                    out[i] = (res.label, res.latency_s, res.source)
                    engine.release(tok.gen_id)
                    done = True
            if done:
                break
    return [o for o in out if o is not None]


def measure_llm(items: list[Item], engine=None, batch: int = 1) -> dict[str, Any]:
    own = engine is None
    if own:
        from timely_llm_ros.engines.llamacpp import LlamaCppEngine

        engine = LlamaCppEngine()
    try:
        # warm the shared instruction prefix once (the planner pays it at start-up, like skill prompts)
        classify_on_engine(engine, ["warm-up"], batch=1)
        res = classify_on_engine(engine, [it.text for it in items], batch=batch)
    finally:
        if own:
            engine.close()
    labels = [r[0] for r in res]
    out = {
        "classifier": "llm",
        "engine": engine.info.name,
        "batch": batch,
        **_scores(items, labels, [r[1] for r in res]),
        "misses": _misses(items, labels),
        "undecided": sum(r[2] == "default" for r in res),
    }
    return out


def _misses(items: list[Item], labels: list[str]) -> list[dict[str, str]]:
    return [
        {"text": it.text, "label": it.label, "got": lab, "tag": it.tag}
        for it, lab in zip(items, labels, strict=True)
        if lab != it.label
    ]


TAG_ORDER = ("lrtrace", "lrtrace-public", "paraphrase", "new", "hard", "held-out", "all")


def table(rows: list[dict[str, Any]]) -> str:
    """Accuracy % per text group and latency per classifier."""
    tags = [t for t in TAG_ORDER if any(t in r["groups"] for r in rows)]
    head = (
        f"{'classifier':<12}"
        + "".join(f"{t:>15}" for t in tags)
        + f"{'urgent recall':>15}{'false urgent':>14}"
        + f"{'lat p50 ms':>12}{'lat p99 ms':>12}"
    )
    lines = [
        "urgency classifiers: accuracy % per text group (n), recall of urgent texts, normal texts "
        "called urgent, added latency",
        head,
        "-" * len(head),
    ]
    for r in rows:
        g = r["groups"]
        cells = "".join(
            f"{g[t]['accuracy_pct']:>10.1f} ({g[t]['n']:>2})" if t in g else f"{'-':>15}" for t in tags
        )
        lines.append(
            f"{r['classifier']:<12}{cells}{g['all']['urgent_recall_pct']:>15.1f}"
            f"{g['all']['false_urgent']:>14}{r['latency_ms']['median']:>12.3f}{r['latency_ms']['p99']:>12.3f}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="urgency classifier accuracy and latency")
    ap.add_argument("--llm", action="store_true", help="also measure the embedded llama.cpp model")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    items = all_items()
    rows = [measure_lexical(items)]
    if args.llm:
        rows.append(measure_llm(items, batch=args.batch))
    print(table(rows))
    if args.out:
        Path(args.out).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
