"""The tello backend (djitellopy 2.5.0) against the SDK emulator over real UDP, in network namespaces.

Checks the exact SDK command strings, splitting of long motions, take-off/landing, keep-alive (and
what happens without it), retries on ``error``, a timed-out motion that must not be re-sent, lost
replies judged from the state stream, and resynchronisation after an unsolicited reply. The
emulator runs scaled in time; assertions are on outcomes and command logs, never on durations.
"""

from __future__ import annotations

import json
import select
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("djitellopy", reason="the tello backend tests need djitellopy==2.5.0 in this environment")

pytestmark = pytest.mark.slow

HERE = Path(__file__).resolve().parent
EMULATOR = [sys.executable, "-m", "timely_llm_ros.robots.tello_emulator", "--host", "192.168.10.1"]
TIMEOUT_S = 90


def start_emulator(pair, log: Path, *extra: str) -> subprocess.Popen:
    proc = pair.popen(
        pair.drone_ns,
        [*EMULATOR, "--log", str(log), "--time-scale", "0.05", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""
    assert line.strip() == "READY", (
        f"emulator did not start: {line!r}{proc.stdout.read() if proc.poll() else ''}"
    )
    return proc


def drive(pair, steps: list[dict], **backend) -> dict:
    spec = json.dumps({"backend": backend, "steps": steps})
    proc = pair.popen(
        pair.host_ns,
        [sys.executable, str(HERE / "tello_peer.py"), spec],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    out, _ = proc.communicate(timeout=TIMEOUT_S)
    lines = [ln for ln in out.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"driver printed no result:\n{out}"
    result = json.loads(lines[-1][len("RESULT ") :])
    assert result["error"] is None, f"driver error: {result['error']}\n{out}"
    return result


def emu_log(log: Path) -> list[dict]:
    return [json.loads(line) for line in log.read_text().splitlines()]


def received(log: Path) -> list[str]:
    return [e["cmd"] for e in emu_log(log) if e["event"] == "rx"]


def seg(task: str, index: int, text: str, final: bool = False) -> dict:
    return {"segment": [task, index, text, final]}


def test_skills_become_exact_sdk_commands_with_takeoff_splitting_and_landing(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log)
    plan = ["mf(100);", "tc(90);", "mu(400);", "tc(360);", "d(0.2);", "mb(20);", "tu(5)"]
    res = drive(netns_pair, [seg("t", i, s, i == len(plan) - 1) for i, s in enumerate(plan)])
    assert all(o["ok"] for o in res["outcomes"]), res["outcomes"]
    # up/down split at 255 cm and turns at 255 degrees: the fitted models' 5 s command budget
    assert received(log) == [
        "command",
        "takeoff",
        "forward 100",
        "cw 90",
        "up 200",
        "up 200",
        "cw 180",
        "cw 180",
        "back 20",
        "ccw 5",
        "land",
    ]
    stop = [e for e in emu_log(log) if e["event"] == "reply"]
    assert all(e["reply"] == "ok" for e in stop)
    assert res["status"]["airborne"] is False and res["status"]["takeoffs"] == 1


def test_perception_skills_fail_the_segment_before_anything_moves(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log)
    res = drive(netns_pair, [seg("t", 0, "?iv('cat')==True{"), seg("u", 0, "tp")])
    for out in res["outcomes"]:
        assert not out["ok"] and "perception and camera skills" in out["detail"]
    assert received(log) == ["command"]  # no take-off for work it cannot do


def test_keepalive_keeps_the_drone_flying_while_idle(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log, "--idle-land-s", "1.5")
    res = drive(
        netns_pair, [seg("t", 0, "mf(50);"), {"idle": 4.0}, seg("t", 1, "tc(30)", True)], keepalive_s=0.5
    )
    assert all(o["ok"] for o in res["outcomes"]), res["outcomes"]
    events = emu_log(log)
    assert not [e for e in events if e["event"] == "auto_land"]
    cmds = received(log)
    assert cmds.count("battery?") >= 3 and cmds.count("takeoff") == 1
    assert res["status"]["keepalive_failures"] == 0


def test_without_keepalive_the_drone_lands_and_is_taken_off_again(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log, "--idle-land-s", "1.0")
    res = drive(
        netns_pair, [seg("t", 0, "mf(50);"), {"idle": 3.0}, seg("t", 1, "tc(30)", True)], keepalive_s=12.0
    )
    assert all(o["ok"] for o in res["outcomes"]), res["outcomes"]
    assert [e for e in emu_log(log) if e["event"] == "auto_land"]
    assert received(log).count("takeoff") == 2
    assert "landed by itself" in res["outcomes"][1]["detail"]


def test_error_replies_are_resent_up_to_retry_count(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log, "--error", "forward:2", "--error", "back:3")
    res = drive(
        netns_pair,
        [seg("a", 0, "mf(100)", True), seg("b", 0, "mb(50)", True)],
        retry_count=3,
        retry_delay_s=0.1,
    )
    ok, failed = res["outcomes"]
    assert ok["ok"]
    assert not failed["ok"] and "answered 'error' to 'back 50' 3 time(s)" in failed["detail"]
    cmds = received(log)
    assert cmds.count("forward 100") == 3 and cmds.count("back 50") == 3


def test_a_timed_out_motion_is_not_resent_and_its_late_reply_shifts_nothing(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    # forward takes 2.5 s, the driver waits 1 s for replies: djitellopy alone would re-send it
    start_emulator(netns_pair, log, "--slow", "forward:2.5")
    res = drive(
        netns_pair,
        [seg("t", 0, "mf(100);"), seg("t", 1, "tc(90);"), {"idle": 0.5}, seg("t", 2, "mu(30)", True)],
        response_timeout_s=1.0,
        late_reply_s=4.0,
        keepalive_s=0.2,
    )
    assert all(o["ok"] for o in res["outcomes"]), res["outcomes"]
    assert "late reply 'ok'" in res["outcomes"][0]["detail"]
    cmds = received(log)
    assert cmds.count("forward 100") == 1
    assert res["status"]["late_replies"] == 1 and res["status"]["shifted_replies"] == 0
    assert res["status"]["keepalive_failures"] == 0  # the battery? queries got numbers: in sync


def test_lost_replies_are_judged_from_the_state_stream(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log, "--drop-reply", "up:1", "--drop-reply", "cw:1", "--drop-reply", "left:1")
    res = drive(
        netns_pair,
        [seg("a", 0, "mu(50);tc(90)", True), seg("b", 0, "ml(60)", True)],
        response_timeout_s=1.0,
        late_reply_s=0.5,
    )
    vertical_and_turn, horizontal = res["outcomes"]
    assert vertical_and_turn["ok"], vertical_and_turn
    assert vertical_and_turn["detail"].count("state stream shows it was executed") == 2
    assert not horizontal["ok"] and "cannot be verified" in horizontal["detail"]
    cmds = received(log)
    assert cmds.count("up 50") == 1 and cmds.count("cw 90") == 1 and cmds.count("left 60") == 1


def test_an_unsolicited_reply_is_drained_before_the_next_command(netns_pair, tmp_path):
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log, "--spurious-ok", "cw")
    res = drive(
        netns_pair, [seg("t", 0, "tc(90);"), {"idle": 1.0}, seg("t", 1, "mf(30)", True)], keepalive_s=0.3
    )
    assert all(o["ok"] for o in res["outcomes"]), res["outcomes"]
    assert res["status"]["stale_replies"] >= 1
    assert res["status"]["keepalive_failures"] == 0
    spurious = [e for e in emu_log(log) if e.get("spurious")]
    assert len(spurious) == 1  # the emulator really sent the extra 'ok' the driver had to drain


def test_an_interrupt_sends_stop_at_once_and_nothing_more_of_the_segment(netns_pair, tmp_path):
    """Liveness: the planner timed the task out; the drone must hover, not finish the motion."""
    log = tmp_path / "emu.jsonl"
    start_emulator(netns_pair, log, "--slow", "forward:6")
    res = drive(
        netns_pair,
        [{"interrupt": ["t", 0, "mf(100);mf(100)", False, 1.5]}, seg("u", 0, "tc(30)", True)],
    )
    stopped, after = res["outcomes"]
    assert not stopped["ok"] and "interrupted: the planner marked the task FAILED: test" in stopped["detail"]
    assert after["ok"], after
    cmds = received(log)
    assert cmds[cmds.index("forward 100") + 1] == "stop"  # sent while the motion was still going
    assert cmds.count("forward 100") == 1 and cmds.count("takeoff") == 1 and cmds.count("cw 30") == 1
    replies = {(e["cmd"], e["reply"]) for e in emu_log(log) if e["event"] == "reply"}
    assert ("forward 100", "error") in replies and ("stop", "ok") in replies  # cut short, hovering
    assert res["status"]["stops"] == 1 and res["status"]["airborne"] is False  # landed at close
