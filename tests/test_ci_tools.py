"""Under CI=true a test that would skip for a missing plink2/bcftools fails (tests/conftest.py)."""

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# A skip by marker (setup), a skip from the test body (call), and a skip for absent data.
SAMPLE = """
import shutil

import pytest


@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")
def test_marked():
    pass


def test_in_body():
    if shutil.which("bcftools") is None:
        pytest.skip("bcftools absent")


def test_data_absent():
    pytest.skip("CINECA synthetic data absent")
"""


def _run_suite(tmp_path: Path, *, ci: str | None) -> subprocess.CompletedProcess:
    """Run SAMPLE with the suite's conftest.py, with a PATH that has no external tool."""
    suite = tmp_path / "suite"
    suite.mkdir(exist_ok=True)
    shutil.copy(ROOT / "tests" / "conftest.py", suite / "conftest.py")
    (suite / "test_sample.py").write_text(SAMPLE)
    empty = tmp_path / "bin"
    empty.mkdir(exist_ok=True)
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PATH"] = str(empty)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rA", "-p", "no:cacheprovider", "-p", "no:xdist",
         str(suite)],
        cwd=suite, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_missing_tool_fails_under_ci(tmp_path):
    done = _run_suite(tmp_path, ci="true")
    out = done.stdout + done.stderr
    assert done.returncode == 1, out
    assert "CI=true: plink2 not found on PATH" in out
    assert "CI=true: bcftools not found on PATH" in out
    # the data skip stays a skip; the two tool skips are reported as not passing
    assert "1 skipped" in out, out
    assert "SKIPPED" in out and "CINECA synthetic data absent" in out


def test_missing_tool_skips_outside_ci(tmp_path):
    done = _run_suite(tmp_path, ci=None)
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "3 skipped" in out, out
    assert "not found on PATH" not in out
