"""The message interfaces: documented, consistent with the core's names, installed as built.

The DDS round trip (test_dds_roundtrip.py) is only as strong as its samples, so the sample set is
checked here too: every field of every type carries a non-default value somewhere, every array is
sent both empty and non-empty, and every type with text carries non-ASCII text.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
INTERFACE_FILES = sorted(
    [*REPO_ROOT.glob("msg/*.msg"), *REPO_ROOT.glob("srv/*.srv"), *REPO_ROOT.glob("action/*.action")]
)
# arrays: T[] (unbounded), T[N] (fixed), T[<=N] (bounded: Segment[<=1] = an optional Segment)
FIELD_LINE = re.compile(r"^\s*[A-Za-z][\w/]*(\[(<=)?\d*\])?\s+[A-Za-z]\w*\s*(=.*)?(#.*)?$")


def test_expected_interfaces_exist():
    names = {p.name for p in INTERFACE_FILES}
    assert names == {
        "Tuf.msg",
        "Task.msg",
        "SkillCall.msg",
        "Segment.msg",
        "SegmentFeedback.msg",
        "TaskStatus.msg",
        "TraceEvent.msg",
        "EstimateExecTime.srv",
        "CancelTask.srv",
        "PlanTask.action",
    }


@pytest.mark.parametrize("path", INTERFACE_FILES, ids=lambda p: p.name)
def test_every_field_and_constant_is_documented(path: Path):
    """Units and ranges live in trailing comments; `ros2 interface show` prints them."""
    text = path.read_text(encoding="utf-8")
    assert text.isascii(), f"{path.name}: keep interface files ASCII"
    undocumented = []
    for number, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#") or stripped == "---":
            continue
        assert FIELD_LINE.match(line), f"{path.name}:{number}: not a field or constant: {line!r}"
        if "#" not in line:
            undocumented.append(f"{path.name}:{number}: {stripped}")
    assert not undocumented, "fields without a comment:\n" + "\n".join(undocumented)


@pytest.mark.ros
def test_constants_match_core_names():
    """Message constants are numbered in the order of the core's name tuples (adapters rely on it)."""
    from timely_llm_ros.core import events
    from timely_llm_ros.msg import SegmentFeedback, TaskStatus, TraceEvent

    for msg_type, names in (
        (TraceEvent, events.EVENT_KINDS),
        (TaskStatus, events.TASK_STATES),
        (SegmentFeedback, events.FEEDBACK_STATES),
    ):
        constants = {k: v for k, v in vars(msg_type).items() if k.isupper() and isinstance(v, int)}
        assert constants == {name: i for i, name in enumerate(names)}, msg_type.__name__


@pytest.mark.ros
def test_samples_exercise_every_field():
    from ros_dds_samples import samples, service_cases, to_plain

    groups = {topic: (msg_type, items) for topic, (msg_type, items) in samples().items()}
    cases = service_cases()
    groups["request"] = (type(cases[0][0]), [req for req, _ in cases])
    groups["response"] = (type(cases[0][1]), [res for _, res in cases])
    for topic, (msg_type, items) in groups.items():
        default = to_plain(msg_type())
        plain = [to_plain(item) for item in items]
        for field, field_type in msg_type.get_fields_and_field_types().items():
            assert any(p[field] != default[field] for p in plain), f"{topic}.{field} is never set"
            if field_type.startswith("sequence<"):
                lengths = {len(p[field]) for p in plain}
                assert 0 in lengths and max(lengths) > 0, f"{topic}.{field}: send it empty and non-empty"
        if "string" in msg_type.get_fields_and_field_types().values():
            texts = [v for p in plain for v in p.values() if isinstance(v, str)]
            assert any(not t.isascii() for t in texts), f"{topic}: no non-ASCII text in any string field"


@pytest.mark.ros
def test_installed_interfaces_match_the_source():
    """The venv (or colcon prefix) must hold the interfaces of THIS tree: catches a stale build."""
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    share = next(
        (
            p / "share" / "timely_llm_ros"
            for p in prefixes
            if (p / "share" / "timely_llm_ros" / "package.xml").exists()
        ),
        None,
    )
    assert share is not None, f"timely_llm_ros is not installed in any AMENT_PREFIX_PATH prefix {prefixes}"
    for source in INTERFACE_FILES:
        installed = share / source.parent.name / source.name
        assert installed.exists(), f"{installed} missing: run make (the interface build) again"
        assert installed.read_text() == source.read_text(), f"{installed} is stale: run make again"
    marker = share.parent / "ament_index" / "resource_index" / "packages" / "timely_llm_ros"
    assert marker.exists(), f"ament index marker {marker} missing"


@pytest.mark.ros
def test_generated_and_source_modules_form_one_package():
    """timely_llm_ros.msg comes from the install prefix, timely_llm_ros.core from this source tree."""
    import timely_llm_ros
    import timely_llm_ros.core.tuf as tuf_module
    import timely_llm_ros.msg as msg_module

    assert Path(tuf_module.__file__).resolve().is_relative_to(REPO_ROOT / "timely_llm_ros")
    assert not Path(msg_module.__file__).resolve().is_relative_to(REPO_ROOT / "timely_llm_ros")
    assert len(timely_llm_ros.__path__) >= 2
