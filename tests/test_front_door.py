"""The README's two commands: CI runs the test one verbatim; install.sh reuses and explains."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _readme_commands() -> list[str]:
    block = re.search(
        r"## Two commands.*?```bash\n(.*?)```", (ROOT / "README.md").read_text(), re.S
    )
    assert block, "README has no '## Two commands' bash block"
    return [line for line in block.group(1).splitlines() if line and not line.startswith("#")]


def test_readme_has_two_commands_through_the_venv():
    commands = _readme_commands()
    assert len(commands) == 2
    for command in commands:
        assert command.startswith("bash scripts/install.sh && source .venv/bin/activate && ")
    assert commands[0].endswith("snakemake --cores 2")
    assert "pytest" in commands[1]


def test_ci_runs_the_readme_test_command_verbatim():
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert _readme_commands()[1] in [line.strip() for line in ci]


def _copy_installer(tmp_path: Path) -> Path:
    (tmp_path / "scripts").mkdir()
    for name in ("scripts/install.sh", "pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    return tmp_path / "scripts" / "install.sh"


def test_install_names_the_missing_python(tmp_path):
    script = _copy_installer(tmp_path)
    done = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "PYTHON": str(tmp_path / "no-such-python")},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "no Python >= 3.11 found" in done.stderr
    assert "apt-get install python3 python3-venv" in done.stderr
    assert not (tmp_path / ".venv").exists()


def test_install_names_python3_venv_when_ensurepip_is_missing(tmp_path):
    script = _copy_installer(tmp_path)
    fake = tmp_path / "python-without-venv"
    # A Python >= 3.11 whose ensurepip is missing, as on Debian without python3-venv.
    fake.write_text(
        "#!/bin/sh\n"
        'case "$*" in *ensurepip*) echo "No module named ensurepip" >&2; exit 1;; esac\n'
        f'exec {sys.executable} "$@"\n'
    )
    fake.chmod(0o755)
    done = subprocess.run(
        ["bash", str(script)],
        env={**os.environ, "PYTHON": str(fake)},
        capture_output=True,
        text=True,
    )
    assert done.returncode == 1
    assert "cannot create a virtual environment" in done.stderr
    assert "python3-venv" in done.stderr
    assert not (tmp_path / ".venv").exists()


@pytest.mark.skipif(
    not (ROOT / ".venv" / ".rvfedprs-install").is_file(),
    reason="no .venv/ built by scripts/install.sh in this checkout",
)
def test_install_twice_reuses_the_environment():
    # The checkout's environment is already installed (the README command ran install.sh):
    # a second run must reuse it and skip pip.
    done = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install.sh")], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "reusing .venv" in done.stderr
    assert "Python packages up to date" in done.stderr
