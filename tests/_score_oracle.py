"""The pooled score test: the oracle of the federated top-k choice (numpy and scikit-learn)."""

from __future__ import annotations

import numpy as np
from scipy.special import expit
from sklearn.linear_model import LogisticRegression

from rvfedprs.training.glm import glm_design


def pooled_score_test(pooled) -> tuple[np.ndarray, np.ndarray]:
    """The pooled unpenalised floor's coefficients and every rare variant's U²/V under it.

    U = Σ a_j (y − p), V its efficient variance with the floor's covariates projected out
    (1 / the last diagonal entry of the inverse information of [floor design, a_j]); 0 for a
    variant nobody carries.
    """
    z = glm_design(pooled, "floor").toarray()
    fit = LogisticRegression(C=np.inf, solver="newton-cholesky", tol=1e-12, max_iter=1000)
    fit.fit(z[:, 1:], pooled.y.astype(int))
    floor = np.concatenate([fit.intercept_, fit.coef_.ravel()])
    p = expit(z @ floor)
    w = p * (1 - p)
    a = pooled.rare.toarray().astype(np.float64)
    score = a.T @ (pooled.y - p)
    statistic = np.zeros(a.shape[1])
    for j in np.flatnonzero(a.any(axis=0)):
        x = np.column_stack([z, a[:, j]])
        variance = 1.0 / np.linalg.pinv(x.T @ (x * w[:, None]))[-1, -1]
        statistic[j] = score[j] ** 2 / variance if variance > 1e-9 else 0.0
    return floor, statistic


def ranking(statistic: np.ndarray) -> list[int]:
    """Variant columns by decreasing statistic, ties by the lower column (the server's order)."""
    return sorted(range(len(statistic)), key=lambda j: (-statistic[j], j))
