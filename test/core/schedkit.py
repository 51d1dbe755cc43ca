"""Shared factory for scheduler and policy tests: a queued Generation with chosen TUF, segment and memory.

Imported by test_scheduler.py and test_policy_timely.py (pytest puts this folder on sys.path)."""

from __future__ import annotations

from timely_llm_ros.core.generation import Generation, TaskRecord
from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.core.task import TaskSpec
from timely_llm_ros.core.tuf import NORMAL_TUF

NET = 0.008  # planner -> robot latency used by the tests (paper §7.2)
_ids = iter(range(10**6))


def gen(arrival=0.0, tuf=NORMAL_TUF, k=0, ref=None, seg_tokens=0, mem=100, sset="tello_minispec"):
    """A generation of a fresh task; ``k > 0`` makes it a suspended one whose reference time is ``ref``."""
    s = load_skill_set(sset)
    i = next(_ids)
    spec = TaskSpec(
        task_id=f"t{i}",
        agent_id="a",
        robot_type=s.robot_type,
        skill_set=s.name,
        instruction="x",
        tuf=tuf,
        arrival=arrival,
    )
    g = Generation(i, spec, TaskRecord.from_spec(spec), s, NET)
    if k:
        g.k, g.ert_k, g.ref = k, 0.0, ref
    g.seg_tokens = seg_tokens
    g.mem_need = mem
    return g
