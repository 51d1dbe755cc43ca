"""timely-llm's dispatcher: lazy subcommands, and one broken subcommand never breaks the others."""

from __future__ import annotations

import sys
import textwrap

import pytest

from timely_llm_ros import cli


@pytest.fixture
def fake_commands(tmp_path, monkeypatch):
    """Three subcommand modules in a scratch package: working, failing at import, missing run()."""
    pkg = tmp_path / "fake_cmds"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "good.py").write_text(
        textwrap.dedent("""
        def add_arguments(parser):
            parser.add_argument("--times", type=int, default=1)

        def run(args):
            print("good ran", args.times)
            return 3
    """)
    )
    (pkg / "broken.py").write_text("import timely_no_such_dependency\n")
    (pkg / "incomplete.py").write_text("def add_arguments(parser):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield {
        "good": ("fake_cmds.good", "a working command"),
        "broken": ("fake_cmds.broken", "needs a missing dependency"),
        "incomplete": ("fake_cmds.incomplete", "has no run()"),
        "absent": ("fake_cmds.absent", "module not written yet"),
    }
    for name in [m for m in sys.modules if m.startswith("fake_cmds")]:
        del sys.modules[name]


def test_runs_the_chosen_command_with_its_arguments(fake_commands, capsys):
    assert cli.main(["good", "--times", "4"], commands=fake_commands) == 3
    assert "good ran 4" in capsys.readouterr().out


def test_broken_modules_are_not_imported_for_other_commands(fake_commands):
    assert cli.main(["good"], commands=fake_commands) == 3
    assert "fake_cmds.broken" not in sys.modules


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("broken", "needs the missing module 'timely_no_such_dependency'"),
        ("incomplete", "does not define run()"),
        ("absent", "module fake_cmds.absent does not exist"),
    ],
)
def test_an_unavailable_command_gets_a_clear_error(fake_commands, capsys, name, expected):
    assert cli.main([name], commands=fake_commands) == 2
    err = capsys.readouterr().err
    assert f"subcommand '{name}'" in err and expected in err


def test_help_lists_every_command_without_importing_them(fake_commands, capsys):
    with pytest.raises(SystemExit) as info:
        cli.main(["--help"], commands=fake_commands)
    assert info.value.code == 0
    out = capsys.readouterr().out
    assert all(name in out for name in fake_commands)
    assert not any(m.startswith("fake_cmds.") for m in sys.modules)


def test_unknown_or_missing_command_is_a_usage_error(fake_commands, capsys):
    for argv in (["nope"], []):
        with pytest.raises(SystemExit) as info:
            cli.main(argv, commands=fake_commands)
        assert info.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_the_real_table_names_the_planned_subcommands():
    assert {"demo", "bench", "profile", "fleet", "timeline", "report"} <= set(cli.COMMANDS)
    assert cli.COMMANDS["bench"][0] == "timely_llm_ros.bench.cli"
    assert cli.COMMANDS["demo"][0] == "timely_llm_ros.demo"
