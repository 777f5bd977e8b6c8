"""A client's samples as training sees them, and how they become torch tensors and batches.

torch is imported where a tensor is made, so that reading and summarising a site's samples
(a query that trains nothing) does not import it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import scipy.sparse as sp

from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes import BINARY, Outcome, outcome

if TYPE_CHECKING:
    import torch

__all__ = ["ClientData", "to_torch_sparse", "batch_indices"]


@dataclass(frozen=True)
class ClientData:
    """One client's training (or test) samples.

    Attributes
    ----------
    client_id : str
    sample_ids : array of str, shape (n_samples,)
    prs : array of float32, shape (n_samples,)
        PRS standardised with the federated mean and sd.
    rare : scipy.sparse.csr_matrix of float32, shape (n_samples, n_rare)
        Minor-allele dosages of the rare variants (column order = ``rare_variants.tsv``).
    y : array of float32, shape (n_samples,)
        Phenotype: 0/1, or a quantitative trait standardised with its federated moments.
    covariates : array of float32, shape (n_samples, n_covariates), optional
        Covariates standardised with the federated moments (none: shape (n_samples, 0)).
    outcome : Outcome
        What ``y`` is (:mod:`rvfedprs.outcomes`; a kind's name is accepted): it checks the
        values and gives the loss, the link and the metrics.
    """

    client_id: str
    sample_ids: np.ndarray
    prs: np.ndarray
    rare: sp.csr_matrix
    y: np.ndarray
    covariates: np.ndarray | None = None
    outcome: Outcome = BINARY

    def __post_init__(self) -> None:
        sample_ids = np.asarray(self.sample_ids).astype(str)
        prs = np.asarray(self.prs, dtype=np.float32).reshape(-1)
        kind = outcome(self.outcome)
        y = kind.check(self.y, where=f"client {self.client_id}")
        if not sp.issparse(self.rare):
            raise InputDataError(
                f"client {self.client_id}: rare dosages must be a scipy sparse matrix, "
                f"got {type(self.rare).__name__}"
            )
        rare = sp.csr_matrix(self.rare, dtype=np.float32)
        rare.sum_duplicates()
        n = len(sample_ids)
        for name, length in (("prs", len(prs)), ("y", len(y)), ("rare rows", rare.shape[0])):
            if length != n:
                raise InputDataError(
                    f"client {self.client_id}: {name} has {length} entries for {n} samples"
                )
        if not np.all(np.isfinite(prs)):
            raise InputDataError(f"client {self.client_id}: prs contains NaN or infinite values")
        if rare.nnz and not np.all(np.isfinite(rare.data)):
            raise InputDataError(f"client {self.client_id}: rare dosages contain NaN values")
        covariates = np.zeros((n, 0), dtype=np.float32)
        if self.covariates is not None:
            covariates = np.asarray(self.covariates, dtype=np.float32).reshape(n, -1)
            if not np.all(np.isfinite(covariates)):
                raise InputDataError(
                    f"client {self.client_id}: covariates contain NaN or infinite values"
                )
        object.__setattr__(self, "outcome", kind)
        object.__setattr__(self, "covariates", covariates)
        object.__setattr__(self, "sample_ids", sample_ids)
        object.__setattr__(self, "prs", prs)
        object.__setattr__(self, "y", y)
        object.__setattr__(self, "rare", rare)

    @property
    def n_samples(self) -> int:
        """Number of samples."""
        return len(self.sample_ids)

    @property
    def n_covariates(self) -> int:
        """Number of covariates."""
        return int(self.covariates.shape[1])

    @property
    def n_rare(self) -> int:
        """Number of rare-variant columns ``P``."""
        return int(self.rare.shape[1])

    def carried_variants(self) -> np.ndarray:
        """Sorted indices of the columns with at least one non-zero dosage, shape (n_carried,)."""
        return np.unique(self.rare.indices[self.rare.data != 0]).astype(np.int64)

    def subset(self, rows: np.ndarray) -> ClientData:
        """The samples at ``rows`` (integer indices or a boolean mask)."""
        rows = np.asarray(rows)
        return ClientData(
            self.client_id,
            self.sample_ids[rows],
            self.prs[rows],
            self.rare[rows],
            self.y[rows],
            self.covariates[rows],
            self.outcome,
        )

    def covariates_tensor(self, rows: np.ndarray | None = None) -> torch.Tensor | None:
        """The covariates of ``rows`` (all when None) as a tensor, or None without covariates."""
        if self.n_covariates == 0:
            return None
        import torch

        values = self.covariates if rows is None else self.covariates[rows]
        return torch.from_numpy(np.ascontiguousarray(values))

    def batch(
        self, rows: np.ndarray | None = None, *, sparse: bool = True
    ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Torch tensors ``(prs (n,), rare (n, P), y (n,))`` for ``rows`` (all when None).

        ``rare`` is a sparse COO tensor when ``sparse`` (the model's sparse path), else dense.
        """
        import torch

        rare = self.rare if rows is None else self.rare[rows]
        prs = self.prs if rows is None else self.prs[rows]
        y = self.y if rows is None else self.y[rows]
        rare_t = to_torch_sparse(rare) if sparse else torch.from_numpy(rare.toarray())
        return torch.from_numpy(np.ascontiguousarray(prs)), rare_t, torch.from_numpy(y.copy())


def to_torch_sparse(matrix: sp.spmatrix) -> torch.Tensor:
    """A scipy sparse matrix as a coalesced torch sparse COO float32 tensor of the same shape."""
    import torch

    coo = sp.coo_matrix(matrix, dtype=np.float32)
    indices = torch.from_numpy(np.vstack([coo.row, coo.col]).astype(np.int64))
    values = torch.from_numpy(coo.data.astype(np.float32, copy=False))
    return torch.sparse_coo_tensor(indices, values, coo.shape, check_invariants=False).coalesce()


def batch_indices(
    n_samples: int, batch_size: int, epochs: int, random_seed: int
) -> list[list[np.ndarray]]:
    """Shuffled mini-batches: ``epochs`` lists of row-index arrays covering ``0..n_samples-1``."""
    rng = np.random.default_rng(random_seed)
    out = []
    for _ in range(epochs):
        perm = rng.permutation(n_samples)
        out.append([perm[i : i + batch_size] for i in range(0, n_samples, batch_size)])
    return out
