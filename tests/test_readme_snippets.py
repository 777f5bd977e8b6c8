"""The public Python API, and every ``python`` snippet of README.md run as a reader runs it.

Every public name is shown in use in the README's snippets or the docs' (``docs/**/*.md``; the
README keeps to the names a user calls, ``docs/api_examples.md`` shows those a researcher
extends).

A reader runs the snippets in order from the repository root, each in a fresh interpreter,
beside ``../shared/data`` and with the workflow's per-site inputs in ``results/`` (written by
``snakemake --cores 2``). The test rebuilds that place in a temporary folder: ``repo/`` as the
working directory, ``shared`` linked beside it when this checkout has one, and ``results/`` a
small synthetic federation in the workflow's layout (the workflow itself takes minutes). A
snippet that reads ``../shared/data`` is skipped, with the reason, where that folder is absent.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402

import rvfedprs  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"
SHARED = REPO.parent / "shared"


def python_snippets(markdown: str) -> list[tuple[int, str]]:
    """Each fenced ``python`` block of ``markdown``: (line of its opening fence, code)."""
    return [
        (markdown.count("\n", 0, match.start()) + 1, match.group(1))
        for match in re.finditer(r"^```python\n(.*?)^```", markdown, re.MULTILINE | re.DOTALL)
    ]


SNIPPETS = python_snippets(README.read_text())
DOC_SNIPPETS = [
    code
    for page in sorted((REPO / "docs").glob("**/*.md"))
    for _, code in python_snippets(page.read_text())
]


def _needs_absent_data(code: str) -> str | None:
    """Why ``code`` cannot run here (it reads ``../shared/data``, which is absent), or None."""
    if "../shared/data" in code and not (SHARED / "data").is_dir():
        return f"the snippet reads ../shared/data, absent here ({SHARED / 'data'})"
    return None


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[int, subprocess.CompletedProcess | str]:
    """Every snippet run in README order in one reader's folder: its process, or a skip reason."""
    root = tmp_path_factory.mktemp("reader")
    repo = root / "repo"
    repo.mkdir()
    if SHARED.is_dir():
        (root / "shared").symlink_to(SHARED)
    workflow = write_federation(
        root / "workflow", n_clients=4, n_clusters=2, samples_per_client=200
    )
    workflow["data"].rename(repo / "results")
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "PYTHONPATH": path}
    found: dict[int, subprocess.CompletedProcess | str] = {}
    for line, code in SNIPPETS:
        reason = _needs_absent_data(code)
        found[line] = reason or subprocess.run(
            [sys.executable, "-c", code],
            cwd=repo,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )
    return found


def _used(name: str, code: str) -> bool:
    """``name`` called (``name(``), or a class subclassed or tested (``(..., name)``)."""
    return re.search(rf"\b{name}\(|\b{name}\)", code) is not None


def test_the_readme_and_docs_have_python_snippets_for_every_public_name():
    assert len(SNIPPETS) >= 4
    readme = "\n".join(snippet for _, snippet in SNIPPETS)
    code = "\n".join([readme, *DOC_SNIPPETS])
    public = [name for name in rvfedprs.__all__ if name != "__version__"]
    assert {"open_genotypes", "simulate_cohort", "load_config", "train"} <= set(public)
    assert [name for name in public if not _used(name, code)] == []
    # the README itself shows what a user calls first
    assert [n for n in ("simulate_cohort", "load_config", "train") if not _used(n, readme)] == []


def test_a_public_name_counts_only_when_used():
    assert _used("train", "train(config)") and _used("Strategy", "issubclass(A, Strategy)")
    assert not _used("train", "# train the model") and not _used("Task", "MyTask(x)")


def test_snippet_extraction_finds_python_blocks_only():
    text = "a\n```python\nx = 1\n```\n```bash\nls\n```\n\n```python\ny = 2\nz = 3\n```\n"
    assert python_snippets(text) == [(2, "x = 1\n"), (9, "y = 2\nz = 3\n")]


_PROBE = """
import sys

import rvfedprs

heavy = sorted({"torch", "pandas", "sklearn", "flwr", "numpy"} & set(sys.modules))
assert heavy == [], heavy
public = [name for name in rvfedprs.__all__ if name != "__version__"]
assert [name for name in public if not callable(getattr(rvfedprs, name))] == []
assert sorted(set(public) - set(dir(rvfedprs))) == []
# what a researcher extends is exported as the class the library itself uses
from rvfedprs.federation.task import Task
from rvfedprs.strategies.base import Strategy
from rvfedprs.strategies.fedavg import FedAvg

assert rvfedprs.Strategy is Strategy and rvfedprs.Task is Task
assert issubclass(FedAvg, rvfedprs.GlobalModelStrategy)
assert rvfedprs.register_strategy.__module__ == "rvfedprs.strategies"
try:
    rvfedprs.no_such_name
except AttributeError as error:
    assert "no_such_name" in str(error)
else:
    raise AssertionError("rvfedprs.no_such_name gave no AttributeError")
"""


def test_importing_rvfedprs_is_light_and_every_public_name_resolves():
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.slow
@pytest.mark.parametrize("line", [line for line, _ in SNIPPETS], ids=lambda n: f"README.md:{n}")
def test_readme_snippet_runs_as_written(outcomes, line):
    outcome = outcomes[line]
    if isinstance(outcome, str):
        pytest.skip(outcome)
    assert outcome.returncode == 0, f"README.md:{line} failed:\n{outcome.stderr[-4000:]}"
    assert outcome.stdout.strip(), f"README.md:{line} printed nothing"
