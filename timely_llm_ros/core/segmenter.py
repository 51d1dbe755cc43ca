"""Content-aware segment stop checker (TimelyLLM §4.1, "Segmentation").

TimelyLLM detokenises every new token and suspends a generation as soon as the text produced since
the last suspension holds an *executable* piece of plan, so the robot can start acting while the
rest is generated later. The rule (from the public TimelyLLM code) is:

* robot plans: the newest text **ends a statement** — a ``)`` closing a call, ``;``, ``}``, or the
  ``{`` that opens a block — **and** the text since the last cut holds a complete skill call of the
  robot's skill set;
* chatbot, sentence mode: ``.``, ``!`` or ``?`` once more than ~10 tokens were produced;
* chatbot, paragraph mode: a paragraph break (blank line).

Design decisions (documented here because the planner relies on them):

* The checker works **per character**, not per feed call, and never looks ahead. Every decision
  depends only on the characters seen so far, so any split of the same text into deltas (whole text,
  per character, per token, partial tokens such as ``"mf(1"`` + ``"00)"``) yields the same segments.
  When a delta holds a boundary in its middle (one token ``");"`` or ``"){"``), the segment ends at
  the boundary character and the rest of the delta stays in :attr:`SegmentChecker.pending` as the
  start of the next segment; the concatenation of all segments always equals the generated text.
* A ``)`` inside a condition header (``?iv('x')==True{``) does not end a statement: the condition is
  only executable once its ``{`` arrives, so the whole header is one segment. A loop header
  (``3{``) holds no skill by itself, so it joins the first body statement's segment.
* Nothing inside a quoted string counts (``l('a;b)')`` is one call), and a ``)`` of a nested
  parenthesis does not end the statement.
* A MiniSpec skill written without parentheses (``tp``) counts as a call once the identifier has
  ended (the next non-identifier character arrived); skill names are matched as whole identifiers,
  so ``t`` (time) is not found inside ``tp`` or ``tc``.
* The checker never forces a cut by length; ``max_segment_tokens`` is an estimate for the
  scheduler's batching (§4.4), not a stop rule. A caller that wants to cut anyway may call
  :meth:`SegmentChecker.cut` with no boundary ready: it returns all pending text.

Cost: :meth:`SegmentChecker.feed` is O(len(delta)); pending text is kept as a list of chunks and only
joined when a segment is cut or :attr:`pending` is read.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

_IDENT_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_")
_SENTENCE_ENDS = frozenset(".!?")
_DIGITS = frozenset("0123456789")

MODES = ("statement", "sentence", "paragraph")


class SegmentRuleError(ValueError):
    """A segment rule that cannot be checked (unknown mode, bad parameter)."""


@dataclass(frozen=True)
class SegmentRule:
    """How a skill set's text ends an executable segment (built from the skill-set YAML).

    ``mode``: ``statement`` (robot plans), ``sentence`` or ``paragraph`` (chatbot).
    ``skill_names``: call names that make a statement executable (statement mode).
    ``bare_calls``: a skill may be written without ``()`` (MiniSpec ``tp``).
    ``min_chars``: sentence mode only — a sentence end counts once more than this many characters
    were produced since the last cut (character proxy for "more than ~10 tokens"; see the chatbot
    YAML for the chosen value and why).
    """

    mode: str = "statement"
    skill_names: frozenset[str] = field(default_factory=frozenset)
    bare_calls: bool = False
    min_chars: int = 0

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise SegmentRuleError(f"segment mode {self.mode!r} is not one of {', '.join(MODES)}")
        if self.mode == "statement" and not self.skill_names:
            raise SegmentRuleError("statement mode needs at least one skill name")
        if isinstance(self.min_chars, bool) or not isinstance(self.min_chars, int) or self.min_chars < 0:
            raise SegmentRuleError(f"min_chars must be a non-negative int, got {self.min_chars!r}")


class SegmentChecker:
    """Incremental stop checker for one generation.

    Usage in the generation loop: after every decoded token call ``feed(delta)``; when it returns
    True, call :meth:`cut` to take the executable segment and suspend the generation. Because one
    delta can hold more than one boundary, check :attr:`ready` after a cut. At EOS or the token
    limit, :meth:`finish` returns what is left.
    """

    def __init__(self, rule: SegmentRule) -> None:
        self.rule = rule
        self._chunks: list[str] = []  # pending text since the last cut
        self._pending_len = 0
        self._boundaries: deque[int] = deque()  # end offsets (within pending) of ready segments
        self._finished = False
        # Lexer state; carried across cuts because it describes the character stream.
        self._quote = ""  # active quote character, "" outside strings
        self._escape = False
        self._paren = 0
        self._in_header = False  # inside a `?condition` before its `{`
        self._ident: list[str] = []
        self._candidate = ""  # skill identifier that just ended, waiting to see if `(` follows
        self._call_open = False  # a skill call's `(` is open at paren depth 1
        # Per-segment state: reset at each boundary.
        self._has_skill = False
        self._chars_since_cut = 0
        self._has_text = False
        self._after_newline = False
        self._prev_digit = False

    # -- public API -------------------------------------------------------------------------------
    def feed(self, text_delta: str) -> bool:
        """Add newly detokenised text; True when at least one executable segment is ready."""
        if self._finished:
            raise RuntimeError("feed() after finish(): start a new checker for a new generation")
        if not isinstance(text_delta, str):
            raise TypeError(f"text_delta must be str, got {type(text_delta).__name__}")
        if text_delta:
            base = self._pending_len
            self._chunks.append(text_delta)
            self._pending_len += len(text_delta)
            mode = self.rule.mode
            step = (
                self._step_statement
                if mode == "statement"
                else (self._step_sentence if mode == "sentence" else self._step_paragraph)
            )
            for i, ch in enumerate(text_delta):
                if step(ch):
                    self._boundaries.append(base + i + 1)
        return bool(self._boundaries)

    @property
    def ready(self) -> bool:
        """True while a complete executable segment waits to be cut."""
        return bool(self._boundaries)

    @property
    def pending(self) -> str:
        """Text since the last cut (may extend past a ready boundary)."""
        return "".join(self._chunks)

    def cut(self) -> str:
        """Return the next ready segment (or, if none is ready, all pending text) and drop it."""
        text = self.pending
        if self._boundaries:
            end = self._boundaries.popleft()
            self._boundaries = deque(b - end for b in self._boundaries)
        else:
            end = len(text)
            # A forced cut: what follows starts a new segment that has seen no skill yet.
            self._reset_segment()
        rest = text[end:]
        self._chunks = [rest] if rest else []
        self._pending_len = len(rest)
        return text[:end]

    def finish(self) -> str:
        """At EOS / token limit: return all remaining text (ready segments included) and close."""
        self._finished = True
        text = self.pending
        self._chunks = []
        self._pending_len = 0
        self._boundaries.clear()
        return text

    # -- per-character steps (return True when the character ends a segment) --------------------
    def _reset_segment(self) -> None:
        self._has_skill = False
        self._chars_since_cut = 0
        self._has_text = False
        self._after_newline = False

    def _end_identifier(self, ch: str) -> None:
        """An identifier just ended at ``ch``: remember it when it names a skill."""
        name = "".join(self._ident)
        self._ident.clear()
        if name in self.rule.skill_names and self._paren == 0:
            self._candidate = name

    def _step_statement(self, ch: str) -> bool:
        if self._quote:
            if self._escape:
                self._escape = False
            elif ch == "\\":
                self._escape = True
            elif ch == self._quote:
                self._quote = ""
            return False
        if ch in _IDENT_CHARS:
            if self._candidate and not self._ident:
                self._settle_candidate(ch)
            self._ident.append(ch)
            return False
        if self._ident:
            self._end_identifier(ch)
        if self._candidate and not ch.isspace():
            self._settle_candidate(ch)
        if ch in "'\"":
            self._quote = ch
            return False
        if ch == "(":
            self._paren += 1
            return False
        if ch == ")":
            if self._paren == 0:
                return False  # stray `)`: parse() reports it; it ends nothing here
            self._paren -= 1
            if self._paren == 0 and self._call_open:
                self._call_open = False
                self._has_skill = True
                if self._in_header:
                    return False
                return self._boundary()
            return False
        if self._paren:
            return False
        if ch == "?":
            self._in_header = True
            return False
        if ch == "{":
            self._in_header = False
            return self._boundary()
        if ch in ";}":
            self._in_header = False
            return self._boundary()
        return False

    def _settle_candidate(self, ch: str) -> None:
        """Decide what the skill identifier that just ended was, now that ``ch`` follows it."""
        if ch == "(":
            self._call_open = True
        elif self.rule.bare_calls:
            self._has_skill = True
        self._candidate = ""

    def _boundary(self) -> bool:
        if self._has_skill:
            self._reset_segment()
            return True
        return False

    def _step_sentence(self, ch: str) -> bool:
        self._chars_since_cut += 1
        prev_digit = self._prev_digit
        self._prev_digit = ch in _DIGITS
        if not ch.isspace():
            self._has_text = True
        if ch in _SENTENCE_ENDS and self._has_text and self._chars_since_cut > self.rule.min_chars:
            if ch == "." and prev_digit:
                return False  # "3.5": a decimal point, not a sentence end
            self._reset_segment()
            return True
        return False

    def _step_paragraph(self, ch: str) -> bool:
        if ch == "\n":
            if self._after_newline and self._has_text:
                self._reset_segment()
                return True
            self._after_newline = True
            return False
        if ch in " \t\r":
            return False
        self._after_newline = False
        self._has_text = True
        return False


def split_segments(rule: SegmentRule, text: str) -> list[str]:
    """Cut a whole generated text the way the checker would during generation.

    Returns the executable segments in order, plus the trailing remainder (what ``finish()``
    returns at EOS) when it is not empty; the concatenation equals ``text``. Used to pre-segment
    reference plans (simulator) and in tests.
    """
    checker = SegmentChecker(rule)
    segments = []
    if checker.feed(text):
        while checker.ready:
            segments.append(checker.cut())
    rest = checker.finish()
    if rest:
        segments.append(rest)
    return segments
