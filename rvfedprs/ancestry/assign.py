"""Ancestry assignment with probabilities: a random forest on the reference PCs (as pgsc_calc).

pgsc_calc trains scikit-learn's ``RandomForestClassifier`` on the reference panel's PCs and
population labels, assigns a target sample to the most probable population when that
probability reaches 0.5 and calls it ``undetermined`` below. The same here; pgsc_calc's outlier
test (Mahalanobis distance to each population) is not done.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

__all__ = ["UNDETERMINED", "assign_ancestry"]

#: The label of a sample whose best population's probability is below the threshold.
UNDETERMINED = "undetermined"


def assign_ancestry(
    reference_pcs: np.ndarray,
    labels: np.ndarray,
    target_pcs: np.ndarray,
    *,
    threshold: float = 0.5,
    n_estimators: int = 300,
    random_seed: int = 0,
) -> pd.DataFrame:
    """Population probabilities of each target sample and the assigned population.

    Parameters
    ----------
    reference_pcs : ndarray, shape (n_reference, n_pcs)
    labels : array of str, shape (n_reference,)
    target_pcs : ndarray, shape (n_target, n_pcs)
    threshold : float
        The assignment needs the best population's probability ≥ ``threshold``.
    n_estimators : int
        Trees of the forest.
    random_seed : int

    Returns
    -------
    DataFrame, shape (n_target, 2 + n_populations)
        ``population`` (or :data:`UNDETERMINED`), ``probability`` (of the best population) and
        ``P_<population>`` per reference population (sorted names).
    """
    from sklearn.ensemble import RandomForestClassifier

    forest = RandomForestClassifier(
        n_estimators=n_estimators, random_state=random_seed, n_jobs=1
    ).fit(reference_pcs, np.asarray(labels, dtype=str))
    proba = forest.predict_proba(target_pcs)
    best = proba.argmax(axis=1)
    top = proba[np.arange(len(proba)), best]
    table = pd.DataFrame(
        {
            "population": np.where(top >= threshold, forest.classes_[best], UNDETERMINED),
            "probability": top,
        }
    )
    for j, name in enumerate(forest.classes_):
        table[f"P_{name}"] = proba[:, j]
    return table
