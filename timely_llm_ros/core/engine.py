"""The engine port: the one interface every LLM engine implements (simulated, llama.cpp, vLLM).

It lives in ``core`` because the planner and the admission in ``core`` drive it: the core owns the
contract, engines (:mod:`timely_llm_ros.engines`) implement it, so imports point from engines down
to core and never back. :mod:`timely_llm_ros.engines.base` re-exports these names for external
engine plug-ins.

TimelyLLM (paper §3, §4.1) needs an engine that can run several generations in one batch, stop any
of them after any decoding iteration, keep its context (token ids + KV) and continue it later without
re-tokenising text. The interface is deliberately small and lock-step: the planner calls
:meth:`Engine.step` once per decoding iteration and decides admissions and suspensions between
steps, so scheduling is identical on a virtual clock and on a real GPU.

How the real engines map onto it:

* **llama.cpp** (one context, ``n_seq_max`` sequences): ``admit`` reserves a sequence id and queues
  the prompt ids for the next ``llama_batch``; ``step`` decodes one batch holding the pending prompt
  tokens plus the last token of every running sequence and samples one token per sequence;
  ``suspend`` simply leaves the sequence out of later batches (KV stays in the context) and may spill
  it with the per-sequence state save (``llama_state_seq_get_data``) + ``seq_rm`` under memory
  pressure; ``resume`` restores it (``set_data``) if it was spilled; ``release`` removes the sequence.
* **vLLM** (``LLMEngine`` in-process, DELTA outputs): ``admit`` = ``add_request`` with
  ``TokensPrompt(prompt_token_ids)``; ``step`` = ``engine.step()``; ``suspend`` = ``abort_request``
  keeping the ids seen so far (any token computed after the planner's last look is dropped);
  ``resume`` = ``add_request`` of prompt + generated ids, automatic prefix caching reusing the KV
  blocks (``Context.kv`` records nothing engine-specific there); ``prefix_key`` is advisory.
* **OpenAI-compatible servers** over HTTP (``engine: openai``,
  :mod:`timely_llm_ros.engines.openai_endpoint`): streams run asynchronously, so ``step`` returns
  at most one token per generation among those that arrived since the last step (waiting a
  bounded time for the first), stamped with its arrival; ``suspend`` closes the stream, ``resume``
  re-submits prompt + generated ids to the server's prefix cache. Several servers form one engine
  (:mod:`timely_llm_ros.engines.replicas`).

Times are seconds on the engine's clock (:meth:`Engine.now`): virtual for the simulator, monotonic
wall time for real engines.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections import deque
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from timely_llm_ros.core.profile import EngineProfile

__all__ = [
    "Context",
    "Engine",
    "EngineError",
    "EngineInfo",
    "EngineOutOfMemory",
    "MemoryInfo",
    "SpeedMeter",
    "TokenOut",
    "check_admission",
    "check_replays",
    "plan_kwargs",
    "script_kwargs",
]


class EngineError(RuntimeError):
    """Misuse of the engine protocol (unknown generation, double admission, ...) or engine failure."""


class EngineOutOfMemory(EngineError):
    """The running generations alone no longer fit the KV capacity."""


@dataclass(slots=True)
class TokenOut:
    """One token of one generation produced by one :meth:`Engine.step`."""

    gen_id: int
    token_id: int
    text: str  # incremental detokenisation of this token ("" for EOS)
    t: float  # engine clock when the token became available
    finished: bool  # EOS emitted or the token budget reached; the generation stopped running
    # "eos" | "length" when finished; "error": the engine ended this generation on a failure
    # (token_id -1; ``text`` may say why): the planner fails its task with that reason
    reason: str = ""


@dataclass(slots=True)
class Context:
    """What a suspended generation keeps (paper §4.1): token ids so far and where its KV lives.

    ``token_ids`` is prompt + generated ids (never re-tokenised text); ``n_prompt`` says where the
    prompt ends. ``kv`` is the engine's handle (opaque to the planner); ``location`` is informative:
    "device", "host" or "discarded" at the time of suspension (the engine may move it later).
    """

    gen_id: int
    token_ids: list[int]
    n_prompt: int
    kv: object = None
    location: str = "device"

    @property
    def n_generated(self) -> int:
        return len(self.token_ids) - self.n_prompt

    def check_matches(self, gen_id: int, ids: list[int], n_prompt: int) -> None:
        """Raise :class:`EngineError` unless this context is the engine's own copy of ``gen_id``.

        Why every engine checks it: resuming is only free of re-prefill because the engine's KV was
        built from exactly these ids; a context from another generation or an edited one would
        silently continue the wrong text. Length, prompt split and last id are compared (O(1)).
        """
        if len(self.token_ids) != len(ids) or self.n_prompt != n_prompt or self.token_ids[-1:] != ids[-1:]:
            raise EngineError(f"context of generation {gen_id} does not match the engine's copy")


@dataclass(frozen=True, slots=True)
class MemoryInfo:
    """KV memory in tokens. ``free`` counts memory suspended contexts occupy as reclaimable."""

    capacity: int
    running: int  # KV tokens of running generations (private part)
    prefix: int  # shared-prefix cache (pinned)
    suspended_device: int  # suspended contexts still on the device (evictable unless pinned)
    suspended_host: int  # contexts swapped to host memory
    pinned: int = 0  # part of suspended_device the engine will not evict (kv_policy ``keep``)

    @property
    def free(self) -> int:
        """Tokens a new admission may use after evicting suspended contexts."""
        return self.capacity - self.running - self.prefix - self.pinned


class SpeedMeter:
    """Per-sequence decode speed from the most recent *pure decode* steps.

    A step that also prefilled or restored a context is not a decode measurement and is skipped
    (mixing prefill into decode steps, or a long window, made the §4.4 admission check useless).
    Speed = 1 / mean duration of the last ``window`` decode steps, in tokens per second per running
    sequence (every running sequence gets one token per step).
    """

    __slots__ = ("_window", "_durations", "_sum")

    def __init__(self, window: int = 4) -> None:
        if window <= 0:
            raise ValueError("speed window must be positive")
        self._window = window
        self._durations: deque[float] = deque()
        self._sum = 0.0

    def record(self, duration: float, pure_decode: bool) -> None:
        if not pure_decode or duration <= 0:
            return
        self._durations.append(duration)
        self._sum += duration
        if len(self._durations) > self._window:
            self._sum -= self._durations.popleft()

    def speed(self) -> float | None:
        """Tokens/s per sequence, or None before the first decode step."""
        if not self._durations:
            return None
        # Recompute from the window instead of the running sum so rounding never accumulates.
        return len(self._durations) / sum(self._durations)


@dataclass
class EngineInfo:
    """Static facts the planner validates against."""

    name: str
    context_limit: int
    eos_id: int
    extra: dict[str, Any] = field(default_factory=dict)


class Engine(ABC):
    """Lock-step multi-sequence LLM engine (see module docstring for the protocol)."""

    info: EngineInfo
    # True for engines that emit a scripted output instead of generating it (the simulated engine and
    # replica sets of it): their ``admit`` takes one more keyword, ``script`` (the ids to emit, then
    # EOS), which is not part of this port; callers pass it through :func:`script_kwargs`.
    needs_script = False
    # True for engines that can hold a generation to an exact text (replay mode,
    # :mod:`timely_llm_ros.core.options.replay`): their ``admit`` takes one more keyword, ``plan`` (the text
    # the generation must write, applied as the engine's structured-output constraint in place of the
    # skill grammar; after a resumption the constraint is the rest of it). Callers pass it through
    # :func:`plan_kwargs`.
    replays_plans = False

    @abstractmethod
    def tokenize(self, text: str) -> list[int]:
        """Token ids of ``text`` without special tokens (the planner concatenates prefix + task)."""

    @abstractmethod
    def admit(
        self,
        gen_id: int,
        prompt_ids: list[int],
        *,
        max_tokens: int,
        prefix_key: str | None = None,
        prefix_len: int = 0,
    ) -> None:
        """Start a new generation; its prefill happens in the next :meth:`step`.

        ``prefix_key``/``prefix_len``: the first ``prefix_len`` prompt ids are a shared prefix (a skill
        set's fixed prompt) that the engine may cache across generations. ``max_tokens`` bounds the
        generated tokens.
        """

    @abstractmethod
    def resume(self, gen_id: int, context: Context, *, max_tokens: int) -> None:
        """Continue a suspended generation from ``context`` in the next :meth:`step`.

        ``max_tokens`` is the total generated-token budget (as at admission, not the remainder).
        """

    @abstractmethod
    def suspend(self, gen_id: int, resume_hint: float | None = None) -> Context:
        """Stop stepping a running generation and return its context; its KV stays on the device
        until the engine needs the space. ``resume_hint``: expected resumption time (engine clock),
        which an engine may use to choose what to evict first."""

    def resumes_mid_segment(self, gen_id: int) -> bool:
        """True if ``gen_id``, suspended at any token (not only at a segment boundary), resumes under
        the same constraint it was generating under (its grammar's state, or the rest of a replayed
        literal), so the scheduler may preempt it mid-segment (:mod:`timely_llm_ros.core.sched.preemption`;
        the planner asks before every admission). False by default: an engine whose resumed request
        starts a new grammar derivation (the continuation grammar is "what may follow a complete
        statement") would force a new statement into the middle of one."""
        return False

    def set_priority(self, gen_id: int, priority: float) -> None:  # noqa: B027 (optional hook)
        """Urgency of a running generation's work inside a step (smaller = more urgent; the planner
        passes the segment deadline). Admission stays with the planner's scheduler; an engine that
        orders prompt work within a step (llama.cpp with ``prefill_chunk``) uses it, others ignore it."""

    def set_importance(self, gen_id: int, importance: float) -> None:  # noqa: B027 (optional hook)
        """Semantic importance of a generation (larger = keep its KV longer; the planner passes the
        task's initial utility β). Engines that evict suspended contexts in ``priority`` order
        (paper 001's eviction heap, :mod:`timely_llm_ros.core.options.kv_policy`) use it; others ignore it."""

    def set_prefill_budget(self, tokens: int | None) -> None:  # noqa: B027 (optional hook)
        """At most ``tokens`` prompt tokens in the next :meth:`step` (None: whole prompts); the planner
        chooses it before every step (:mod:`timely_llm_ros.core.options.token_budget`). Engines with chunked
        prefill (simulated with ``chunked_prefill``, llama.cpp) use it; others ignore it."""

    def cost_profile(self) -> EngineProfile | None:
        """The :class:`~timely_llm_ros.core.profile.EngineProfile` that prices this engine's work
        (prefill, decode, KV transfers), or None if unknown. The simulator returns its timing model;
        real engines return the profile they were given or one fitted for their model."""
        return None

    @abstractmethod
    def step(self) -> list[TokenOut]:
        """One decoding iteration of every running generation (admissions prefill first); [] if idle."""

    @abstractmethod
    def release(self, gen_id: int) -> None:
        """Forget a generation (running or suspended) and free its memory. Unknown ids are ignored."""

    @abstractmethod
    def memory(self) -> MemoryInfo:
        """Current KV usage in tokens."""

    @abstractmethod
    def speed(self) -> float | None:
        """Recent decode speed in tokens/s per running sequence (see :class:`SpeedMeter`)."""

    @abstractmethod
    def now(self) -> float:
        """Engine clock in seconds."""

    @abstractmethod
    def running(self) -> int:
        """Number of generations that the next step will advance."""

    @abstractmethod
    def close(self) -> None:
        """Release everything the engine holds: its generations, the model and its memory (llama.cpp
        context, vLLM engine core), open server streams and threads.

        Contract: idempotent (a second call does nothing and never raises), and it never raises
        for generations still running (they are dropped). After it the engine is spent; an engine
        that holds a model or a connection refuses further calls with :class:`EngineError`. Why on
        the port: whoever created an engine (the planner service on shutdown or re-configure, the
        benchmark CLIs) must free a GPU's memory or a server's slots without knowing which engine
        it holds.
        """


def check_admission(admitted: bool, gen_id: int, prompt_ids: list[int], max_tokens: object) -> None:
    """The arguments every real engine refuses in ``Engine.admit`` (an id already admitted, an empty
    prompt, a token budget that is not a positive integer), with one wording for all of them."""
    if admitted:
        raise EngineError(f"generation {gen_id} already admitted")
    if not prompt_ids:
        raise EngineError("empty prompt")
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens <= 0:
        raise EngineError(f"max_tokens must be a positive integer, got {max_tokens!r}")


def script_kwargs(engine: Engine, script: list[int] | None) -> dict[str, Any]:
    """``{"script": script}`` for an engine that emits a scripted output (``needs_script``), else ``{}``.

    Why: the simulated engine's reference plan is no argument of the port's ``admit`` (an engine
    that generates has nothing to do with it), so only a scripted engine is handed one."""
    return {"script": script} if engine.needs_script else {}


def plan_kwargs(engine: Engine, plan: str | None) -> dict[str, str]:
    """``{"plan": plan}`` for a replayed generation on an engine that generates (``replays_plans``);
    ``{}`` without a plan, and for a scripted engine, whose script already is the reference plan.

    Why a keyword outside the port's signature: only replay mode needs it, and an engine that cannot
    constrain its output to a literal is refused with a reason instead of silently writing its own
    plan (:class:`EngineError`)."""
    if plan is None or engine.needs_script:
        return {}
    check_replays(engine)
    return {"plan": plan}


def check_replays(engine: Engine) -> None:
    """:class:`EngineError` unless ``engine`` can replay reference plans (scripted engines can: their
    script is the reference plan)."""
    if not (engine.needs_script or engine.replays_plans):
        raise EngineError(
            f"engine {engine.info.name!r} cannot replay reference plans (plan_source: reference): it "
            "has no structured-output constraint for an exact text"
        )
