"""A federation from a researcher's own arrays: no files, no scoring file, either trait kind.

:func:`federation_from_arrays` takes what a researcher holds in memory — rare-variant dosages,
a phenotype (0/1 or continuous), a site label per sample, optionally a PRS and covariates — and
returns the :class:`~rvfedprs.genomic.data.Federation` the pipeline's files would give: a
train/test split per site stratified by the outcome (:meth:`~rvfedprs.outcomes.Outcome.strata`,
seeded per site as the pipeline seeds it), the PRS, covariates and a quantitative trait
standardised with their federated training moments. :func:`rvfedprs.train` then trains it
(``data=``)::

    from rvfedprs import federation_from_arrays, load_config, train
    federation = federation_from_arrays(dosages, ldl, sites, kind="quantitative",
                                        covariates=age_sex, random_seed=1)
    result = train(load_config(None, {"train": {"strategy": "fedglm"}}), "out", data=federation)
    result.metrics["r2"], result.metrics["incremental_r2"]

Without a PRS the common pathway reads a constant (the floor is then the covariates alone).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.cohort import stratified_split
from rvfedprs.exceptions import InputDataError
from rvfedprs.genomic.data import Federation, federation_from_tables
from rvfedprs.outcomes import Outcome, outcome
from rvfedprs.provenance import draw_seed

__all__ = ["federation_from_arrays"]


def federation_from_arrays(
    dosages: np.ndarray | sp.spmatrix,
    phenotype: Sequence[float] | np.ndarray,
    sites: Sequence[str] | np.ndarray,
    *,
    kind: str | Outcome = "binary",
    prs: Sequence[float] | np.ndarray | None = None,
    covariates: np.ndarray | pd.DataFrame | None = None,
    sample_ids: Sequence[str] | None = None,
    variant_ids: Sequence[str] | None = None,
    test_fraction: float = 0.2,
    random_seed: int | None = None,
) -> Federation:
    """A federation of the samples of ``sites`` from arrays held in memory.

    Parameters
    ----------
    dosages : array or scipy sparse matrix, shape (n_samples, n_rare)
        Minor-allele dosages in [0, 2] of the rare variants (the rare pathway's inputs).
    phenotype : array, shape (n_samples,)
        0/1 for ``kind="binary"``, a finite number for ``kind="quantitative"``.
    sites : array of str, shape (n_samples,)
        The site (biobank) each sample belongs to.
    kind : {"binary", "quantitative"} or Outcome
    prs : array, shape (n_samples,), optional
        A polygenic score (default: none; the common pathway then reads a constant).
    covariates : array, shape (n_samples, n_covariates), or DataFrame, optional
        Numeric covariates (a DataFrame's column names are kept; else ``cov1``, ``cov2``...).
    sample_ids : sequence of str, optional
        Default ``<site>_<row>``.
    variant_ids : sequence of str, optional
        The dosage columns' names (default ``variant1``, ``variant2``...).
    test_fraction : float
        Share of every site's samples held out for testing, stratified by the outcome.
    random_seed : int, optional
        Seed of the split (each site's from it and the site's name); drawn when None.

    Returns
    -------
    Federation
        With ``data_dir`` None (train it in-process: :func:`rvfedprs.train` with ``data=``).

    Raises
    ------
    InputDataError
        When the arrays disagree on the number of samples, values are not finite, a phenotype
        value is not one ``kind`` takes, or a site cannot be split or learned from (named).
    """
    kind = outcome(kind)
    y = np.asarray(phenotype, dtype=np.float64).reshape(-1)
    n = y.size
    site = np.asarray(sites).astype(str).reshape(-1)
    matrix = sp.csr_matrix(dosages, dtype=np.float32)
    frame = covariates if isinstance(covariates, pd.DataFrame) else None
    cov = None if covariates is None else np.asarray(covariates, dtype=np.float64).reshape(n, -1)
    names = (
        [str(c) for c in frame.columns]
        if frame is not None
        else [f"cov{i + 1}" for i in range(0 if cov is None else cov.shape[1])]
    )
    score = np.zeros(n) if prs is None else np.asarray(prs, dtype=np.float64).reshape(-1)
    ids = (np.array([f"{s}_{i}" for i, s in enumerate(site)]) if sample_ids is None
           else np.asarray(sample_ids).astype(str))  # fmt: skip
    lengths = {"sites": site.size, "dosage rows": matrix.shape[0], "prs": score.size,
               "sample_ids": ids.size}  # fmt: skip
    if cov is not None:
        lengths["covariate rows"] = cov.shape[0]
    wrong = {k: v for k, v in lengths.items() if v != n}
    if wrong:
        raise InputDataError(f"the phenotype has {n} samples but {wrong}")
    kind.check(y, where="phenotype")
    if not np.all(np.isfinite(score)):
        raise InputDataError("prs contains NaN or infinite values")
    if np.unique(ids).size != n:
        raise InputDataError("sample_ids are not unique")
    keys = ([f"variant{j + 1}" for j in range(matrix.shape[1])] if variant_ids is None
            else [str(v) for v in variant_ids])  # fmt: skip
    if len(keys) != matrix.shape[1]:
        raise InputDataError(f"{len(keys)} variant_ids for {matrix.shape[1]} dosage columns")
    seed = draw_seed(random_seed)
    tables = {}
    for name in sorted(set(site)):
        rows = np.flatnonzero(site == name)
        split = stratified_split(kind.strata(y[rows]), test_fraction=test_fraction,
                                 random_seed=[seed, zlib.crc32(name.encode())])  # fmt: skip
        table = pd.DataFrame({"sample_id": ids[rows], "prs": score[rows],
                              "phenotype": y[rows], "split": split})  # fmt: skip
        for i, column in enumerate(names):
            table[column] = cov[rows, i]
        tables[name] = (table, matrix[rows])
    return federation_from_tables(tables, keys, kind=kind)
