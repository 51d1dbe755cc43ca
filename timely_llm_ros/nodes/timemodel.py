"""Execution-time model node: ``EstimateExecTime`` for every robot type, and measured statistics.

**Service** ``/estimate_exec_time``: parses ``segment_text`` with the request's skill set (empty:
the default set of the robot type — ``default_skill_sets`` or the first registered set of that
type) and answers minimum / expected / maximum from the per-skill models in
``config/exec_time/<robot_type>.yaml`` (:mod:`timely_llm_ros.core.exectime`, TimelyLLM §4.3/§6). Any
problem — unknown robot type, skill set of another robot type, unparsable text, a skill without a
model — is answered with ``ok = false`` and the reason; the node never raises.

**Measurements.** Robots report each segment's measured duration in ``SegmentFeedback`` (DONE).
Feedback names only (task, segment index), so the node also watches every
``/<agent>/skill_segments`` topic (found by discovery) to learn the segment's calls, and ``/tasks``
to learn the robot type (feedback that overtakes its segment or task waits up to ``PARK_S`` for
them). A segment topic is watched while it has a publisher (the planner) or its robot (a subscriber
in namespace ``/<agent>``); one with neither for ``unwatch_after`` seconds — the topic of a task the
planner rejected (no such robot), or of a robot that left — is unsubscribed, so bad agent ids do not
pile up subscriptions here (observers such as the recorder do not keep a topic watched). A DONE segment with exactly one call is a clean measurement of that skill;
segments with several calls only count toward a per-robot-type ratio measured / expected (the split
between their calls is unknown, so no per-skill number is invented).

**Refit.** With ``refit_output`` set, the node writes refitted model files (``<robot_type>.yaml`` in
that directory, the same format :func:`~timely_llm_ros.core.exectime.load_exec_time_file` reads)
at shutdown and every ``refit_interval`` seconds: skills with at least ``min_samples`` measurements
get a ``samples`` model of the measured values — or, for argument-dependent models (``poly``,
``argument``) measured at ≥ 2 distinct argument values, a least-squares line in the argument — and
every other skill keeps its configured model.

The node only wires ROS: measuring, fitting, writing the files and answering an estimate are pure
Python in :mod:`timely_llm_ros.core.exectime_fit`.
"""

from __future__ import annotations

import time
from collections import deque
from pathlib import Path
from typing import Any

from rclpy.node import Node
from rclpy.timer import Timer

from timely_llm_ros.core.exectime import ExecTimeError, load_exec_time_model
from timely_llm_ros.core.exectime_fit import Measurements, estimate_segment
from timely_llm_ros.core.skills.loader import available_skill_sets, load_skill_set
from timely_llm_ros.core.skills.model import SkillParseError
from timely_llm_ros.interfaces import topics
from timely_llm_ros.interfaces.mapping import Feedback
from timely_llm_ros.msg import Segment, SegmentFeedback, Task
from timely_llm_ros.nodes.common import Param, declare_params, forget_destroyed, run_node
from timely_llm_ros.ros import convert, qos
from timely_llm_ros.srv import EstimateExecTime

MAX_SEGMENTS_REMEMBERED = 100_000  # (task, index) -> calls; oldest forgotten first
# DDS orders messages per topic only: a DONE may overtake its Segment or Task. Such feedback waits
# this long for them before it is counted as unknown.
PARK_S = 10.0
REFIT_HEADER = "# Refitted by the timely_llm_ros time-model node from measured SegmentFeedback.\n"


def _pairs_check(value: list[str]) -> str | None:
    for entry in value:
        a, sep, b = entry.partition(":")
        if not sep or not a.strip() or not b.strip():
            return f"entry {entry!r} is not 'robot_type:skill_set'"
    return None


PARAMS = (
    Param(
        "default_skill_sets",
        [],
        "'robot_type:skill_set' entries used when a request names no skill "
        "set (else the first registered set of that robot type)",
        check=_pairs_check,
    ),
    Param("refit_output", "", "directory for refitted model files (<robot_type>.yaml); empty = never write"),
    Param(
        "refit_interval",
        0.0,
        "also write the refitted models every this many seconds (0 = only at shutdown)",
        low=0.0,
        high=86400.0,
    ),
    Param("min_samples", 3, "measurements a skill needs before its model is refitted", low=1, high=1_000_000),
    Param(
        "discovery_period",
        1.0,
        "how often new /<agent>/skill_segments topics are looked for (s)",
        low=0.05,
        high=3600.0,
        read_only=True,
    ),
    Param(
        "unwatch_after",
        30.0,
        "a /<agent>/skill_segments topic with no publisher and no robot subscriber for this long "
        "is unsubscribed (s)",
        low=0.0,
        high=86400.0,
    ),
)


class TimeModelNode(Node):
    """See the module docstring."""

    def __init__(self, name: str = "timemodel", **kwargs: Any) -> None:
        super().__init__(name, **kwargs)
        self.p = declare_params(self, PARAMS, on_change=self._param_changed)
        self.model = load_exec_time_model()
        self._defaults = self._default_sets(self.p["default_skill_sets"])
        self.measurements = Measurements()
        self.counters = {"feedback": 0, "measured": 0, "multi_call": 0, "unknown_segment": 0, "requests": 0}
        self._task_type: dict[str, str] = {}
        self._agent_type: dict[str, str] = {}
        self._segments: dict[tuple[str, int], Segment] = {}
        self._watched: dict[str, Any] = {}  # segment topic -> our subscription
        self._orphaned: dict[str, float] = {}  # watched topic -> since when it has no publisher nor robot
        self._parked: deque[tuple[float, Feedback]] = deque()
        self.create_service(EstimateExecTime, topics.ESTIMATE_EXEC_TIME, self._serve)
        self.create_subscription(Task, topics.TASKS, self._on_task, qos.task_qos())
        self.create_subscription(
            SegmentFeedback, topics.SEGMENT_FEEDBACK, self._on_feedback, qos.feedback_qos()
        )
        self.create_timer(self.p["discovery_period"], self._discover)
        self._refit_timer: Timer | None = None
        self._arm_refit_timer()
        self._discover()
        self.get_logger().info(f"time model ready for robot types {', '.join(self.model.robot_types())}")

    # ------------------------------------------------------------------ parameters
    def _default_sets(self, entries: list[str]) -> dict[str, str]:
        out: dict[str, str] = {}
        for name in sorted(available_skill_sets()):
            try:
                out.setdefault(load_skill_set(name).robot_type, name)
            except (KeyError, ValueError) as exc:
                self.get_logger().warning(f"skill set {name!r} cannot be loaded: {exc}")
        for entry in entries:
            rtype, _, sset = entry.partition(":")
            out[rtype.strip()] = sset.strip()
        return out

    def _param_changed(self, name: str, value: Any) -> None:
        self.p[name] = value
        if name == "default_skill_sets":
            self._defaults = self._default_sets(self.p[name])
        elif name == "refit_interval":
            self._arm_refit_timer()

    def _arm_refit_timer(self) -> None:
        if self._refit_timer is not None:
            self.destroy_timer(self._refit_timer)
            self._refit_timer = None
        if self.p["refit_interval"] > 0:
            self._refit_timer = self.create_timer(self.p["refit_interval"], self._periodic_refit)

    # ------------------------------------------------------------------ service
    def estimate(self, robot_type: str, skill_set: str, text: str) -> tuple[float, float, float]:
        """(minimum, expected, maximum) or ValueError/KeyError with the reason."""
        return estimate_segment(self.model, self._defaults, robot_type, skill_set, text)

    def _serve(self, request: EstimateExecTime.Request, response: EstimateExecTime.Response):
        self.counters["requests"] += 1
        try:
            response.minimum, response.expected, response.maximum = self.estimate(
                request.robot_type, request.skill_set, request.segment_text
            )
            response.ok = True
            response.error = ""
        except SkillParseError as exc:
            response.ok, response.error = False, f"segment does not parse: {exc}"
        except (KeyError, ValueError, ExecTimeError) as exc:
            response.ok = False
            response.error = str(exc.args[0]) if isinstance(exc, KeyError) and exc.args else str(exc)
        return response

    # ------------------------------------------------------------------ measurements
    def _discover(self) -> None:
        self._retry_parked()  # also expires feedback whose segment never came
        for name, types in self.get_topic_names_and_types():
            agent = topics.agent_of_segment_topic(name, self.get_namespace())
            if agent is None or name in self._watched or "timely_llm_ros/msg/Segment" not in types:
                continue
            if self._alive(name):  # not a topic kept in the graph only by observers (and us, before)
                self._watched[name] = self.create_subscription(
                    Segment, name, self._on_segment, qos.segment_qos()
                )
        self._unwatch_orphans(time.monotonic())

    def _alive(self, name: str) -> bool:
        """The segment topic has a publisher (the planner) or its robot's subscription."""
        if self.count_publishers(name) > 0:
            return True
        robot_ns = name.rsplit("/", 1)[0]
        return any(info.node_namespace == robot_ns for info in self.get_subscriptions_info_by_topic(name))

    def _unwatch_orphans(self, now: float) -> None:
        forget_destroyed(self)  # subscriptions unwatched earlier (see nodes.common.forget_destroyed)
        for name in list(self._watched):
            if self._alive(name):
                self._orphaned.pop(name, None)
            elif now - self._orphaned.setdefault(name, now) >= self.p["unwatch_after"]:
                self.destroy_subscription(self._watched.pop(name))
                del self._orphaned[name]

    def _on_task(self, msg: Task) -> None:
        if msg.robot_type:
            if msg.task_id:
                self._task_type[msg.task_id] = msg.robot_type
            if msg.agent_id:
                self._agent_type[msg.agent_id] = msg.robot_type
        self._retry_parked()

    def _on_segment(self, msg: Segment) -> None:
        if len(self._segments) >= MAX_SEGMENTS_REMEMBERED:
            self._segments.pop(next(iter(self._segments)))
        self._segments[(msg.task_id, int(msg.index))] = msg
        self._retry_parked()

    def _retry_parked(self) -> None:
        if not self._parked:
            return
        now = time.monotonic()
        waiting = list(self._parked)
        self._parked.clear()
        for since, fb in waiting:
            if not self._measure(fb):
                if now - since < PARK_S:
                    self._parked.append((since, fb))
                else:
                    self.counters["unknown_segment"] += 1

    def _on_feedback(self, msg: SegmentFeedback) -> None:
        try:
            fb = convert.feedback_from_msg(msg)
        except ValueError as exc:
            self.get_logger().warning(f"feedback ignored: {exc}")
            return
        if fb.state != "DONE" or not fb.duration > 0:
            return
        self.counters["feedback"] += 1
        if not self._measure(fb):
            self._parked.append((time.monotonic(), fb))

    def _measure(self, fb: Feedback) -> bool:
        """Record a DONE feedback if its segment and robot type are known; False to retry later."""
        seg = self._segments.get((fb.task_id, fb.index))
        rtype = self._task_type.get(fb.task_id) or self._agent_type.get(fb.agent_id)
        if seg is None or rtype is None:
            return False
        del self._segments[(fb.task_id, fb.index)]
        self.record(rtype, [(c.name, list(c.args)) for c in seg.calls], fb.duration, seg.exec_time_expected)
        return True

    def record(
        self, robot_type: str, calls: list[tuple[str, list[str]]], duration: float, expected: float
    ) -> None:
        """One measured segment (also the unit-test entry point)."""
        measured = self.measurements.record(robot_type, calls, duration, expected)
        self.counters["measured" if measured else "multi_call"] += 1

    # ------------------------------------------------------------------ refit
    def refitted(self, robot_type: str) -> dict[str, Any]:
        """The model file content for ``robot_type`` with measured skills refitted."""
        return self.measurements.refitted(robot_type, self.p["min_samples"])

    def write_refit(self) -> list[Path]:
        """Write ``<refit_output>/<robot_type>.yaml`` for every measured robot type; returns the files."""
        out_dir = self.p["refit_output"].strip()
        if not out_dir:
            return []
        return self.measurements.write(Path(out_dir), self.p["min_samples"], REFIT_HEADER)

    def _periodic_refit(self) -> None:
        try:
            self.write_refit()
        except OSError as exc:
            self.get_logger().error(f"cannot write the refitted models: {exc}")

    def close(self) -> None:
        try:
            files = self.write_refit()
        except OSError as exc:
            self.get_logger().error(f"cannot write the refitted models: {exc}")
            return
        if files:
            self.get_logger().info(f"refitted models written: {', '.join(map(str, files))}")


def main(argv: list[str] | None = None) -> int:
    return run_node(
        TimeModelNode, argv, description="execution-time model node (EstimateExecTime)", params=PARAMS
    )


if __name__ == "__main__":
    raise SystemExit(main())
