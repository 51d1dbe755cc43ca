"""``timely-llm bench --suite stress``: bursty LRTrace workloads the policies were never tuned on.

Why a suite of its own: the scenario suite (:mod:`.scenarios`) holds the cases the ``timely``
policy was developed against. A robustness claim needs workloads of the same kind it has not seen:
here bursty composed workloads (the two-state bursts of :mod:`timely_llm_ros.workload.composer`, or
rare large events), each as composed ("normal"), with arrivals compressed ×0.5 and ×0.35 so that
bursts overlap, and with one agent per task (*distinct*) or the preset's fixed agent pool
(*shared*: a task whose event finds every robot busy is skipped and reported) — under every batch
cap of :data:`CAPS`. ``--workload-seeds`` composes the same families with other seeds, so a
result can be checked on workloads drawn fresh.

Each entry is ``(family, workload spec, cap)``, the spec alone reproducing the workload
(``wid2:bursty=10,compress=0.35,unique_agents=true,duration=150``); everything runs on the
simulated engine's virtual clock, so the table and the JSON are the same on every machine.
The summary (:mod:`.scenario_table`) gives per row ``timely``, the best baseline and the gap, with
Eq. 1 utility unclamped and clamped at 0, and counts the rows where ``timely`` trails by more than
one point.
"""

from __future__ import annotations

from collections.abc import Sequence

from timely_llm_ros.bench.scenarios import SuiteEntry

CAPS = (2, 4, 6, 8, 12, 16)
# The bursty bases (composer specs without the compression and agent keys): drone traces 1-8 unless
# named. 150 s holds about three burst states of the two-state families (bursts of ~10 s every ~50 s)
# and keeps one run of the whole matrix within minutes.
BASES: dict[str, str] = {
    "wid1-bursty": "wid1:bursty=10,duration=150",
    "wid2-bursty": "wid2:bursty=10,duration=150",
    "urgent-bursty": "wid2:traces=1,6-8,bursty=10,duration=150",
    "big-events": "wid2:rate=0.05,max_tpe=32,min_tpe=16,agents=40,duration=300",
}
# (compression, one agent per task): as composed with distinct agents, ×0.5 and ×0.35 with distinct
# or shared agents (as composed with shared agents is the base preset's own load: never overloaded).
VARIANTS: tuple[tuple[float, bool], ...] = (
    (1.0, True),
    (0.5, True),
    (0.35, True),
    (0.5, False),
    (0.35, False),
)


def workload_spec(base: str, compress: float, distinct: bool, seed: int | None = None) -> str:
    """The composer spec of one stress workload (``seed`` None: the base preset's own seed)."""
    if not 0.0 < compress <= 1.0:
        raise ValueError(f"compression must be in (0, 1], got {compress!r}")
    parts = [base]
    if compress != 1.0:
        parts.append(f"compress={compress:g}")
    if distinct:
        parts.append("unique_agents=true")
    if seed is not None:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"workload seed must be a non-negative integer, got {seed!r}")
        parts.append(f"seed={seed}")
    return ",".join(parts)


def workloads(seeds: Sequence[int] | None = None) -> list[tuple[str, str]]:
    """``(family, spec)`` of every stress workload: 4 bases × 5 variants = 20 per seed (``None``:
    the presets' own seeds, once)."""
    out = []
    for seed in seeds if seeds else [None]:
        for family, base in BASES.items():
            for compress, distinct in VARIANTS:
                out.append((family, workload_spec(base, compress, distinct, seed)))
    return out


def suite(seeds: Sequence[int] | None = None, caps: Sequence[int] = CAPS) -> list[SuiteEntry]:
    """The stress matrix: every workload of :func:`workloads` under every cap."""
    for c in caps:
        if isinstance(c, bool) or not isinstance(c, int) or c < 1:
            raise ValueError(f"max batch cap must be a positive integer, got {c!r}")
    return [(family, spec, cap) for family, spec in workloads(seeds) for cap in caps]


def parse_seeds(text: str | None) -> list[int] | None:
    """``--workload-seeds 11,12`` → [11, 12]; absent → None (the presets' own seeds)."""
    if text is None:
        return None
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        if not part.isdigit():
            raise ValueError(f"--workload-seeds: {part!r} is not a non-negative integer")
        out.append(int(part))
    if not out:
        raise ValueError("--workload-seeds: no seed given")
    return list(dict.fromkeys(out))
