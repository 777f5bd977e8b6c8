"""``rvfedprs assess`` against independent computations: scikit-learn, 2×2 tables, likelihoods."""

import base64
import json
import re

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import roc_auc_score

from rvfedprs.cli import main
from rvfedprs.evaluation.assess import (
    assess_scores,
    histogram_delong_se,
    load_assess_data,
    score_metrics,
)
from rvfedprs.evaluation.paired import auc_standard_error
from rvfedprs.evaluation.prs_metrics import liability_factor
from rvfedprs.evaluation.summaries import merge_histograms, site_summary
from rvfedprs.exceptions import InputDataError


def _cohort(n=900, seed=0):
    rng = np.random.default_rng(seed)
    site = np.array([f"site{k}" for k in rng.integers(0, 3, n)])
    age = rng.normal(55, 8, n)
    sex = rng.integers(0, 2, n).astype(float)
    score = rng.normal(size=n) + 0.4 * (site == "site2")
    eta = -1.4 + 0.6 * score + 0.04 * (age - 55) + 0.3 * sex
    y = (rng.random(n) < 1 / (1 + np.exp(-eta))).astype(int)
    return y, score, np.column_stack([age, sex]), site


def _sklearn_fit(X, y):
    # Unpenalised (C = inf: scikit-learn 1.8 deprecates penalty=None for it).
    return LogisticRegression(C=np.inf, tol=1e-12, max_iter=100_000).fit(X, y)


def _loglik(fit, X, y):
    p = fit.predict_proba(X)[:, 1]
    return float(np.sum(y * np.log(p) + (1 - y) * np.log1p(-p)))


def test_auc_matches_sklearn_and_its_interval_is_delong():
    y, score, cov, _ = _cohort()
    got = score_metrics(y, score, cov)
    assert got["auc"] == pytest.approx(roc_auc_score(y, score), abs=1e-12)
    half = 1.959963984540054 * auc_standard_error(y, score)
    assert got["auc_lo"] == pytest.approx(got["auc"] - half, abs=1e-9)
    assert got["auc_hi"] == pytest.approx(got["auc"] + half, abs=1e-9)


def test_or_per_sd_equals_sklearn_on_the_standardised_score_and_covariates():
    y, score, cov, _ = _cohort(seed=1)
    z = (score - score.mean()) / score.std(ddof=1)
    fit = _sklearn_fit(np.column_stack([cov, z]), y)
    got = score_metrics(y, score, cov)
    assert got["or_per_sd"] == pytest.approx(np.exp(fit.coef_[0, -1]), rel=1e-5)
    assert got["or_per_sd_lo"] < got["or_per_sd"] < got["or_per_sd_hi"]


def test_or_per_sd_interval_is_wald_from_the_observed_information():
    y, score, cov, _ = _cohort(seed=2)
    z = (score - score.mean()) / score.std(ddof=1)
    X = np.column_stack([np.ones_like(z), cov, z])
    fit = _sklearn_fit(X[:, 1:], y)
    p = fit.predict_proba(X[:, 1:])[:, 1]
    se = np.sqrt(np.linalg.inv((X * (p * (1 - p))[:, None]).T @ X)[-1, -1])
    got = score_metrics(y, score, cov)
    assert np.log(got["or_per_sd_hi"] / got["or_per_sd_lo"]) == pytest.approx(
        2 * 1.959963984540054 * se, rel=1e-4
    )


def test_nagelkerke_increment_equals_the_two_log_likelihoods():
    y, score, cov, _ = _cohort(seed=3)
    n = y.size
    ll_null = _loglik(_sklearn_fit(cov, y), cov, y)
    full = np.column_stack([cov, score])
    ll_full = _loglik(_sklearn_fit(full, y), full, y)
    p = y.mean()
    ll0 = n * (p * np.log(p) + (1 - p) * np.log(1 - p))

    def r2(ll):
        return (1 - np.exp(2 * (ll0 - ll) / n)) / (1 - np.exp(2 * ll0 / n))

    got = score_metrics(y, score, cov)
    assert got["r2_nagelkerke"] == pytest.approx(r2(ll_full) - r2(ll_null), abs=1e-7)


def test_liability_r2_is_lee_et_al_of_the_observed_increment():
    y, score, cov, _ = _cohort(seed=4)
    got = score_metrics(y, score, cov, prevalence=0.05)
    factor = liability_factor(0.05, y.mean())
    assert got["r2_liability"] == pytest.approx(got["r2_observed"] * factor, rel=1e-12)
    assert "r2_liability" not in score_metrics(y, score, cov)


def test_top_decile_or_equals_the_two_by_two_table():
    y, score, _, _ = _cohort(seed=5)
    order = np.argsort(-score)
    top = np.zeros(y.size, bool)
    top[order[: int(np.ceil(y.size / 10))]] = True  # 900 samples: exactly the top 90
    a, b = (y[top] == 1).sum(), (y[top] == 0).sum()
    c, d = (y[~top] == 1).sum(), (y[~top] == 0).sum()
    odds = a * d / (b * c)
    se = np.sqrt(1 / a + 1 / b + 1 / c + 1 / d)
    got = score_metrics(y, score)
    assert got["or_top_decile"] == pytest.approx(odds, rel=1e-12)
    assert got["or_top_decile_lo"] == pytest.approx(odds * np.exp(-1.959963984540054 * se))
    assert got["or_top_decile_hi"] == pytest.approx(odds * np.exp(1.959963984540054 * se))


def test_histogram_delong_se_equals_delong_on_distinct_scores():
    y, score, _, _ = _cohort(seed=6)
    p = 1 / (1 + np.exp(-score))
    cases, controls = merge_histograms([site_summary(y, p)["histogram"]])
    assert histogram_delong_se(cases, controls) == pytest.approx(
        auc_standard_error(y, score), rel=1e-6
    )


def _data(tmp_path, y, score, cov, site):
    ids = [f"S{i}" for i in range(y.size)]
    pd.DataFrame({"sample_id": ids, "SUM": score, "n_matched": 10}).to_csv(
        tmp_path / "prs.tsv", sep="\t", index=False
    )
    pd.DataFrame({"IID": ids, "y": y}).to_csv(tmp_path / "pheno.tsv", sep="\t", index=False)
    pd.DataFrame({"sample_id": ids, "age": cov[:, 0], "sex": cov[:, 1]}).to_csv(
        tmp_path / "cov.tsv", sep="\t", index=False
    )
    pd.DataFrame({"sample_id": ids, "client": site}).to_csv(
        tmp_path / "samples.tsv", sep="\t", index=False
    )
    return {
        "scores": tmp_path / "prs.tsv",
        "phenotypes": tmp_path / "pheno.tsv",
        "covariates": tmp_path / "cov.tsv",
        "samples": tmp_path / "samples.tsv",
    }


def test_federated_pooled_rows_match_the_exact_pooled_rows(tmp_path):
    y, score, cov, site = _cohort(n=3000, seed=7)
    data = load_assess_data(**_data(tmp_path, y, score, cov, site))
    exact = assess_scores(data, prevalence=0.1).set_index("site")
    federated = assess_scores(data, prevalence=0.1, federated=True).set_index("site")
    assert federated.loc["pooled", "method"] == "federated"
    assert abs(federated.loc["pooled", "auc"] - roc_auc_score(y, score)) < 1e-3
    assert (
        abs(federated.loc["pooled", "auc"] - exact.loc["pooled", "auc"])
        <= federated.loc["pooled", "auc_tie_bound"] + 1e-12
    )
    for key in ("auc_lo", "auc_hi"):
        assert federated.loc["pooled", key] == pytest.approx(exact.loc["pooled", key], abs=1e-3)
    for key in ("or_per_sd", "or_per_sd_lo", "r2_nagelkerke", "r2_liability", "or_top_decile"):
        assert federated.loc["pooled", key] == pytest.approx(exact.loc["pooled", key], rel=1e-8)
    pd.testing.assert_frame_equal(  # the sites' own rows do not depend on the mode
        exact.drop(index="pooled").drop(columns=["auc_tie_bound"], errors="ignore"),
        federated.drop(index="pooled").drop(columns=["auc_tie_bound"]),
    )


def test_site_rows_are_the_sites_own_samples(tmp_path):
    y, score, cov, site = _cohort(seed=8)
    table = assess_scores(load_assess_data(**_data(tmp_path, y, score, cov, site)))
    row = table[table["site"] == "site1"].iloc[0]
    mask = site == "site1"
    assert row["n"] == mask.sum() and row["n_cases"] == y[mask].sum()
    assert row["auc"] == pytest.approx(roc_auc_score(y[mask], score[mask]))
    assert table["site"].tolist() == ["site0", "site1", "site2", "pooled"]


def test_cli_end_to_end(tmp_path, capsys):
    y, score, cov, site = _cohort(seed=9)
    files = _data(tmp_path, y, score, cov, site)
    out = tmp_path / "out"
    argv = [
        "assess",
        "--scores",
        str(files["scores"]),
        "--phenotypes",
        str(files["phenotypes"]),
        "--covariates",
        str(files["covariates"]),
        "--samples",
        str(files["samples"]),
        "--prevalence",
        "0.1",
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    for name in ("assess.tsv", "assess.md", "assess.html", "provenance.json"):
        assert (out / name).is_file()
    table = pd.read_csv(out / "assess.tsv", sep="\t")
    assert {"auc", "auc_lo", "or_per_sd", "or_top_decile", "r2_nagelkerke", "r2_liability"} <= set(
        table.columns
    )
    assert len(table) == 4
    page = (out / "assess.html").read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 3  # ROC, risk by decile, score by site
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "How to read" in (out / "assess.md").read_text()
    record = json.loads((out / "provenance.json").read_text())
    assert record["command"] == "rvfedprs assess" and len(record["inputs"]) == 4
    assert "SUM: n=900" in capsys.readouterr().out


def test_cli_without_sites_or_covariates(tmp_path):
    y, score, cov, site = _cohort(seed=10)
    files = _data(tmp_path, y, score, cov, site)
    out = tmp_path / "out"
    argv = [
        "assess",
        "--scores",
        str(files["scores"]),
        "--phenotypes",
        str(files["phenotypes"]),
        "--out",
        str(out),
    ]
    assert main(argv) == 0
    table = pd.read_csv(out / "assess.tsv", sep="\t")
    assert table["site"].tolist() == ["pooled"] and "r2_liability" not in table
    assert len(re.findall("data:image/png;base64", (out / "assess.html").read_text())) == 2


def _run_bad(tmp_path, capsys, *extra, scores=None, phenotypes=None):
    argv = [
        "assess",
        "--scores",
        str(scores or tmp_path / "prs.tsv"),
        "--phenotypes",
        str(phenotypes or tmp_path / "pheno.tsv"),
        "--out",
        str(tmp_path / "out"),
        *extra,
    ]
    status = main(argv)
    return status, capsys.readouterr().err


@pytest.mark.parametrize(
    ("change", "extra", "message"),
    [
        ("none", ["--phenotype", "T2D"], r"phenotype file .* lacks column\(s\) \['T2D'\]"),
        ("none", ["--score-columns", "PGS1"], r"score file .* lacks column\(s\) \['PGS1'\]"),
        ("none", ["--samples", "SAMPLES", "--group-column", "site"], r"lacks column\(s\) \['site'"),
        ("ids", [], "no sample id is shared"),
        ("coded12", [], r"must be 0/1 .*found values \[1.0, 2.0\].*subtract 1"),
        ("text", [], r"must be 0/1 .*found values \['no', 'yes'\]"),
        ("one_class", [], r"only controls \(0\) among the 900 samples"),
        ("none", ["--prevalence", "1.5"], r"prevalence must lie in \(0, 1\); got 1.5"),
        ("none", ["--federated"], "--federated needs sites"),
    ],
)
def test_bad_input_is_a_named_error(tmp_path, capsys, change, extra, message):
    y, score, cov, site = _cohort(seed=11)
    files = _data(tmp_path, y, score, cov, site)
    pheno = pd.read_csv(files["phenotypes"], sep="\t")
    if change == "ids":
        pheno["IID"] = "X" + pheno["IID"]
    elif change == "coded12":
        pheno["y"] += 1
    elif change == "text":
        pheno["y"] = np.where(pheno["y"] == 1, "yes", "no")
    elif change == "one_class":
        pheno["y"] = 0
    pheno.to_csv(files["phenotypes"], sep="\t", index=False)
    extra = [str(files["samples"]) if e == "SAMPLES" else e for e in extra]
    status, err = _run_bad(tmp_path, capsys, *extra)
    assert status == 2
    assert "Traceback" not in err
    assert re.search(message, err), err


def test_missing_file_and_missing_id_column(tmp_path, capsys):
    status, err = _run_bad(tmp_path, capsys, scores=tmp_path / "absent.tsv")
    assert status == 2 and "score file" in err and "not found" in err
    pd.DataFrame({"name": ["a"], "SUM": [1.0]}).to_csv(tmp_path / "prs.tsv", sep="\t", index=False)
    status, err = _run_bad(tmp_path, capsys, phenotypes=tmp_path / "prs.tsv")
    assert status == 2 and "has no sample id column" in err and "--id-column" in err


def test_loader_drops_missing_phenotypes_and_one_hot_encodes_text_covariates(tmp_path):
    y, score, cov, site = _cohort(seed=12)
    files = _data(tmp_path, y, score, cov, site)
    pheno = pd.read_csv(files["phenotypes"], sep="\t").astype({"y": float})
    pheno.loc[:4, "y"] = np.nan
    pheno.to_csv(files["phenotypes"], sep="\t", index=False)
    covs = pd.read_csv(files["covariates"], sep="\t")
    covs["sex"] = np.where(covs["sex"] == 1, "male", "female")
    covs.to_csv(files["covariates"], sep="\t", index=False)
    data = load_assess_data(files["scores"], files["phenotypes"], covariates=files["covariates"])
    assert len(data.frame) == y.size - 5
    assert data.covariates == ["cov:age", "cov:sex=male"]
    assert any("5 samples with a missing phenotype" in n for n in data.notes)
    with pytest.raises(InputDataError, match="name the phenotype column"):
        load_assess_data(files["scores"], files["phenotypes"], covariates=files["phenotypes"])
