"""config/params/<node>.yaml: every key is a declared parameter of that node, of its type, with its
current default — so the launch file's first parameter layer can never break or silently change a
node (the fleet YAML, params_file and launch arguments are what override defaults)."""

from __future__ import annotations

import pytest
import yaml

pytestmark = pytest.mark.ros


def _declared() -> dict[str, dict]:
    from timely_llm_ros.nodes import drone, recorder, replay, timemodel, workload
    from timely_llm_ros.nodes.planner_params import PARAMS
    from timely_llm_ros.nodes.robot_base import common_params

    sets = {
        "planner": PARAMS,
        "recorder": recorder.PARAMS,
        "replay": replay.PARAMS,
        "timemodel": timemodel.PARAMS,
        "workload": workload.PARAMS,
        "drone": [*common_params("drone", "tello_minispec", ("sim", "tello")), *drone.TELLO_PARAMS],
        "arm": common_params("arm", "robot_arm", ("sim",)),
    }
    return {name: {p.name: p for p in params} for name, params in sets.items()}


def test_params_files_match_the_nodes_declarations(repo_root):
    declared = _declared()
    files = sorted((repo_root / "config" / "params").glob("*.yaml"))
    assert {f.stem for f in files} == set(declared)
    for f in files:
        data = yaml.safe_load(f.read_text(encoding="utf-8"))
        params = data["/**"]["ros__parameters"]
        assert params, f
        for key, value in params.items():
            p = declared[f.stem].get(key)
            assert p is not None, f"{f.name}: {key!r} is not a parameter of the {f.stem} node"
            assert type(value) is type(p.default) and value == p.default, (
                f"{f.name}: {key} = {value!r} but the node's default is {p.default!r}; update the file"
            )
