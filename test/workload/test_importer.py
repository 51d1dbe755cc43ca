"""Public TimelyLLM JSON importer: exact reproduction of a hand-written file, strict rejection."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from timely_llm_ros.core.tuf import TUF
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.fileformat import data_dir
from timely_llm_ros.workload.importer import import_public
from timely_llm_ros.workload.tasks import load_catalog

DATA = Path(__file__).parent / "data"


def test_small_public_file_is_reproduced_exactly():
    raw = json.loads((DATA / "public_small.json").read_text())
    specs = import_public(DATA / "public_small.json")
    assert len(specs) == len(raw)
    for spec, entry in zip(specs, raw):
        assert spec.task_id == str(entry["job_id"])
        assert spec.arrival == entry["trigger time"]  # exact, no shifting or rounding
        assert spec.agent_id == str(entry["agent_id"])
        assert spec.tuf == TUF.from_public(*entry["tuf"])
        assert spec.exec_times == [(tok, float(sec)) for tok, sec in entry["exe_time_detail"]]
        assert spec.robot_type == "drone" and spec.skill_set == "tello_minispec"
    # The non-standard TUF [1, 0.8, 1.8] is kept as written, not replaced by the task's class.
    assert specs[2].tuf == TUF(ert=0.8, alpha=-1.0, beta=1.0)
    # Public trace ids map to Table-2 tasks by content: 0 cat -> 1, 6 dog -> 8, 1 keys -> 2, 7 boy -> 6.
    assert [s.trace_id for s in specs] == [1, 8, 2, 6]
    assert [s.task_class for s in specs] == ["normal", "urgent", "normal", "urgent"]
    catalog = load_catalog()
    assert specs[1].reference_plan == catalog.get(8).primary.plan
    assert specs[1].scene == "[dog x:0.48 y:0.51 width:0.2 height:0.4]"
    assert specs[1].instruction.startswith("[E] You provided me with plan ml,100")


def test_arm_file_uses_fltrnn_variant_and_own_times():
    (spec,) = import_public(DATA / "arm_small.json")
    assert (spec.robot_type, spec.skill_set, spec.task_class, spec.trace_id) == (
        "arm",
        "arm_fltrnn",
        "arm",
        9,
    )
    assert spec.reference_plan == load_catalog().get(9).variant("arm_fltrnn").plan
    assert spec.exec_times[0] == ("move_to", 1.0) and sum(s for _, s in spec.exec_times) == 20.0
    assert spec.arrival == 0.25 and spec.agent_id == "2"


def test_task_plan_field_overrides_reference_plan(tmp_path):
    raw = json.loads((DATA / "public_small.json").read_text())[:1]
    raw[0]["task_plan"] = "?s('dog')==True{g('dog')}->False"
    raw[0]["exe_time_detail"] = [["s(", 1.0], ["g(", 2.0], ["tp", 0.001]]  # own plan: own sequence allowed
    raw[0]["task_exe_time"] = 3.001
    path = tmp_path / "w.json"
    path.write_text(json.dumps(raw))
    (spec,) = import_public(path)
    assert spec.reference_plan == raw[0]["task_plan"]


def _mutations():
    def drop(field):
        return lambda e: e.pop(field)

    def set_(field, value):
        return lambda e: e.__setitem__(field, value)

    return [
        ("missing trigger time", drop("trigger time"), "trigger time", "missing"),
        ("missing tuf", drop("tuf"), "tuf", "missing"),
        ("missing exe_time_detail", drop("exe_time_detail"), "exe_time_detail", "missing"),
        ("string arrival", set_("trigger time", "31.2"), "trigger time", "number"),
        ("negative arrival", set_("trigger time", -1.0), "trigger time", "negative"),
        ("bool job id", set_("job_id", True), "job_id", "integer"),
        ("negative agent", set_("agent_id", -2), "agent_id", "negative"),
        ("unknown trace", set_("trace_id", 42), "trace_id", "unknown trace id 42"),
        ("t_zero <= ERT", set_("tuf", [2, 0.5, 0.5]), "tuf", "t_zero"),
        ("short tuf", set_("tuf", [1, 1]), "tuf", "Umax"),
        (
            "negative exec",
            set_("exe_time_detail", [["iv", -0.001], ["iv", 0.001], ["l", 0.001], ["l", 0.001]]),
            "exe_time_detail",
            "negative",
        ),
        ("bad detail item", set_("exe_time_detail", [["iv"]]), "exe_time_detail", "item 0"),
        (
            "wrong skills",
            set_("exe_time_detail", [["mf", 0.002], ["l", 0.002]]),
            "exe_time_detail",
            "do not match",
        ),
        ("total mismatch", set_("task_exe_time", 9.0), "task_exe_time", "sum"),
        ("empty input", set_("task_input", "  "), "task_input", "non-empty"),
        ("bad robot type", set_("robot_type", 3), "robot_type", "string"),
        ("duplicate job", set_("job_id", 0), "job_id", "duplicate"),
    ]


@pytest.mark.parametrize("name,mutate,field,reason", _mutations(), ids=[m[0] for m in _mutations()])
def test_malformed_entry_names_file_entry_and_field(tmp_path, name, mutate, field, reason):
    raw = json.loads((DATA / "public_small.json").read_text())
    bad = copy.deepcopy(raw)
    mutate(bad[2])  # job_id 2, the third entry
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    with pytest.raises(WorkloadError) as info:
        import_public(path)
    err = info.value
    assert isinstance(err, ValueError)
    assert err.source == str(path) and str(path) in str(err)
    assert err.entry.startswith("entry 2") and "entry 2" in str(err)
    if field != "job_id":
        assert "job_id 2" in err.entry
    assert err.field == field and f"'{field}'" in str(err)
    assert reason in err.reason


@pytest.mark.parametrize(
    "content,reason",
    [
        ("{not json", "not valid JSON"),
        ('{"job_id": 1}', "expected a JSON list"),
        ("[]", "no tasks"),
        ("[3]", "expected an object"),
    ],
)
def test_malformed_file_rejected(tmp_path, content, reason):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(WorkloadError, match=reason) as info:
        import_public(path)
    assert info.value.source == str(path)


def test_missing_file_is_a_workload_error(tmp_path):
    with pytest.raises(WorkloadError, match="cannot read"):
        import_public(tmp_path / "nope.json")


@pytest.mark.parametrize(
    "name,count,agents",
    [
        ("data_sample_1.json", 532, 42),
        ("data_sample_2.json", 295, 25),
        ("data_sample_robotarm_fltrnn.json", 598, 94),
    ],
)
def test_public_samples_import(name, count, agents):
    raw = json.loads((data_dir() / name).read_text())
    specs = import_public(data_dir() / name)
    assert len(specs) == count and len({s.agent_id for s in specs}) == agents
    assert [s.arrival for s in specs] == [e["trigger time"] for e in raw]
    if name == "data_sample_1.json":
        # Paper Fig. 6: job 71 "find a toy" (task 4) and job 72 "evading animal pursuit" (task 8) of WID 2.
        by_id = {s.task_id: s for s in specs}
        assert (by_id["71"].trace_id, by_id["72"].trace_id) == (4, 8)
        assert load_catalog().get(8).title == "Evading animal pursuit"
