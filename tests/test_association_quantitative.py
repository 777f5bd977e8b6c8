"""Federated rare-variant association of a quantitative trait: the linear-model score tests.

Under the linear floor (least squares on Z = [1, PRS, covariates], residual variance
σ̂² = RSS/(n − q)) the efficient score of dosage columns A is U = Aᵀ(y − Zβ̂) with null
covariance σ̂² (AᵀA − AᵀZ(ZᵀZ)⁻¹ZᵀA): the oracle here, written from the formulas in numpy on the
pooled training data, for the single-variant tests, the gene burden and SKAT.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _federation_fixtures import write_federation  # noqa: E402
from test_association import BURDEN, CUTOFFS, _rows, _unit_design  # noqa: E402

from rvfedprs.association.runner import associate  # noqa: E402
from rvfedprs.burden import burden_from_config  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.genomic.data import load_federation, pool_clients  # noqa: E402
from rvfedprs.training.glm import glm_design  # noqa: E402


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("association-quantitative")
    info = write_federation(root, n_clients=4, n_clusters=2, covariates=("age",),
                            kind="quantitative")  # fmt: skip
    config = validate_config({
        "train": {"data": str(info["data"]), "seed": 3, "progress": False},
        "burden": BURDEN, "associate": {"maf_cutoffs": CUTOFFS},
    })  # fmt: skip
    return info, associate(config, root / "out")


@pytest.fixture(scope="module")
def oracle(run):
    info, _ = run
    pooled = pool_clients(load_federation(info["data"]).train)
    z = glm_design(pooled, "floor").toarray()
    y = pooled.y.astype(float)
    floor = np.linalg.solve(z.T @ z, z.T @ y)
    residual = y - z @ floor
    variants = pd.read_csv(Path(info["data"]) / "rare_variants.tsv", sep="\t")
    units = burden_from_config(
        info["data"], validate_config({"burden": {**BURDEN, "weights": "flat",
                                                  "max_maf": 0.5}})["burden"])  # fmt: skip
    return {"z": z, "y": y, "floor": floor, "mu": z @ floor, "w": np.ones(y.size),
            "phi": residual @ residual / (y.size - z.shape[1]),
            "a": pooled.rare.toarray().astype(float), "variants": variants,
            "units": units}  # fmt: skip


def _linear_scores(o, design):
    u = design.T @ (o["y"] - o["mu"])
    cross = o["z"].T @ design
    return u, o["phi"] * (design.T @ design - cross.T @ np.linalg.solve(o["z"].T @ o["z"], cross))


def test_the_linear_floor_and_score_tests_equal_the_pooled_oracle(run, oracle):
    _, result = run
    np.testing.assert_allclose(result.summary["floor"], oracle["floor"], atol=1e-8)
    assert result.summary["dispersion"] == pytest.approx(oracle["phi"], rel=1e-8)
    u, v = _linear_scores(oracle, oracle["a"])
    scores = result.strategy.scores()
    np.testing.assert_allclose(scores.score.sum(axis=0), u, rtol=1e-8, atol=1e-8)
    np.testing.assert_allclose(scores.pooled_variance(), np.diag(v), rtol=1e-8, atol=1e-10)
    rows = _rows(result.table, "score").set_index("unit")
    keys = oracle["variants"]["variant_key"]
    carried = oracle["a"].sum(axis=0) > 0
    want = u[carried] ** 2 / np.diag(v)[carried]
    np.testing.assert_allclose(rows.loc[keys[carried], "statistic"], want, rtol=1e-8)
    np.testing.assert_allclose(rows.loc[keys[carried], "p"], stats.chi2.sf(want, 1), rtol=1e-7)


def test_gene_burden_and_skat_of_a_trait_equal_the_oracle(run, oracle):
    _, result = run
    for unit in _rows(result.table, "burden", maf=0.05)["unit"]:
        design, w = _unit_design(oracle, unit, 0.05)
        u, v = _linear_scores(oracle, design)
        burden = _rows(result.table, "burden", maf=0.05).set_index("unit").loc[unit]
        assert burden["statistic"] == pytest.approx((w @ u) ** 2 / (w @ v @ w), rel=1e-8)
        skat = _rows(result.table, "skat", maf=0.05).set_index("unit").loc[unit]
        assert skat["statistic"] == pytest.approx(np.sum((w * u) ** 2), rel=1e-8)


def test_the_planted_rare_effects_are_found(run):
    info, result = run
    truth = pd.read_csv(info["truth"], sep="\t")
    rows = _rows(result.table, "score").set_index("unit")
    causal = rows.loc[rows.index.isin(truth["variant_key"]), "p"]
    null = rows.loc[~rows.index.isin(truth["variant_key"]), "p"]
    assert causal.median() < 1e-3 < null.median()
