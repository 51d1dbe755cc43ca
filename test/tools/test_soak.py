"""The soak harness (``make soak``, tools/soak*.py): its accounting, and a short real run.

The real run is a smoke test of the harness itself (a few dozen tasks, robot and recorder kills), so
that the 10-minute soak the lead runs does not rot: it must account for every task and write its
report. Kills of the planner are left to ``make soak`` (they need the planner's crash recovery).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

TOOLS = Path(__file__).resolve().parents[2] / "tools"
sys.path.insert(0, str(TOOLS))

from soak_report import Ledger, RssLog, table  # noqa: E402


def test_ledger_counts_lost_separately_from_tasks_sent_while_the_planner_was_down():
    led = Ledger()
    led.publish("a", 0.0, "drone_1", True)
    led.publish("b", 0.1, "drone_1", True)
    led.publish("c", 0.2, "arm_1", False)  # nobody listened
    led.publish("d", 0.3, "arm_1", False)
    led.publish("e", 0.4, "arm_1", True)
    led.status("a", "ACCEPTED", 0.5)
    led.status("a", "COMPLETED", 2.0)
    led.status("a", "FAILED", 2.5, "late duplicate")  # a second final does not count twice
    led.status("b", "QUEUED", 0.6)
    led.status("c", "REJECTED", 9.0, "no robot node for agent 'arm_1' within 5 s")
    led.status("zz", "COMPLETED", 1.0)
    s = led.summary(planner_kills=[0.35])
    assert s["published"] == 5 and s["final"] == 2
    assert s["final_states"] == {"COMPLETED": 1, "REJECTED": 1}
    assert s["lost"] == 2 and s["lost_after_a_status"] == 1 and s["lost_never_seen"] == 1
    assert set(s["lost_tasks"]) == {"b", "e"}
    assert s["lost_open_at_a_planner_kill"] == 1 and s["lost_with_the_planner_running"] == 1  # b / e
    assert (s["published_while_planner_down"], s["answered_while_down"], s["unanswered_while_down"]) == (
        2,
        1,
        1,
    )
    assert s["repeated_finals"] == 1 and s["unknown_statuses"] == 1
    assert s["latency_s"]["max"] == 8.8 and s["top_reasons"] == {
        "no robot node for agent 'arm_#' within # s": 1
    }
    assert led.open_count() == 3


def test_rss_growth_is_measured_on_the_last_generation_after_its_warm_up():
    rss = RssLog()
    for t in range(0, 101, 10):  # generation 0 grows, then is killed at 100 s
        rss.add(float(t), "planner", 0, 10, 50.0 + t)
    for t in range(110, 211, 10):  # generation 1: start-up to 80 MiB, then flat
        rss.add(float(t), "planner", 1, 11, 80.0 if t > 120 else 40.0)
    s = rss.summary(warmup_fraction=0.2, tasks=1000)["planner"]
    assert s["restarts"] == 1 and s["max_mib"] == 150.0 and s["growth_after_warmup_mib"] == 0.0
    assert s["start_mib"] == 50.0 and s["end_mib"] == 80.0
    assert s["slope_mib_per_min"] == 0.0  # least squares after the warm-up: flat
    grow = RssLog()
    for t in range(0, 601, 30):  # 1 MiB per minute, with a 3 MiB wobble
        grow.add(float(t), "recorder", 0, 12, 100.0 + t / 60.0 + (3.0 if t % 60 else 0.0))
    slope = grow.summary(warmup_fraction=0.2, tasks=10)["recorder"]["slope_mib_per_min"]
    assert slope == pytest.approx(1.0, abs=0.1)
    text = table(Ledger().summary(), {"planner": s}, [{"event": "kill", "target": "planner", "t": 100}])
    assert "planner x1" in text and "LOST 0" in text


@pytest.mark.ros
@pytest.mark.slow
def test_a_short_soak_with_robot_and_recorder_kills_accounts_for_every_task(tmp_path):
    out = tmp_path / "soak"
    res = subprocess.run(
        [
            sys.executable,
            str(TOOLS / "soak.py"),
            "--rate",
            "2",
            "--minutes",
            "0.25",
            "--drones",
            "1",
            "--arms",
            "1",
            "--kill-every",
            "6",
            "--kill-targets",
            "robot,recorder",
            "--restart-delay",
            "1",
            "--drain",
            "150",
            "--sample-period",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]
    report = json.loads((out / "soak.json").read_text())
    acc = report["accounting"]
    assert acc["published"] == 30 and acc["final"] == 30 and acc["lost"] == 0
    assert any(e["event"] == "kill" for e in report["events"])
    assert all(e["ready"] for e in report["events"] if e["event"] == "restart")
    assert {"planner", "drone_1", "arm_1", "recorder", "soak_client"} <= set(report["rss_summary"])
    assert (out / "rss.png").stat().st_size > 10_000
    assert "SOAK PASSED" in res.stdout
    recorder = [e for e in report["events"] if e.get("target") == "recorder" and e["event"] == "restart"]
    last = out / "bags" / f"bag_{len(recorder)}"  # each recorder generation records into a new bag
    assert (last / "metadata.yaml").is_file()


def test_tasks_without_any_status_are_due_for_a_retry_and_counted():
    """/tasks is a topic: a task sent while no planner listened is gone; the client re-publishes a
    task that got no status at all (the 10-minute soak lost 54 of 64 such tasks without it)."""
    led = Ledger()
    led.publish("seen", 0.0, "drone_1", True)
    led.publish("down", 1.0, "drone_1", False)
    led.publish("young", 15.0, "drone_1", True)
    led.status("seen", "ACCEPTED", 0.5)
    assert led.due_retries(now=21.0, after=20.0, max_retries=2) == ["down"]
    led.retried("down", 21.0)
    assert led.due_retries(now=30.0, after=20.0, max_retries=2) == []  # 20 s from the retry
    assert led.due_retries(now=41.0, after=20.0, max_retries=2) == ["down", "young"]
    led.retried("down", 41.0)
    assert led.due_retries(now=99.0, after=20.0, max_retries=2) == ["young"]  # at most max_retries
    led.status("down", "COMPLETED", 45.0)
    s = led.summary()
    assert (s["retried"], s["retries"], s["retried_then_final"]) == (1, 2, 1)
    assert s["unanswered_while_down"] == 0 and "re-published after no status at all: 1 tasks" in table(
        s, {}, []
    )


def test_rss_growth_is_taken_from_the_longest_lived_generation():
    """A planner restarted 10 s before the end is flat: the generation before it shows the growth."""
    rss = RssLog()
    for t in range(0, 301, 10):
        rss.add(float(t), "planner", 0, 10, 80.0 + t / 100)  # +3 MiB over 300 s
    for t in range(310, 321, 10):
        rss.add(float(t), "planner", 1, 11, 79.0)
    s = rss.summary(warmup_fraction=0.2, tasks=600)["planner"]
    assert s["restarts"] == 1 and s["growth_after_warmup_mib"] == 2.4 and s["growth_window_s"] == 240.0
