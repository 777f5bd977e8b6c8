"""What the workflow's rules log, and what the terminal hears when a run stops or ends.

A pipeline script (``pipelines/*.py``) runs inside :func:`logged_rule`: its logging goes to the
rule's ``log:`` file. A data or configuration error (:class:`~rvfedprs.exceptions.RvfedprsError`)
ends the job with its one-line message on stderr, the traceback in the log and the message in
``<log>.error``; any other exception is a bug and keeps its traceback on the terminal too.

Snakemake prints its own job dump after a failure, which buries the message, so the
Snakefile's ``onerror`` calls :func:`report_errors` to repeat every failed rule's message last;
its ``onsuccess`` calls :func:`report_exclusions`, which counts every exclusion of the run per
step and per client and names every client left out.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TextIO

import pandas as pd

from rvfedprs.exceptions import RvfedprsError

__all__ = ["ERROR_SUFFIX", "clear_errors", "logged_rule", "report_errors", "report_exclusions"]

#: Appended to a rule's log path for the file holding its error message.
ERROR_SUFFIX = ".error"

#: How many distinct reasons a step's line names.
_REASONS_SHOWN = 3


@contextmanager
def logged_rule(job: Any) -> Iterator[None]:
    """Send logging to the rule's ``log:`` file; a data error ends the job with one line.

    Parameters
    ----------
    job : snakemake.script.Snakemake
        The object Snakemake injects into a ``script:`` (``log[0]`` and ``rule`` are used).
    """
    logging.basicConfig(
        filename=job.log[0], level=logging.INFO, format="%(asctime)s %(message)s", force=True
    )
    rule = getattr(job, "rule", "?")
    wildcards = dict(getattr(job, "wildcards", {}) or {})
    where = rule + "".join(f" {k}={v}" for k, v in wildcards.items())
    try:
        yield
    except RvfedprsError as exc:
        logging.exception("rule %s failed", rule)
        _write_error(job.log[0], where, str(exc))
        print(f"rvfedprs: error in {where}: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(1) from None
    except Exception as exc:
        logging.exception("rule %s failed", rule)
        _write_error(job.log[0], where, f"{type(exc).__name__}: {exc} (an rvfedprs bug?)")
        raise


def _write_error(log: str | Path, where: str, message: str) -> None:
    Path(f"{log}{ERROR_SUFFIX}").write_text(f"{where}\t{' '.join(message.split())}\n")


def clear_errors(logs: str | Path) -> None:
    """Remove the error files an earlier run left under ``logs`` (the Snakefile's ``onstart``)."""
    for path in Path(logs).rglob(f"*.log{ERROR_SUFFIX}"):
        path.unlink(missing_ok=True)


def report_errors(logs: str | Path, stream: TextIO | None = None) -> int:
    """Print every failed rule's message under ``logs`` as the run's last lines.

    Returns
    -------
    int
        How many failed rules were reported.
    """
    stream = sys.stderr if stream is None else stream
    found = sorted(Path(logs).rglob(f"*.log{ERROR_SUFFIX}"))
    if not found:
        return 0
    print(f"\nrvfedprs: the run stopped on {len(found)} error(s):", file=stream)
    for path in found:
        where, _, message = path.read_text().strip().partition("\t")
        log = path.with_name(path.name.removesuffix(ERROR_SUFFIX))
        print(f"  {where}: {message}\n    (traceback in {log})", file=stream)
    stream.flush()
    return len(found)


def report_exclusions(logs: str | Path, stream: TextIO | None = None) -> pd.DataFrame:
    """Count on the terminal every exclusion the run's steps logged under ``logs/exclusions``.

    One line per step and kind (samples, variants, clients) with its most common reasons, the
    sample QC per client, and every excluded client by name with its reason. Nothing excluded is
    said too.

    Returns
    -------
    DataFrame
        ``step, kind, client, n`` (``client`` empty where a step is not per client).
    """
    stream = sys.stderr if stream is None else stream
    folder = Path(logs) / "exclusions"
    tables = []
    for path in sorted(folder.rglob("*.tsv")) if folder.is_dir() else []:
        table = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False)
        per_client = path.parent != folder  # exclusions/<step>/<client>.tsv
        tables.append(table.assign(client=path.stem if per_client else ""))
    rows = pd.concat(tables, ignore_index=True) if tables else pd.DataFrame()
    merged = Path(logs) / "exclusions.tsv"
    if rows.empty:
        if tables:
            print("rvfedprs: nothing was excluded in this run", file=stream)
        return pd.DataFrame(columns=["step", "kind", "client", "n"])
    print(f"rvfedprs: exclusions in this run (every one with its reason: {merged}):", file=stream)
    for (step, kind), group in rows.groupby(["step", "kind"], sort=False):
        reasons = group["reason"].map(_reason_kind).value_counts()
        named = ", ".join(f"{r} ({n})" for r, n in reasons.head(_REASONS_SHOWN).items())
        others = len(reasons) - _REASONS_SHOWN
        more = f", {others} other reasons" if others > 0 else ""
        print(f"  {step}: {len(group)} {kind}(s): {named}{more}", file=stream)
        clients = group["client"][group["client"] != ""].value_counts().sort_index()
        if len(clients):
            print(
                "    per client: " + ", ".join(f"{c} {n}" for c, n in clients.items()), file=stream
            )
    lost = rows[rows["kind"] == "client"]
    for client in lost.itertuples():
        print(f"  client {client.id} left out ({client.step}): {client.reason}", file=stream)
    stream.flush()
    counts = rows.groupby(["step", "kind", "client"], sort=False).size()
    return counts.rename("n").reset_index()


def _reason_kind(reason: str) -> str:
    """A reason without its per-sample details and numbers, so that alike reasons count together."""
    text = " ".join(str(reason).split()).partition(" (")[0]
    return re.sub(r"(?<![\w'.-])-?\d+(\.\d+)?(e-?\d+)?", "#", text)[:80]
