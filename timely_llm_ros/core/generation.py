"""Records of requests and segments with every timestamp (paper §4.2, Figure 3).

A request's output is a sequence of segments ``s_0 … s_K``. For each segment we keep when its
generation started and ended, when it was dispatched, and when the robot started and finished its
action. The paper's latencies follow from them:

* waiting time ``W(s_k)`` = action start of ``s_k`` − action end of ``s_{k-1}`` (arrival for
  ``k = 0``); ``W(s_0)`` is the response time;
* robot waiting time ``Σ_k W(s_k)``; task completion time = last action end − arrival;
* generation time ``G(s_k)`` = generation end − generation start (of that segment's tokens,
  possibly spread over a resumption); execution time ``E(s_k)`` = action end − action start;
* time utility ``TUF_0(W(s_0))`` (Eq. 1; unclamped — metrics also report it clamped at 0).

Times are floats on the planner's clock; ``nan`` marks "has not happened".
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from timely_llm_ros.core.task import TaskSpec, task_class
from timely_llm_ros.core.tuf import TUF, segment_deadline

if TYPE_CHECKING:
    from timely_llm_ros.core.engine import Context
    from timely_llm_ros.core.segmenter import SegmentChecker
    from timely_llm_ros.core.skills.model import SkillCall
    from timely_llm_ros.core.skills.skillset import SkillSet

NAN = math.nan


@dataclass(slots=True)
class Segment:
    """One executable piece of a plan."""

    idx: int
    text: str = ""
    skills: tuple[str, ...] = ()  # skill names of the parsed calls
    n_tokens: int = 0
    gen_start: float = NAN  # first token of this segment was being generated from here
    gen_end: float = NAN  # the stop checker found it complete (SEGMENT_READY)
    dispatch: float = NAN
    exec_start: float = NAN
    exec_end: float = NAN
    min_exec: float = NAN  # estimated minimum execution time (priority, paper §4.3)
    expected_exec: float = NAN
    final: bool = False
    calls: tuple[
        SkillCall, ...
    ] = ()  # SkillCall objects (not compared in determinism checks: they are values)

    @property
    def exec_time(self) -> float:
        return self.exec_end - self.exec_start


@dataclass(slots=True)
class TaskRecord:
    """Everything that happened to one request."""

    task_id: str
    agent_id: str
    task_class: str
    tuf: TUF | None  # None only for a REJECTED task that came without one
    arrival: float
    robot_type: str = ""
    skill_set: str = ""
    trace_id: int | None = None
    state: str = "ACCEPTED"
    reason: str = ""
    # why the plan is shorter than generated: "plan truncated at max_tokens ..." (the COMPLETED reason)
    truncated: str = ""
    first_admit: float = NAN  # first GEN_START
    gen_end: float = NAN  # EOS / token limit
    n_tokens: int = 0  # generated tokens (EOS included)
    n_suspensions: int = 0
    segments: list[Segment] = field(default_factory=list)
    completion_time_abs: float = NAN  # clock time of the last action end
    terminal_time: float = NAN  # when the task reached COMPLETED / FAILED / REJECTED / EXPIRED

    @classmethod
    def from_spec(cls, spec: TaskSpec) -> TaskRecord:
        """Record of a spec; never raises, so even a malformed task gets a record of its REJECT.

        The record keeps the TUF the task is judged by: its own, or a benchmark's ``reference_tuf``
        when the planner had to derive one (semantic urgency)."""
        ref = getattr(spec, "reference_tuf", None)
        tuf = ref if isinstance(ref, TUF) else (spec.tuf if isinstance(spec.tuf, TUF) else None)
        klass = (
            spec.task_class
            if isinstance(spec.task_class, str) and spec.task_class
            else (task_class(spec) if tuf is not None else "")
        )
        arrival = spec.arrival if isinstance(spec.arrival, (int, float)) else NAN
        return cls(
            task_id=str(spec.task_id),
            agent_id=str(spec.agent_id),
            task_class=klass,
            tuf=tuf,
            arrival=float(arrival),
            robot_type=str(spec.robot_type),
            skill_set=str(spec.skill_set),
            trace_id=spec.trace_id,
        )

    # -- derived latencies ----------------------------------------------------------------------
    def waiting_times(self) -> list[float]:
        """W(s_k) for every segment whose action started."""
        out = []
        prev_end = self.arrival
        for seg in self.segments:
            if math.isnan(seg.exec_start):
                break
            out.append(seg.exec_start - prev_end)
            prev_end = seg.exec_end
            if math.isnan(prev_end):
                break
        return out

    @property
    def response_time(self) -> float:
        """W(s_0): arrival to the first action start (nan if no action started)."""
        if not self.segments:
            return NAN
        return self.segments[0].exec_start - self.arrival

    @property
    def waiting_time(self) -> float:
        """Robot waiting time Σ W(s_k) (nan until the first action started)."""
        w = self.waiting_times()
        return sum(w) if w else NAN

    @property
    def completion_time(self) -> float:
        """Task completion time C(r): arrival to the last action's end (nan unless completed)."""
        return self.completion_time_abs - self.arrival

    @property
    def exec_time(self) -> float:
        return sum(s.exec_time for s in self.segments if not math.isnan(s.exec_end))

    @property
    def utility(self) -> float:
        """TUF_0(W(s_0)), Eq. 1, unclamped (nan when the task never got a response)."""
        r = self.response_time
        return NAN if math.isnan(r) or self.tuf is None else self.tuf(r)


@dataclass(frozen=True, slots=True)
class Dispatch:
    """A segment sent to a robot.

    ``final`` marks the last segment of the plan. A *closing marker* (``calls`` empty, ``text`` empty,
    ``final`` true, ``seg`` = the number of segments) tells the robot that a plan whose last executable
    segment was already sent has ended; it has no record in :attr:`TaskRecord.segments` and the robot
    sends no feedback for it.
    """

    task_id: str
    agent_id: str
    robot_type: str
    seg: int
    text: str
    calls: tuple[SkillCall, ...]
    t: float
    min_exec: float
    expected_exec: float
    final: bool = False

    @property
    def closing_marker(self) -> bool:
        # text matters: a call-less final tail such as a loop's '}' runs the loop's replays (the
        # robots' TaskQueue tells a marker by its empty text likewise)
        return self.final and not self.calls and not self.text.strip()


def estimated_action_end(rec: TaskRecord, net: float, held_at: float = math.nan) -> float:
    """Estimated end of the last dispatched segment's action (paper §4.3).

    Chained over the segments: ``est_end(k) = max(dispatch_k + net, est_end(k−1)) + min_exec_k``
    until the action starts (the *minimum* execution time: the worst case for being late), then
    ``exec_start_k + min_exec_k``, and ``exec_end_k`` once it is done. ``-inf`` with no segment.
    A segment held back (not dispatched yet: its robot still executes another task) counts as
    dispatched at ``held_at``.
    """
    end = -math.inf
    for s in rec.segments:
        if not math.isnan(s.exec_end):
            end = s.exec_end
        elif not math.isnan(s.exec_start):
            end = s.exec_start + s.min_exec
        else:
            sent = s.dispatch if not math.isnan(s.dispatch) else held_at
            end = max(sent + net, end) + s.min_exec
    return end


Request = TaskRecord  # the paper's word for one task; its record is the TaskRecord


class Generation:
    """Runtime state of one request's generation inside the planner (one per task).

    The scheduler reads only plain floats from it: ``ref`` is the reference point of the next
    segment's waiting time — the arrival for ``k = 0``, the estimated end of the previous segment's
    action for ``k > 0`` — and ``ert_k`` is that segment's ERT (the task's ERT for ``k = 0``,
    0 for later segments: TUF_1, §4.2). ``g`` is the segment generation-time estimate G and ``net``
    the planner→robot latency.
    """

    __slots__ = (
        "gen_id",
        "seq",
        "spec",
        "record",
        "skill_set",
        "checker",
        "alpha",
        "beta",
        "ert",
        "g",
        "net",
        "max_seg_tokens",
        "k",
        "ref",
        "ert_k",
        "fixed_key",
        "state",
        "context",
        "prompt_ids",
        "prefix_len",
        "script",
        "plan",
        "max_tokens",
        "seg_tokens",
        "seg_start",
        "slot",
        "mem_need",
        "robot_type",
        "finished",
        "dispatched",
        "done_segments",
        "text",
        "held",
        "parked",
        "chain",
        "partial",
        "preempted",
        "mid_resume",
        "seg_first",
    )

    def __init__(
        self, gen_id: int, spec: TaskSpec, record: TaskRecord, skill_set: SkillSet, net: float
    ) -> None:
        self.gen_id = gen_id
        self.seq = gen_id  # FCFS order = submission order
        self.spec = spec
        self.record = record
        self.skill_set = skill_set
        self.checker: SegmentChecker | None = None
        tuf = spec.tuf
        assert tuf is not None, "a generation is made of a validated task (Intake.prepare)"
        self.alpha = float(tuf.alpha)
        self.beta = float(tuf.beta)
        self.ert = float(tuf.ert)
        self.g = float(skill_set.segment_gen_estimate_s) if skill_set is not None else 0.0
        self.max_seg_tokens = int(skill_set.max_segment_tokens) if skill_set is not None else 0
        self.net = float(net)
        self.k = 0
        self.ref = float(spec.arrival)
        self.ert_k = self.ert
        self.fixed_key = 0.0
        self.state = "QUEUED"
        self.context: Context | None = None
        self.prompt_ids: list[int] = []
        self.prefix_len = 0
        self.script: list[int] | None = None
        self.plan: str | None = None  # replay mode: the text the engine must write (core/options/replay.py)
        self.max_tokens = int(spec.max_tokens)
        self.seg_tokens = 0
        self.seg_start = NAN
        self.slot = -1
        self.mem_need = 0
        self.robot_type = spec.robot_type
        self.finished = False
        self.dispatched = 0
        self.done_segments = 0
        self.text: list[str] = []
        self.held: list[Dispatch] = []  # segments planned while its robot executes another task
        self.parked = False  # out of the scheduler until its robot is free (see core.sched.agent_queue)
        # (ref, ERT, α, β) of the first segment of the next task waiting for this one's robot (set by
        # the planner while this task is its robot's active one; None if nothing waits): that task's
        # response cannot start before this plan ends, so a policy may rank this generation by it
        self.chain: tuple[float, float, float, float] | None = None
        # preemption (core.sched.preemption): suspended mid-segment (its partial segment is kept:
        # seg_tokens, the checker's state), how often its current segment was preempted, and when
        # that segment's generation first started (seg_start is shifted by the pause on resumption)
        self.partial = False
        self.preempted = 0
        # the engine resumes it exactly mid-segment (Engine.resumes_mid_segment; the planner sets it
        # when the generation starts): only then may the scheduler preempt it
        self.mid_resume = True
        self.seg_first = NAN

    def deadline(self) -> float:
        """Latest generation end of the current segment for its action to start on time:
        ``ref + ERT_k − net`` (arrival + ERT − net for k = 0; previous action end − net after)."""
        return segment_deadline(self.ref, self.ert_k, self.net)
