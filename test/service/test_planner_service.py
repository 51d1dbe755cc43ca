"""The planner service (front door + planner thread) without ROS: a simulated engine on its virtual
clock, fake ports that record what the host would publish, the thread's turns driven by hand
(:meth:`PlannerService.pump`). What a ROS test shows end to end over DDS is pinned here turn by turn."""

from __future__ import annotations

import logging

import pytest

from timely_llm_ros.core import events as ev
from timely_llm_ros.core import limits
from timely_llm_ros.core.intake import NOT_ACTIVE
from timely_llm_ros.core.options.planner_options import PlannerOptions
from timely_llm_ros.core.task import TaskRejected, TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF, TUF
from timely_llm_ros.engines.sim import SimEngine
from timely_llm_ros.interfaces.mapping import Feedback
from timely_llm_ros.service import handoff as ho
from timely_llm_ros.service.journal import Journal
from timely_llm_ros.service.planner_service import PlannerService, Ports

PLAN = "mu(40);tp;"


def params(**over: object) -> dict[str, object]:
    """The planner node's parameter defaults (the one list, nodes/planner_params.py) with overrides."""
    from timely_llm_ros.nodes.planner_params import PARAMS  # the defaults only; no node is started

    p = {param.name: param.default for param in PARAMS}
    p.update(over)
    return p


class Plans:
    """A one-entry reference-plan table (the simulated engine plans from it)."""

    sources = ["test"]

    def lookup(self, skill_set: str, instruction: str, scene: object) -> str | None:
        return PLAN if instruction != "unknown" else None


class Host:
    """Fake ports: the outbox as a list, a robot graph as a set of ready agents."""

    def __init__(self, **over: object) -> None:
        self.out: list[ho.Outbound] = []
        self.ready: set[str] = set()
        self.released: list[str] = []
        self.opened: list[str] = []
        ports = Ports(
            put=self.out.append,
            log=logging.getLogger("test-planner-service"),
            robot_ready=lambda agent, late: agent in self.ready,
            status_readers_matched=lambda: True,
            open_robot=self._open,
            robot_topic=lambda agent: f"/{agent}/skill_segments",
            release_robot=self.released.append,
        )
        self.svc = PlannerService(params(**over), ports)
        self.engine = SimEngine()
        self.svc.configure(self.engine, Plans(), PlannerOptions())
        self.svc.active = True

    def _open(self, agent: str) -> None:
        if agent == "bad agent":
            raise TaskRejected("cannot publish segments for agent 'bad agent'")
        self.opened.append(agent)

    def send(self, task_id: str, agent: str = "d1", instruction: str = "[A] look") -> str:
        def to_spec(tid: str, now: float, tuf: TUF | None) -> TaskSpec:
            return TaskSpec(tid, agent, "drone", "tello_minispec", instruction, tuf, arrival=now)

        fields = limits.TaskFields(
            task_id, agent, "drone", "tello_minispec", instruction, "", "", 0, 1.0, -2.0, 1.0
        )
        return self.svc.desk.intake(task_id, agent, lambda: fields, to_spec)

    def run(self, turns: int = 200) -> None:
        for _ in range(turns):
            self.svc.pump(block=False)
            if self.svc.inbound.empty() and not self.svc.core.has_work():
                return

    def statuses(self, task_id: str) -> list[str]:
        return [i.state for i in self.out if isinstance(i, ho.Status) and i.task_id == task_id]

    def segments(self, task_id: str) -> list[ho.SegmentOut]:
        return [i for i in self.out if isinstance(i, ho.SegmentOut) and i.dispatch.task_id == task_id]


def test_a_task_goes_from_intake_to_completed_with_core_values_in_host_time():
    h = Host()
    h.ready.add("d1")
    arrival = h.engine.now()
    assert h.send("t1") == "t1" and "t1" in h.svc.open_tasks and h.opened == ["d1"]
    h.run()
    segs = [s for s in h.segments("t1") if not s.dispatch.closing_marker]
    assert "".join(s.dispatch.text for s in segs) == PLAN and len(segs) == 2
    # stamps are host (ROS) time: planner clock + the offset measured at configure
    assert segs[0].gen_end == pytest.approx(segs[0].dispatch.t + h.svc.ros_offset)
    assert segs[0].gen_start <= segs[0].gen_end and segs[0].tokens > 0
    t = h.engine.now()
    for i, t_start, t_done in ((0, t + 0.1, t + 2.0), (1, t + 2.0, t + 2.1)):
        for state, at in ((ev.STARTED, t_start), (ev.DONE, t_done)):
            nonce = segs[i].nonce  # the robot echoes the segment's nonce
            h.svc.desk.feedback(Feedback("t1", "d1", i, state, 0.0, 0.0, "", nonce), at)
            h.run()
    assert h.statuses("t1")[0] == ev.ACCEPTED and h.statuses("t1")[-1] == ev.COMPLETED
    final = [i for i in h.out if isinstance(i, ho.Status) and i.state == ev.COMPLETED][0]
    assert final.response == pytest.approx(t + 0.1 - arrival)
    assert final.utility == pytest.approx(NORMAL_TUF(t + 0.1 - arrival))
    assert ho.Closed("t1") in h.out and h.svc.stats["segments"] == 2 and h.svc.stats["tasks"] == 1
    assert any(isinstance(i, ho.Event) and i.event.kind == ev.ARRIVAL for i in h.out)


def test_front_door_rejections_are_statuses_with_events_never_exceptions():
    h = Host()
    h.ready.add("d1")
    h.svc.active = False
    assert h.send("t1") == "t1"
    assert h.statuses("t1") == [ev.REJECTED]
    reject = [i for i in h.out if isinstance(i, ho.Status)][0]
    assert reject.reason == NOT_ACTIVE
    kinds = [i.event.kind for i in h.out if isinstance(i, ho.Event)]
    assert kinds == [ev.ARRIVAL, ev.REJECT] and h.svc.stats["rejected"] == 1
    h.svc.active = True
    h.send("t2", instruction="unknown")  # the simulated engine has no reference plan for it
    assert h.statuses("t2") == [ev.REJECTED] and "no reference plan" in h.out[-1].reason
    h.send("t3", agent="bad agent")  # the robot's channel cannot be opened: this task only
    assert h.statuses("t3") == [ev.REJECTED] and "cannot publish segments" in h.out[-1].reason
    assert h.send("t2") == "t2#dup1" and h.statuses("t2#dup1") == [ev.REJECTED]  # the id was taken
    assert h.svc.inbound.empty() and len(h.svc.open_tasks) == 0


def test_a_task_waits_for_its_robot_and_is_given_up_at_the_grace_period():
    h = Host(robot_grace_period=2.0)
    h.send("t1")
    assert h.svc.desk.waits_for("d1") and h.svc.inbound.empty() and h.statuses("t1") == []
    h.svc.desk.check_waiting()  # still within the grace period
    assert h.svc.desk.waits_for("d1")
    h.engine.advance_to(h.engine.now() + 2.5)
    h.svc.desk.check_waiting()
    assert h.statuses("t1") == [ev.REJECTED] and "no robot node for agent 'd1'" in h.out[-1].reason
    assert "/d1/skill_segments" in h.out[-1].reason and h.released == ["d1"]
    assert "t1" not in h.svc.open_tasks


def test_a_waiting_task_goes_once_its_robot_appears_and_a_cancel_ends_another_at_once():
    h = Host()
    h.send("t1")
    h.send("t2", agent="d2")
    assert h.svc.desk.request_cancel("t2", "operator") is None
    assert h.statuses("t2") == [ev.CANCELLED] and ho.Closed("t2") in h.out
    h.ready.add("d1")
    h.svc.desk.check_waiting()
    h.run()
    assert h.statuses("t1")[0] == ev.ACCEPTED and h.segments("t1")
    assert h.svc.desk.request_cancel("nope", "x") == "no open task with this id (unknown, or already ended)"


def test_shutdown_fails_every_open_task_and_closes_the_journal(tmp_path):
    h = Host()
    h.ready.update({"d1", "d2"})
    h.svc.journal = Journal(tmp_path / "planner.journal")
    assert h.svc.journal.open() == []
    h.send("t1")
    h.run()  # t1 accepted and dispatched, its robot executes
    h.send("t2", agent="d2")  # queued, never taken by the planner thread
    h.send("t3", agent="d3")  # waiting for a robot that never came
    flushed: list[int] = []
    assert h.svc.shutdown("planner shut down", lambda: flushed.append(len(h.out)))
    assert h.statuses("t1")[-1] == ev.FAILED
    assert h.statuses("t2") == [ev.REJECTED] and h.statuses("t3") == [ev.REJECTED]
    assert h.svc.journal is None and h.svc.engine is None and flushed
    assert Journal(tmp_path / "planner.journal").open() == []  # nothing left open for a restart
    assert not h.svc.shutdown("again", lambda: None)  # nothing to stop twice


def test_feedback_needs_the_nonce_and_the_robots_sequence_and_a_dead_robot_ends_its_tasks():
    """Issue 27 on the virtual clock: forged DONEs (no nonce, a guessed one) change nothing, an early
    DONE counts at its plausible time, a silent robot's tasks all end at once with its name."""
    h = Host(feedback_min_exec_fraction=0.5, robot_down_timeout=3.0)
    h.ready.add("d1")
    for tid in ("a", "b"):
        h.send(tid)
    h.run()
    segs = [s for s in h.segments("a") if not s.dispatch.closing_marker]
    assert segs and all(len(s.nonce) == 16 for s in segs) and len({s.nonce for s in segs}) == len(segs)
    t = h.engine.now()
    for i in range(len(segs)):  # the forger: DONE 0, 1, … without / with a guessed nonce
        for nonce in ("", "0" * 16):
            h.svc.desk.feedback(Feedback("a", "d1", i, ev.DONE, 0.0, 0.0, "", nonce), t)
    h.run()
    assert ev.COMPLETED not in h.statuses("a") and h.svc.stats["feedback_ignored"] == 2 * len(segs)
    # the robot: STARTED, then a DONE sooner than half the minimum execution time: deferred
    h.svc.desk.feedback(Feedback("a", "d1", 0, ev.STARTED, 0.0, 0.0, "", segs[0].nonce), t)
    h.svc.desk.feedback(Feedback("a", "d1", 0, ev.DONE, 0.0, 0.0, "", segs[0].nonce), t + 0.001)
    h.run()
    rec = h.svc._records["a"]
    assert h.svc.stats["feedback_deferred"] == 1 and rec.segments[0].exec_end != rec.segments[0].exec_end
    h.engine.advance_to(t + rec.segments[0].min_exec)
    h.run()
    assert rec.segments[0].exec_end == pytest.approx(t + 0.5 * rec.segments[0].min_exec)
    # heartbeats, then silence: both tasks of d1 FAIL at once, naming the robot
    h.svc.host_tick = float("inf")  # the host's executor is running (no lag)
    h.svc.beat("d1")
    h.run()
    h.engine.advance_to(h.engine.now() + 3.5)
    h.run()
    for tid in ("a", "b"):
        assert h.statuses(tid)[-1] == ev.FAILED
    reasons = [i.reason for i in h.out if isinstance(i, ho.Status) and i.state == ev.FAILED]
    assert len(reasons) == 2 and all("robot 'd1' is down: no heartbeat for" in r for r in reasons)
    assert h.send("c") == "c" and h.statuses("c") == [ev.REJECTED]  # refused while it is down
    h.svc.beat("d1")  # it is back: used again
    h.run()
    assert h.send("d") == "d" and ev.ACCEPTED in (h.run() or h.statuses("d"))


def test_changed_parameters_reach_what_the_service_holds_and_the_backlog_is_warned(caplog):
    host = Host()
    svc = host.svc
    assert svc.describe() == f"engine {host.engine.info.name}, policy {svc.core.policy.name}, journal off"
    svc.p["robot_down_timeout"] = 9.5
    svc.p["warn_period"] = 0.0
    svc.p["feedback_min_exec_fraction"] = 0.25
    for name in ("robot_down_timeout", "warn_period", "feedback_min_exec_fraction"):
        svc.param_changed(name)
    assert svc.liveness.timeout == 9.5 and svc.warn_limiter.period == 0.0
    assert svc.core.feedback_rules.min_exec_fraction == 0.25
    svc.p["max_inbound"] = 4
    for i in range(3):
        svc.inbound.put(ho.Cancel(f"t{i}", "test"))
    with caplog.at_level(logging.WARNING, logger="test-planner-service"):
        svc.warn_backlog()
    assert "planner busy: 3 messages wait for the planner thread" in caplog.text
