"""PRS normalised on the reference PCs, as pgsc_calc reports them (Z_norm1, Z_norm2).

Fitted on the reference panel, applied to every sample:

- ``Z_norm1``: the residual of the PRS after a least-squares regression on ``[1, PC1..PCn]``
  (the mean adjusted for ancestry);
- ``Z_norm2``: ``Z_norm1 / sqrt(σ²(PCs))`` where ``σ²`` is a gamma GLM with log link of the
  squared residuals on ``[1, PC1..PCn]`` (the variance adjusted too), so that within each
  reference population the score has mean ≈ 0 and SD ≈ 1.
"""

from __future__ import annotations

import numpy as np

__all__ = ["fit_gamma_log", "normalise_prs"]


def _design(pcs: np.ndarray) -> np.ndarray:
    return np.column_stack([np.ones(len(pcs)), pcs])


def fit_gamma_log(
    x: np.ndarray, y: np.ndarray, *, max_iter: int = 100, tol: float = 1e-10
) -> np.ndarray:
    """Coefficients of a gamma GLM with log link, ``E[y] = exp(x · β)``, by IRLS.

    For the gamma family with log link the IRLS weights are constant, so each step is a least-
    squares fit of the working response ``η + (y − μ) / μ``.

    Parameters
    ----------
    x : ndarray, shape (n, p)
        Design matrix (with its intercept column).
    y : ndarray, shape (n,)
        Positive responses.
    """
    beta = np.zeros(x.shape[1])
    beta[0] = np.log(np.mean(y))
    for _ in range(max_iter):
        eta = np.clip(x @ beta, -50, 50)
        mu = np.exp(eta)
        new, *_ = np.linalg.lstsq(x, eta + (y - mu) / mu, rcond=None)
        if np.max(np.abs(new - beta)) < tol:
            return new
        beta = new
    return beta


def normalise_prs(
    reference_pcs: np.ndarray, reference_prs: np.ndarray, pcs: np.ndarray, prs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """``Z_norm1`` and ``Z_norm2`` of scores ``prs`` given their PCs, fitted on the reference.

    Parameters
    ----------
    reference_pcs : ndarray, shape (n_reference, n_pcs)
    reference_prs : ndarray, shape (n_reference,)
    pcs : ndarray, shape (n, n_pcs)
    prs : ndarray, shape (n,)

    Returns
    -------
    z_norm1, z_norm2 : ndarray, shape (n,)
    """
    x_ref = _design(reference_pcs)
    mean_coef, *_ = np.linalg.lstsq(x_ref, reference_prs, rcond=None)
    resid_ref = reference_prs - x_ref @ mean_coef
    floor = 1e-12 * max(float(np.mean(resid_ref**2)), 1e-300)
    var_coef = fit_gamma_log(x_ref, np.maximum(resid_ref**2, floor))
    x = _design(pcs)
    z1 = prs - x @ mean_coef
    z2 = z1 / np.sqrt(np.exp(np.clip(x @ var_coef, -50, 50)))
    return z1, z2
