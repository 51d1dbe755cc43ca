"""LRTrace workloads: benchmark tasks (Table 2), the Poisson composer (Table 3) and importers.

Everything here produces ``list[TaskSpec]`` (timely_llm_ros.core.task) for the simulator and the
bench CLI. Entry point for callers: :func:`resolve_workload` (preset name, public sample name or
path).
"""

from timely_llm_ros.workload.composer import (
    ComposerSpec,
    Composition,
    SkippedTask,
    compose,
)
from timely_llm_ros.workload.errors import WorkloadError
from timely_llm_ros.workload.fileformat import (
    Workload,
    load_workload_file,
    resolve_workload,
)
from timely_llm_ros.workload.importer import import_public
from timely_llm_ros.workload.tasks import BenchmarkTask, TaskCatalog, load_catalog

__all__ = [
    "BenchmarkTask",
    "ComposerSpec",
    "Composition",
    "SkippedTask",
    "TaskCatalog",
    "Workload",
    "WorkloadError",
    "compose",
    "import_public",
    "load_catalog",
    "load_workload_file",
    "resolve_workload",
]
