"""Helpers shared by the bench tests."""

from __future__ import annotations


def parse_table(text: str) -> list[dict[str, str]]:
    """Inverse of :func:`~timely_llm_ros.bench.tables.render_table`: rows as {header: cell} (title skipped)."""
    lines = [ln for ln in text.splitlines() if ln.strip()]
    header_idx = next(i for i, ln in enumerate(lines) if ln.split()[:1] == ["policy"])
    dash = lines[header_idx + 1]
    spans = []
    start = 0
    for part in dash.split("  "):
        spans.append((start, start + len(part)))
        start += len(part) + 2
    names = [lines[header_idx][a:b].strip() for a, b in spans]
    rows = []
    for ln in lines[header_idx + 2 :]:
        rows.append({name: ln[a:b].strip() for name, (a, b) in zip(names, spans)})
    return rows
