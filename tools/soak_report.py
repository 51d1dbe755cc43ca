"""Bookkeeping and report of a soak run (``make soak``): every task accounted for, RSS over time.

Pure Python (matplotlib only for the PNG): the orchestration in ``tools/soak.py`` feeds it.

Accounting (:class:`Ledger`): each published task is recorded with whether the planner was up
(subscribed to ``/tasks``) when it went out. A task is *final* once a terminal ``TaskStatus``
(COMPLETED / FAILED / EXPIRED / REJECTED / CANCELLED) was observed for it — possibly long after a
planner restart. At the end:

* ``lost`` — published while the planner was up and never final: the run fails on any. Split into
  tasks still open when the planner was killed (a crash-recovery gap) and tasks lost while the
  planner kept running (worse: no crash to blame);
* ``unanswered_while_down`` — published while the planner was down and never answered: nobody was
  listening when they were sent (``/tasks`` is a fire-and-forget topic). The client retries like a
  task publisher must (see ``tools/soak.py``, ``--retry-after``), so with retries on, any such task
  also fails the run;
* ``retried`` — tasks published again (same id) because no status at all came back for them, and
  how many of those then got a final state;
* per final state, counts; per task, publish → final latency.

Memory (:class:`RssLog`): samples of each process's resident set size (``/proc/<pid>/status``
VmRSS) by role (``planner``, ``drone_1``, ``recorder``, ``soak_client`` ...), across restarts.
The *growth* of a role is, over its longest-lived process generation, the RSS at that generation's
end minus its RSS after the warm-up fraction of its lifetime (a restarted process starts afresh, and
starting up is not a leak).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

FINAL_STATES = ("COMPLETED", "FAILED", "EXPIRED", "REJECTED", "CANCELLED")


@dataclass
class _Task:
    t: float
    agent: str
    planner_up: bool
    states: list[str] = field(default_factory=list)
    last_sent: float = math.nan  # the latest (re)publication
    retries: int = 0
    final: str = ""
    final_t: float = math.nan
    reason: str = ""


class Ledger:
    """Published tasks and the statuses seen for them."""

    def __init__(self) -> None:
        self.tasks: dict[str, _Task] = {}
        self.unknown_statuses = 0  # statuses of tasks this run never published (other clients)
        self.repeated_finals = 0  # a second terminal status for a task already final

    def publish(self, task_id: str, t: float, agent: str, planner_up: bool) -> None:
        self.tasks[task_id] = _Task(t, agent, planner_up, last_sent=t)

    def due_retries(self, now: float, after: float, max_retries: int) -> list[str]:
        """Tasks that got no status at all within ``after`` seconds of their latest publication."""
        return [
            tid
            for tid, task in self.tasks.items()
            if not task.states
            and not task.final
            and task.retries < max_retries
            and now - task.last_sent >= after
        ]

    def retried(self, task_id: str, t: float) -> None:
        task = self.tasks[task_id]
        task.retries += 1
        task.last_sent = t

    def status(self, task_id: str, state: str, t: float, reason: str = "") -> None:
        task = self.tasks.get(task_id)
        if task is None:
            self.unknown_statuses += 1
            return
        if len(task.states) < 32:
            task.states.append(state)
        if state in FINAL_STATES:
            if task.final:
                self.repeated_finals += 1
                return
            task.final, task.final_t, task.reason = state, t, reason[:200]

    def open_count(self) -> int:
        return sum(1 for task in self.tasks.values() if not task.final)

    def summary(self, planner_kills: list[float] = ()) -> dict[str, Any]:
        """Counts (see the module docstring); ``planner_kills``: when the planner was killed, to tell
        tasks lost in a crash from tasks lost while the planner kept running."""
        finals = Counter(task.final for task in self.tasks.values() if task.final)
        lost = {tid: task for tid, task in self.tasks.items() if not task.final and task.planner_up}
        crash = {tid for tid, task in lost.items() if any(k >= task.t for k in planner_kills)}
        down = [task for task in self.tasks.values() if not task.planner_up]
        latencies = sorted(task.final_t - task.t for task in self.tasks.values() if task.final)
        reasons = Counter(
            _reason_kind(task.reason)
            for task in self.tasks.values()
            if task.final in ("FAILED", "REJECTED", "EXPIRED")
        )
        return {
            "published": len(self.tasks),
            "final": sum(finals.values()),
            "final_states": dict(sorted(finals.items())),
            "lost": len(lost),
            "lost_after_a_status": sum(1 for task in lost.values() if task.states),
            "lost_never_seen": sum(1 for task in lost.values() if not task.states),
            "lost_open_at_a_planner_kill": len(crash),
            "lost_with_the_planner_running": len(lost) - len(crash),
            "lost_tasks": {
                tid: {
                    "agent": task.agent,
                    "published_s": round(task.t, 2),
                    "states": task.states,
                    "open_at_a_planner_kill": tid in crash,
                }
                for tid, task in list(lost.items())[:50]
            },
            "published_while_planner_down": len(down),
            "answered_while_down": sum(1 for task in down if task.final),
            "unanswered_while_down": sum(1 for task in down if not task.final),
            "retried": sum(1 for task in self.tasks.values() if task.retries),
            "retried_then_final": sum(1 for task in self.tasks.values() if task.retries and task.final),
            "retries": sum(task.retries for task in self.tasks.values()),
            "latency_s": _quantiles(latencies),
            "top_reasons": dict(reasons.most_common(8)),
            "repeated_finals": self.repeated_finals,
            "unknown_statuses": self.unknown_statuses,
        }


def _reason_kind(reason: str) -> str:
    """A reason without its task-specific details, for grouping (first clause, digits dropped)."""
    head = reason.split(":")[0].split(";")[0]
    return "".join("#" if c.isdigit() else c for c in head).strip()[:80] or "(no reason)"


def _quantiles(xs: list[float]) -> dict[str, float]:
    if not xs:
        return {}

    def q(p: float) -> float:
        return round(xs[min(len(xs) - 1, int(p * len(xs)))], 3)

    return {"p50": q(0.5), "p95": q(0.95), "max": round(xs[-1], 3)}


class RssLog:
    """RSS samples by role and process generation."""

    def __init__(self) -> None:
        self.samples: list[tuple[float, str, int, int, float]] = []  # (t, role, generation, pid, MiB)

    def add(self, t: float, role: str, generation: int, pid: int, rss_mib: float) -> None:
        self.samples.append((t, role, generation, pid, rss_mib))

    def roles(self) -> list[str]:
        return sorted({s[1] for s in self.samples})

    def summary(self, warmup_fraction: float, tasks: int) -> dict[str, dict[str, float]]:
        """Per role: restarts, RSS at start / end / max, and the growth of its longest-lived process
        generation (the latest of equally long ones) after that generation's warm-up (a fraction of
        its lifetime). The longest one: a generation restarted just before the end has seen almost
        no tasks, and its flat line would hide the growth of the one before."""
        out = {}
        for role in self.roles():
            mine = [s for s in self.samples if s[1] == role]
            last_gen = max(s[2] for s in mine)
            spans = {
                g: (max(s[0] for s in mine if s[2] == g) - min(s[0] for s in mine if s[2] == g), g)
                for g in {s[2] for s in mine}
            }
            longest = max(spans, key=lambda g: spans[g])
            gen = [s for s in mine if s[2] == longest]
            start = gen[0][0] + warmup_fraction * (gen[-1][0] - gen[0][0])
            after = [s for s in gen if s[0] >= start] or gen
            growth = after[-1][4] - after[0][4]
            slope = _slope([(x[0] / 60.0, x[4]) for x in after])
            out[role] = {
                "restarts": last_gen,
                "start_mib": round(mine[0][4], 1),
                "end_mib": round(mine[-1][4], 1),
                "max_mib": round(max(s[4] for s in mine), 1),
                "growth_after_warmup_mib": round(growth, 1),
                "growth_window_s": round(after[-1][0] - after[0][0], 1),
                "kib_per_task": round(growth * 1024 / tasks, 2) if tasks else 0.0,
                "slope_mib_per_min": round(slope, 3),
            }
        return out


def _slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points (0 for fewer than two distinct x): the trend of RSS
    after warm-up, which end-minus-start growth (one sample each) overstates when RSS wobbles."""
    n = len(points)
    if n < 2:
        return 0.0
    mx = sum(p[0] for p in points) / n
    my = sum(p[1] for p in points) / n
    sxx = sum((p[0] - mx) ** 2 for p in points)
    return sum((p[0] - mx) * (p[1] - my) for p in points) / sxx if sxx > 0 else 0.0


def rss_mib(pid: int) -> float | None:
    """Resident set size of a process in MiB (None if it is gone)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024.0
    except (OSError, ValueError, IndexError):
        return None
    return None


def table(summary: dict[str, Any], rss: dict[str, dict[str, float]], events: list[dict]) -> str:
    """The human-readable report printed at the end of a run."""
    s = summary
    lines = [
        f"published {s['published']}   final {s['final']}   LOST {s['lost']} "
        f"(after a status {s['lost_after_a_status']}, never seen {s['lost_never_seen']}; open at a planner "
        f"kill {s['lost_open_at_a_planner_kill']}, with the planner running {s['lost_with_the_planner_running']})",
        "final states: " + (", ".join(f"{k} {v}" for k, v in s["final_states"].items()) or "-"),
        f"published while the planner was down: {s['published_while_planner_down']} "
        f"(answered {s['answered_while_down']}, unanswered {s['unanswered_while_down']})",
        f"re-published after no status at all: {s.get('retried', 0)} tasks ({s.get('retries', 0)} times; "
        f"final afterwards {s.get('retried_then_final', 0)})",
        f"publish -> final status latency (s): {s['latency_s'] or '-'}",
    ]
    if s["top_reasons"]:
        lines.append("most frequent failure reasons:")
        lines += [f"  {n:6d}  {r}" for r, n in s["top_reasons"].items()]
    kills = Counter(e["target"] for e in events if e["event"] == "kill")
    if kills:
        lines.append("kill -9: " + ", ".join(f"{k} x{v}" for k, v in sorted(kills.items())))
    lines.append("")
    lines.append(
        f"{'process':<14}{'restarts':>9}{'start MiB':>11}{'end MiB':>9}{'max MiB':>9}"
        f"{'growth MiB':>12}{'window s':>10}{'KiB/task':>10}{'MiB/min':>9}"
    )
    for role, r in rss.items():
        lines.append(
            f"{role:<14}{r['restarts']:>9}{r['start_mib']:>11.1f}{r['end_mib']:>9.1f}"
            f"{r['max_mib']:>9.1f}{r['growth_after_warmup_mib']:>12.1f}"
            f"{r['growth_window_s']:>10.0f}{r['kib_per_task']:>10.2f}"
            f"{r.get('slope_mib_per_min', 0.0):>9.3f}"
        )
    return "\n".join(lines)


def write_json(path: Path, report: dict[str, Any]) -> None:
    path.write_text(json.dumps(report, indent=1, sort_keys=False, default=str) + "\n", encoding="utf-8")


def write_png(path: Path, rss: RssLog, events: list[dict], title: str) -> None:
    """RSS of every process over time, one line per role, kills marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(10, 5))
    for role in rss.roles():
        pts = [(s[0], s[4]) for s in rss.samples if s[1] == role]
        ax.plot([p[0] for p in pts], [p[1] for p in pts], label=role, linewidth=1.2)
    for e in events:
        if e["event"] == "kill":
            ax.axvline(e["t"], color="red", alpha=0.25, linewidth=0.8)
    ax.set_xlabel("time since start (s); red lines: kill -9")
    ax.set_ylabel("RSS (MiB)")
    ax.set_title(title)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
