"""``timely-llm skills check FILE`` / ``skills list``: what a user runs before giving a fleet a skill set."""

from __future__ import annotations

from pathlib import Path

import yaml

from timely_llm_ros.cli import main

REPO = Path(__file__).resolve().parents[1]
ROVER = REPO / "examples" / "rover_robot" / "rover_robot" / "config"


def test_check_prints_grammar_and_parsed_examples(capsys):
    assert main(["skills", "check", str(REPO / "config" / "skills" / "tello_minispec.yaml")]) == 0
    out = capsys.readouterr().out
    assert "skill set 'tello_minispec' for 'drone' robots, language minispec" in out
    assert "root ::=" in out and "calls: " in out and out.rstrip().endswith("OK")


def test_check_of_a_file_in_a_config_dir_uses_its_time_model_and_mapping(capsys):
    assert main(["skills", "check", "--no-grammar", str(ROVER / "skills" / "rover_drive.yaml")]) == 0
    out = capsys.readouterr().out
    assert "every skill of robot type 'rover' is covered" in out
    assert "backend 'ros': every skill is mapped and checked" in out and "root ::=" not in out


def _copy(tmp: Path, change) -> Path:
    doc = yaml.safe_load((ROVER / "skills" / "rover_drive.yaml").read_text())
    change(doc)
    (tmp / "skills").mkdir(exist_ok=True)
    path = tmp / "skills" / "rover_drive.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_check_names_file_field_and_reason(tmp_path, capsys):
    # structure (schema)
    bad = _copy(tmp_path, lambda d: d["skills"][0]["args"][0].update(type="integer"))
    assert main(["skills", "check", str(bad)]) == 1
    assert (
        f"{bad}: skills[0].args[0].type: must be one of int, float, str, bool, got 'integer'"
        in capsys.readouterr().err
    )
    # an example that does not parse
    bad = _copy(tmp_path, lambda d: d["examples"][0].update(plan="drive(30);"))
    assert main(["skills", "check", str(bad)]) == 1
    assert "examples[0].plan does not parse: argument 'steps' of drive" in capsys.readouterr().err
    # no time model for the robot type (the copy's config dir has no exec_time/)
    ok = _copy(tmp_path, lambda d: d.update(robot_type="hovercraft"))
    assert main(["skills", "check", str(ok)]) == 1
    assert (
        "no execution-time model for skill(s) dock, drive, light of robot type 'hovercraft'"
        in capsys.readouterr().err
    )
    # a mapping naming a field the interface does not have
    bad = _copy(tmp_path, lambda d: d["backends"]["ros"]["skills"]["drive"].update(goal={"steps": "$steps"}))
    assert main(["skills", "--config-path", str(ROVER), "check", str(bad)]) == 1
    err = capsys.readouterr().err
    assert "backends.ros.skills.drive.goal: test_msgs/Fibonacci_Goal has no field 'steps'" in err


def test_list_shows_overlays_first(tmp_path, capsys):
    _copy(tmp_path, lambda d: None)
    assert main(["skills", "--config-path", str(tmp_path), "list"]) == 0
    out = capsys.readouterr().out
    assert f"rover_drive              {tmp_path / 'skills' / 'rover_drive.yaml'}" in out
    assert "tello_minispec" in out
    assert main(["skills", "--config-path", str(tmp_path / "missing"), "list"]) == 2
    assert "does not exist" in capsys.readouterr().err
