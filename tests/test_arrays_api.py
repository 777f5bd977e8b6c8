"""A federation from a researcher's own arrays (rvfedprs/arrays.py, issue 39 item 6).

The README's two snippets (a binary and a quantitative trait) are read from the README and run
as they are; the federation they build is checked against the pipeline's rules (the split,
the federated standardisation) and its floor against a pooled least-squares fit.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse as sp

from rvfedprs import federation_from_arrays, load_config, train
from rvfedprs.cohort import stratified_split
from rvfedprs.exceptions import InputDataError
from rvfedprs.genomic.data import pool_clients
from rvfedprs.outcomes import QUANTITATIVE
from rvfedprs.training.glm import glm_design

README = Path(__file__).resolve().parents[1] / "README.md"


def _snippets() -> dict[str, str]:
    """The README's python blocks that follow an ``<!-- api: NAME -->`` marker."""
    found = re.findall(r"<!-- api: (\w+) -->\s*```python\n(.*?)```", README.read_text(), re.S)
    return dict(found)


@pytest.mark.parametrize("name", ["binary", "quantitative"])
def test_the_readme_snippets_run_in_at_most_15_lines(name, tmp_path, monkeypatch):
    code = _snippets()[name]
    assert len(code.strip().splitlines()) <= 15
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(code, f"README:{name}", "exec"), scope)  # noqa: S102 (the README's own code)
    metrics = scope["result"].metrics
    assert (tmp_path / "runs" / name / "metrics.json").is_file()
    if name == "binary":
        assert metrics["metric"] == "auc" and metrics["auc"] > metrics["prs_only_auc"]
    else:
        assert metrics["metric"] == "r2" and metrics["r2"] > metrics["prs_only_r2"]
        assert metrics["incremental_r2_lo"] > 0


def _arrays(n=600, p=40, seed=0):
    rng = np.random.default_rng(seed)
    dosages = sp.csr_matrix((rng.random((n, p)) < 0.03).astype(float))
    sites = np.repeat(["a", "b", "c"], n // 3)
    age = 50 + 10 * rng.normal(size=n)
    trait = 3.0 + 0.5 * dosages[:, :4].toarray().sum(1) + 0.02 * age + rng.normal(size=n)
    return dosages, trait, sites, age


def test_the_split_and_the_standardisation_follow_the_pipeline():
    dosages, trait, sites, age = _arrays()
    fed = federation_from_arrays(dosages, trait, sites, kind="quantitative",
                                 covariates=age[:, None], random_seed=5)  # fmt: skip
    assert fed.outcome == QUANTITATIVE and fed.client_ids == ["a", "b", "c"]
    assert fed.covariate_names == ("cov1",)
    train_rows = []
    for site in fed.client_ids:
        rows = np.flatnonzero(sites == site)
        import zlib

        split = stratified_split(QUANTITATIVE.strata(trait[rows]), test_fraction=0.2,
                                 random_seed=[5, zlib.crc32(site.encode())])  # fmt: skip
        np.testing.assert_array_equal(fed.test[site].sample_ids,
                                      [f"{site}_{i}" for i in rows[split == "test"]])  # fmt: skip
        train_rows.append(rows[split == "train"])
    train_y = trait[np.concatenate(train_rows)]
    assert (fed.trait_mean, fed.trait_sd) == pytest.approx((train_y.mean(), train_y.std()))
    pooled = pool_clients(fed.train)
    assert pooled.covariates.mean() == pytest.approx(0, abs=1e-6)


def test_a_federation_without_a_prs_fits_the_covariate_floor(tmp_path):
    dosages, trait, sites, age = _arrays()
    fed = federation_from_arrays(dosages, trait, sites, kind="quantitative",
                                 covariates=age[:, None], random_seed=5)  # fmt: skip
    config = load_config(overrides={"train": {"strategy": "fedglm", "validation_fraction": 0},
                                    "fedglm": {"features": "dosages", "l2": 1.0}})  # fmt: skip
    result = train(config, tmp_path, data=fed)
    pooled = pool_clients(fed.train)
    x = glm_design(pooled, "dosages").toarray()
    penalty = np.r_[0.0, 0.0, 0.0, np.ones(x.shape[1] - 3)]  # intercept, PRS, age free
    keep = np.r_[0, 2 : x.shape[1]]  # the constant PRS column carries nothing
    expected = np.linalg.solve(x[:, keep].T @ x[:, keep] + np.diag(penalty[keep]),
                               x[:, keep].T @ pooled.y)  # fmt: skip
    np.testing.assert_allclose(result.strategy.coef[keep], expected, atol=1e-8)
    assert result.strategy.coef[1] == pytest.approx(0.0, abs=1e-12)


def test_bad_arrays_are_refused_by_name():
    dosages, trait, sites, _ = _arrays()
    with pytest.raises(InputDataError, match=r"600 samples but \{'sites': 599"):
        federation_from_arrays(dosages, trait, sites[:-1], kind="quantitative")
    with pytest.raises(InputDataError, match=r"phenotype must be 0/1"):
        federation_from_arrays(dosages, trait, sites)
    with pytest.raises(InputDataError, match=r"2 variant_ids for 40 dosage columns"):
        federation_from_arrays(dosages, trait, sites, kind="quantitative", variant_ids=["x", "y"])
