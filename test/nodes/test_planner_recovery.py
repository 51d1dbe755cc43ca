"""Issue 18, finding 5: a planner that stops never loses its in-flight tasks.

* clean stop (SIGINT): every open task — executing (plan generated, robot busy), queued behind it,
  waiting for its robot node — gets a final status;
* ``kill -9`` + restart: the journal gives every task that was open a final state (FAILED "planner
  restarted"), or (``on_restart: resume``) the rest of its plan is re-planned and the task completes.

Each test runs its own planner process (the journal is per planner); robots are played by the peer.
"""

from __future__ import annotations

import os
import signal
import time

import pytest
from planner_testkit import (
    PLANS,
    Peer,
    is_closing_marker,
    log_text,
    make_task,
    start_node,
    stop_process,
    wait_for,
    write_params,
)

pytestmark = [pytest.mark.ros, pytest.mark.slow]

WAIT = 120.0


task = make_task


def planner(tmp_path, name: str, **extra):
    params = write_params(
        tmp_path / f"{name}.yaml",
        {
            "sim_plans": ["catalog", PLANS],
            "robot_grace_period": 5.0,
            "segment_timeout_margin": 120.0,
            "journal": str(tmp_path / "planner.journal"),
            **extra,
        },
    )
    return start_node("planner", dict(os.environ), tmp_path / f"{name}.log", params_file=params)


def segments_of(peer, agent, task_id):
    with peer.lock:
        return [s for s in peer.segments[agent] if s.task_id == task_id]


def test_a_clean_stop_gives_every_open_task_a_final_status(tmp_path):
    """Before: tasks whose plan was generated but still executing got no final status on Ctrl-C."""
    proc = planner(tmp_path, "clean")
    peer = Peer(robots={"cs_busy": "silent"}, name="cs_peer")
    try:
        peer.wait_planner(procs=(proc,))
        peer.task_pub.publish(task("cs-exec", "cs_busy"))  # one segment: generated, then the robot is busy
        peer.task_pub.publish(task("cs-queued", "cs_busy"))  # queued behind it (one task at a time)
        wait_for(lambda: "EXECUTING" in peer.states("cs-exec"), WAIT, "cs-exec executing", procs=(proc,))
        wait_for(lambda: "QUEUED" in peer.states("cs-queued"), WAIT, "cs-queued queued", procs=(proc,))
        peer.task_pub.publish(task("cs-norobot", "cs_nobody"))  # waits for its robot node (5 s grace)
        time.sleep(1.0)
        assert not segments_of(peer, "cs_busy", "cs-queued")  # never sent while cs-exec runs
        assert stop_process(proc) == 0
        wait_for(
            lambda: all(peer.final_state(t) for t in ("cs-exec", "cs-queued", "cs-norobot")),
            WAIT,
            "final statuses after SIGINT",
        )
        assert peer.final_state("cs-exec") == "FAILED" and peer.final("cs-exec").reason == "planner shut down"
        assert peer.final_state("cs-queued") == "FAILED"
        assert peer.final_state("cs-norobot") == "REJECTED"
        assert (tmp_path / "planner.journal").read_text() != ""  # ended entries, nothing open
        restarted = planner(tmp_path, "clean2")
        wait_for(lambda: "planner ready" in log_text(restarted), WAIT, "restart", procs=(restarted,))
        assert "were open when the planner stopped" not in log_text(restarted)
        assert stop_process(restarted) == 0
    finally:
        peer.close()
        stop_process(proc)


def kill9(proc) -> None:
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)


def test_kill_9_and_restart_fails_every_open_task_with_a_reason(tmp_path):
    """Before: after kill -9, 3 of 13 demo tasks never got a final state."""
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.ros import convert

    proc = planner(tmp_path, "k1")
    peer = Peer(robots={"k9_busy": "silent", "k9_ok": "done"}, name="k9_peer")
    try:
        peer.wait_planner(procs=(proc,))
        peer.task_pub.publish(task("k9-exec", "k9_busy", "[A] Climb, turn and take a picture."))
        peer.task_pub.publish(task("k9-queued", "k9_busy"))
        peer.task_pub.publish(task("k9-done", "k9_ok"))
        wait_for(
            lambda: (
                segments_of(peer, "k9_busy", "k9-exec")
                and peer.final_state("k9-done")
                and "QUEUED" in peer.states("k9-queued")
            ),
            WAIT,
            "tasks in flight",
            procs=(proc,),
        )
        now = time.time()
        nonce = peer.nonce("k9_busy", "k9-exec", 0)
        peer._send(convert.feedback_to_msg("k9-exec", "k9_busy", 0, ev.STARTED, now, nonce=nonce))
        time.sleep(1.0)
        kill9(proc)
        assert peer.final_state("k9-exec") is None and peer.final_state("k9-queued") is None
        proc = planner(tmp_path, "k2")  # on_restart: fail (default)
        wait_for(
            lambda: peer.final_state("k9-exec") and peer.final_state("k9-queued"),
            WAIT,
            "final states after the restart",
            procs=(proc,),
        )
        for task_id in ("k9-exec", "k9-queued"):
            assert peer.final_state(task_id) == "FAILED" and peer.final(task_id).reason == "planner restarted"
        assert peer.states("k9-done").count("COMPLETED") == 1  # a finished task is not touched again
        assert "2 task(s) were open when the planner stopped" in log_text(proc)
        peer.task_pub.publish(task("k9-after", "k9_ok"))  # the restarted planner serves as usual
        wait_for(lambda: peer.final_state("k9-after"), WAIT, "a task after the restart", procs=(proc,))
        assert peer.final_state("k9-after") == "COMPLETED"
    finally:
        peer.close()
        stop_process(proc)


def test_kill_9_and_restart_resumes_the_rest_of_the_plan(tmp_path):
    from timely_llm_ros.core import events as ev
    from timely_llm_ros.ros import convert

    proc = planner(tmp_path, "r1")
    peer = Peer(robots={"rs_bot": "silent"}, name="rs_peer")

    def send(seg, state):
        nonce = peer.nonce("rs_bot", "rs-1", seg)
        peer._send(convert.feedback_to_msg("rs-1", "rs_bot", seg, state, time.time(), 0.01, nonce=nonce))

    try:
        peer.wait_planner(procs=(proc,))
        peer.task_pub.publish(task("rs-1", "rs_bot", "[A] Climb, turn and take a picture."))  # mu; tc; tp
        wait_for(lambda: segments_of(peer, "rs_bot", "rs-1"), WAIT, "segment 0", procs=(proc,))
        send(0, ev.STARTED)
        send(0, ev.DONE)
        wait_for(lambda: len(segments_of(peer, "rs_bot", "rs-1")) >= 2, WAIT, "segment 1", procs=(proc,))
        send(1, ev.STARTED)
        time.sleep(1.0)
        before = [(s.index, s.text) for s in segments_of(peer, "rs_bot", "rs-1")]
        kill9(proc)
        proc = planner(tmp_path, "r2", on_restart="resume")
        wait_for(lambda: "resumed after the restart" in log_text(proc), WAIT, "the resumption", procs=(proc,))
        send(1, ev.DONE)  # the robot finished the segment it held across the restart
        answered = {0, 1}

        def robot_executes_the_rest():  # in order, as a robot does; no feedback for a closing marker
            for s in segments_of(peer, "rs_bot", "rs-1"):
                if s.index not in answered and not is_closing_marker(s):
                    send(s.index, ev.STARTED)
                    send(s.index, ev.DONE)
                    answered.add(s.index)
            return peer.final_state("rs-1")

        wait_for(robot_executes_the_rest, WAIT, "rs-1 final", procs=(proc,))
        assert peer.final_state("rs-1") == "COMPLETED", peer.final("rs-1").reason
        sent = [(s.index, s.text) for s in segments_of(peer, "rs_bot", "rs-1") if not is_closing_marker(s)]
        assert sent[: len(before)] == [b for b in before if b[1]]  # what was sent before the crash, then
        assert [i for i, _ in sent] == list(range(len(sent)))  # the rest, numbered on from there
        assert "".join(t for _, t in sent).replace(" ", "").startswith("mu(50);tc(90);tp()")
        assert [t for _, t in sent].count(before[0][1]) == 1  # nothing was sent twice
    finally:
        peer.close()
        stop_process(proc)
