"""Crash-recovery journal of the planner's open tasks.

Before it, a planner killed with ``kill -9`` forgot its in-flight tasks: they never got a final
state and a restarted planner knew nothing of them. The journal is a small append-only log, one JSON
object per line:

====================  ========================================================================  =====
entry                 written when                                                              fsync
====================  ========================================================================  =====
``accept``            a task is accepted (its fields, arrival as wall-clock seconds)            yes
``segment``           a segment is dispatched to the robot (text, execution-time estimates)    no
``start`` / ``done``  the robot reports STARTED / DONE of a segment (wall-clock seconds)         no
``end``               the task is terminal (state, reason)                                      yes
====================  ========================================================================  =====

fsync at task boundaries (accept, end) makes sure that no accepted task is lost by a crash of the
machine; progress lines are written (flushed to the OS) at once, so a crash of the *process* —
the common case — loses nothing either. A torn last line (power loss mid-write) is skipped.

:meth:`Journal.open` reads what a previous run left: the tasks accepted and not ended (with the
segments their robot received and what it reported), then rewrites the file to hold only those
(compaction); the file is compacted again whenever it grows beyond ``compact_bytes``, so it stays
small on a planner that runs for months. A lock file (``<path>.lock``, ``flock``) keeps a second
planner from sharing the journal.

Pure Python (json, fcntl, os): the ROS planner node decides what to do with the recovered tasks
(re-plan the rest, or end them FAILED "planner restarted").
"""

from __future__ import annotations

import fcntl
import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

# The reason a task left open by a previous run ends with (alone, or with what stood in the way).
RESTARTED = "planner restarted"

COMPACT_BYTES = 8 << 20


class JournalError(RuntimeError):
    """The journal cannot be used (locked by another planner, not writable); the message says how."""


@dataclass
class JournalSegment:
    text: str
    min_exec: float
    expected_exec: float
    started: float = math.nan  # wall clock
    done: float = math.nan


@dataclass
class OpenTask:
    """A task a previous run accepted and never ended."""

    task: dict[str, Any]  # the fields written by Journal.accepted
    segments: list[JournalSegment] = field(default_factory=list)

    @property
    def task_id(self) -> str:
        return str(self.task.get("task_id", ""))


def default_path(node_name: str = "planner", domain_id: str | int | None = None) -> Path:
    """``$ROS_HOME/timely_llm_ros/<domain>_<node>.journal`` (ROS_HOME defaults to ~/.ros, as for ROS
    logs; ``domain_id`` defaults to $ROS_DOMAIN_ID or 0): planners of different fleets (domains) on one
    machine never share a journal."""
    home = os.environ.get("ROS_HOME") or os.path.join(os.path.expanduser("~"), ".ros")
    domain = domain_id if domain_id is not None else (os.environ.get("ROS_DOMAIN_ID") or "0")
    name = node_name.strip("/").replace("/", ".") or "planner"
    return Path(home) / "timely_llm_ros" / f"{domain}_{name}.journal"


class Journal:
    """See the module docstring. Not thread-safe: one thread writes (the planner thread)."""

    def __init__(self, path: str | Path, compact_bytes: int = COMPACT_BYTES) -> None:
        self.path = Path(path).expanduser()
        self.compact_bytes = compact_bytes
        self._file: Any = None
        self._lock: Any = None
        self._lines: dict[str, list[str]] = {}  # open task -> its lines (for compaction)
        self.stats = {"accepted": 0, "ended": 0, "compactions": 0, "skipped_lines": 0}

    # -- start-up -------------------------------------------------------------------------------
    def open(self) -> list[OpenTask]:
        """Lock, read the previous run's open tasks, compact, and open for appending."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._lock = open(self.path.with_name(self.path.name + ".lock"), "a+")  # noqa: SIM115
        except OSError as exc:
            raise JournalError(f"journal {self.path}: cannot create it: {exc.strerror or exc}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._lock.close()
            self._lock = None
            raise JournalError(
                f"journal {self.path} is in use by another planner; give each planner its "
                "own (parameter 'journal')"
            ) from None
        recovered = self._read()
        self._compact()
        return recovered

    def _read(self) -> list[OpenTask]:
        tasks: dict[str, OpenTask] = {}
        try:
            text = self.path.read_text(encoding="utf-8", errors="replace")
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise JournalError(f"journal {self.path}: cannot read it: {exc.strerror or exc}") from None
        for line in text.splitlines():
            try:
                entry = json.loads(line)
                self._replay(entry, tasks, line)
            except (ValueError, TypeError, KeyError, IndexError, AttributeError):
                self.stats["skipped_lines"] += 1  # torn or foreign line: never fatal
        return list(tasks.values())

    def _replay(self, e: dict[str, Any], tasks: dict[str, OpenTask], line: str) -> None:
        kind, tid = e["e"], str(e["id"])
        if kind == "accept":
            tasks[tid] = OpenTask(dict(e["task"]))
            self._lines[tid] = [line]
            return
        if tid not in tasks:
            return
        if kind == "end":
            del tasks[tid]
            self._lines.pop(tid, None)
            return
        task = tasks[tid]
        if kind == "segment":
            task.segments.append(JournalSegment(str(e["text"]), float(e["min"]), float(e["exp"])))
        elif kind in ("start", "done"):
            seg = task.segments[int(e["seg"])]
            if kind == "start":
                seg.started = float(e["t"])
            else:
                seg.done = float(e["t"])
        self._lines[tid].append(line)

    def _compact(self) -> None:
        """Rewrite the file with the open tasks' lines only (atomic rename), then append to it."""
        if self._file is not None:
            self._file.close()
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            with open(tmp, "w", encoding="utf-8") as f:
                for lines in self._lines.values():
                    f.writelines(line + "\n" for line in lines)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.path)
            self._file = open(self.path, "a", encoding="utf-8")  # noqa: SIM115
        except OSError as exc:
            raise JournalError(f"journal {self.path}: cannot write it: {exc.strerror or exc}") from None
        self.stats["compactions"] += 1

    # -- entries --------------------------------------------------------------------------------
    def accepted(self, task_id: str, task: dict[str, Any]) -> None:
        self._write(task_id, {"e": "accept", "id": task_id, "task": task}, sync=True, new=True)
        self.stats["accepted"] += 1

    def segment(self, task_id: str, seg: int, text: str, min_exec: float, expected_exec: float) -> None:
        self._write(
            task_id,
            {"e": "segment", "id": task_id, "seg": seg, "text": text, "min": min_exec, "exp": expected_exec},
        )

    def started(self, task_id: str, seg: int, t_wall: float) -> None:
        self._write(task_id, {"e": "start", "id": task_id, "seg": seg, "t": t_wall})

    def done(self, task_id: str, seg: int, t_wall: float) -> None:
        self._write(task_id, {"e": "done", "id": task_id, "seg": seg, "t": t_wall})

    def ended(self, task_id: str, state: str, reason: str = "") -> None:
        if task_id not in self._lines:
            return
        self._write(task_id, {"e": "end", "id": task_id, "state": state, "reason": reason}, sync=True)
        del self._lines[task_id]
        self.stats["ended"] += 1
        if self._file is not None and self._file.tell() > self.compact_bytes:
            self._compact()

    def open_count(self) -> int:
        return len(self._lines)

    def _write(self, task_id: str, entry: dict[str, Any], sync: bool = False, new: bool = False) -> None:
        if self._file is None:
            raise JournalError("journal is not open")
        if not new and task_id not in self._lines:
            return  # a task the journal does not follow (never accepted here)
        line = json.dumps(entry, separators=(",", ":"))  # ASCII: any str (even a lone surrogate) fits
        self._file.write(line + "\n")
        self._file.flush()
        if sync:
            os.fsync(self._file.fileno())
        self._lines.setdefault(task_id, []).append(line)

    def close(self) -> None:
        if self._file is not None:
            self._file.flush()
            os.fsync(self._file.fileno())
            self._file.close()
            self._file = None
        if self._lock is not None:
            self._lock.close()  # releases the flock
            self._lock = None


# ----------------------------------------------------------------------------- task <-> journal entry
def task_entry(spec: Any, arrival_wall: float) -> dict[str, Any]:
    """The fields of a :class:`~timely_llm_ros.core.task.TaskSpec` a restarted planner needs."""
    return {
        "task_id": spec.task_id,
        "agent_id": spec.agent_id,
        "robot_type": spec.robot_type,
        "skill_set": spec.skill_set,
        "instruction": spec.instruction,
        "scene": spec.scene or "",
        # None: sent without a TUF; a restarted planner derives it again (planner option urgency)
        "tuf": None if spec.tuf is None else [spec.tuf.ert, spec.tuf.alpha, spec.tuf.beta],
        "max_tokens": spec.max_tokens,
        "task_class": spec.task_class or "",
        "trace_id": spec.trace_id,
        "arrival": arrival_wall,
        "overrun": spec.overrun or "",
    }


def task_from_entry(entry: dict[str, Any], arrival: float) -> Any:
    """A TaskSpec again (``arrival`` on the new planner's clock); ValueError/TypeError if malformed."""
    from timely_llm_ros.core.task import TaskSpec
    from timely_llm_ros.core.tuf import TUF

    tuf = None if entry["tuf"] is None else TUF(*(float(v) for v in entry["tuf"]))
    trace = entry.get("trace_id")
    return TaskSpec(
        task_id=str(entry["task_id"]),
        agent_id=str(entry["agent_id"]),
        robot_type=str(entry["robot_type"]),
        skill_set=str(entry["skill_set"]),
        instruction=str(entry["instruction"]),
        tuf=tuf,
        arrival=float(arrival),
        scene=str(entry.get("scene") or ""),
        max_tokens=int(entry["max_tokens"]),
        task_class=str(entry.get("task_class") or ""),
        trace_id=int(trace) if trace else None,
        overrun=str(entry.get("overrun") or ""),
    )
