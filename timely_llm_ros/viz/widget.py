"""Live timeline widget (Qt via ``python_qt_binding``): the last N seconds of every task, with a
task table (state, response time, utility) beside it. No rqt needed — the rqt plugin
(viz/rqt_plugin.py) and ``timely-llm rqt-timeline`` (viz/standalone.py) both embed it.

Threading: ROS callbacks (or a replay) call :meth:`TimelineWidget.submit` /
:meth:`~TimelineWidget.submit_task` from any thread; those only append to a deque. A Qt timer in
the GUI thread drains it every ``refresh_ms`` (:meth:`~TimelineWidget.process_pending`): each event
updates the shared :class:`~timely_llm_ros.lrtrace.timeline_model.TimelineModel` in O(1), only the
table rows of tasks that changed are rewritten, and the canvas repaints once. That is what lets it
follow 200 events/s (tested).
"""

from __future__ import annotations

import math
import time
from collections import deque
from collections.abc import Callable

from python_qt_binding.QtCore import QPointF, QRectF, Qt, QTimer
from python_qt_binding.QtGui import QBrush, QColor, QFont, QPainter, QPen, QPolygonF
from python_qt_binding.QtWidgets import (
    QAbstractItemView,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QSpinBox,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.lrtrace.timeline_model import TaskLane, TimelineModel
from timely_llm_ros.viz import style
from timely_llm_ros.viz.layout import lane_items

PITCH = 16  # px per lane
LABEL_W = 70  # px for task ids at least; wider for long ids (up to MAX_LABEL_W), so they stay readable
MAX_LABEL_W = 240
TABLE_COLUMNS = ("task", "agent", "class", "state", "response (s)", "utility")


class TimelineCanvas(QWidget):
    """Paints the lanes active in the last ``window_s`` seconds, newest at the bottom."""

    def __init__(
        self,
        model: TimelineModel,
        now: Callable[[], float],
        window_s: float = 30.0,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.model = model
        self.now = now
        self.window_s = float(window_s)
        self.setMinimumSize(360, 160)
        self.setMouseTracking(True)
        # What the last paint showed (tests and tooltips read these).
        self.painted_rows: list[str] = []
        self.painted_markers: list[tuple[str, str]] = []
        self._hits: list[tuple[QRectF, str]] = []

    def visible_lanes(self, now: float) -> list[TaskLane]:
        """Lanes with anything in [now - window, now], as many as fit, the most recent ones."""
        lo = now - self.window_s
        lanes = [
            lane
            for lane in self.model.lanes.values()
            if not math.isnan(lane.last_t) and lane.end_time(now) >= lo
        ]  # has events, active lately
        lanes.sort(key=lambda lane: (_start(lane), lane.task_id))
        fit = max(1, (self.height() - 24) // PITCH)
        return lanes[-fit:]

    def paintEvent(self, _event) -> None:  # noqa: N802 (Qt API)
        now = self.now()
        p = QPainter(self)
        try:
            self._paint(p, now)
        finally:
            p.end()

    def _paint(self, p: QPainter, now: float) -> None:
        w, h = self.width(), self.height()
        p.fillRect(0, 0, w, h, QColor("white"))
        small = QFont(self.font())
        small.setPointSize(7)
        p.setFont(small)
        lanes = self.visible_lanes(now)
        metrics = p.fontMetrics()
        widest = max((metrics.horizontalAdvance(lane.task_id) for lane in lanes), default=0)
        label_w = min(max(LABEL_W, widest + 10), MAX_LABEL_W, max(w // 3, LABEL_W))
        plot_w = max(w - label_w - 8, 10)
        lo = now - self.window_s

        def x(t: float) -> float:
            return label_w + (t - lo) / self.window_s * plot_w

        # time grid: a line every 1/2/5/10 s, labels as "-Ns" relative to now
        step = next(s for s in (1, 2, 5, 10, 30, 60, 300, 600, 3600) if self.window_s / s <= 12)
        p.setPen(QPen(QColor("#e0e0e0")))
        k = 0
        while k * step <= self.window_s + 1e-9:
            gx = x(now - k * step)
            p.drawLine(int(gx), 0, int(gx), h - 14)
            p.setPen(QPen(QColor("#666")))
            p.drawText(int(gx) - 14, h - 2, f"-{k * step:g}s")
            p.setPen(QPen(QColor("#e0e0e0")))
            k += 1
        self.painted_rows = [lane.task_id for lane in lanes]
        self.painted_markers = []
        self._hits = []
        p.setClipRect(0, 0, w, h - 14)
        for i, lane in enumerate(lanes):
            y = 4 + i * PITCH
            if lane.urgent:
                p.fillRect(QRectF(0, y - 1, w, PITCH), QColor(style.URGENT_BAND))
            p.setPen(QPen(QColor(style.URGENT_TEXT if lane.urgent else "#222")))
            p.drawText(
                QRectF(2, y, label_w - 6, PITCH - 2), int(Qt.AlignRight | Qt.AlignVCenter), lane.task_id
            )
            bars, markers = lane_items(lane, now, lo)
            p.setPen(Qt.NoPen)
            for b in bars:
                if b.end < lo:
                    continue
                x0, x1 = max(x(b.start), label_w), x(b.end)
                top = y + (PITCH / 2 if b.robot_side else 1)
                rect = QRectF(x0, top, max(x1 - x0, 1.5), PITCH / 2 - 2)
                p.fillRect(rect, QColor(style.SPAN_COLORS[b.kind]))
                self._hits.append((rect, b.tip))
            for m in markers:
                mx = x(m.t)
                if mx < label_w or mx > w:
                    continue
                self.painted_markers.append((lane.task_id, m.kind))
                if m.kind == "arrival":
                    p.setBrush(QBrush(QColor(style.ARRIVAL_COLOR)))
                    p.setPen(Qt.NoPen)
                    p.drawPolygon(QPolygonF([QPointF(mx, y), QPointF(mx + 5, y + 3.5), QPointF(mx, y + 7)]))
                elif m.kind in ("ert", "ert_missed"):
                    missed = m.kind == "ert_missed"
                    p.setPen(
                        QPen(
                            QColor(style.MISSED_COLOR if missed else style.ERT_COLOR), 2.5 if missed else 1.5
                        )
                    )
                    p.drawLine(QPointF(mx, y - 1), QPointF(mx, y + PITCH - 2))
                    if missed:
                        c = y + PITCH / 2
                        p.drawLine(QPointF(mx - 4, c - 4), QPointF(mx + 4, c + 4))
                        p.drawLine(QPointF(mx - 4, c + 4), QPointF(mx + 4, c - 4))
                else:
                    p.setPen(QPen(QColor(style.FAILED_COLOR), 2))
                    c = y + PITCH / 2
                    p.drawLine(QPointF(mx - 4, c - 4), QPointF(mx + 4, c + 4))
                    p.drawLine(QPointF(mx - 4, c + 4), QPointF(mx + 4, c - 4))
                self._hits.append((QRectF(mx - 4, y, 8, PITCH), m.tip))
            p.setPen(Qt.NoPen)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802 (Qt API)
        pos = event.pos()
        for rect, tip in reversed(self._hits):
            if rect.contains(QPointF(pos)):
                QToolTip.showText(event.globalPos(), tip, self)
                return
        QToolTip.hideText()


class TimelineWidget(QWidget):
    """Canvas + task table; feed it with :meth:`submit` from any thread (module docstring)."""

    def __init__(
        self,
        parent: QWidget | None = None,
        window_s: float = 30.0,
        refresh_ms: int = 100,
        clock: Callable[[], float] | None = None,
        keep_s: float | None = None,
        start_timer: bool = True,
    ) -> None:
        super().__init__(parent)
        self.setObjectName("TimelyLLMTimelineWidget")
        self.model = TimelineModel()
        self.clock = clock
        self.keep_s = keep_s if keep_s is not None else 5 * window_s  # table memory for finished tasks
        self._pending: deque = deque()
        self._rows: dict[str, int] = {}
        self.events_processed = 0
        self.canvas = TimelineCanvas(self.model, self.now, window_s)
        self.table = QTableWidget(0, len(TABLE_COLUMNS))
        self.table.setHorizontalHeaderLabels(list(TABLE_COLUMNS))
        self.table.setEditTriggers(QAbstractItemView.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeToContents)
        self.window_box = QSpinBox()
        self.window_box.setRange(1, 3600)
        self.window_box.setValue(int(round(window_s)))
        self.window_box.setSuffix(" s")
        self.window_box.valueChanged.connect(self.set_window)
        self.status = QLabel("waiting for trace events …")
        self.legend = QLabel(style.legend_html())
        self.legend.setWordWrap(True)
        bar = QHBoxLayout()
        bar.addWidget(QLabel("last"))
        bar.addWidget(self.window_box)
        bar.addWidget(self.status, 1)
        split = QSplitter(Qt.Horizontal)
        split.addWidget(self.canvas)
        split.addWidget(self.table)
        split.setStretchFactor(0, 3)
        split.setStretchFactor(1, 2)
        self.table.setMinimumWidth(420)
        box = QVBoxLayout(self)
        box.addLayout(bar)
        box.addWidget(self.legend)
        box.addWidget(split, 1)
        self.timer = QTimer(self)
        self.timer.timeout.connect(self.process_pending)
        if start_timer:
            self.timer.start(int(refresh_ms))

    # -- feeding (any thread) ------------------------------------------------------------------
    def submit(self, event: ev.TraceEvent) -> None:
        self._pending.append(("event", event))

    def submit_task(
        self, task_id: str, agent_id: str = "", tuf: TUF | None = None, task_class: str = ""
    ) -> None:
        self._pending.append(("task", (task_id, agent_id, tuf, task_class)))

    # -- GUI thread ----------------------------------------------------------------------------
    def now(self) -> float:
        """The window's right edge: the clock, or the newest event while the clock has no time (NaN,
        e.g. a sim-time node before the first /clock) or there is no clock."""
        if self.clock is not None:
            t = float(self.clock())
            if math.isfinite(t):
                return t
        return self.model.t_max if math.isfinite(self.model.t_max) else 0.0

    def set_window(self, seconds: float) -> None:
        self.canvas.window_s = float(seconds)
        self.keep_s = max(self.keep_s, 5 * float(seconds))
        self.canvas.update()

    def reset(self) -> None:
        """Forget every task and event (a replay seeking backwards rebuilds from the bag's start)."""
        self._pending.clear()
        self.model = TimelineModel()
        self.canvas.model = self.model
        self._rows.clear()
        self.table.setRowCount(0)
        self.events_processed = 0

    def process_pending(self) -> int:
        """Apply every queued event, refresh changed table rows, repaint; returns events applied."""
        n = 0
        while self._pending:
            what, item = self._pending.popleft()
            if what == "event":
                self.model.apply(item)
                n += 1
            else:
                tid, agent, tuf, klass = item
                self.model.set_task(tid, agent, tuf, klass)
        self.events_processed += n
        now = self.now()
        gone = [
            tid for tid, lane in self.model.lanes.items() if lane.done and lane.terminal < now - self.keep_s
        ]
        if gone:
            self.model.prune(now - self.keep_s)
            self._remove_rows(gone)
        self._refresh_missed(now)
        changed = [self.model.lanes[t] for t in self.model.take_changed() if t in self.model.lanes]
        changed = [lane for lane in changed if not math.isnan(lane.last_t)]  # announced, no event yet
        changed.sort(key=lambda lane: (_start(lane), lane.task_id))  # new rows in arrival order
        bar = self.table.verticalScrollBar()
        follow = bar.value() >= bar.maximum()  # keep following the newest rows unless the user scrolled up
        rows_before = self.table.rowCount()
        for lane in changed:
            self._update_row(lane, now)
        if follow and self.table.rowCount() > rows_before:
            self.table.scrollToBottom()
        lanes = self.model.lanes.values()
        missed = sum(lane.missed_ert(now) for lane in lanes)
        self.status.setText(
            f"{len(self.model.lanes)} tasks, {self.events_processed} events, {missed} missed ERT"
        )
        self.canvas.update()
        return n

    def _remove_rows(self, task_ids: list[str]) -> None:
        for row in sorted((self._rows.pop(t) for t in task_ids if t in self._rows), reverse=True):
            self.table.removeRow(row)
        self._rows = {self.table.item(r, 0).text(): r for r in range(self.table.rowCount())}

    def _update_row(self, lane: TaskLane, now: float) -> None:
        row = self._rows.get(lane.task_id)
        if row is None:
            row = self.table.rowCount()
            self.table.insertRow(row)
            self._rows[lane.task_id] = row
        resp, util = lane.response_time, lane.utility
        cells = (
            lane.task_id,
            lane.agent_id,
            lane.klass,
            lane.activity,
            "" if math.isnan(resp) else f"{resp:.3f}",
            "" if math.isnan(util) else f"{util:.3f}",
        )
        missed = lane.missed_ert(now)
        for col, text in enumerate(cells):
            item = self.table.item(row, col)
            if item is None:
                item = QTableWidgetItem(text)
                self.table.setItem(row, col, item)
            elif item.text() != text:
                item.setText(text)
            if lane.urgent:
                item.setForeground(QBrush(QColor(style.URGENT_TEXT)))
            if col >= 4:
                item.setBackground(QBrush(QColor("#fcc5c0" if missed else "white")))

    def _refresh_missed(self, now: float) -> None:
        """Tasks still waiting whose ERT just passed change colour without an event."""
        for lane in self.model.lanes.values():
            if math.isnan(lane.first_exec) and not lane.done and lane.missed_ert(now):
                self.model.changed.add(lane.task_id)

    # -- test / tooling helpers --------------------------------------------------------------
    def table_rows(self) -> list[tuple[str, ...]]:
        return [
            tuple(
                self.table.item(r, c).text() if self.table.item(r, c) else ""
                for c in range(self.table.columnCount())
            )
            for r in range(self.table.rowCount())
        ]

    def stop(self) -> None:
        self.timer.stop()


def _start(lane: TaskLane) -> float:
    if not math.isnan(lane.arrival):
        return lane.arrival
    return lane.spans[0].start if lane.spans else lane.last_t


def wall_clock() -> float:
    """Clock of a live planner (its TraceEvent stamps are ROS time = wall time by default)."""
    return time.time()
