"""Logging for the pipeline scripts that Snakemake runs (``pipelines/*.py``)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["logged_rule"]


@contextmanager
def logged_rule(job: Any) -> Iterator[None]:
    """Send logging to the rule's ``log:`` file and record a failure's traceback there.

    Parameters
    ----------
    job : snakemake.script.Snakemake
        The object Snakemake injects into a ``script:`` (``log[0]`` and ``rule`` are used).
    """
    logging.basicConfig(
        filename=job.log[0], level=logging.INFO, format="%(asctime)s %(message)s", force=True
    )
    try:
        yield
    except Exception:
        logging.exception("rule %s failed", getattr(job, "rule", "?"))
        raise
