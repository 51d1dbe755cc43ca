"""realbench's ordering check (bench/ordering.py): pairs the real runs cannot separate are ties,
never swaps; a swap needs a real separation beyond the tolerance (or beyond the repeats' spread)
and the prediction on the other side; a slice where every pair ties does not count as reproduced."""

from __future__ import annotations

import math

from timely_llm_ros.bench import ordering as od


def run(policy, resp, sim_resp, beta=100.0, sim_beta=100.0, urgent=None):
    """One realbench result: mean response and %Σβ (all tasks), real and predicted; ``urgent``:
    (real, sim) urgent %Σβ."""
    res = {
        "policy": policy,
        "real": {"all": {"response_mean": resp, "pct_beta": beta}},
        "sim": {"all": {"response_mean": sim_resp, "pct_beta": sim_beta}},
    }
    if urgent is not None:
        res["real"]["urgent"] = {"pct_beta": urgent[0]}
        res["sim"]["urgent"] = {"pct_beta": urgent[1]}
    return res


def test_pair_verdict_response_is_relative_and_beta_in_points():
    # response: smaller is better; 4 % apart is a tie at 5 %, 10 % apart is separated
    assert od.pair_verdict("response_mean", (1.00, 1.04), (1.0, 0.5), 0.05) == "tie"
    assert od.pair_verdict("response_mean", (1.00, 1.10), (1.0, 1.01), 0.05) == "agree"
    assert od.pair_verdict("response_mean", (1.00, 1.10), (1.2, 1.1), 0.05) == "swap"
    assert od.pair_verdict("response_mean", (1.00, 1.10), (1.1, 1.1), 0.05) == "swap"  # sim: no order
    # %Σβ: larger is better, tolerance in points (values near 0 or negative: Eq. 1 unbounded below)
    assert od.pair_verdict("pct_beta", (-3.0, 1.0), (-80.0, 10.0), 5.0) == "tie"
    assert od.pair_verdict("pct_beta", (-30.0, 1.0), (-80.0, 10.0), 5.0) == "agree"
    assert od.pair_verdict("pct_beta", (-30.0, 1.0), (10.0, -80.0), 5.0) == "swap"
    assert od.pair_verdict("pct_beta", (math.nan, 1.0), (1.0, 1.0), 5.0) == "n/a"


def test_overlapping_repeats_are_a_tie_even_beyond_the_tolerance():
    real, sim = (1.0, 1.2), (1.3, 1.1)  # 17 % apart: separated by the tolerance alone -> a swap
    assert od.pair_verdict("response_mean", real, sim, 0.05) == "swap"
    overlap = ((0.8, 1.25), (1.1, 1.3))  # but the repeats' ranges overlap: the runs cannot order them
    assert od.pair_verdict("response_mean", real, sim, 0.05, overlap) == "tie"
    apart = ((0.95, 1.05), (1.15, 1.25))
    assert od.pair_verdict("response_mean", real, sim, 0.05, apart) == "swap"


def test_by_policy_merges_repeats_with_their_range():
    rs = [run("timely", 1.0, 1.1), run("vllm", 2.0, 2.1), run("timely", 1.2, 1.1), run("vllm", 2.4, 2.1)]
    merged = od.by_policy(rs)
    assert [m["policy"] for m in merged] == ["timely", "vllm"] and merged[0]["runs"] == 2
    assert math.isclose(merged[0]["real"]["all"]["response_mean"], 1.1)
    assert merged[1]["real_range"]["all"]["response_mean"] == (2.0, 2.4)


def test_ordering_counts_agreements_ties_and_swaps():
    same = [run("timely", 1.0, 0.9), run("edf-seg", 1.5, 1.4), run("vllm", 3.0, 2.5)]
    o = od.ordering(same, "response_mean")
    assert o["real"] == o["sim"] == ["timely", "edf-seg", "vllm"] and o["match"] and o["agrees"] == 3
    swapped = [run("timely", 1.0, 1.6), run("edf-seg", 1.5, 1.4)]
    o = od.ordering(swapped, "response_mean")
    assert not o["match"] and o["discordant"] == o["swaps"] == 1
    tie = [run("timely", 1.0, 1.0), run("edf-seg", 1.01, 1.3)]  # real 1 % apart: a tie, not a swap
    o = od.ordering(tie, "response_mean")
    assert o["match"] and o["ties"] == 1 and o["agrees"] == 0


def test_check_says_yes_no_and_why():
    good = [
        run("timely", 5.0, 5.3, 80.0, 85.0, urgent=(90.0, 92.0)),
        run("edf-seg", 5.1, 5.0, 60.0, 55.0, urgent=(70.0, 60.0)),  # response: a tie with timely
        run("vllm", 9.0, 8.5, -40.0, -30.0, urgent=(-50.0, -20.0)),
    ]
    c = od.ordering_check(good)
    assert [(m["key"], m["class"]) for m in c["metrics"]] == [
        ("pct_beta", "all"),
        ("pct_beta", "urgent"),
        ("response_mean", "all"),
    ]
    assert c["reproduced"] and c["ties"] == 1 and c["swaps"] == 0 and c["agrees"] == 8
    assert od.lines(c)[-1].startswith("ordering reproduced: yes (8 separated pair(s) ordered alike, 1 tie")
    bad = [run("timely", 5.0, 6.0), run("edf-seg", 6.0, 5.5)]
    c = od.ordering_check(bad)
    assert not c["reproduced"] and c["swaps"] == 1 and "timely vs edf-seg by mean response" in c["reason"]
    assert "urgent" not in {m["class"] for m in c["metrics"]}  # a class no run has is left out
    flat = [run("timely", 5.0, 4.0), run("edf-seg", 5.1, 6.0)]  # every pair ties: nothing checked
    c = od.ordering_check(flat)
    assert not c["reproduced"] and "does not separate" in c["reason"]
    assert od.lines(c)[-1].startswith("ordering reproduced: no (every pair is a tie")
