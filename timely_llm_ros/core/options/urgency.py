"""Semantic urgency: a TUF for a task that comes without one (related paper 001, semantic scheduling).

A person speaking to a robot does not write a TUF. A task may therefore omit it (``TaskSpec.tuf``
None, an all-zero ``Tuf`` message, ``tuf: auto`` in a workload file); with the planner option
``urgency`` set, the planner derives an *urgency class* from the instruction text and gives the task
that class's TUF (``config/urgency/urgency.yaml``: urgent → ``[2, 0.2, 0.5]``, normal →
``[1, 1, 1.5]``, the paper's §7.1 classes). 001 §3.2 has a small language model assign an
emergency level before the main LLM runs; two classifiers are offered here:

* ``lexical`` — a rule/lexical model (:class:`LexicalClassifier`): weighted regular-expression cues
  (danger, harm, something approaching, an execution failure, haste; negative weights for an
  explicit absence of haste and for ordinary errands) summed against a threshold. Microseconds per
  task, no engine time.
* ``llm`` — the embedded LLM itself (:class:`LLMClassifier`): a short instruction (a shared,
  cached prefix) followed by the request, the answer constrained by a grammar to one class name and
  decided by its first token(s). It costs one prefill of the request plus one decoding step on the
  same engine that plans, and the task waits for it (its response time counts from arrival).

The planner runs the LLM classifier as a *probe generation* in its own loop (:class:`ProbeBook`),
so the engine keeps stepping every other generation meanwhile. ``timely-llm bench --suite related``
measures both classifiers' accuracy and added latency on the LRTrace texts and on a labelled set of
paraphrases (``config/urgency/labelled.yaml``).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING

import yaml

from timely_llm_ros.core.paths import config_path
from timely_llm_ros.core.tuf import TUF, InvalidTUF

if TYPE_CHECKING:
    from timely_llm_ros.core.engine import Engine

CLASSIFIERS = ("off", "lexical", "llm")
PROBE_KEY = "urgency-classifier"  # prefix key (and grammar key) of the LLM classifier's prompt


class UrgencyConfigError(ValueError):
    """An urgency configuration file that cannot be used (says which field and why)."""


@dataclass(frozen=True)
class Cue:
    pattern: re.Pattern[str]
    weight: float


@dataclass(frozen=True)
class UrgencyConfig:
    """Classes (most urgent first) with their TUFs, the lexical cues and the LLM prompt."""

    classes: dict[str, TUF]
    default: str
    cues: tuple[Cue, ...]
    threshold: float
    llm_prompt: str
    llm_request: str
    source: str = ""

    def tuf(self, label: str) -> TUF:
        return self.classes[label]

    @property
    def urgent(self) -> str:
        """The most urgent class (the lexical model's positive answer)."""
        return next(iter(self.classes))


def _public_tuf(value: object, where: str) -> TUF:
    if not (isinstance(value, list) and len(value) == 3):
        raise UrgencyConfigError(f"{where}: tuf must be [Umax, ERT, t_zero], got {value!r}")
    try:
        return TUF.from_public(*value)
    except (InvalidTUF, TypeError) as exc:
        raise UrgencyConfigError(f"{where}: {exc}") from None


def parse_config(data: object, source: str = "<urgency>") -> UrgencyConfig:
    """Build an :class:`UrgencyConfig` from the YAML mapping (see config/urgency/urgency.yaml)."""
    if not isinstance(data, dict):
        raise UrgencyConfigError(f"{source}: expected a mapping")
    classes_raw = data.get("classes")
    if not isinstance(classes_raw, dict) or len(classes_raw) < 2:
        raise UrgencyConfigError(f"{source}: 'classes' must map at least two class names to a tuf")
    classes = {}
    for name, spec in classes_raw.items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z][a-z0-9_-]*", name):
            raise UrgencyConfigError(f"{source}: class name {name!r} must be a lower-case word")
        if not isinstance(spec, dict):
            raise UrgencyConfigError(f"{source}: class {name!r} must be a mapping with a tuf")
        classes[name] = _public_tuf(spec.get("tuf"), f"{source}: class {name!r}")
    default = data.get("default", list(classes)[-1])
    if default not in classes:
        raise UrgencyConfigError(f"{source}: default {default!r} is not one of the classes {list(classes)}")
    lex = data.get("lexical") or {}
    cues = []
    for i, c in enumerate(lex.get("cues") or []):
        try:
            cues.append(Cue(re.compile(c["pattern"], re.IGNORECASE), float(c["weight"])))
        except (KeyError, TypeError, ValueError, re.error) as exc:
            raise UrgencyConfigError(f"{source}: lexical cue {i}: {exc}") from None
    threshold = lex.get("threshold", 1.0)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not math.isfinite(threshold):
        raise UrgencyConfigError(f"{source}: lexical threshold must be a number, got {threshold!r}")
    llm = data.get("llm") or {}
    prompt = llm.get("prompt", "")
    request = llm.get("request", "Request: {text}\nAnswer:")
    if not isinstance(prompt, str) or not isinstance(request, str) or "{text}" not in request:
        raise UrgencyConfigError(f"{source}: llm.prompt must be text and llm.request must contain {{text}}")
    return UrgencyConfig(classes, default, tuple(cues), float(threshold), prompt, request, source)


@cache
def _load(path: str) -> UrgencyConfig:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as exc:
        raise UrgencyConfigError(f"{p}: cannot be read: {exc}") from None
    return parse_config(data, str(p))


def load_urgency_config(path: str | Path | None = None) -> UrgencyConfig:
    """``config/urgency/urgency.yaml`` on the config search path, or an explicit file."""
    return _load(str(Path(path) if path is not None else config_path("urgency", "urgency.yaml")))


@dataclass(frozen=True, slots=True)
class Classification:
    """The outcome for one instruction: class, its TUF, who decided and how long it took."""

    label: str
    tuf: TUF
    source: str  # "lexical" | "llm" | "default" (no usable answer)
    score: float = math.nan  # lexical score (nan for the LLM)
    latency_s: float = 0.0  # time from the request to the answer (planner clock)


class LexicalClassifier:
    """The rule/lexical model (module docstring). Deterministic and stateless."""

    name = "lexical"

    def __init__(self, config: UrgencyConfig | None = None) -> None:
        self.config = config or load_urgency_config()

    def score(self, text: str) -> float:
        return math.fsum(c.weight for c in self.config.cues if c.pattern.search(text))

    def classify(self, text: str) -> Classification:
        t0 = time.perf_counter()
        s = self.score(text)
        cfg = self.config
        label = cfg.urgent if s >= cfg.threshold else cfg.default
        if label == cfg.urgent and label == cfg.default:  # degenerate config: never crash
            label = cfg.default
        return Classification(label, cfg.tuf(label), self.name, s, time.perf_counter() - t0)


def grammar_gbnf(labels: list[str]) -> str:
    """GBNF that accepts exactly one of the class names (the LLM's constrained one-word answer)."""
    return "root ::= " + " | ".join(f'"{name}"' for name in labels) + "\n"


class LLMClassifier:
    """The embedded LLM as urgency classifier (module docstring): prompt ids, grammar and answer."""

    name = "llm"

    def __init__(self, config: UrgencyConfig | None = None) -> None:
        self.config = config or load_urgency_config()
        self.labels = list(self.config.classes)

    def request_text(self, text: str) -> str:
        return self.config.llm_request.format(text=" ".join(text.split()))

    def max_tokens(self, tokenize: Callable[[str], list[int]]) -> int:
        """Tokens needed to tell the classes apart in the worst case (longest class name)."""
        return max(len(tokenize(label)) for label in self.labels)

    def decide(self, generated: str) -> str | None:
        """The class the answer so far names, once only one class starts with it (None: undecided)."""
        g = generated.strip().lower()
        if not g:
            return None
        hits = [lab for lab in self.labels if lab.startswith(g) or g.startswith(lab)]
        return hits[0] if len(hits) == 1 else None


@dataclass
class _Probe:
    task_id: str
    gen_id: int
    started: float
    text: list[str] = field(default_factory=list)


class ProbeBook:
    """The LLM classifier's probe generations inside the planner loop.

    The planner asks :meth:`probe_prompt` for a task's prompt ids, admits them on its engine as a
    generation of its own (``prefix_key`` :data:`PROBE_KEY`, the grammar set once per engine with
    ``set_grammar`` where the engine has it) and hands every token of that generation to
    :meth:`on_token`, which returns the :class:`Classification` as soon as the answer is decided (the
    planner then releases the probe). A probe that ends undecided gives the default class.
    """

    def __init__(self, classifier: LLMClassifier) -> None:
        self.clf = classifier
        self._by_gen: dict[int, _Probe] = {}
        self._grammar_engines: set[int] = set()

    def __len__(self) -> int:
        return len(self._by_gen)

    def prepare_engine(self, engine: Engine) -> None:
        """Install the one-word grammar on engines that take one (llama.cpp), once per engine."""
        if id(engine) in self._grammar_engines:
            return
        setter = getattr(engine, "set_grammar", None)
        if callable(setter):
            setter(PROBE_KEY, grammar_gbnf(self.clf.labels))
        self._grammar_engines.add(id(engine))

    def probe_prompt(self, engine: Engine, text: str) -> tuple[list[int], int]:
        """(prompt ids, shared-prefix length) of the classification request for ``text``."""
        prefix = engine.tokenize(self.clf.config.llm_prompt)
        return prefix + engine.tokenize("\n" + self.clf.request_text(text)), len(prefix)

    def start(self, task_id: str, gen_id: int, t: float) -> None:
        self._by_gen[gen_id] = _Probe(task_id, gen_id, t)

    def owns(self, gen_id: int) -> bool:
        return gen_id in self._by_gen

    def task_of(self, gen_id: int) -> str | None:
        p = self._by_gen.get(gen_id)
        return None if p is None else p.task_id

    def on_token(self, gen_id: int, text: str, finished: bool, t: float) -> Classification | None:
        """Feed one token of a probe; the classification once decided (the probe is then forgotten)."""
        p = self._by_gen.get(gen_id)
        if p is None:
            return None
        p.text.append(text)
        label = self.clf.decide("".join(p.text))
        if label is None and not finished:
            return None
        del self._by_gen[gen_id]
        cfg = self.clf.config
        if label is None:
            return Classification(cfg.default, cfg.tuf(cfg.default), "default", latency_s=t - p.started)
        return Classification(label, cfg.tuf(label), self.clf.name, latency_s=t - p.started)

    def drop(self, gen_id: int) -> str | None:
        """Forget a probe (its engine failed); returns its task id."""
        p = self._by_gen.pop(gen_id, None)
        return None if p is None else p.task_id
