"""Planner options through the planner node on real DDS: ``planner_options`` (nested mapping in a
parameter file) with overrun ``kill`` tells the robot EXPIRED with the reason and frees it for its
next task; a task sent without a TUF (all-zero ``Tuf``: auto) gets one derived from its instruction.
Nothing is timed: every wait polls with a generous bound."""

from __future__ import annotations

import pytest
from planner_testkit import make_task, planner_graph, wait_for

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 60.0
DOOMED = (0.0, -10.0, 0.01)  # utility horizon: 1 ms after arrival, before any first step can end


def test_kill_expires_with_the_reason_and_an_auto_tuf_task_runs_next(tmp_path):
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.ros import convert

    params = {
        "robot_grace_period": 5.0,
        "segment_timeout_margin": 30.0,
        "planner_options": {"overrun": "kill"},
    }
    with planner_graph(tmp_path, params, {"po_drone": "done"}, "po_peer") as (peer, proc):
        peer.task_pub.publish(make_task("po-late", "po_drone", tuf=DOOMED))
        peer.task_pub.publish(make_task("po-auto", "po_drone", tuf=(0.0, 0.0, 0.0)))
        wait_for(lambda: peer.final_state("po-auto") is not None, WAIT, "po-auto to finish", procs=(proc,))
        late = peer.final("po-late")
        assert peer.final_state("po-late") == ev.EXPIRED
        assert late.reason.startswith("overrun (kill): its first segment could no longer start")
        assert not late.has_response
        wait_for(  # trace events come on their own topic, in no fixed order with the status
            lambda: ev.EXPIRE in [convert.EVENT_KIND_NAME[e.kind] for e in peer.events_of("po-late")],
            WAIT,
            "po-late's EXPIRE trace event",
            procs=(proc,),
        )
        assert not [s for s in peer.segments.get("po_drone", []) if s.task_id == "po-late"]
        # the auto task: the lexical classifier's normal TUF; it ran once the robot was free
        assert peer.final_state("po-auto") == ev.COMPLETED, peer.final("po-auto").reason
        assert [s.index for s in peer.segments["po_drone"] if s.task_id == "po-auto"][:1] == [0]


def test_per_task_overrun_field_kill_expires_and_a_bad_value_is_rejected(tmp_path):
    """``Task.overrun`` overrides the planner's default (``continue`` here): a doomed task asking for
    ``kill`` is EXPIRED with the reason; an unknown strategy is REJECTED naming the field; a doomed
    task without the field (planner default ``continue``) still gets its plan, late."""
    from timely_llm_ros.core import events as ev

    params = {"robot_grace_period": 5.0, "segment_timeout_margin": 30.0}
    with planner_graph(tmp_path, params, {"pt_drone": "done", "pt_drone2": "done"}, "pt_peer") as (
        peer,
        proc,
    ):
        bad = make_task("pt-bad", "pt_drone2")
        bad.overrun = "explode"
        killed = make_task("pt-kill", "pt_drone", tuf=DOOMED)
        killed.overrun = "kill"
        late = make_task("pt-late", "pt_drone2", tuf=DOOMED)  # overrun "": the planner's continue
        for msg in (bad, killed, late):
            peer.task_pub.publish(msg)
        for tid in ("pt-bad", "pt-kill", "pt-late"):
            wait_for(lambda t=tid: peer.final_state(t) is not None, WAIT, f"{tid} to end", procs=(proc,))
        assert peer.final_state("pt-bad") == ev.REJECTED
        assert (
            "overrun must be one of" in peer.final("pt-bad").reason
            and "explode" in peer.final("pt-bad").reason
        )
        assert peer.final_state("pt-kill") == ev.EXPIRED
        assert peer.final("pt-kill").reason.startswith("overrun (kill):")
        assert not [s for s in peer.segments.get("pt_drone", []) if s.task_id == "pt-kill"]
        assert peer.final_state("pt-late") == ev.COMPLETED, peer.final("pt-late").reason
