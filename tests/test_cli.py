import subprocess
import sys

import pytest

from rvfedprs.cli import COMMANDS, main


def test_help_lists_commands(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help(name, capsys):
    with pytest.raises(SystemExit) as exc:
        main([name, "--help"])
    assert exc.value.code == 0
    assert "usage: rvfedprs " + name in capsys.readouterr().out


def test_console_script_is_installed():
    result = subprocess.run(
        [sys.executable, "-m", "rvfedprs", "--version"], capture_output=True, text=True
    )
    assert result.returncode == 0
    assert result.stdout.startswith("rvfedprs ")


def test_unknown_command_exits_nonzero(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["simulat"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


def test_a_command_imports_only_its_own_module():
    # `rvfedprs prepare ...` must not pay for the simulator's or trainer's imports (issue 16:
    # a genotype pass's fixed cost); `rvfedprs --help` still lists every command.
    code = (
        "import sys; from rvfedprs.cli import build_parser; p = build_parser('prepare'); "
        "print(sorted(m for m in sys.modules if m.startswith('rvfedprs.commands.'))); "
        "print('msprime' in sys.modules, 'torch' in sys.modules)"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    modules, heavy = result.stdout.strip().splitlines()
    assert "rvfedprs.commands.prepare'" in modules
    assert all(m.startswith("'rvfedprs.commands.prepare") for m in modules.strip("[]").split(", "))
    assert heavy == "False False"
