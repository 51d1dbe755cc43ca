"""Task ids as the workload node publishes them (also what the demo keys its urgent tasks by).

``task_id_prefix`` (default ``{name}-``) + the workload's own id, where ``{name}`` is the workload
name without its overrides (``wid1:duration=30,rate=0.1`` -> ``wid1``; characters other than
letters, digits, ``_``, ``.``, ``-`` become ``_``) and numeric ids are zero-padded to one width, so
ids read and sort well: ``wid1-07`` before ``wid1-12``, not ``wid1:duration=30,rate=0.1-7``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence


def id_name(name: str) -> str:
    """The workload name as it appears in task ids (see the module docstring)."""
    base = name.split(":", 1)[0].strip() or "workload"
    return re.sub(r"[^A-Za-z0-9_.-]", "_", base)


def published_ids(name: str, task_ids: Sequence[str], id_prefix: str = "{name}-") -> dict[str, str]:
    """Workload id -> published task id for every id of one workload."""
    prefix = id_prefix.replace("{name}", id_name(name))
    numeric = bool(task_ids) and all(t.isdigit() for t in task_ids)
    width = max(len(t) for t in task_ids) if numeric else 0
    return {t: f"{prefix}{t.zfill(width)}" for t in task_ids}
