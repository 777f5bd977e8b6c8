"""What PRS papers report: covariate-adjusted incremental R² and the top-decile odds ratio.

For a score s (the model's logit), covariates C (age, sex, PCs: whatever the data carry) and a
binary phenotype y on a test split:

- **Nagelkerke incremental R²**: R²_N(y ~ C + s) − R²_N(y ~ C), both from logistic regressions,
  R²_N = [1 − exp(2(ℓ₀ − ℓ)/n)] / [1 − exp(2ℓ₀/n)] with ℓ₀ the intercept-only log-likelihood;
- **liability-scale incremental R²** (Lee, Goddard, Wray & Visscher, *A better coefficient of
  determination for genetic profile analysis*, Genet. Epidemiol. 2012): the observed-scale
  incremental R² of linear regressions, R²_O(y ~ C + s) − R²_O(y ~ C), times
  K²(1−K)² / (z² P(1−P)), with K the population prevalence, P the case fraction of the sample
  and z the standard normal density at the liability threshold Φ⁻¹(1 − K); K defaults to P;
- **top-decile odds ratio**: the odds of disease among the 10% with the highest scores against
  the other 90%, with Woolf's 95% interval (Haldane's ½ added when a cell is empty).

Every statistic is a function of sums (X'X, X'y, y'y and the logistic score and Hessian), so the
same functions serve pooled data and a federation that adds up its sites' sums.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import stats

from rvfedprs.training import ClientData

__all__ = [
    "logistic_loglik",
    "nagelkerke_r2",
    "observed_r2",
    "liability_factor",
    "incremental_r2",
    "top_decile_or",
    "prs_metrics",
    "federation_prs_metrics",
]


def _design(covariates: np.ndarray | None, n: int, score: np.ndarray | None = None) -> np.ndarray:
    parts = [np.ones((n, 1))]
    if covariates is not None and np.asarray(covariates).size:
        parts.append(np.asarray(covariates, dtype=np.float64).reshape(n, -1))
    if score is not None:
        parts.append(np.asarray(score, dtype=np.float64).reshape(n, 1))
    return np.hstack(parts)


def logistic_loglik(X: np.ndarray, y: np.ndarray, *, max_iter: int = 100) -> float:
    """Maximised log-likelihood of a logistic regression of ``y`` on ``X`` (Newton–Raphson).

    A tiny ridge (1e-9) keeps the Hessian invertible under separation; the log-likelihood is
    then the supremum approached.
    """
    y = np.asarray(y, dtype=np.float64)
    beta = np.zeros(X.shape[1])
    for _ in range(max_iter):
        eta = X @ beta
        p = 1.0 / (1.0 + np.exp(-eta))
        w = p * (1.0 - p)
        hessian = (X * w[:, None]).T @ X + 1e-9 * np.eye(X.shape[1])
        step = np.linalg.solve(hessian, X.T @ (y - p))
        beta += step
        if np.max(np.abs(step)) < 1e-10:
            break
    eta = X @ beta
    return float(np.sum(y * eta - np.logaddexp(0.0, eta)))


def nagelkerke_r2(loglik: float, loglik_intercept: float, n: int) -> float:
    """Nagelkerke's R² of a model against the intercept-only model."""
    cox_snell = 1.0 - np.exp(2.0 * (loglik_intercept - loglik) / n)
    return float(cox_snell / (1.0 - np.exp(2.0 * loglik_intercept / n)))


def observed_r2(X: np.ndarray, y: np.ndarray) -> float:
    """R² of a least-squares regression of ``y`` on ``X`` (with its intercept column)."""
    y = np.asarray(y, dtype=np.float64)
    beta, *_ = np.linalg.lstsq(X, y, rcond=None)
    residual = y - X @ beta
    total = y - y.mean()
    return float(1.0 - residual @ residual / (total @ total))


def liability_factor(prevalence: float, case_fraction: float) -> float:
    """Lee et al.'s K²(1−K)² / (z² P(1−P)) turning an observed-scale R² into liability scale."""
    k, p = float(prevalence), float(case_fraction)
    z = stats.norm.pdf(stats.norm.ppf(1.0 - k))
    return k * k * (1.0 - k) ** 2 / (z * z * p * (1.0 - p))


def incremental_r2(
    y: np.ndarray,
    score: np.ndarray,
    covariates: np.ndarray | None = None,
    *,
    prevalence: float | None = None,
) -> dict[str, float]:
    """Covariate-adjusted incremental R² of ``score``: Nagelkerke, observed and liability scale.

    Parameters
    ----------
    y : array of {0, 1}, shape (n,)
    score : array, shape (n,)
    covariates : array, shape (n, c), optional
    prevalence : float, optional
        Population prevalence K (default: the sample's case fraction).

    Returns
    -------
    dict
        ``r2_nagelkerke``, ``r2_observed``, ``r2_liability`` (NaN when ``y`` has one class).
    """
    y = np.asarray(y, dtype=np.float64)
    n = y.size
    if n == 0 or y.min() == y.max():
        nan = float("nan")
        return {"r2_nagelkerke": nan, "r2_observed": nan, "r2_liability": nan}
    null = _design(covariates, n)
    full = _design(covariates, n, score)
    ll0 = logistic_loglik(np.ones((n, 1)), y)
    nagelkerke = nagelkerke_r2(logistic_loglik(full, y), ll0, n) - nagelkerke_r2(
        logistic_loglik(null, y), ll0, n
    )
    observed = observed_r2(full, y) - observed_r2(null, y)
    p = float(y.mean())
    k = p if prevalence is None else float(prevalence)
    return {
        "r2_nagelkerke": float(nagelkerke),
        "r2_observed": float(observed),
        "r2_liability": float(observed * liability_factor(k, p)),
    }


def top_decile_or(y: np.ndarray, score: np.ndarray) -> dict[str, float]:
    """Odds ratio of the top score decile against the rest, with Woolf's 95% interval."""
    y = np.asarray(y).astype(int)
    s = np.asarray(score, dtype=np.float64)
    if y.size < 10 or y.min() == y.max():
        nan = float("nan")
        return {"or_top_decile": nan, "or_top_decile_lo": nan, "or_top_decile_hi": nan}
    top = s >= np.quantile(s, 0.9)
    a, b = float(((y == 1) & top).sum()), float(((y == 0) & top).sum())
    c, d = float(((y == 1) & ~top).sum()), float(((y == 0) & ~top).sum())
    if min(a, b, c, d) == 0:
        a, b, c, d = a + 0.5, b + 0.5, c + 0.5, d + 0.5
    log_or = np.log(a * d / (b * c))
    se = np.sqrt(1 / a + 1 / b + 1 / c + 1 / d)
    return {
        "or_top_decile": float(np.exp(log_or)),
        "or_top_decile_lo": float(np.exp(log_or - 1.959964 * se)),
        "or_top_decile_hi": float(np.exp(log_or + 1.959964 * se)),
    }


def prs_metrics(
    y: np.ndarray,
    score: np.ndarray,
    covariates: np.ndarray | None = None,
    *,
    prevalence: float | None = None,
) -> dict[str, float]:
    """:func:`incremental_r2` and :func:`top_decile_or` in one mapping."""
    return {
        **incremental_r2(y, score, covariates, prevalence=prevalence),
        **top_decile_or(y, score),
    }


def federation_prs_metrics(
    predictions: Mapping[str, np.ndarray],
    test: Mapping[str, ClientData],
    *,
    prevalence: float | None = None,
) -> dict[str, Any]:
    """:func:`prs_metrics` of every client's model on its test split, per client and pooled.

    The score is the model's logit; the covariates are the clients' standardised ones.

    Returns
    -------
    dict
        ``pooled`` and ``clients`` ({client: metrics}).
    """
    clients = sorted(predictions)

    def logit(p: np.ndarray) -> np.ndarray:
        p = np.clip(np.asarray(p, dtype=np.float64), 1e-12, 1 - 1e-12)
        return np.log(p) - np.log1p(-p)

    per_client = {
        c: prs_metrics(test[c].y, logit(predictions[c]), test[c].covariates, prevalence=prevalence)
        for c in clients
    }
    pooled = prs_metrics(
        np.concatenate([test[c].y for c in clients]),
        np.concatenate([logit(predictions[c]) for c in clients]),
        np.concatenate([test[c].covariates for c in clients]),
        prevalence=prevalence,
    )
    return {"pooled": pooled, "clients": per_client}
