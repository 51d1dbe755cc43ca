"""Which segment a robot executes next: one task at a time, each task's segments strictly by index.

Why one task at a time: a robot executing the segments of two plans interleaved flies (or grips)
two programs mixed together — in a flood, 249 of 250 arm tasks failed with "cannot pick 'X': the
gripper already holds 'Y'". The planner queues a robot's tasks (one open task per agent), but the
robot must stay safe even when a planner misbehaves, so it enforces the same rule itself:

* The first segment that can run makes its task the robot's **active** task. Until that task is
  *over*, segments of other tasks are **held**; one held longer than ``busy_wait`` is handed out
  as ``busy`` (the node fails it with "robot busy with task A") and its task is over for the robot.
  The hold is what makes a benign race harmless: the planner may publish task B's first segment
  right after marking A FAILED, and the segment can overtake the status on the other topic.
* A task is over after its final segment ran (``Segment.final``), when one of its segments failed,
  on a terminal ``TaskStatus`` (:meth:`TaskQueue.end`), on its **closing marker** (a final segment
  with no text: nothing runs and no feedback is sent), after a gap that never closed, or when it
  stayed idle — nothing of it queued or running — for ``idle_release`` seconds (a lost terminal
  status must not block the robot forever; the late segments are refused, never run).
* Segments of a task that is over are handed out at once as ``over`` (failed with the task's end
  reason) — except indices that already ran (``duplicate``, reported only) and markers.

Within the active task: a segment whose predecessor has not arrived waits (DDS keeps per-publisher
order, so this only happens after a loss); after ``gap_timeout`` it is handed out as ``gap``.

Memory is bounded: at most ``max_items`` queued segments (:meth:`put` refuses beyond), per-task
state only for tasks with queued segments or the active one, and a bounded record of ended tasks.
Pure Python, thread-safe (the ROS callback thread puts, the worker thread gets).
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

RUN, DUPLICATE, GAP, BUSY, OVER, MARKER, RELEASED = (
    "run",
    "duplicate",
    "gap",
    "busy",
    "over",
    "marker",
    "released",
)


@dataclass
class SegmentItem:
    """One received segment (what the node takes from the Segment message)."""

    task_id: str
    index: int
    text: str
    final: bool = False
    received: float = field(default_factory=time.monotonic)
    nonce: str = ""  # Segment.nonce, echoed in every feedback about this segment

    @property
    def marker(self) -> bool:
        """The planner's closing marker: a final segment without text (nothing to run, no feedback)."""
        return self.final and not self.text.strip()


@dataclass(frozen=True)
class Handout:
    """What :meth:`TaskQueue.get` hands out; ``kind`` is one of the module's constants."""

    kind: str
    item: SegmentItem
    reason: str = ""


@dataclass
class _Ended:
    reason: str
    next_index: int  # indices below this ran (or were handed out) before the task ended


class TaskQueue:
    """Thread-safe segment queue enforcing one task at a time (see the module docstring)."""

    def __init__(
        self,
        gap_timeout: float = 10.0,
        busy_wait: float = 10.0,
        idle_release: float = 60.0,
        *,
        max_items: int = 1000,
        max_ended: int = 4096,
        clock: Callable[[], float] = time.monotonic,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        self.gap_timeout = gap_timeout
        self.busy_wait = busy_wait
        self.idle_release = idle_release
        self.max_items = max_items
        self.max_ended = max_ended
        self.clock = clock
        self.on_end = on_end  # told when a task is over (the runner drops its state); lock held
        self._items: deque[SegmentItem] = deque()
        self._next: dict[str, int] = {}  # task -> next index to hand out (tasks not over)
        self._ended: OrderedDict[str, _Ended] = OrderedDict()
        self.active: str | None = None
        self._running = False  # a segment of the active task is executing
        self._last_activity = 0.0
        self._cv = threading.Condition()
        self._closed = False

    # ------------------------------------------------------------------ producer side
    def put(self, item: SegmentItem) -> bool:
        """Queue a segment; False (not queued) when ``max_items`` segments already wait."""
        with self._cv:
            if len(self._items) >= self.max_items:
                return False
            self._items.append(item)
            if item.task_id == self.active:
                self._last_activity = self.clock()
            self._cv.notify_all()
            return True

    def end(self, task_id: str, reason: str) -> bool:
        """The task is over (terminal status, a failure): True if it was the active task."""
        with self._cv:
            was_active = task_id == self.active
            self._end(task_id, reason)
            self._cv.notify_all()
            return was_active

    def done(self, task_id: str, *, ok: bool, final: bool, reason: str = "") -> None:
        """The worker finished running a segment of ``task_id`` (ok or failed; final or not)."""
        with self._cv:
            if task_id == self.active:
                self._running = False
                self._last_activity = self.clock()
            if not ok:
                self._end(task_id, reason or "a segment failed")
            elif final:
                self._end(task_id, "its final segment already ran")
            self._cv.notify_all()

    def ended(self, task_id: str) -> str | None:
        """Why the task is over for this robot (None: not over, or forgotten)."""
        with self._cv:
            e = self._ended.get(task_id)
            return e.reason if e else None

    def close(self) -> None:
        with self._cv:
            self._closed = True
            self._cv.notify_all()

    def drain(self) -> list[SegmentItem]:
        """Remove and return every segment still waiting (at shutdown, to report them)."""
        with self._cv:
            out = list(self._items)
            self._items.clear()
            return out

    def __len__(self) -> int:
        with self._cv:
            return len(self._items)

    def task_states(self) -> int:
        """Per-task records held (open + ended): bounded, for tests and status logs."""
        with self._cv:
            return len(self._next) + len(self._ended)

    # ------------------------------------------------------------------ consumer side
    def poll(self) -> Handout | None:
        """The next handout due now, without waiting (None: nothing can be handed out yet)."""
        with self._cv:
            return None if self._closed else self._pick()

    def get(self, timeout: float | None = None) -> Handout | None:
        """Next segment to handle, or None after ``timeout`` / :meth:`close`."""
        deadline = None if timeout is None else self.clock() + timeout
        with self._cv:
            while not self._closed:
                out = self._pick()
                if out is not None:
                    return out
                now = self.clock()
                waits = [d - now for d in self._deadlines()]
                if deadline is not None:
                    if deadline <= now:
                        return None
                    waits.append(deadline - now)
                self._cv.wait(max(min(waits), 0.001) if waits else None)
            return None

    # ------------------------------------------------------------------ internals (lock held)
    def _end(self, task_id: str, reason: str) -> None:
        if task_id in self._ended:
            return
        nxt = self._next.pop(task_id, 0)
        self._ended[task_id] = _Ended(reason, nxt)
        while len(self._ended) > self.max_ended:
            self._ended.popitem(last=False)
        if task_id == self.active:
            self.active = None
            self._running = False
        if self.on_end is not None:
            self.on_end(task_id)

    def _deadlines(self) -> list[float]:
        out = []
        for it in self._items:
            out.append(it.received + (self.busy_wait if it.task_id != self.active else self.gap_timeout))
            out.append(it.received + self.gap_timeout)
        if self.active is not None and not self._running:
            out.append(self._last_activity + self.idle_release)
        return out

    def _take(self, i: int, kind: str, reason: str = "") -> Handout:
        item = self._items[i]
        del self._items[i]
        return Handout(kind, item, reason)

    def _pick(self, run: bool = True) -> Handout | None:
        """The next handout; with ``run`` False only refusals (nothing starts executing)."""
        now = self.clock()
        # 1. segments of tasks already over: answered at once
        for i, it in enumerate(self._items):
            e = self._ended.get(it.task_id)
            if e is None:
                continue
            if it.index < e.next_index:
                return self._take(
                    i,
                    DUPLICATE,
                    f"segment {it.index} of task {it.task_id!r} was already handled; not executed again",
                )
            if it.marker:
                return self._take(i, MARKER)
            return self._take(
                i,
                OVER,
                f"task {it.task_id!r} is over on this robot ({e.reason}); segment {it.index} is not executed",
            )
        # 2. the active task: its next segment, a duplicate, a gap, or an idle release
        if self.active is not None:
            out = self._pick_task(self.active, now, run)
            if out is not None:
                return out
            idle = not self._running and not any(it.task_id == self.active for it in self._items)
            if idle and now - self._last_activity >= self.idle_release:
                task = self.active
                why = f"released after {self.idle_release:g} s without a segment or status"
                self._end(task, why)
                return Handout(RELEASED, SegmentItem(task, -1, "", received=now), why)
            return self._held(now)
        # 3. no active task: the oldest segment that can start (index = the task's next) takes over;
        #    a task whose first segments went missing gets its gap after the wait (one pass: O(n))
        lowest: dict[str, list] = {}  # task -> [lowest index, its position, earliest receipt]
        ready: set[str] = set()
        for i, it in enumerate(self._items):
            want = self._next.get(it.task_id, 0)
            if it.index == want:
                if run or it.marker:
                    return self._start(i, it.task_id)
                ready.add(it.task_id)
            elif it.index < want:
                return self._take(
                    i,
                    DUPLICATE,
                    f"segment {it.index} of task {it.task_id!r} was already "
                    f"received (next expected: {want}); not executed again",
                )
            else:
                low = lowest.setdefault(it.task_id, [it.index, i, it.received])
                if it.index < low[0]:
                    low[0], low[1] = it.index, i
                low[2] = min(low[2], it.received)
        for task, (_, pos, first) in lowest.items():
            if task not in ready and now - first >= self.gap_timeout:
                return self._gap(task, pos)
        return None

    def refusals(self) -> list[Handout]:
        """Every handout due now that executes nothing (over, busy, gap, duplicate, marker, release).

        Called from a second thread (the node's heartbeat) so that a segment held for ``busy_wait``
        is answered on time even while the worker executes a long segment of the active task.
        """
        out = []
        with self._cv:
            while (h := self._pick(run=False)) is not None:
                out.append(h)
        return out

    def _pick_task(self, task: str, now: float, run: bool = True) -> Handout | None:
        """The current task's next segment, a duplicate of it, or its gap (one pass)."""
        want = self._next.get(task, 0)
        low: tuple[int, int] | None = None  # (lowest index above want, its position)
        first = math.inf  # earliest receipt among the task's waiting segments
        for i, it in enumerate(self._items):
            if it.task_id != task:
                continue
            if it.index < want:
                return self._take(
                    i,
                    DUPLICATE,
                    f"segment {it.index} of task {task!r} was already "
                    f"received (next expected: {want}); not executed again",
                )
            if it.index == want:
                return self._start(i, task) if run or it.marker else None
            if low is None or it.index < low[0]:
                low = (it.index, i)
            first = min(first, it.received)
        if low is not None and now - first >= self.gap_timeout:
            return self._gap(task, low[1])
        return None

    def _gap(self, task: str, pos: int) -> Handout:
        """The task's lowest waiting segment after a gap that never closed: refused, task over."""
        want = self._next.get(task, 0)
        index = self._items[pos].index
        missing = f"{want}" if want == index - 1 else f"{want}..{index - 1}"
        self._next[task] = index + 1
        out = self._take(
            pos,
            GAP,
            f"segment(s) {missing} of task {task!r} never arrived within "
            f"{self.gap_timeout:g} s; segment {index} cannot run out of order",
        )
        self._end(task, out.reason)
        return out

    def _start(self, i: int, task: str) -> Handout:
        item = self._items[i]
        self._next[task] = item.index + 1
        self.active = task
        self._last_activity = self.clock()
        if item.marker:
            out = self._take(i, MARKER)
            self._end(task, "its closing marker arrived")
            return out
        self._running = True
        return self._take(i, RUN)

    def _held(self, now: float) -> Handout | None:
        """A segment of another task held past ``busy_wait``: refused, its task over."""
        for i, it in enumerate(self._items):
            if it.task_id != self.active and now - it.received >= self.busy_wait:
                reason = (
                    f"robot busy with task {self.active!r}: segment {it.index} of task "
                    f"{it.task_id!r} waited {self.busy_wait:g} s and is not executed "
                    "(one task at a time per robot)"
                )
                self._next[it.task_id] = max(self._next.get(it.task_id, 0), it.index + 1)
                out = self._take(i, BUSY, reason)
                self._end(it.task_id, reason)
                return out
        return None
