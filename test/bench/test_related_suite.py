"""``timely-llm bench --suite related``: the ablation's pieces on small cases (deltas against the off
state, the default decision rule, the written files). The full suite is a benchmark, not a test."""

from __future__ import annotations

import json

from timely_llm_ros.bench import related


def _run(classes: dict[str, float]) -> dict:
    return {"classes": {c: {"pct_beta": v} for c, v in classes.items()}, "stats": {}}


def test_deltas_and_decision_rule():
    runs = {(s, "base"): _run({"urgent": 90.0, "normal": 99.0, "all": 95.0}) for s in related.LOW}
    runs |= {(s, "overrun=kill"): _run({"urgent": 90.5, "normal": 98.5, "all": 95.2}) for s in related.LOW}
    d = related.deltas(runs)
    assert d["overrun=kill"]["wid1"]["urgent"] == 0.5 and d["overrun=kill"]["wid1"]["normal"] == -0.5
    assert related.decide("overrun=kill", d["overrun=kill"])[0]  # +0.2 on average, worst −0.5 ≤ 1
    runs[("wid2", "overrun=kill")] = _run({"urgent": 95.0, "normal": 97.9, "all": 96.0})  # −1.1 normal
    on, why = related.decide("overrun=kill", related.deltas(runs)["overrun=kill"])
    assert not on and "costs 1.1 points" in why
    flat = {s: {"urgent": 0.05, "normal": 0.0, "all": 0.05} for s in related.LOW}
    assert related.decide("x", flat) == (False, "no gain on average (+0.05)")
    # a classifier cannot beat the TUF it replaces: on when it costs nothing beyond the tolerance anywhere
    same = {s: {"urgent": 0.0, "normal": 0.0, "all": 0.0} for s in (*related.LOW, *related.HIGH)}
    assert related.decide("urgency=lexical", same)[0]
    same["mix"]["urgent"] = -1.5
    assert related.decide("urgency=llm", same) == (False, "costs 1.5 points against the given TUF")


def test_hidden_tuf_tasks_are_judged_by_their_real_tuf():
    tasks = related.workload_tasks("sample1")[:5]
    hidden = related.hide_tuf(tasks)
    assert all(h.tuf is None and h.reference_tuf == t.tuf for h, t in zip(hidden, tasks))
    assert all(h.task_class in ("urgent", "normal") for h in hidden)


def test_mix_adds_fltrnn_tasks_within_wid2s_span():
    mix = related.mixed_tasks()
    arm = [t for t in mix if t.task_id.startswith("mix-")]
    assert arm and all(t.robot_type == "arm" for t in arm)
    assert len({t.task_id for t in mix}) == len(mix)


def test_small_suite_writes_table_json_and_figure(tmp_path, capsys):
    assert related.run_suite(tmp_path, specs=["wid1"], variants=["overrun=kill"], note=lambda m: None) == 0
    doc = json.loads((tmp_path / "related.json").read_text())
    assert {(r["workload"], r["variant"]) for r in doc["runs"]} == {
        ("wid1", "base"),
        ("wid1", "overrun=kill"),
    }
    assert "overrun=kill" in doc["decisions"] and (tmp_path / "related.png").stat().st_size > 0
    text = (tmp_path / "related.txt").read_text()
    assert "overrun=kill" in text and "# decisions" in text
    kill = next(r for r in doc["runs"] if r["variant"] == "overrun=kill")
    assert kill["stats"]["expired"] == kill["stats"]["overrun_killed"]
