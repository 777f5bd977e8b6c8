"""Warnings a result must carry: a model that ranks below chance or below the floor.

A trained model contains the PRS it started from (SPEC §4), so a test AUC below 0.5, or below
the PRS-only floor by more than its sampling interval, is a bug to find, not a finding. These
checks turn such results into explicit warnings, written beside the metrics and in the
comparison, instead of a number a reader has to notice.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

__all__ = ["Z95", "auc_warnings"]

#: The two-sided 95% normal quantile of the intervals.
Z95 = 1.959963984540054


def _finite(value: Any) -> bool:
    return value is not None and math.isfinite(float(value))


def auc_warnings(
    name: str,
    auc: float,
    *,
    se: float | None = None,
    floor_auc: float | None = None,
    client_auc: Mapping[str, float] | None = None,
    client_se: Mapping[str, float] | None = None,
) -> list[str]:
    """Warnings for one model's test AUCs (empty when there is nothing to say).

    Parameters
    ----------
    name : str
        The model (strategy) named in each message.
    auc, se : float
        Pooled test AUC and its (DeLong) standard error.
    floor_auc : float, optional
        The PRS-only floor's AUC on the same test samples.
    client_auc, client_se : mapping of client to float, optional
        Per-site AUCs and their standard errors.

    Returns
    -------
    list of str
        "below 0.5" for the pooled AUC and each site's, with its 95% interval; "below the
        floor beyond its interval" when auc + 1.96·se < floor_auc.
    """
    out = []

    def interval(value: float, error: float | None) -> str:
        if not _finite(error):
            return f"{value:.3f}"
        return f"{value:.3f} [{value - Z95 * error:.3f}, {value + Z95 * error:.3f}]"

    if _finite(auc) and auc < 0.5:
        out.append(f"{name}: pooled test AUC {interval(auc, se)} is below 0.5 (chance)")
    if _finite(auc) and _finite(floor_auc) and _finite(se) and auc + Z95 * se < floor_auc:
        out.append(
            f"{name}: pooled test AUC {interval(auc, se)} is below the PRS-only floor "
            f"{floor_auc:.3f} beyond its 95% interval"
        )
    for client, value in sorted((client_auc or {}).items()):
        if _finite(value) and value < 0.5:
            error = (client_se or {}).get(client)
            out.append(f"{name}: site {client} test AUC {interval(value, error)} is below 0.5")
    return out


def r2_warnings(name: str, metrics: Mapping[str, Any]) -> list[str]:
    """A quantitative run's warnings: pooled test R² below the PRS alone beyond its interval.

    Parameters
    ----------
    name : str
    metrics : mapping
        :func:`~rvfedprs.evaluation.quantitative.quantitative_metrics` (``r2``, ``r2_hi``,
        ``prs_only_r2``).
    """
    r2, high, floor = metrics.get("r2"), metrics.get("r2_hi"), metrics.get("prs_only_r2")
    if _finite(r2) and _finite(high) and _finite(floor) and high < floor:
        return [
            f"{name}: pooled test R² {r2:.3f} (95% CI up to {high:.3f}) is below the PRS "
            f"alone's {floor:.3f} beyond its interval"
        ]
    return []
