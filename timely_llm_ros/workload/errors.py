"""The one error type every workload loader raises.

Workload files are written by hand or copied from elsewhere; a bad one must be reported with
enough context to fix it (which file, which entry, which field) instead of crashing somewhere in
the simulator. :class:`WorkloadError` is a ``ValueError`` so callers that only care about "bad
input" can catch that.
"""

from __future__ import annotations


class WorkloadError(ValueError):
    """A workload, task catalogue or composer spec that cannot be used.

    ``source`` is the file (or a label such as ``"<wid1 overrides>"``), ``entry`` the position or
    job id of the offending entry (``None`` for file-level problems), ``field`` the field name
    (``None`` when the whole entry is wrong) and ``reason`` what is wrong with it.
    """

    def __init__(self, source: str, reason: str, *, entry: str | None = None, field: str | None = None):
        self.source = str(source)
        self.entry = entry
        self.field = field
        self.reason = reason
        where = self.source
        if entry is not None:
            where += f": {entry}"
        if field is not None:
            where += f": field '{field}'"
        super().__init__(f"{where}: {reason}")
