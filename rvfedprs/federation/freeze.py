"""A test hook: a site stopped before it answers a named step, for a test to kill its node there.

A real node answers most steps in milliseconds, too fast to kill it at a known point from its
log. When the node's environment names a folder (:data:`FREEZE_DIR_ENV`) that holds a file
``<site>@<step>``, that site, asked that step, writes ``<site>@<step>.reached`` there and waits
without answering while the file exists, at most :data:`FREEZE_SECONDS`. Steps are those a
site answers (``client03@secagg.share``, ``site2@features``) and the rounds it trains:
``client01@train.2`` for round 2 of a training run, ``client01@warm_start.2`` for round 2 of
the warm-start fit. The Flower ClientApp checks it before each
(:mod:`rvfedprs.federation.flower.client_app`); unset, nothing happens
(``tests/test_fault_suite.py``, ``tests/test_deploy_resume.py``,
``tests/test_study_resume.py``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

__all__ = ["FREEZE_DIR_ENV", "FREEZE_SECONDS", "freeze_file", "reached_file", "freeze_if_asked"]

FREEZE_DIR_ENV = "RVFEDPRS_TEST_FREEZE_DIR"
FREEZE_SECONDS = 600.0


def freeze_file(folder: str | Path, site: str, step: str) -> Path:
    """The file in ``folder`` that asks ``site`` to freeze at ``step``."""
    return Path(folder) / f"{site}@{step}"


def reached_file(asked: Path) -> Path:
    """The file a site writes once it is frozen at the step the file ``asked`` names."""
    return asked.with_name(f"{asked.name}.reached")


def freeze_if_asked(site: str, step: str) -> bool:
    """Wait here while the folder of :data:`FREEZE_DIR_ENV` asks ``site`` to at ``step``.

    Returns
    -------
    bool
        True when the site was frozen (and has been let go, or waited :data:`FREEZE_SECONDS`).
    """
    folder = os.environ.get(FREEZE_DIR_ENV)
    if not folder:
        return False
    asked = freeze_file(folder, site, step)
    if not asked.exists():
        return False
    reached_file(asked).touch()
    deadline = time.monotonic() + FREEZE_SECONDS
    while asked.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    return True
