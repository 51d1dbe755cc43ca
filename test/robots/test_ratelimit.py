"""LogLimiter: one warning line per kind of bad input and period, counting the suppressed ones."""

from timely_llm_ros.robots.ratelimit import LogLimiter


def test_first_line_at_once_then_at_most_one_per_period_with_the_count():
    t = [0.0]
    lim = LogLimiter(10.0, clock=lambda: t[0])
    assert lim("dup", "segment 0 again") == "segment 0 again"
    assert all(lim("dup", f"segment {i} again") is None for i in range(1, 500))
    assert lim("other", "foreign agent") == "foreign agent"  # keys are independent
    t[0] = 10.0
    assert lim("dup", "segment 7 again") == "segment 7 again (and 499 more like it since the last such line)"
    assert lim.suppressed_total == 499
    t[0] = 25.0
    assert lim("dup", "x") == "x"


def test_memory_is_bounded():
    lim = LogLimiter(10.0, clock=lambda: 0.0, max_keys=8)
    for i in range(1000):
        lim(f"k{i}", "m")
    assert len(lim._keys) == 8
