"""Make Snakemake honour ``--cores``: charge a job selected alone for its cores.

Snakemake 9.16.3's scheduler (``JobScheduler.job_selector``) returns early when exactly one job
is ready (``if len(jobs) == 1: return self.job_selector_greedy(...)``) without subtracting that
job's resources from what is free, but adds them back when the job finishes. Every job that
was ready alone therefore leaves one more core (and one more of every resource) than
``--cores`` allows: after the workflow's ``validate_inputs`` checkpoint, which always runs alone,
``--cores 2`` started up to 8 jobs at once (all five trainings, 1.0–1.6 GB each); a 15-line
Snakefile with a checkpoint and six 1-thread jobs starts three at once under ``--cores 2``
(``tests/test_snakemake_cores.py``; snakemake/snakemake#3795 reports ``--jobs 1`` not honoured).

:func:`honour_cores` wraps the method so that a lone job is charged as a batch is; the Snakefile
calls it before any job is scheduled. Snakemake releases that fix it are left alone
(:data:`AFFECTED_VERSIONS`), so the patch cannot charge a job twice.
"""

from __future__ import annotations

import functools

__all__ = ["AFFECTED_VERSIONS", "honour_cores"]

#: The Snakemake releases whose lone-job selection charges no resources (read in their source).
AFFECTED_VERSIONS = ("9.16.3",)


def honour_cores() -> bool:
    """Patch the installed Snakemake's scheduler to charge a job selected alone.

    Returns
    -------
    bool
        True when this Snakemake is an affected release and the scheduler is patched (or was
        already); False when it is left as it is.
    """
    from importlib.metadata import version

    from snakemake.scheduling.job_scheduler import JobScheduler

    if version("snakemake") not in AFFECTED_VERSIONS:
        return False
    selector = JobScheduler.job_selector
    if getattr(selector, "rvfedprs_charges_lone_jobs", False):
        return True

    @functools.wraps(selector)
    def job_selector(self, jobs):
        selected = selector(self, jobs)
        if len(jobs) == 1 and selected:
            with self._lock:  # the batch path charges under the same lock
                self.update_available_resources(selected)
        return selected

    job_selector.rvfedprs_charges_lone_jobs = True
    JobScheduler.job_selector = job_selector
    return True
