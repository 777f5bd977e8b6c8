"""PCA of a reference panel and the projection of new samples onto it.

Genotypes are standardised by the reference's ALT frequencies ``p``: ``(g − 2p) / sqrt(2p(1−p))``,
a missing genotype counting as the mean (0 after standardising). The reference's top PCs come
from an exact SVD (or a randomized one for large panels).

A new sample's naive projection ``z · V`` is shrunk towards 0 when variants outnumber reference
samples (Lee et al. 2010): the reference's own scores are inflated by fitting its noise. The
online augmentation–decomposition–Procrustes projection (OADP; Zhang, Dey & Lee 2020, AJHG 107)
removes the shrinkage: the reference augmented by the new sample is decomposed (here through
the reference's top ``L`` singular triplets and the sample's residual, an ``(L+1) × (L+1)``
eigenproblem), and the augmented reference scores are mapped onto the reference's by a
Procrustes fit (rotation and scale), which then places the new sample.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PROJECTIONS", "ReferencePCA", "fit_pca", "project", "standardise"]

#: Projection methods of :func:`project`.
PROJECTIONS = ("oadp", "naive")


def standardise(dosages: np.ndarray, alt_freq: np.ndarray) -> np.ndarray:
    """``(g − 2p) / sqrt(2p(1 − p))`` per column, 0 where missing.

    Parameters
    ----------
    dosages : ndarray, shape (n_samples, n_variants)
        ALT dosages, NaN missing.
    alt_freq : ndarray, shape (n_variants,)
        Reference ALT frequencies, in (0, 1).
    """
    p = np.asarray(alt_freq, dtype=np.float64)
    z = (np.asarray(dosages, dtype=np.float64) - 2.0 * p) / np.sqrt(2.0 * p * (1.0 - p))
    return np.nan_to_num(z, nan=0.0, copy=False)


@dataclass(frozen=True)
class ReferencePCA:
    """The reference panel's PCA.

    Attributes
    ----------
    alt_freq : ndarray, shape (n_variants,)
        The reference ALT frequencies that standardise genotypes.
    loadings : ndarray, shape (n_variants, n_kept)
        Right singular vectors ``V`` (orthonormal columns), ``n_kept ≥ n_components``: the extra
        ones serve the OADP projection.
    singular_values : ndarray, shape (n_kept,)
    scores : ndarray, shape (n_reference, n_kept)
        ``U · S``: the reference samples' PC scores.
    n_components : int
        The PCs reported.
    """

    alt_freq: np.ndarray
    loadings: np.ndarray
    singular_values: np.ndarray
    scores: np.ndarray
    n_components: int

    @property
    def reference_scores(self) -> np.ndarray:
        """The reference's reported PC scores, shape (n_reference, n_components)."""
        return self.scores[:, : self.n_components]


def fit_pca(
    dosages: np.ndarray,
    alt_freq: np.ndarray,
    *,
    n_components: int = 10,
    n_oadp: int | None = None,
    method: str = "auto",
    random_seed: int = 0,
) -> ReferencePCA:
    """Top PCs of the standardised reference genotypes.

    Parameters
    ----------
    dosages : ndarray, shape (n_reference, n_variants)
    alt_freq : ndarray, shape (n_variants,)
    n_components : int
        PCs reported (K).
    n_oadp : int, optional
        Singular triplets kept for the OADP projection (L ≥ K; default ``2K``, capped by the
        rank).
    method : {"auto", "exact", "randomized"}
        ``auto``: exact up to 5·10⁷ matrix cells, else randomized (scikit-learn).
    random_seed : int
        For the randomized SVD.
    """
    z = standardise(dosages, alt_freq)
    rank = min(z.shape) - 1  # centred columns lose one dimension
    if n_components < 1 or n_components > rank:
        raise ValueError(
            f"{n_components} PCs asked of a reference of {z.shape[0]} samples × {z.shape[1]} "
            f"variants (at most {rank})"
        )
    kept = min(rank, n_oadp if n_oadp is not None else 2 * n_components)
    kept = max(kept, n_components)
    if method == "auto":
        method = "exact" if z.size <= 5e7 else "randomized"
    if method == "exact":
        u, s, vt = np.linalg.svd(z, full_matrices=False)
        u, s, vt = u[:, :kept], s[:kept], vt[:kept]
    elif method == "randomized":
        from sklearn.utils.extmath import randomized_svd

        u, s, vt = randomized_svd(z, kept, n_iter=7, random_state=random_seed)
    else:
        raise ValueError(
            f"SVD method {method!r} unknown; choose from ['auto', 'exact', 'randomized']"
        )
    signs = np.sign(vt[np.arange(kept), np.abs(vt).argmax(axis=1)])  # deterministic signs
    u, vt = u * signs, vt * signs[:, None]
    return ReferencePCA(
        alt_freq=np.asarray(alt_freq, dtype=np.float64),
        loadings=vt.T.copy(),
        singular_values=s,
        scores=u * s,
        n_components=n_components,
    )


def project(pca: ReferencePCA, dosages: np.ndarray, *, method: str = "oadp") -> np.ndarray:
    """PC scores of new samples on the reference PCs.

    Parameters
    ----------
    pca : ReferencePCA
    dosages : ndarray, shape (n_new, n_variants)
        ALT dosages on the reference's variants and alleles, NaN missing.
    method : {"oadp", "naive"}
        ``naive``: ``z · V`` (shrunk towards 0 in high dimension); ``oadp``: online
        augmentation–decomposition–Procrustes (not shrunk).

    Returns
    -------
    ndarray, shape (n_new, n_components)
    """
    if method not in PROJECTIONS:
        raise ValueError(f"projection {method!r} unknown; choose from {list(PROJECTIONS)}")
    z = standardise(dosages, pca.alt_freq)
    a = z @ pca.loadings  # (n_new, L)
    k = pca.n_components
    if method == "naive":
        return a[:, :k]
    residual = np.sqrt(np.maximum((z * z).sum(axis=1) - (a * a).sum(axis=1), 0.0))
    return _oadp(pca, a, residual)


def _oadp(pca: ReferencePCA, a: np.ndarray, residual: np.ndarray) -> np.ndarray:
    """OADP scores from each sample's loadings ``a`` (n, L) and residual norm (n,).

    With the reference ``X = U S Vᵀ`` (rank L) and a sample ``y = V a + r e`` (``e ⟂ V``), the
    augmented matrix in the basis ``[V, e]`` is ``M = [[U S, 0], [aᵀ, r]]``. The eigenvectors
    ``W`` of ``MᵀM`` give the augmented scores ``M W``: the reference's ``B = U S W_L`` and the
    sample's ``b = aᵀ W_L + r w``. Procrustes from ``B`` to the reference scores ``A`` (both
    centred): ``Bᵀ A = P Σ Rᵀ``, ``Q = P Rᵀ``, ``ρ = tr Σ / ‖B‖²``; the sample's score is
    ``ρ b Q``. ``Bᵀ A = W_Lᵀ diag(s²)[:, :K]`` and ``‖B‖² = Σ_k w_kᵀ diag(s²) w_k`` as ``U`` is
    orthonormal, so nothing of size n is formed per sample.
    """
    s2 = pca.singular_values**2
    n_kept, k = len(s2), pca.n_components
    gram = np.zeros((len(a), n_kept + 1, n_kept + 1))
    gram[:, :n_kept, :n_kept] = np.einsum("ni,nj->nij", a, a)
    gram[:, np.arange(n_kept), np.arange(n_kept)] += s2
    gram[:, :n_kept, n_kept] = a * residual[:, None]
    gram[:, n_kept, :n_kept] = a * residual[:, None]
    gram[:, n_kept, n_kept] = residual**2
    _, vecs = np.linalg.eigh(gram)
    w = vecs[:, :, ::-1][:, :, :k]  # top K, shape (n, L + 1, K)
    w_ref = w[:, :n_kept, :]
    cross = np.einsum("nlk,l,lj->nkj", w_ref, s2, np.eye(n_kept)[:, :k])  # Bᵀ A, (n, K, K)
    norm_b = np.einsum("nlk,l,nlk->n", w_ref, s2, w_ref)
    p, sigma, rt = np.linalg.svd(cross)
    rotation = p @ rt
    scale = sigma.sum(axis=1) / norm_b
    b = np.einsum("nl,nlk->nk", a, w_ref) + residual[:, None] * w[:, n_kept, :]
    return scale[:, None] * np.einsum("nk,nkj->nj", b, rotation)
