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

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from scipy import stats

from rvfedprs.outcomes import BINARY
from rvfedprs.training import ClientData

__all__ = [
    "Z95",
    "logistic_fit",
    "logistic_loglik",
    "nagelkerke_r2",
    "observed_r2",
    "liability_factor",
    "incremental_r2",
    "woolf_or",
    "top_decile_table",
    "top_decile_or",
    "prs_metrics",
    "federation_prs_metrics",
]

#: The standard normal's 97.5% quantile: the half-width of a 95% interval in standard errors.
Z95 = 1.959963984540054


def _design(covariates: np.ndarray | None, n: int, score: np.ndarray | None = None) -> np.ndarray:
    parts = [np.ones((n, 1))]
    if covariates is not None and np.asarray(covariates).size:
        parts.append(np.asarray(covariates, dtype=np.float64).reshape(n, -1))
    if score is not None:
        parts.append(np.asarray(score, dtype=np.float64).reshape(n, 1))
    return np.hstack(parts)


def logistic_fit(designs, *, max_iter: int = 100) -> tuple[np.ndarray, np.ndarray, float]:
    """Maximum-likelihood logistic regression on summed per-block score vectors and Hessians.

    The one logistic Newton solver of the evaluation statistics (:func:`logistic_loglik`,
    :mod:`.assess_statistics`). It is not :func:`.metrics.calibration`'s ``_logistic_fit``
    (which also fits an offset model with the slope fixed at 1 and answers NaN on a singular
    Hessian), nor the training GLM's (:mod:`rvfedprs.training.glm` with
    :class:`rvfedprs.strategies.newton.NewtonSearch`: penalised, one Newton point per
    federated round): those solve other problems.

    Parameters
    ----------
    designs : sequence of (X, y)
        Each block's design matrix (with its intercept column), shape (n_b, p), and 0/1
        phenotype, shape (n_b,); the fit is that of the blocks stacked.
    max_iter : int
        Newton iterations at most.

    Returns
    -------
    (beta, covariance, loglik)
        Newton–Raphson with step halving; a 1e-9 ridge keeps the Hessian invertible (under
        separation the log-likelihood is then the supremum approached).
    """
    p = designs[0][0].shape[1]

    def loglik(beta):
        return -sum(BINARY.glm_sums(X, y, beta, hessian=False)[0] for X, y in designs)

    def derivatives(beta):
        """Score (gradient of the log-likelihood) and information, summed over the blocks."""
        grad, hess = np.zeros(p), 1e-9 * np.eye(p)
        for X, y in designs:
            _, g, h = BINARY.glm_sums(X, y, beta)
            grad -= g
            hess += h
        return grad, hess

    beta = np.zeros(p)
    current = loglik(beta)
    for _ in range(max_iter):
        grad, hess = derivatives(beta)
        step = np.linalg.solve(hess, grad)
        for _ in range(30):
            trial = loglik(beta + step)
            if trial >= current - 1e-12:
                break
            step /= 2
        beta, current = beta + step, trial
        if np.max(np.abs(step)) < 1e-10:
            break
    _, hess = derivatives(beta)
    return beta, np.linalg.inv(hess), current


def logistic_loglik(X: np.ndarray, y: np.ndarray, *, max_iter: int = 100) -> float:
    """Maximised log-likelihood of a logistic regression of ``y`` on ``X`` (Newton–Raphson).

    :func:`logistic_fit` on one block; a tiny ridge (1e-9) keeps the Hessian invertible under
    separation, the log-likelihood is then the supremum approached.
    """
    return logistic_fit([(X, np.asarray(y, dtype=np.float64))], max_iter=max_iter)[2]


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


def woolf_or(a: float, b: float, c: float, d: float) -> tuple[float, float, float]:
    """Odds ratio a·d / (b·c) with Woolf's 95% interval; ½ added to every cell if one is 0."""
    if min(a, b, c, d) == 0:
        a, b, c, d = a + 0.5, b + 0.5, c + 0.5, d + 0.5
    log_or = math.log(a * d / (b * c))
    se = math.sqrt(1 / a + 1 / b + 1 / c + 1 / d)
    return math.exp(log_or), math.exp(log_or - Z95 * se), math.exp(log_or + Z95 * se)


def top_decile_table(y: np.ndarray, score: np.ndarray) -> tuple[int, int, int, int]:
    """Cases and controls in the top decile (score ≥ its 90th percentile) and below."""
    top = score >= np.quantile(score, 0.9)
    return (
        int(((y == 1) & top).sum()),
        int(((y == 0) & top).sum()),
        int(((y == 1) & ~top).sum()),
        int(((y == 0) & ~top).sum()),
    )


def top_decile_or(y: np.ndarray, score: np.ndarray) -> dict[str, float]:
    """Odds ratio of the top score decile against the rest, with Woolf's 95% interval."""
    y = np.asarray(y).astype(int)
    s = np.asarray(score, dtype=np.float64)
    if y.size < 10 or y.min() == y.max():
        nan = float("nan")
        return {"or_top_decile": nan, "or_top_decile_lo": nan, "or_top_decile_hi": nan}
    odds, lo, hi = woolf_or(*top_decile_table(y, s))
    return {"or_top_decile": odds, "or_top_decile_lo": lo, "or_top_decile_hi": hi}


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
