"""Reading run folders: what ``rvfedprs train`` / ``mia`` and the paper driver leave behind.

A run folder holds ``metrics.json`` (design §11 keys; the protocol driver adds ``experiment`` and
``label``), and optionally ``mia.json`` (per-client rows of
:func:`rvfedprs.evaluation.attacks.audit_federation`), ``mia_scores.npz`` (the scores behind them,
keys ``<client>__<attack or mask>``), ``channels.json`` (rows of
:func:`rvfedprs.evaluation.attacks.audit_channels`), ``predictions.parquet``, ``jaccard.npz`` and
``bloom_attack.json``. Every loader searches a root recursively.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation.attacks import ATTACK_ALIASES
from rvfedprs.exceptions import InputDataError

__all__ = ["DICT_COLUMNS", "load_runs", "load_mia", "load_audits", "load_bloom", "load_channels"]

#: Keys of ``metrics.json`` kept as dicts (every other dict or list is dropped).
DICT_COLUMNS = ("client_auc", "client_auc_se", "cluster_metrics")
_TEXT_COLUMNS = ("run", "strategy", "label", "experiment")


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per ``metrics.json`` under ``root`` (recursively).

    Columns: ``strategy``, ``seed``, ``experiment`` (default ``"main"``), ``label`` (default the
    strategy), every scalar metric, the dicts of :data:`DICT_COLUMNS` and ``run`` (the folder).

    Raises
    ------
    InputDataError
        When no metrics.json is found or one lacks ``strategy``/``seed``.
    """
    root = Path(root)
    paths = sorted(root.rglob("metrics.json"))
    if not paths:
        raise InputDataError(f"no metrics.json found under {root}")
    rows = []
    for path in paths:
        record = json.loads(path.read_text())
        missing = [k for k in ("strategy", "seed") if k not in record]
        if missing:
            raise InputDataError(f"{path} lacks keys {missing}")
        row: dict[str, Any] = {
            k: v for k, v in record.items() if not isinstance(v, (dict, list)) or k in DICT_COLUMNS
        }
        row.setdefault("experiment", "main")
        row.setdefault("label", record["strategy"])
        row["run"] = str(path.parent)
        rows.append(row)
    df = pd.DataFrame(rows)
    for column in df.columns:
        if column not in DICT_COLUMNS + _TEXT_COLUMNS:
            converted = pd.to_numeric(df[column], errors="coerce")
            if converted.notna().sum() == df[column].notna().sum():
                df[column] = converted
    return df


def _run_fields(record: dict[str, Any], path: Path) -> dict[str, Any]:
    return {
        "strategy": record["strategy"],
        "seed": record["seed"],
        "experiment": record.get("experiment", "main"),
        "label": record.get("label", record["strategy"]),
        "run": str(path.parent),
    }


def load_mia(root: str | Path) -> pd.DataFrame:
    """Every ``mia.json`` row under ``root``, with the run's strategy/seed/experiment/label/run.

    Older files name offline LiRA ``lira``; it is renamed ``lira_offline``. Column
    ``corrected`` tells whether the file was written with the advantage ``max (TPR − FPR)``
    (its rows carry ``min_resolvable_fpr``); older files used ``max |TPR − FPR|``.
    """
    rows = []
    for path in sorted(Path(root).rglob("mia.json")):
        record = json.loads(path.read_text())
        corrected = any("min_resolvable_fpr" in row for row in record["rows"])
        for row in record["rows"]:
            row = {**row, "attack": ATTACK_ALIASES.get(row["attack"], row["attack"])}
            rows.append({**_run_fields(record, path), "corrected": corrected, **row})
    df = pd.DataFrame(rows)
    for column in df.columns:
        if column.startswith("tpr_at_") or column in ("advantage", "accuracy_advantage", "auc"):
            df[column] = pd.to_numeric(df[column], errors="coerce")
    return df


def load_audits(root: str | Path) -> list[dict[str, Any]]:
    """The scores of every audited run: ``mia_scores.npz`` beside a ``mia.json``.

    Returns
    -------
    list of dict
        Per run: the run fields of :func:`load_mia`, ``clusters`` (client → true cluster, when
        the audit recorded it) and ``scores`` (client → {attack or mask: array}).
    """
    out = []
    for path in sorted(Path(root).rglob("mia_scores.npz")):
        meta = path.parent / "mia.json"
        if not meta.is_file():
            continue
        record = json.loads(meta.read_text())
        scores: dict[str, dict[str, np.ndarray]] = {}
        with np.load(path) as z:
            for key in z.files:
                client, name = key.rsplit("__", 1)
                scores.setdefault(client, {})[ATTACK_ALIASES.get(name, name)] = z[key]
        out.append(
            {**_run_fields(record, meta), "clusters": record.get("clusters"), "scores": scores}
        )
    return out


def load_bloom(root: str | Path) -> pd.DataFrame:
    """Every ``bloom_attack.json`` row under ``root``, with its seed."""
    rows = []
    for path in sorted(Path(root).rglob("bloom_attack.json")):
        record = json.loads(path.read_text())
        rows += [{"seed": record["seed"], **r} for r in record["rows"]]
    return pd.DataFrame(rows)


def load_channels(root: str | Path) -> pd.DataFrame:
    """Every ``channels.json`` row under ``root``, with the run fields and ``seen_by``.

    ``seen_by`` is ``"own updates"`` when the server received every client's own update and
    ``"secure sums"`` when it received only sums (secure aggregation); the Bloom filters travel
    in the clear in both.
    """
    rows = []
    for path in sorted(Path(root).rglob("channels.json")):
        record = json.loads(path.read_text())
        for row in record["rows"]:
            secure = row.get("secure_aggregation")
            if secure is None:  # files without the flag: a sum over several clients is secure
                n = row.get("n_summed")
                secure = n is not None and n == n and n > 1
            seen_by = "secure sums" if secure else "own updates"
            rows.append({**_run_fields(record, path), "seen_by": seen_by, **row})
    df = pd.DataFrame(rows)
    if not df.empty:
        df["hashing"] = df["hashing"].fillna("—")
    return df
