"""Test metrics of a quantitative phenotype, as PRS papers and PRSice-2 report them (SPEC §10).

For a score s (a model's prediction or a PRS), covariates C and a trait y on a test split:

- ``r2``: the squared correlation of s and y (PRSice-2's R² of y ~ s), with the 95% interval
  of Fisher's z of the correlation;
- ``incremental_r2``: R²(y ~ C + s) − R²(y ~ C) of least-squares fits (PRSice-2's PRS.R2 =
  Full.R2 − Null.R2, both reported), its interval from the partial correlation of s and y given
  C (Fisher's z with n − k − 3 degrees of freedom, k covariates), since
  ΔR² = r²_partial · (1 − R²_null);
- ``partial_r``: that partial correlation;
- ``beta_per_sd``: the slope of y on s standardised to sd 1 (in the trait's units: standardised
  units for a standardised trait), given C, with the 95% interval of its OLS standard error
  (Student's t with n − k − 2 degrees of freedom);
- ``top_decile_difference``: the mean trait of the 10% with the highest scores minus that of
  the other 90%, with Welch's 95% interval;
- ``mse``: the mean squared error of s as a prediction of y.

:func:`quantitative_metrics` returns them pooled, per client and per true cluster, and restricted
to the carriers of causal rare variants, in the shape :func:`rvfedprs.evaluation.
federation_metrics` gives a binary phenotype's.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from rvfedprs.evaluation.metrics import cluster_label
from rvfedprs.training import ClientData

__all__ = [
    "SUMS",
    "trait_sums",
    "pooled_sums",
    "design_sums",
    "sums_metrics",
    "test_summary",
    "pooled_test_metrics",
    "r2_score",
    "r2_interval",
    "client_r2_intervals",
    "ols_r2",
    "score_metrics",
    "ols_half_width",
    "quantitative_metrics",
    "quantitative_prs_metrics",
]

_Z = float(stats.norm.ppf(0.975))

#: The sums of a trait and a score a site sends (validation, test), in order.
SUMS = ("n", "sum_y", "sum_yy", "sum_p", "sum_pp", "sum_yp")


def trait_sums(y: np.ndarray, s: np.ndarray) -> dict[str, float]:
    """:data:`SUMS` of trait ``y`` and score ``s``: n, Σy, Σy², Σs, Σs², Σys."""
    y, s = np.asarray(y, dtype=np.float64), np.asarray(s, dtype=np.float64)
    values = (y.size, y.sum(), y @ y, s.sum(), s @ s, y @ s)
    return {k: (int(v) if k == "n" else float(v)) for k, v in zip(SUMS, values, strict=True)}


def pooled_sums(sums: Mapping[str, float]) -> dict[str, float]:
    """``r`` (the correlation), ``r2``, ``mse`` and ``n`` of pooled :data:`SUMS`."""
    n = float(sums["n"])
    if n < 2:
        return {"r": float("nan"), "r2": float("nan"), "mse": float("nan"), "n": n}
    sy, syy, sp_, spp, syp = (float(sums[k]) for k in SUMS[1:])
    cov = syp - sy * sp_ / n
    var_y, var_p = syy - sy * sy / n, spp - sp_ * sp_ / n
    r = cov / np.sqrt(var_y * var_p) if var_y > 0 and var_p > 0 else float("nan")
    return {"r": float(np.clip(r, -1.0, 1.0)), "r2": float(min(r * r, 1.0)),
            "mse": float((syy - 2 * syp + spp) / n), "n": n}  # fmt: skip


def client_r2_intervals(sums: Mapping[str, Mapping[str, float]]) -> dict[str, list[float]]:
    """{client: [low, high]}: the 95% interval of each client's R² from its :data:`SUMS`."""
    out = {}
    for client, own in sums.items():
        fit = pooled_sums(own)
        out[client] = list(r2_interval(fit["r"], int(fit["n"]) - 3))
    return out


def _fisher_interval(r: float, dof: int) -> tuple[float, float]:
    """95% interval of a correlation from Fisher's z with ``dof`` (n − 3 − covariates)."""
    if not np.isfinite(r) or dof < 1 or abs(r) >= 1:
        return float("nan"), float("nan")
    z, half = np.arctanh(r), _Z / np.sqrt(dof)
    return float(np.tanh(z - half)), float(np.tanh(z + half))


def _squared_interval(low: float, high: float) -> tuple[float, float]:
    """The interval of r² from that of r (0 inside when the interval of r holds 0)."""
    if not (np.isfinite(low) and np.isfinite(high)):
        return float("nan"), float("nan")
    if low <= 0 <= high:
        return 0.0, float(max(low * low, high * high))
    return float(min(low * low, high * high)), float(max(low * low, high * high))


def r2_interval(r: float, dof: int) -> tuple[float, float]:
    """The 95% interval of r² from Fisher's z of the correlation ``r`` (``dof`` degrees of freedom).

    ``dof`` is n − 3 for a correlation, n − k − 3 for a partial correlation given k covariates;
    the interval holds 0 when that of r does.
    """
    return _squared_interval(*_fisher_interval(r, dof))


def r2_score(y: np.ndarray, s: np.ndarray) -> float:
    """The squared correlation of ``s`` and ``y`` (NaN when either is constant or n < 3)."""
    y, s = np.asarray(y, np.float64), np.asarray(s, np.float64)
    if y.size < 3 or np.ptp(y) == 0 or np.ptp(s) == 0:
        return float("nan")
    return float(np.corrcoef(y, s)[0, 1] ** 2)


def ols_r2(x: np.ndarray, y: np.ndarray) -> float:
    """R² of the least-squares fit of ``y`` on [1, ``x``] (``x`` may have 0 columns)."""
    y = np.asarray(y, np.float64)
    design = np.column_stack([np.ones(y.size), np.asarray(x, np.float64).reshape(y.size, -1)])
    coef, *_ = np.linalg.lstsq(design, y, rcond=None)
    residual = y - design @ coef
    total = float(np.sum((y - y.mean()) ** 2))
    return float(1.0 - residual @ residual / total) if total > 0 else float("nan")


def score_metrics(
    y: np.ndarray, s: np.ndarray, covariates: np.ndarray | None = None, *, ddof: int = 0
) -> dict[str, float]:
    """Every metric of the module docstring for one score on one sample.

    Parameters
    ----------
    y : array, shape (n,)
    s : array, shape (n,)
    covariates : array, shape (n, k), optional
    ddof : int
        Delta degrees of freedom of the SD that ``beta_per_sd`` standardises ``s`` with (0: the
        population SD; ``rvfedprs assess`` uses 1, the sample SD).
    """
    y, s = np.asarray(y, np.float64), np.asarray(s, np.float64)
    n = int(y.size)
    c = (
        np.zeros((n, 0))
        if covariates is None
        else np.asarray(covariates, np.float64).reshape(n, -1)
    )
    nan = float("nan")
    out: dict[str, float] = {"n": n, "r2": r2_score(y, s)}
    r = float(np.sign(np.cov(y, s)[0, 1]) * np.sqrt(out["r2"])) if n >= 3 else nan
    out["r2_lo"], out["r2_hi"] = r2_interval(r, n - 3)
    out["mse"] = float(np.mean((y - s) ** 2)) if n else nan
    if n < c.shape[1] + 3 or not np.isfinite(out["r2"]):
        return out | {k: nan for k in ("null_r2", "full_r2", "incremental_r2", "incremental_r2_lo",
                                       "incremental_r2_hi", "partial_r", "beta_per_sd",
                                       "beta_per_sd_lo", "beta_per_sd_hi", "top_decile_difference",
                                       "top_decile_difference_lo", "top_decile_difference_hi")
                      }  # fmt: skip
    null, full = ols_r2(c, y), ols_r2(np.column_stack([c, s]), y)
    design = np.column_stack([np.ones(n), c])
    resid_y = y - design @ np.linalg.lstsq(design, y, rcond=None)[0]
    resid_s = s - design @ np.linalg.lstsq(design, s, rcond=None)[0]
    partial = float(np.corrcoef(resid_y, resid_s)[0, 1]) if np.ptp(resid_s) > 0 else nan
    low, high = r2_interval(partial, n - c.shape[1] - 3)
    scaled = np.column_stack([design, (s - s.mean()) / s.std(ddof=ddof)])
    coef, *_ = np.linalg.lstsq(scaled, y, rcond=None)
    residual = y - scaled @ coef
    beta, half = float(coef[-1]), ols_half_width(scaled.T @ scaled, residual @ residual, n)
    top = s >= np.quantile(s, 0.9)
    out |= {
        "null_r2": null,
        "full_r2": full,
        "incremental_r2": full - null,
        "incremental_r2_lo": low * (1 - null),
        "incremental_r2_hi": high * (1 - null),
        "partial_r": partial,
        "beta_per_sd": beta,
        "beta_per_sd_lo": beta - half,
        "beta_per_sd_hi": beta + half,
    }
    out |= _top_decile(y[top], y[~top])
    return out


def ols_half_width(xtx: np.ndarray, rss: float, n: int) -> float:
    """Half the 95% interval of the last coefficient of a least-squares fit.

    Its OLS standard error √(σ̂² (X'X)⁻¹ₚₚ), σ̂² = RSS / (n − p), times Student's t with n − p
    degrees of freedom (statsmodels' ``OLS.conf_int``).

    Parameters
    ----------
    xtx : array, shape (p, p)
        X'X of the design (its last column the coefficient's).
    rss : float
        The fit's residual sum of squares.
    n : int
        The samples fitted.
    """
    p = xtx.shape[0]
    if n <= p:
        return float("nan")
    variance = rss / (n - p) * np.linalg.pinv(xtx)[-1, -1]
    return float(stats.t.ppf(0.975, n - p) * np.sqrt(max(variance, 0.0)))


def _top_decile(top: np.ndarray, rest: np.ndarray) -> dict[str, float]:
    """Mean of ``top`` − mean of ``rest`` with Welch's 95% interval."""
    nan = float("nan")
    if top.size < 2 or rest.size < 2:
        return {"top_decile_difference": nan, "top_decile_difference_lo": nan,
                "top_decile_difference_hi": nan}  # fmt: skip
    diff = float(top.mean() - rest.mean())
    va, vb = top.var(ddof=1) / top.size, rest.var(ddof=1) / rest.size
    se = float(np.sqrt(va + vb))
    dof = (va + vb) ** 2 / (va**2 / (top.size - 1) + vb**2 / (rest.size - 1)) if se else 1.0
    half = float(stats.t.ppf(0.975, dof)) * se
    return {"top_decile_difference": diff, "top_decile_difference_lo": diff - half,
            "top_decile_difference_hi": diff + half}  # fmt: skip


def _reference_r2(y, prs, genetic, prefix: str = "") -> dict[str, float]:
    out = {f"{prefix}prs_only_r2": r2_score(y, prs)}
    if genetic is not None:
        out[f"{prefix}oracle_r2"] = r2_score(y, genetic)
    return out


def quantitative_metrics(
    predictions: Mapping[str, np.ndarray],
    test: Mapping[str, ClientData],
    *,
    carriers: Mapping[str, np.ndarray] | None = None,
    genetic: Mapping[str, np.ndarray] | None = None,
    sample_clusters: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Pooled, per-client, carrier and per-cluster metrics of a quantitative phenotype.

    Parameters as :func:`rvfedprs.evaluation.federation_metrics` (predictions: the predicted
    standardised trait).

    Returns
    -------
    dict
        ``metric`` ("r2"), :func:`score_metrics` of the pooled predictions with the pooled
        covariates (``r2``, ``r2_lo``, ``r2_hi``, ``incremental_r2``...), ``client_r2``
        {client: r2} and ``client_r2_ci`` {client: [low, high]} (Fisher's z),
        ``client_r2_mean``, ``client_r2_std``, ``prs_only_r2`` (and with ``genetic``
        ``oracle_r2``), with ``carriers`` ``carrier_r2``, ``n_carriers`` and the
        carrier references, with ``sample_clusters`` ``cluster_metrics``.
    """
    clients = sorted(predictions)
    y = np.concatenate([test[c].y for c in clients]).astype(np.float64)
    p = np.concatenate([predictions[c] for c in clients]).astype(np.float64)
    prs = np.concatenate([test[c].prs for c in clients]).astype(np.float64)
    cov = np.concatenate([test[c].covariates for c in clients]).astype(np.float64)
    g = None if genetic is None else np.concatenate([genetic[c] for c in clients])
    client_r2 = {c: r2_score(test[c].y, predictions[c]) for c in clients}
    finite = np.array([v for v in client_r2.values() if np.isfinite(v)])
    out: dict[str, Any] = {
        "metric": "r2",
        **score_metrics(y, p, cov),
        "carrier_r2": float("nan"),
        "n_carriers": None,
        "client_r2": client_r2,
        "client_r2_ci": client_r2_intervals(
            {c: trait_sums(test[c].y, predictions[c]) for c in clients}
        ),  # fmt: skip
        "client_r2_mean": float(finite.mean()) if finite.size else float("nan"),
        "client_r2_std": float(finite.std()) if finite.size else float("nan"),
        **_reference_r2(y, prs, g),
    }
    mask = None
    if carriers is not None:
        mask = np.concatenate([carriers[c] for c in clients])
        out["n_carriers"] = int(mask.sum())
        out["carrier_r2"] = r2_score(y[mask], p[mask])
        out |= _reference_r2(y[mask], prs[mask], None if g is None else g[mask], "carrier_")
    if sample_clusters is not None:
        labels = np.concatenate([np.asarray(sample_clusters[c], dtype=object) for c in clients])
        labels = np.asarray([cluster_label(v) for v in labels], dtype=object)
        out["cluster_metrics"] = {}
        for k in sorted(set(labels)):
            rows = labels == k
            g_rows = None if g is None else g[rows]
            entry = {"n": int(rows.sum()), "r2": r2_score(y[rows], p[rows]),
                     **_reference_r2(y[rows], prs[rows], g_rows)}  # fmt: skip
            if mask is not None:
                both = rows & mask
                entry |= {"n_carriers": int(both.sum()), "carrier_r2": r2_score(y[both], p[both])}
            out["cluster_metrics"][k] = entry
    return out


def quantitative_prs_metrics(
    predictions: Mapping[str, np.ndarray], test: Mapping[str, ClientData], **_: Any
) -> dict[str, Any]:
    """:func:`score_metrics` of every client's predictions on its test split, and pooled.

    Returns
    -------
    dict
        ``pooled`` and ``clients`` ({client: metrics}), as
        :func:`~rvfedprs.evaluation.prs_metrics.federation_prs_metrics`.
    """
    clients = sorted(predictions)
    per_client = {c: score_metrics(test[c].y, predictions[c], test[c].covariates)
                  for c in clients}  # fmt: skip
    pooled = score_metrics(
        np.concatenate([test[c].y for c in clients]),
        np.concatenate([predictions[c] for c in clients]),
        np.concatenate([test[c].covariates for c in clients]),
    )
    return {"pooled": pooled, "clients": per_client}


def design_sums(y: np.ndarray, score: np.ndarray, covariates: np.ndarray | None) -> dict:
    """A site's least-squares sums over X = [1, covariates, score]: n, XᵀX, Xᵀy, yᵀy.

    Summed over sites they give the pooled fits exactly (:func:`sums_metrics`).
    """
    y = np.asarray(y, np.float64)
    c = np.zeros((y.size, 0)) if covariates is None else np.asarray(covariates, np.float64)
    x = np.column_stack([np.ones(y.size), c.reshape(y.size, -1), score]).astype(np.float64)
    return {"n": int(y.size), "xtx": x.T @ x, "xty": x.T @ y, "yty": float(y @ y)}


def _sums_fit(xtx: np.ndarray, xty: np.ndarray, yty: float, columns: list[int]):
    """Least squares on ``columns`` of the design from its sums: coefficients and RSS."""
    coef = np.linalg.lstsq(xtx[np.ix_(columns, columns)], xty[columns], rcond=None)[0]
    return coef, float(yty - coef @ xty[columns])


def sums_metrics(sums: Sequence[Mapping[str, Any]], *, min_samples: int = 3) -> dict | None:
    """Null, full, incremental and score-alone R², partial r and β per SD from summed sums.

    Parameters
    ----------
    sums : sequence of :func:`design_sums`
    min_samples : int
        Fewest samples (besides k + 4 for k covariates) to fit.

    Returns
    -------
    dict or None
        ``n``, ``null_r2``, ``full_r2``, ``incremental_r2`` (with ``_lo``/``_hi``), ``r2``
        (with ``_lo``/``_hi``), ``partial_r``, ``beta_per_sd`` (with ``_lo``/``_hi``; the score
        standardised by its sample sd); None with too few samples, a constant trait or score.
    """
    n = sum(int(s["n"]) for s in sums)
    xtx = sum(np.asarray(s["xtx"], np.float64) for s in sums)
    xty = sum(np.asarray(s["xty"], np.float64) for s in sums)
    yty = float(sum(float(s["yty"]) for s in sums))
    p = xtx.shape[0]
    k = p - 2
    total = yty - xty[0] ** 2 / n if n else 0.0
    score_ss = xtx[-1, -1] - xtx[0, -1] ** 2 / n if n else 0.0
    if n < max(min_samples, k + 4) or total <= 0 or score_ss <= 0:
        return None
    _, null_rss = _sums_fit(xtx, xty, yty, list(range(k + 1)))
    full_coef, full_rss = _sums_fit(xtx, xty, yty, list(range(p)))
    alone_coef, alone_rss = _sums_fit(xtx, xty, yty, [0, p - 1])
    null, full, alone = 1 - null_rss / total, 1 - full_rss / total, 1 - alone_rss / total
    r = float(np.sign(alone_coef[-1]) * np.sqrt(max(alone, 0.0)))
    partial = float(np.sign(full_coef[-1]) * np.sqrt(max(1 - full_rss / null_rss, 0.0)))
    low, high = r2_interval(partial, n - k - 3)
    sd = float(np.sqrt(score_ss / (n - 1)))
    beta, half = full_coef[-1] * sd, ols_half_width(xtx, full_rss, n) * sd
    r2_lo, r2_hi = r2_interval(r, n - 3)
    return {
        "n": n,
        "incremental_r2": full - null,
        "incremental_r2_lo": low * (1 - null),
        "incremental_r2_hi": high * (1 - null),
        "null_r2": null,
        "full_r2": full,
        "r2": alone,
        "r2_lo": r2_lo,
        "r2_hi": r2_hi,
        "partial_r": partial,
        "beta_per_sd": float(beta),
        "beta_per_sd_lo": float(beta - half),
        "beta_per_sd_hi": float(beta + half),
    }


def test_summary(
    y: np.ndarray,
    pred: np.ndarray,
    *,
    prs: np.ndarray,
    covariates: np.ndarray | None = None,
    carriers: np.ndarray | None = None,
) -> dict[str, Any]:
    """What a site sends of its test split under its model: sums, and its own R².

    ``sums`` (n, Σy, Σy², Σŷ, Σŷ², Σyŷ) of the prediction and ``prs_sums`` of the PRS (the
    pooled R²s), ``design`` (:func:`design_sums` over [1, covariates, ŷ], as lists: the pooled
    null, full and incremental R²), ``carrier_sums`` (the carriers' sums, or None),
    ``n_carriers``, and the site's own ``r2``: nothing per sample.
    """
    y, p = np.asarray(y, np.float64), np.asarray(pred, np.float64)
    design = design_sums(y, p, covariates)
    out: dict[str, Any] = {
        "n": int(y.size),
        "r2": r2_score(y, p),
        "sums": trait_sums(y, p),
        "prs_sums": trait_sums(y, np.asarray(prs, np.float64)),
        "design": {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in design.items()},
        "carrier_sums": None,
        "n_carriers": None,
    }
    if carriers is not None:
        mask = np.asarray(carriers, dtype=bool)
        out["carrier_sums"] = trait_sums(y[mask], p[mask])
        out["carrier_prs_sums"] = trait_sums(y[mask], np.asarray(prs, np.float64)[mask])
        out["n_carriers"] = int(mask.sum())
    return out


def pooled_test_metrics(summaries: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """:func:`quantitative_metrics`' pooled keys from the sites' :func:`test_summary`.

    Exact: every statistic is a function of the summed sums (the intervals use the pooled n).
    """
    sites = sorted(summaries)

    def total(key: str) -> dict[str, float] | None:
        parts = [summaries[s][key] for s in sites if summaries[s].get(key) is not None]
        return {k: sum(float(p[k]) for p in parts) for k in SUMS} if parts else None

    pooled = pooled_sums(total("sums"))
    fitted = sums_metrics([summaries[s]["design"] for s in sites])
    if fitted is None:
        fitted = dict.fromkeys(("incremental_r2", "incremental_r2_lo", "incremental_r2_hi",
                                "null_r2", "full_r2", "r2_lo", "r2_hi", "partial_r"),
                               float("nan"))  # fmt: skip
    client_r2 = {s: float(summaries[s]["r2"]) for s in sites}
    finite = np.array([v for v in client_r2.values() if np.isfinite(v)])
    carriers, carrier_prs = total("carrier_sums"), total("carrier_prs_sums")
    with_carriers = [s for s in sites if summaries[s].get("n_carriers") is not None]
    keys = ("r2_lo", "r2_hi", "null_r2", "full_r2", "incremental_r2", "incremental_r2_lo",
            "incremental_r2_hi", "partial_r")  # fmt: skip
    return {
        "metric": "r2",
        "n": int(pooled["n"]),
        "r2": pooled["r2"],
        "mse": pooled["mse"],
        **{k: fitted[k] for k in keys},
        "client_r2": client_r2,
        "client_r2_ci": client_r2_intervals({s: summaries[s]["sums"] for s in sites}),
        "client_r2_mean": float(finite.mean()) if finite.size else float("nan"),
        "client_r2_std": float(finite.std()) if finite.size else float("nan"),
        "prs_only_r2": pooled_sums(total("prs_sums"))["r2"],
        "carrier_r2": pooled_sums(carriers)["r2"] if carriers else float("nan"),
        "carrier_prs_only_r2": pooled_sums(carrier_prs)["r2"] if carrier_prs else float("nan"),
        "n_carriers": (
            int(sum(summaries[s]["n_carriers"] for s in with_carriers)) if with_carriers else None
        ),  # fmt: skip
    }
