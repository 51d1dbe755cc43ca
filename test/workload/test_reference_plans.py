"""Every reference plan is a valid program of its skill set and matches its recorded skill sequence."""

from __future__ import annotations

import pytest

from timely_llm_ros.core.skills import load_skill_set
from timely_llm_ros.workload.tasks import load_catalog

VARIANTS = [(t.id, v) for t in load_catalog() for v in t.all_variants()]


@pytest.mark.parametrize("task_id,variant", VARIANTS, ids=[f"{t}-{v.skill_set}" for t, v in VARIANTS])
def test_reference_plan_parses_and_matches_exe_time_detail(task_id, variant):
    skill_set = load_skill_set(variant.skill_set)
    assert skill_set.robot_type == variant.robot_type
    calls = skill_set.parse_plan(variant.plan)
    # The recorded exe_time_detail is attached to the plan's skills in order, so they must agree.
    assert [c.name for c in calls] == variant.skills
