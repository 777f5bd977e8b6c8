"""The references every comparison is read against (SPEC §10, §12).

- :func:`fit_logistic` — an L2-penalised logistic regression on [PRS, covariates, rare dosages]
  fitted on the pooled training data: a centralised reference that any federated network should
  be compared with (C tuned on validation data like every other method's knobs);
- :func:`prs_only_scores` — the PRS-only floor: the score a site already has without any rare
  variant (with covariates, a logistic regression on [PRS, covariates] fitted on the training
  data, unpenalised);
- :func:`genetic_values` / :func:`oracle_scores` — the oracle ceiling: each test sample's true
  genetic value from the simulator. Its AUC on the same test split bounds what any predictor
  of genotype can reach. It reads the truth, so it is reported, never used for a choice.

Floor and ceiling give the "share of the learnable signal" a method captures,
(AUC − AUC_PRS-only)/(AUC_oracle − AUC_PRS-only).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp
from sklearn.linear_model import LogisticRegression

from rvfedprs.exceptions import InputDataError
from rvfedprs.outcomes import BINARY
from rvfedprs.training import ClientData

__all__ = [
    "design_matrix",
    "fit_logistic",
    "logistic_scores",
    "prs_only_scores",
    "genetic_values",
    "oracle_scores",
    "causal_columns",
    "ceiling_design",
    "ceiling_scores",
]


def design_matrix(data: ClientData, *, rare: bool = True) -> sp.csr_matrix:
    """[PRS, covariates, rare dosages] of one client's samples, shape (n, 1 + n_cov (+ P))."""
    dense = np.column_stack([data.prs.astype(np.float64), data.covariates.astype(np.float64)])
    blocks = [sp.csr_matrix(dense)] + ([data.rare.astype(np.float64)] if rare else [])
    return sp.hstack(blocks, format="csr")


def _pooled(
    datasets: Mapping[str, ClientData], design, split: str = "training"
) -> tuple[Any, np.ndarray]:
    """The clients' ``design(data)`` rows stacked (sparse or dense, as given) and their labels."""
    clients = sorted(datasets)
    blocks = [design(datasets[c]) for c in clients]
    x = sp.vstack(blocks, format="csr") if sp.issparse(blocks[0]) else np.vstack(blocks)
    y = np.concatenate([datasets[c].y for c in clients]).astype(int)
    if len(np.unique(y)) < 2:
        raise InputDataError(f"the pooled {split} data hold a single phenotype class")
    return x, y


def fit_logistic(
    train: Mapping[str, ClientData], c: float, *, rare: bool = True
) -> LogisticRegression:
    """L2-penalised logistic regression on the pooled training samples.

    Parameters
    ----------
    train : dict of str to ClientData
    c : float
        Inverse penalty strength C > 0 (scikit-learn's convention: the loss is
        C·Σ_i log-loss_i + ½‖β‖², intercept unpenalised).
    rare : bool
        Include the rare dosages (False: [PRS, covariates] only).

    Returns
    -------
    sklearn.linear_model.LogisticRegression
    """
    if c <= 0:
        raise ValueError(f"C must be > 0, got {c}")
    x, y = _pooled(train, lambda data: design_matrix(data, rare=rare))
    model = LogisticRegression(C=float(c), solver="lbfgs", max_iter=5000, tol=1e-6)
    return model.fit(x, y)


def logistic_scores(
    model: LogisticRegression, datasets: Mapping[str, ClientData], *, rare: bool = True
) -> dict[str, np.ndarray]:
    """Each client's case probabilities under a fitted :func:`fit_logistic` model."""
    return {
        c: model.predict_proba(design_matrix(datasets[c], rare=rare))[:, 1]
        for c in sorted(datasets)
    }


def prs_only_scores(
    train: Mapping[str, ClientData], datasets: Mapping[str, ClientData]
) -> dict[str, np.ndarray]:
    """The PRS-only floor's scores of ``datasets``.

    Without covariates the score is the (standardised) PRS itself; with covariates, the
    probabilities of an unpenalised logistic regression on [PRS, covariates] fitted on
    ``train``.
    """
    first = datasets[sorted(datasets)[0]]
    if first.n_covariates == 0:
        return {c: datasets[c].prs.astype(np.float64) for c in sorted(datasets)}
    x, y = _pooled(train, lambda data: design_matrix(data, rare=False))
    model = LogisticRegression(C=np.inf, solver="lbfgs", max_iter=5000).fit(x, y)
    return logistic_scores(model, datasets, rare=False)


def genetic_values(
    truth_dir: str | Path,
    sample_ids: Sequence[str],
    *,
    genotypes: str | Path | Sequence[str | Path] | None = None,
) -> np.ndarray:
    """Each sample's true genetic value (liability scale) from the simulator's truth.

    Parameters
    ----------
    truth_dir : str or Path
        The simulator's ``truth/`` folder. ``genetic_values.tsv`` (``sample_id``,
        ``genetic_common``, ``genetic_rare``) is read when present; otherwise the value is
        computed as Σ_j β_j x_ij over ``causal_variants.tsv`` (one row per causal variant,
        ``effect`` per copy of ``effect_allele``) and the cohort's genotypes.
    sample_ids : sequence of str, shape (n,)
    genotypes : path or list of paths, optional
        The cohort's genotypes, needed only without ``genetic_values.tsv``.

    Returns
    -------
    array of float64, shape (n,)

    Raises
    ------
    InputDataError
        When samples are missing from the truth, or the value cannot be computed (a causal
        table with several rows per variant and no ``genetic_values.tsv``; no genotypes; a
        causal variant absent from them).
    """
    truth_dir = Path(truth_dir)
    ids = [str(s) for s in sample_ids]
    table_path = truth_dir / "genetic_values.tsv"
    if table_path.is_file():
        table = pd.read_csv(table_path, sep="\t", dtype={"sample_id": str})
        parts = [c for c in table.columns if c.startswith("genetic_")]
        if not parts:
            raise InputDataError(f"{table_path} has no genetic_* column")
        value = dict(zip(table["sample_id"], table[parts].sum(axis=1), strict=True))
        missing = [s for s in ids if s not in value]
        if missing:
            raise InputDataError(
                f"{len(missing)} samples absent from {table_path}: {', '.join(missing[:5])}"
            )
        return np.array([value[s] for s in ids], dtype=np.float64)
    return _genetic_values_from_genotypes(truth_dir / "causal_variants.tsv", ids, genotypes)


def _genetic_values_from_genotypes(causal_path: Path, ids: list[str], genotypes) -> np.ndarray:
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.chunk import variant_keys

    if not causal_path.is_file():
        raise InputDataError(f"neither genetic_values.tsv nor {causal_path} found")
    causal = pd.read_csv(causal_path, sep="\t", dtype={"variant_key": str})
    missing = {"variant_key", "effect", "effect_allele", "alt"} - set(causal.columns)
    if missing:
        raise InputDataError(f"{causal_path} lacks columns {sorted(missing)}")
    if causal["variant_key"].duplicated().any():
        raise InputDataError(
            f"{causal_path} has several rows per variant (group-specific effects) and no "
            "genetic_values.tsv beside it: the genetic value cannot be recomputed"
        )
    if genotypes is None:
        raise InputDataError(
            f"no genetic_values.tsv beside {causal_path}: the oracle needs the genotypes"
        )
    source = open_genotypes(genotypes if isinstance(genotypes, str | Path) else list(genotypes))
    effect = dict(zip(causal["variant_key"], causal["effect"].astype(float), strict=True))
    flip = dict(zip(causal["variant_key"], causal["effect_allele"] != causal["alt"], strict=True))
    position = {s: i for i, s in enumerate(source.samples.astype(str))}
    absent = [s for s in ids if s not in position]
    if absent:
        raise InputDataError(f"{len(absent)} samples absent from the genotypes: {absent[:5]}")
    rows = np.array([position[s] for s in ids])
    value = np.zeros(len(ids), dtype=np.float64)
    found: set[str] = set()
    for chunk in source.iter_chunks(chunk_size=4096):
        for j, key in enumerate(variant_keys(chunk.variants)):
            if key not in effect:
                continue
            dosage = np.nan_to_num(chunk.dosages[rows, j].astype(np.float64))
            value += effect[key] * ((2.0 - dosage) if flip[key] else dosage)
            found.add(key)
    lost = sorted(set(effect) - found)
    if lost:
        raise InputDataError(
            f"{len(lost)} causal variants of {causal_path} are absent from the genotypes: "
            f"{', '.join(lost[:5])}"
        )
    return value


def oracle_scores(
    datasets: Mapping[str, ClientData], values: Mapping[str, float]
) -> dict[str, np.ndarray]:
    """Each client's samples scored by their true genetic value (``values``: id → value)."""
    return {
        c: np.array([values[s] for s in datasets[c].sample_ids], dtype=np.float64)
        for c in sorted(datasets)
    }


#: The ceiling's C grid (chosen on the pooled validation AUC).
CEILING_GRID = tuple(np.logspace(-2, 2, 7))


def causal_columns(causal: pd.DataFrame, variant_keys: Sequence[str]) -> list[int]:
    """Rare columns (order of ``variant_keys``) of the truth's causal variants, sorted.

    ``causal`` is ``truth/causal_variants.tsv`` (column ``variant_key``; several rows per variant
    where effects are group-specific). Causal variants absent from the rare set (common ones,
    or dropped by QC) are skipped.
    """
    where = {str(k): j for j, k in enumerate(variant_keys)}
    return sorted({where[k] for k in causal["variant_key"].astype(str) if k in where})


def ceiling_design(
    data: ClientData,
    columns: Sequence[int],
    groups: Mapping[str, str] | None = None,
    labels: Sequence[str] | None = None,
) -> np.ndarray:
    """[PRS, covariates, causal dosages] (global), or the dosages × each group's indicator.

    With ``groups`` (client id → group) the causal block is repeated once per label of
    ``labels`` and zero outside the client's own group.
    """
    floor = design_matrix(data, rare=False).toarray()
    dosages = data.rare[:, list(columns)].toarray().astype(np.float64)
    if groups is None:
        return np.column_stack([floor, dosages])
    own = groups[data.client_id]
    blocks = [dosages * float(own == label) for label in labels]
    return np.column_stack([floor, *blocks])


def ceiling_scores(
    train: Mapping[str, ClientData],
    validation: Mapping[str, ClientData],
    test: Mapping[str, ClientData],
    columns: Sequence[int],
    groups: Mapping[str, str] | None = None,
    *,
    grid: Sequence[float] = CEILING_GRID,
) -> tuple[dict[str, np.ndarray], float]:
    """The learnable ceiling: a known-architecture L2 logistic regression (SPEC §12).

    Fitted on the pooled training data, on the floor's features [PRS, covariates] plus the
    dosages of the true causal rare variants — one coefficient per variant, or one per variant
    per true group when ``groups`` is given. C (on every coefficient, intercept excepted) is
    chosen on the pooled validation AUC. It reads the simulator's truth: an analysis reference,
    reported, never used for a choice.

    Parameters
    ----------
    train, validation, test : dict of str to ClientData
    columns : sequence of int
        Rare columns of the causal variants (:func:`causal_columns`).
    groups : dict of str to str, optional
        Client id → true group (cluster); every client of the three splits needs one.
    grid : sequence of float
        Candidate C values.

    Returns
    -------
    scores : dict of str to array of float64
        Each test client's case probabilities.
    c : float
        The chosen C.

    Raises
    ------
    InputDataError
        For a quantitative trait (not supported yet), or a client without a group.
    """
    from sklearn.metrics import roc_auc_score

    first = train[sorted(train)[0]]
    if first.outcome.kind != BINARY.kind:
        raise InputDataError(
            f"the learnable ceiling supports binary traits only, got a {first.outcome.kind} one"
        )
    labels = None
    if groups is not None:
        clients = set(train) | set(validation) | set(test)
        missing = sorted(clients - set(groups))
        if missing:
            raise InputDataError(f"clients without a group: {', '.join(missing[:5])}")
        labels = sorted({str(groups[c]) for c in clients})
        groups = {c: str(g) for c, g in groups.items()}

    def design(data):
        return ceiling_design(data, columns, groups, labels)

    x, y = _pooled(train, design)
    xv, yv = _pooled(validation, design, "validation")
    best = None
    for c in grid:
        model = LogisticRegression(C=float(c), solver="lbfgs", max_iter=5000, tol=1e-8)
        model.fit(x, y)
        auc = roc_auc_score(yv, model.predict_proba(xv)[:, 1])
        if best is None or auc > best[0]:
            best = (auc, float(c), model)
    _, chosen, model = best
    scores = {
        c: model.predict_proba(ceiling_design(test[c], columns, groups, labels))[:, 1]
        for c in sorted(test)
    }
    return scores, chosen
