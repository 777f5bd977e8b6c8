"""The learnable ceiling (SPEC §12): a known-architecture L2 logistic regression.

Oracle: scikit-learn's LogisticRegression on a design built here with numpy from the
formulas (PRS, covariates, causal dosages; per group: dosages × the group's indicator).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy.special import expit
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from rvfedprs.exceptions import InputDataError
from rvfedprs.protocol.references import causal_columns, ceiling_scores
from rvfedprs.training import ClientData

GROUPS = {"a1": "A", "a2": "A", "b1": "B", "b2": "B"}


def _client(name: str, n: int, rng: np.random.Generator, sign: float) -> ClientData:
    """Samples whose causal variants 0 and 1 raise risk in group A and lower it in group B."""
    rare = (rng.random((n, 6)) < 0.08).astype(np.float32)
    prs = rng.normal(size=n).astype(np.float32)
    covariates = rng.normal(size=(n, 1)).astype(np.float32)
    logit = -1.5 + 0.6 * prs + sign * 2.0 * (rare[:, 0] + rare[:, 1])
    y = (rng.random(n) < expit(logit)).astype(np.float32)
    ids = np.array([f"{name}_{i}" for i in range(n)])
    return ClientData(name, ids, prs, sp.csr_matrix(rare), y, covariates)


def _splits(seed: int):
    rng = np.random.default_rng(seed)
    return [
        {c: _client(c, 600, rng, 1.0 if GROUPS[c] == "A" else -1.0) for c in GROUPS}
        for _ in range(3)
    ]


def _design(data: ClientData, columns, groups=None) -> np.ndarray:
    floor = np.column_stack([data.prs, data.covariates]).astype(np.float64)
    dosages = data.rare.toarray()[:, columns].astype(np.float64)
    if groups is None:
        return np.column_stack([floor, dosages])
    own = groups[data.client_id]
    return np.column_stack([floor, dosages * (own == "A"), dosages * (own == "B")])


def _pooled_auc(scores, test) -> float:
    names = sorted(test)
    return roc_auc_score(np.concatenate([test[c].y for c in names]),
                         np.concatenate([scores[c] for c in names]))  # fmt: skip


@pytest.mark.parametrize("groups", [None, GROUPS])
def test_ceiling_equals_sklearn_on_the_design_written_here(groups):
    train, validation, test = _splits(1)
    scores, c = ceiling_scores(train, validation, test, [0, 1], groups)
    x = np.vstack([_design(train[k], [0, 1], groups) for k in sorted(train)])
    y = np.concatenate([train[k].y for k in sorted(train)]).astype(int)
    model = LogisticRegression(C=c, solver="lbfgs", max_iter=5000, tol=1e-8).fit(x, y)
    for k in sorted(test):
        expected = model.predict_proba(_design(test[k], [0, 1], groups))[:, 1]
        np.testing.assert_allclose(scores[k], expected, rtol=0, atol=1e-8)


def test_per_group_ceiling_follows_a_sign_flip_a_global_one_cannot():
    train, validation, test = _splits(2)
    grouped, _ = ceiling_scores(train, validation, test, [0, 1], GROUPS)
    pooled, _ = ceiling_scores(train, validation, test, [0, 1])
    assert _pooled_auc(grouped, test) > _pooled_auc(pooled, test) + 0.02


def test_c_is_chosen_on_validation_not_test():
    train, validation, test = _splits(3)
    _, c = ceiling_scores(train, validation, test, [0, 1], GROUPS)
    flipped = {k: ClientData(d.client_id, d.sample_ids, d.prs, d.rare, 1 - d.y, d.covariates)
               for k, d in test.items()}  # fmt: skip
    assert ceiling_scores(train, validation, flipped, [0, 1], GROUPS)[1] == c


def test_causal_columns_map_truth_keys_and_skip_the_rest():
    causal = pd.DataFrame({"variant_key": ["1:5:A:G", "1:5:A:G", "2:9:C:T", "3:1:G:A"]})
    assert causal_columns(causal, ["2:9:C:T", "7:7:A:C", "1:5:A:G"]) == [0, 2]


def test_ceiling_names_a_client_without_a_group():
    train, validation, test = _splits(4)
    with pytest.raises(InputDataError, match="clients without a group: b2"):
        ceiling_scores(train, validation, test, [0, 1], {k: g for k, g in GROUPS.items()
                                                         if k != "b2"})  # fmt: skip
