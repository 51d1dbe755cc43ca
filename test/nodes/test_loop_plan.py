"""A loop split over two segments ends COMPLETED: the planner's execution-time estimate of each
segment agrees with what the drone's streaming interpreter runs.

The embedded LLM (SmolLM2 on llama.cpp) wrote ``10{tc(90);tp}`` for a "look around" task; the stop
checker cuts it into ``10{tc(90)`` and ``;tp}``. The drone turns once when the first segment arrives
and runs the picture plus nine more turns and pictures at the closing ``}`` of the second. When the
planner priced each segment's text alone it gave the first segment ten turns and the second a
picture (timeout = factor × 0.001 s + margin), failed the task while the drone was still turning,
and the drone finished later. Here the planner (simulated engine emitting exactly that plan), a
simulated drone and a workload node run as OS processes on real DDS (``timely-llm fleet``); the
timeout margin is small and the drone slow enough that the old estimate would time out the second
segment, so the test fails without the fix. Outcomes only; bounds are generous.
"""

from __future__ import annotations

import pytest
from planner_testkit import run_fleet

RUN_TIMEOUT = 240.0
PLAN = "10{tc(90);tp}"
WORKLOAD = f"""
name: loop
tasks:
  - {{task_id: loop-1, arrival: 0.0, agent: drone_1, robot_type: drone, skill_set: tello_minispec,
     tuf: [1, 1, 1.5], instruction: "[A] Look around in ten steps and take a picture after each.",
     plan: "{PLAN}", exec_times: [[tc, 2.27], [tp, 0.001]]}}
"""


def _one_drone_fleet(wl, tmp_path, time_scale: float, **planner) -> dict:
    """Planner (sim engine on the workload's plans), one sim drone, the recorder, the workload node."""
    return {
        "planner": {
            "parameters": {"engine": "sim", "sim_plans": [str(wl)], "robot_grace_period": 20.0, **planner}
        },
        "robot_defaults": {"drone": {"backend": "sim", "exec_mode": "min", "time_scale": time_scale}},
        "robots": [{"agent": "drone_1", "type": "drone"}],
        "timemodel": {"enabled": False},
        "recorder": {"enabled": True, "parameters": {"output": str(tmp_path / "bag")}},
        "workload": {
            "enabled": True,
            "parameters": {
                "workload": str(wl),
                "exit_when_done": True,
                "completion_timeout": 120.0,
                "discovery_timeout": 180.0,
            },
        },
    }


@pytest.mark.ros
def test_a_loop_split_over_two_segments_completes(tmp_path):
    from timely_llm_ros.core.skills import load_skill_set

    assert load_skill_set("tello_minispec").split(PLAN) == ["10{tc(90)", ";tp}"]  # the finding's cut
    wl = tmp_path / "loop.yaml"
    wl.write_text(WORKLOAD)
    # tc(90) takes 2.269 s in the model: 0.45 s at this scale, so the nine replayed turns of the
    # second segment (~4 s) outlast the old estimate's timeout (1.5 × 0.001 s + 1 s)
    cfg = _one_drone_fleet(wl, tmp_path, 0.2, segment_timeout_factor=1.5, segment_timeout_margin=1.0)
    rc, text, summary = run_fleet(cfg, tmp_path, RUN_TIMEOUT)
    assert summary["final"] == {"COMPLETED": 1}, text[-6000:]
    assert rc == 0, text[-6000:]

    from timely_llm_ros.lrtrace.bagread import read_bag

    bags = [p.parent for p in (tmp_path / "bag").rglob("metadata.yaml")] or [tmp_path / "bag"]
    segments = [m for _topic, _t, m in read_bag(bags[0]).by_type("timely_llm_ros/msg/Segment")]
    texts = [m.text for m in segments]
    assert texts[:2] == ["10{tc(90)", ";tp}"], texts
    one_turn = 0.0165 * 90 + 0.784  # config/exec_time/drone.yaml
    est = [m.exec_time_min for m in segments[:2]]
    assert est[0] == pytest.approx(one_turn, rel=1e-3)  # the live first turn only
    assert est[1] == pytest.approx(9 * one_turn + 10 * 0.001, rel=1e-3)  # picture + 9 × (turn, picture)


TAIL_PLAN = "2{mf(50);tc(90)}"


@pytest.mark.ros
def test_a_loop_closed_by_a_call_less_tail_runs_its_full_count_on_the_drone(tmp_path):
    """``2{mf(50);tc(90)}``: the closing ``}`` comes after the last call. It used to be replaced by a
    text-less closing marker, so the drone received ``2{mf(50);tc(90)`` and flew the body once; now
    ``}`` is a real final segment with feedback and the drone's backend runs four calls."""
    from timely_llm_ros.core.skills import load_skill_set

    assert load_skill_set("tello_minispec").split(TAIL_PLAN) == ["2{mf(50)", ";tc(90)", "}"]
    wl = tmp_path / "tail.yaml"
    wl.write_text(
        WORKLOAD.replace("loop-1", "tail-1")
        .replace(PLAN, TAIL_PLAN)
        .replace("[[tc, 2.27], [tp, 0.001]]", "[[mf, 2.0], [tc, 2.27], [mf, 2.0], [tc, 2.27]]")
    )
    rc, text, summary = run_fleet(_one_drone_fleet(wl, tmp_path, 0.05), tmp_path, RUN_TIMEOUT)
    assert summary["final"] == {"COMPLETED": 1}, text[-6000:]
    assert rc == 0, text[-6000:]
    assert "backend {'calls': 4," in text, text[-6000:]  # mf, tc live + mf, tc replayed at the '}'

    from timely_llm_ros.lrtrace.bagread import read_bag
    from timely_llm_ros.msg import SegmentFeedback

    bag = read_bag(([p.parent for p in (tmp_path / "bag").rglob("metadata.yaml")] or [tmp_path / "bag"])[0])
    segments = [m for _topic, _t, m in bag.by_type("timely_llm_ros/msg/Segment")]
    assert [m.text for m in segments] == ["2{mf(50)", ";tc(90)", "}"]
    assert [m.final for m in segments] == [False, False, True]
    done = {
        m.index
        for _topic, _t, m in bag.by_type("timely_llm_ros/msg/SegmentFeedback")
        if m.state == SegmentFeedback.DONE
    }
    assert done == {0, 1, 2}  # the tail got its own feedback (a closing marker gets none)
