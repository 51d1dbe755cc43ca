"""Per-task and per-class metrics (paper §7.1 "Metrics", scheduling-pitfalls note §4).

Per task (from :class:`TaskRecord`): response time ``W(s_0)``, robot waiting time ``Σ W(s_k)``,
completion time, utility ``TUF_0(W(s_0))`` (Eq. 1, unbounded below) and its value clamped at 0.

Tasks that never got a response (FAILED / EXPIRED before their first action) are not dropped from
the utility means — that would reward giving up: their utility is ``TUF_0(terminal − arrival)``, the
utility of an answer at the moment the planner gave up (an upper bound of what they got).
REJECTED tasks (invalid input) are counted but excluded from utility and latency statistics.

Per class: n, counts by outcome, mean utility unclamped and clamped, Σβ (the oracle bound: every
task answered within its ERT), % of Σβ (unclamped utility; also clamped), number of tasks with
utility ≤ 0, mean / p50 / p99 / max response time, mean waiting, mean completion, on-time % (share
with W(s_0) ≤ ERT). Percentiles are nearest-rank: the ⌈p·n/100⌉-th smallest value.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from typing import Any

from timely_llm_ros.core import events as ev
from timely_llm_ros.core.generation import TaskRecord
from timely_llm_ros.core.tuf import on_time


def percentile(values: list[float], p: float) -> float:
    """Nearest-rank percentile of ``values`` (nan if empty)."""
    if not values:
        return math.nan
    xs = sorted(values)
    k = max(1, math.ceil(p / 100.0 * len(xs)))
    return xs[min(k, len(xs)) - 1]


def task_utility(rec: TaskRecord) -> float:
    """Utility used in the means (module docstring); nan for REJECTED tasks."""
    if rec.state == ev.REJECTED:
        return math.nan
    tuf = rec.tuf
    assert tuf is not None  # only a REJECTED task may come without a TUF
    r = rec.response_time
    if not math.isnan(r):
        return tuf(r)
    if not math.isnan(rec.terminal_time):
        return tuf(rec.terminal_time - rec.arrival)
    return math.nan


@dataclass
class ClassMetrics:
    n: int = 0
    n_rejected: int = 0
    n_failed: int = 0  # FAILED or EXPIRED
    n_expired: int = 0  # EXPIRED: the utility horizon passed (planner option overrun kill / skip-next)
    n_cancelled: int = 0  # cancelled on request: like rejected ones, not in utility or response figures
    n_completed: int = 0
    n_served: int = 0  # got a first action
    utility_mean: float = math.nan
    utility_mean_clamped: float = math.nan
    sum_beta: float = 0.0
    pct_beta: float = math.nan  # 100 · Σ U / Σβ (Eq. 1 utilities, unclamped)
    pct_beta_clamped: float = math.nan  # 100 · Σ max(U, 0) / Σβ
    n_nonpositive: int = 0
    response_mean: float = math.nan
    response_p50: float = math.nan
    response_p99: float = math.nan
    response_max: float = math.nan
    waiting_mean: float = math.nan
    completion_mean: float = math.nan
    on_time_pct: float = math.nan

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def summarize_group(records: Iterable[TaskRecord]) -> ClassMetrics:
    m = ClassMetrics()
    utils: list[float] = []
    resp: list[float] = []
    wait: list[float] = []
    comp: list[float] = []
    n_on_time = 0
    for rec in records:
        m.n += 1
        if rec.state == ev.REJECTED:
            m.n_rejected += 1
            continue
        if rec.state == ev.CANCELLED:
            m.n_cancelled += 1
            continue
        m.n_failed += rec.state in (ev.FAILED, ev.EXPIRED)
        m.n_expired += rec.state == ev.EXPIRED
        m.n_completed += rec.state == ev.COMPLETED
        assert rec.tuf is not None  # only a REJECTED task may come without a TUF
        m.sum_beta += rec.tuf.beta
        u = task_utility(rec)
        if not math.isnan(u):
            utils.append(u)
        r = rec.response_time
        if not math.isnan(r):
            m.n_served += 1
            resp.append(r)
            n_on_time += on_time(r, rec.tuf.ert)
            w = rec.waiting_time
            if not math.isnan(w):
                wait.append(w)
        c = rec.completion_time
        if rec.state == ev.COMPLETED and not math.isnan(c):
            comp.append(c)
    if utils:
        m.utility_mean = math.fsum(utils) / len(utils)
        m.utility_mean_clamped = math.fsum(max(u, 0.0) for u in utils) / len(utils)
        m.n_nonpositive = sum(u <= 0 for u in utils)
    if m.sum_beta > 0:
        m.pct_beta = 100.0 * math.fsum(utils) / m.sum_beta
        m.pct_beta_clamped = 100.0 * math.fsum(max(u, 0.0) for u in utils) / m.sum_beta
    if resp:
        m.response_mean = math.fsum(resp) / len(resp)
        m.response_p50 = percentile(resp, 50)
        m.response_p99 = percentile(resp, 99)
        m.response_max = max(resp)
    if wait:
        m.waiting_mean = math.fsum(wait) / len(wait)
    if comp:
        m.completion_mean = math.fsum(comp) / len(comp)
    if m.n - m.n_rejected - m.n_cancelled > 0:
        m.on_time_pct = 100.0 * n_on_time / (m.n - m.n_rejected - m.n_cancelled)
    return m


def _by_class(rec: TaskRecord) -> str:
    return rec.task_class


def summarize(
    records: Iterable[TaskRecord], by: Callable[[TaskRecord], str] = _by_class, total: str | None = "all"
) -> dict[str, ClassMetrics]:
    """Metrics per group (``by``: record → key; default its task class), plus ``total`` over all
    records unless ``total`` is None. Keys are sorted, the total last."""
    recs = list(records)
    groups: dict[str, list[TaskRecord]] = {}
    for rec in recs:
        groups.setdefault(by(rec), []).append(rec)
    out = {k: summarize_group(groups[k]) for k in sorted(groups)}
    if total is not None:
        out[total] = summarize_group(recs)
    return out
