"""tools/build_secure_fastdds.py: the wheel-ABI edits applied to a Fast DDS source tree (the build
itself takes tens of minutes: it is run by hand, see the tool's docstring and the README)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))

from build_secure_fastdds import LISTENER_CALL, MARK, WHEEL_ABI_EDITS, prepare, venv_version


def _tree(root: Path) -> Path:
    for rel, old, count in WHEEL_ABI_EDITS:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        body = path.read_text() if path.exists() else ""
        path.write_text(body + "".join(f"{old}\nx\n#endif\n" for _ in range(count)))
    impl = root / "src/cpp/fastdds/domain/DomainParticipantImpl.cpp"
    impl.write_text(impl.read_text() + LISTENER_CALL)
    (root / "src/cpp/CMakeLists.txt").write_text("add_library(fastdds)\n")
    return root


def test_the_security_members_rmw_would_see_are_compiled_out_once(tmp_path):
    src = _tree(tmp_path / "Fast-DDS")
    prepare(src, {})
    prepare(src, {})  # idempotent: a second run changes nothing
    qos = (src / WHEEL_ABI_EDITS[0][0]).read_text()
    assert qos.count(f"#if 0 /* {MARK} */") == 3 and "#if HAVE_SECURITY" not in qos
    impl = (src / "src/cpp/fastdds/domain/DomainParticipantImpl.cpp").read_text()
    assert "onParticipantAuthentication(participant_->participant_" not in impl
    assert (src / "src/cpp/CMakeLists.txt").read_text().count(MARK) == 1
    assert (src / "test/CMakeLists.txt").read_text().startswith("# tests not built")


def test_another_fast_dds_layout_is_refused_not_half_patched(tmp_path):
    src = _tree(tmp_path / "Fast-DDS")
    qos = src / WHEEL_ABI_EDITS[0][0]
    qos.write_text(qos.read_text() + "#if HAVE_SECURITY\n")  # one more than this version has
    with pytest.raises(SystemExit, match="another Fast DDS version"):
        prepare(src, {})


def test_the_version_comes_from_the_venv_headers(tmp_path):
    cfg = tmp_path / "include" / "fastdds" / "config.hpp"
    cfg.parent.mkdir(parents=True)
    cfg.write_text('#define FASTDDS_VERSION_STR "3.2.2"\n')
    assert venv_version(tmp_path) == "3.2.2"
    with pytest.raises(SystemExit, match="no Fast DDS headers"):
        venv_version(tmp_path / "nothing")
