"""Suite-wide settings: one compute thread per pytest worker; in CI, no skipping for a missing tool.

CI runs ``pytest -n 2`` on two cores. Left alone, torch and the BLAS in every worker (and in the
Flower, Snakemake and simulator processes the tests start, which inherit the environment) each
start one thread per core, so the two workers oversubscribe the machine; a training round then
takes several times longer (BENCHMARKS.md, "Paper scale"). Set before torch or numpy is imported.

The oracle tests compare against external tools (:data:`EXTERNAL_TOOLS`) and skip where one is
not installed, which is right on a developer's machine but would let CI pass without ever
running them. Under ``CI=true`` a test whose skip reason names a tool that is missing from
``PATH`` fails instead (:func:`pytest_runtest_makereport`). Skips for absent data (the
``../shared/data`` files) and for missing optional Python packages stay skips.
"""

import os
import re
import shutil

import pytest

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")

#: The command-line tools the oracle tests run; a CI machine must have every one on PATH.
EXTERNAL_TOOLS = ("plink2", "bcftools", "bgzip", "tabix")


def in_ci() -> bool:
    """True when the ``CI`` environment variable is set to true (as CI services and .ci/run do)."""
    return os.environ.get("CI", "").strip().lower() in ("true", "1", "yes")


def missing_tools(reason: str) -> list[str]:
    """The tools of :data:`EXTERNAL_TOOLS` that ``reason`` names and ``PATH`` lacks."""
    named = [t for t in EXTERNAL_TOOLS if re.search(rf"(?<![\w-]){t}(?![\w-])", reason)]
    return [t for t in named if shutil.which(t) is None]


def _skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # (path, line, "Skipped: reason")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Under ``CI=true``, turn a skip for a missing external tool into a failure."""
    outcome = yield
    report = outcome.get_result()
    if not report.skipped or hasattr(report, "wasxfail") or not in_ci():
        return
    reason = _skip_reason(report)
    missing = missing_tools(reason)
    if missing:
        report.outcome = "failed"
        report.longrepr = (
            f"CI=true: {', '.join(missing)} not found on PATH, so this test would have been "
            f"skipped ({reason!r}); in CI a missing external tool is a failure. Install "
            f"{', '.join(missing)} (Debian/Ubuntu: apt-get install plink2 bcftools tabix) or "
            "run outside CI (CI unset) to skip."
        )


@pytest.fixture(scope="session")
def study_inputs(tmp_path_factory):
    """A small simulated cohort split into one folder per site (no training), built once."""
    from _workflows import run_workflow
    from test_snakemake import SMALL_COHORT

    root = tmp_path_factory.mktemp("study")
    config = {**SMALL_COHORT, "study": {"enabled": True}}
    run_workflow(root, config, ["results/sites/samplesheet.tsv",
                                "results/cohort/scores/PGS_sim.txt.gz"])  # fmt: skip
    return root / "results"


#: Test files that take longest (``--durations`` of the slow tier, 2026-12-04: a deployed tuned
#: study ≈ 14 min, the deployments and workflows of the others 4–8 min each), longest first.
#: Under ``-n 2 --dist loadfile`` a file is one unit of work handed out in collection order, so
#: these go first and the many short files fill in behind them: both workers finish together
#: instead of one starting the longest file last. A file missing here only runs later.
LONGEST_FIRST = (
    "test_study_tuning.py",
    "test_fault_suite.py",
    "test_study.py",
    "test_flower_engines.py",
    "test_deploy_resume.py",
    "test_imaging_flower.py",
    "test_site_validation.py",
    "test_snakemake.py",
    "test_snakemake_paper.py",
    "test_identity.py",
    "test_study_resume.py",
    "test_secagg_flower.py",
)


def pytest_collection_modifyitems(config, items):
    """Put the files of :data:`LONGEST_FIRST` first, in that order (the rest keep theirs)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))
