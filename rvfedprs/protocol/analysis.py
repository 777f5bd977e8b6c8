"""Paired analysis over independently simulated cohorts (SPEC §12), and its forest plot.

Training seeds on one cohort are not replicates: the unit of inference is the cohort. Within
each cohort every method is evaluated on the same test samples, so a comparison is the
within-cohort difference Δ_c = metric(method, c) − metric(reference, c); :func:`paired_deltas`
reports the mean of Δ_c over cohorts with a Student-t 95% interval (and how many cohorts favour
the method). The reference is a method name, or :data:`BEST_BASELINE`: in each cohort the
baseline with the best *validation* AUC (a choice made without the test split).

Where only one cohort exists (a paper-scale cohort is too costly to simulate ten times),
:func:`bootstrap_deltas` gives the same rows with a paired bootstrap over that cohort's test
samples: an interval for test-set sampling noise only, not for cohort-to-cohort variation.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.evaluation.paired import paired_bootstrap
from rvfedprs.evaluation.report.plots import save_figure
from rvfedprs.evaluation.report.tables import mean_ci
from rvfedprs.protocol.outcomes import metric_subsets

__all__ = ["BEST_BASELINE", "best_baselines", "paired_deltas", "bootstrap_deltas", "forest_plot"]

#: Reference resolved per cohort to the baseline with the best validation AUC.
BEST_BASELINE = "best_baseline"

_KEYS = ["scenario", "cohort"]


def best_baselines(
    validation: pd.DataFrame, candidates: Sequence[str], *, score: str = "validation_auc"
) -> pd.DataFrame:
    """Per (scenario, cohort), the candidate with the best validation score.

    Parameters
    ----------
    validation : DataFrame
        Columns ``scenario, cohort, method`` and ``score``.
    candidates : sequence of str
        The baselines eligible (e.g. every federated baseline; never FedCE or its ablations).
    score : str
        The column to choose on, higher is better: the validation AUC, or a trial's
        criterion-oriented score (``selection_score``: AUC, or minus the log-loss).

    Returns
    -------
    DataFrame
        ``scenario, cohort, method, validation_auc`` and ``score`` (the earliest candidate on
        a tie).
    """
    eligible = validation[validation["method"].isin(candidates)].copy()
    eligible["order"] = eligible["method"].map({m: i for i, m in enumerate(candidates)})
    eligible = eligible.sort_values([*_KEYS, score, "order"],
                                    ascending=[True, True, False, True])  # fmt: skip
    best = eligible.groupby(_KEYS, sort=True).head(1)
    columns = [*_KEYS, "method", *dict.fromkeys(["validation_auc", score])]
    return best[columns].reset_index(drop=True)


def paired_deltas(
    outcomes: pd.DataFrame,
    method: str,
    reference: str,
    *,
    best: pd.DataFrame | None = None,
    confidence: float = 0.95,
) -> pd.DataFrame:
    """Mean within-cohort difference of ``method`` vs ``reference`` over cohorts.

    Parameters
    ----------
    outcomes : DataFrame
        Columns ``scenario, cohort, method, subset, metric, value``.
    method : str
    reference : str
        A method name or :data:`BEST_BASELINE` (then ``best`` maps each cohort to one).
    best : DataFrame, optional
        :func:`best_baselines`' output.
    confidence : float

    Returns
    -------
    DataFrame
        One row per (scenario, subset, metric): ``method, reference, delta, ci_low, ci_high,
        n_cohorts, n_positive`` (cohorts with Δ > 0) and ``references`` (which baselines, for
        :data:`BEST_BASELINE`).
    """
    mine = outcomes[outcomes["method"] == method]
    if reference == BEST_BASELINE:
        if best is None:
            raise ValueError("reference 'best_baseline' needs best=best_baselines(...)")
        pick = best[[*_KEYS, "method"]].rename(columns={"method": "reference_method"})
        theirs = outcomes.merge(pick, on=_KEYS)
        theirs = theirs[theirs["method"] == theirs["reference_method"]]
    else:
        theirs = outcomes[outcomes["method"] == reference].assign(reference_method=reference)
    keys = [*_KEYS, "subset", "metric"]
    paired = mine[[*keys, "value"]].merge(
        theirs[[*keys, "value", "reference_method"]], on=keys, suffixes=("", "_ref")
    )
    paired["delta"] = paired["value"] - paired["value_ref"]
    paired = paired[np.isfinite(paired["delta"])]
    rows = []
    for (scenario, subset, metric), part in paired.groupby(["scenario", "subset", "metric"]):
        mean, half, n = mean_ci(part["delta"].tolist(), confidence)
        used = part["reference_method"].value_counts()
        rows.append(
            {
                "scenario": scenario,
                "subset": subset,
                "metric": metric,
                "method": method,
                "reference": reference,
                "delta": mean,
                "ci_low": mean - half,
                "ci_high": mean + half,
                "n_cohorts": n,
                "n_positive": int((part["delta"] > 0).sum()),
                "references": ", ".join(f"{m}×{k}" for m, k in used.items()),
            }
        )
    return pd.DataFrame(rows)


def bootstrap_deltas(
    predictions: Mapping[str, pd.DataFrame],
    method: str,
    reference: str,
    *,
    scenario: str,
    n_boot: int = 2000,
    confidence: float = 0.95,
    random_seed: int = 0,
) -> pd.DataFrame:
    """:func:`paired_deltas`' rows for one cohort, from a paired bootstrap over its test samples.

    Parameters
    ----------
    predictions : mapping
        Method → its test predictions (:func:`~rvfedprs.protocol.outcomes.predictions_frame`:
        ``sample_id, cluster, y, p, carrier``), every method on the same samples.
    method, reference : str
        Method names (a resolved best baseline is passed by its name).
    scenario : str
    n_boot, confidence, random_seed
        See :func:`~rvfedprs.evaluation.paired.paired_bootstrap` (cases and controls resampled
        separately, the same resamples for both methods).

    Returns
    -------
    DataFrame
        One row per (subset, metric) as :func:`paired_deltas` (``n_cohorts`` 1, ``n_positive``
        1 when Δ > 0), subsets ``pooled`` and ``cluster=<c>``, metrics ``auc`` and
        ``carrier_auc``; subsets without both classes are left out.

    Raises
    ------
    ValueError
        When the two methods were not scored on the same test samples.
    """
    mine = predictions[method].set_index("sample_id")
    theirs = predictions[reference].set_index("sample_id")
    if sorted(mine.index) != sorted(theirs.index):
        raise ValueError(f"{method} and {reference} were not scored on the same test samples")
    frame = mine.join(theirs[["p"]], rsuffix="_ref")
    rows = []
    for subset, metric, rows_of in metric_subsets(frame):
        y = rows_of["y"].to_numpy()
        if 0 < y.sum() < len(y):
            boot = paired_bootstrap(y, [rows_of["p"].to_numpy()], [rows_of["p_ref"].to_numpy()],
                                    n_boot=n_boot, confidence=confidence,
                                    random_seed=random_seed)  # fmt: skip
            rows.append({"scenario": scenario, "subset": subset, "metric": metric,
                         "method": method, "reference": reference,
                         "delta": boot["difference"], "ci_low": boot["ci_low"],
                         "ci_high": boot["ci_high"], "n_cohorts": 1,
                         "n_positive": int(boot["difference"] > 0),
                         "references": reference})  # fmt: skip
    return pd.DataFrame(rows)


def forest_plot(
    deltas: pd.DataFrame,
    out: str | Path,
    *,
    scenarios: Sequence[str],
    labels: Mapping[str, str] | None = None,
    title: str = "",
) -> Path:
    """Forest plot: Δ carrier AUC and Δ pooled AUC per scenario, two references each.

    Parameters
    ----------
    deltas : DataFrame
        :func:`paired_deltas` rows (subset ``pooled``) for one method against one or two
        references.
    out : str or Path
        PNG file.
    scenarios : sequence of str
        Top-to-bottom order.
    labels : mapping, optional
        Scenario → label shown on the axis (e.g. with the expectation).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pooled = deltas[deltas["subset"] == "pooled"]
    references = list(dict.fromkeys(pooled["reference"]))
    styles = [("o", "C0"), ("s", "C1"), ("^", "C2")]
    panels = [("carrier_auc", "Δ carrier AUC (primary)"), ("auc", "Δ pooled AUC")]
    fig, axes = plt.subplots(1, 2, figsize=(10, 0.55 * len(scenarios) + 1.8), sharey=True)
    y = np.arange(len(scenarios))[::-1]
    offsets = np.linspace(-0.15, 0.15, max(len(references), 1))
    for ax, (metric, heading) in zip(axes, panels, strict=True):
        for i, reference in enumerate(references):
            part = pooled[(pooled["metric"] == metric) & (pooled["reference"] == reference)]
            part = part.set_index("scenario").reindex(scenarios)
            marker, color = styles[i % len(styles)]
            ax.errorbar(
                part["delta"],
                y + offsets[i],
                xerr=[part["delta"] - part["ci_low"], part["ci_high"] - part["delta"]],
                fmt=marker,
                color=color,
                capsize=3,
                label=f"vs {reference.replace('_', ' ')}",
            )
        ax.axvline(0.0, color="grey", linewidth=0.8, linestyle="--")
        ax.set_xlabel(heading)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(y, [labels.get(s, s) if labels else s for s in scenarios])
    axes[1].legend(loc="lower right", fontsize="small")
    if title:
        fig.suptitle(title, fontsize="medium")
    fig.tight_layout()
    return save_figure(fig, out)
