"""The shipped JSON Schemas (config/schema/) are valid draft 2020-12 schemas, every shipped YAML file
of each format satisfies its schema, and errors read as *file: field path: reason*."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
import yaml

from timely_llm_ros.core.schema import SCHEMAS, SchemaError, problems, schema_path, validate

REPO = Path(__file__).resolve().parents[2]
FILES = {
    "skill_set": sorted((REPO / "config" / "skills").glob("*.yaml"))
    + [REPO / "examples/rover_robot/rover_robot/config/skills/rover_drive.yaml"],
    "exec_time": sorted((REPO / "config" / "exec_time").glob("*.yaml"))
    + [REPO / "examples/rover_robot/rover_robot/config/exec_time/rover.yaml"],
    "profile": sorted((REPO / "config" / "profiles").glob("*.yaml")),
    "workload": sorted((REPO / "config" / "workloads").glob("*.yaml"))
    + [REPO / "examples/rover_robot/rover_robot/config/workloads/rover_demo.yaml"],
    "fleet": [
        REPO / "config" / "fleet.yaml",
        REPO / "config" / "demo_fleet.yaml",
        REPO / "examples/rover_robot/fleet.yaml",
    ],
}


@pytest.mark.parametrize("name", SCHEMAS)
def test_schema_is_valid_and_every_shipped_file_satisfies_it(name):
    schema = json.loads(schema_path(name).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"].endswith("2020-12/schema") and schema.get("title")
    assert FILES[name], name
    for f in FILES[name]:
        assert problems(yaml.safe_load(f.read_text()), name) == [], f


def test_errors_name_the_file_the_path_and_the_reason():
    doc = yaml.safe_load((REPO / "config/skills/robot_arm.yaml").read_text())
    doc["skills"][2]["args"][0]["type"] = "text"
    doc["colour"] = "red"
    with pytest.raises(SchemaError) as err:
        validate(doc, "skill_set", "my.yaml")
    msg = str(err.value)
    assert msg.startswith("my.yaml: ") and "(and 1 more problem(s))" in msg
    found = problems(doc, "skill_set")
    assert "skills[2].args[0].type: must be one of int, float, str, bool, got 'text'" in found
    assert any(p.startswith("unknown field(s) 'colour'") for p in found)
