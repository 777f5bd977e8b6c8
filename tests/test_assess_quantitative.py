"""``rvfedprs assess`` for a quantitative trait against statsmodels OLS fitted on the same rows."""

import base64
import importlib.util
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import statsmodels.api as sm

from rvfedprs.cli import main
from rvfedprs.evaluation.assess import assess_scores, load_assess_data
from rvfedprs.evaluation.assess_quantitative import STATISTICS
from rvfedprs.exceptions import InputDataError
from rvfedprs.genomic.data import write_outcome

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".." / "shared" / "data"
CINECA = DATA / "cineca_synthetic"
PGS = DATA / "pgs_catalog_scorefiles" / "PGS001229_22.txt"  # standing height, chr22
needs_cineca = pytest.mark.skipif(
    not all(
        p.is_file()
        for p in (CINECA / "cineca_synthetic_subset.bed", CINECA / "uk1_phenotypes.tsv", PGS)
    ),
    reason="needs ../shared/data (the CINECA excerpt and PGS001229)",
)


def _cohort(n=1200, seed=0):
    """Three sites, age and sex, a height-like trait that rises with the score."""
    rng = np.random.default_rng(seed)
    site = np.array([f"site{k}" for k in rng.integers(0, 3, n)])
    age = rng.normal(55, 8, n)
    sex = rng.integers(0, 2, n).astype(float)
    score = 0.02 * rng.normal(size=n) + 0.3 + 0.01 * (site == "site2")
    trait = 165 + 12 * sex - 0.1 * (age - 55) + 150 * (score - 0.3) + rng.normal(0, 6, n)
    return trait, score, np.column_stack([age, sex]), site


def _files(tmp_path, trait, score, cov, site):
    ids = [f"S{i}" for i in range(trait.size)]
    paths = {k: tmp_path / f"{k}.tsv" for k in ("scores", "phenotypes", "covariates", "samples")}
    pd.DataFrame({"IID": ids, "SUM": score}).to_csv(paths["scores"], sep="\t", index=False)
    pd.DataFrame({"IID": ids, "height": trait}).to_csv(paths["phenotypes"], sep="\t", index=False)
    covariates = pd.DataFrame({"IID": ids, "age": cov[:, 0], "sex": cov[:, 1]})
    covariates.to_csv(paths["covariates"], sep="\t", index=False)
    pd.DataFrame({"IID": ids, "client": site}).to_csv(paths["samples"], sep="\t", index=False)
    return paths


def _assess(tmp_path, trait, score, cov, site, **options):
    files = _files(tmp_path, trait, score, cov, site)
    data = load_assess_data(**files, phenotype_kind="quantitative")
    return assess_scores(data, **options).set_index("site")


def _ols(trait, score, cov):
    """statsmodels' null, full, score-alone fits; the score standardised with ddof 1."""
    z = (score - score.mean()) / score.std(ddof=1)
    null = sm.OLS(trait, sm.add_constant(cov)).fit()
    full = sm.OLS(trait, sm.add_constant(np.column_stack([cov, z]))).fit()
    alone = sm.OLS(trait, sm.add_constant(z)).fit()
    return null, full, alone


def _assert_equals_statsmodels(row, trait, score, cov):
    null, full, alone = _ols(trait, score, cov)
    assert row["n"] == trait.size
    assert row["null_r2"] == pytest.approx(null.rsquared, abs=1e-8)
    assert row["full_r2"] == pytest.approx(full.rsquared, abs=1e-8)
    assert row["incremental_r2"] == pytest.approx(full.rsquared - null.rsquared, abs=1e-8)
    assert row["r2"] == pytest.approx(alone.rsquared, abs=1e-8)
    assert row["beta_per_sd"] == pytest.approx(full.params[-1], abs=1e-8)
    low, high = full.conf_int()[-1]
    assert (row["beta_per_sd_lo"], row["beta_per_sd_hi"]) == pytest.approx((low, high), abs=1e-8)
    # partial r² = (RSS_null − RSS_full) / RSS_null, its sign the score's coefficient's
    partial = np.sign(full.params[-1]) * np.sqrt(1 - full.ssr / null.ssr)
    assert row["partial_r"] == pytest.approx(partial, abs=1e-8)
    assert row["incremental_r2_lo"] <= row["incremental_r2"] <= row["incremental_r2_hi"]
    assert row["r2_lo"] <= row["r2"] <= row["r2_hi"]


def test_pooled_and_site_rows_equal_statsmodels_ols(tmp_path):
    trait, score, cov, site = _cohort()
    table = _assess(tmp_path, trait, score, cov, site)
    assert table.index.tolist() == ["site0", "site1", "site2", "pooled"]
    assert "n_cases" not in table and "auc" not in table
    _assert_equals_statsmodels(table.loc["pooled"], trait, score, cov)
    for name in ("site0", "site1", "site2"):
        rows = site == name
        _assert_equals_statsmodels(table.loc[name], trait[rows], score[rows], cov[rows])
    assert table.loc["pooled", "incremental_r2"] > 0.05
    top = score >= np.quantile(score, 0.9)
    difference = trait[top].mean() - trait[~top].mean()
    assert table.loc["pooled", "top_decile_difference"] == pytest.approx(difference, rel=1e-12)


def test_federated_pooled_row_equals_the_exact_pooled_row(tmp_path):
    trait, score, cov, site = _cohort(seed=3)
    exact = _assess(tmp_path, trait, score, cov, site)
    federated = _assess(tmp_path, trait, score, cov, site, federated=True)
    assert federated.loc["pooled", "method"] == "federated"
    for key in STATISTICS:
        if key.startswith("top_decile"):  # needs the pooled ranking: not from sums
            assert np.isnan(federated.loc["pooled", key])
        else:
            assert federated.loc["pooled", key] == pytest.approx(
                exact.loc["pooled", key], abs=1e-8
            ), key
    pd.testing.assert_frame_equal(exact.drop(index="pooled"), federated.drop(index="pooled"))


def test_a_constant_covariate_at_a_site_is_dropped_there(tmp_path):
    trait, score, cov, site = _cohort(seed=4)
    cov[site == "site1", 1] = 1.0  # site1: all one sex
    table = _assess(tmp_path, trait, score, cov, site)
    rows = site == "site1"
    _assert_equals_statsmodels(table.loc["site1"], trait[rows], score[rows], cov[rows][:, :1])


def test_cli_writes_the_three_files_with_r2_columns_and_trait_figures(tmp_path, capsys):
    files = _files(tmp_path, *_cohort(seed=5))
    out = tmp_path / "out"
    argv = ["assess", "--phenotype-kind", "quantitative", "--federated", "--out", str(out)]
    for key in ("scores", "phenotypes", "covariates", "samples"):
        argv += [f"--{key}", str(files[key])]
    assert main(argv) == 0
    table = pd.read_csv(out / "assess.tsv", sep="\t")
    assert {"null_r2", "full_r2", "incremental_r2", "incremental_r2_lo", "beta_per_sd"} <= set(
        table.columns
    )
    assert not {"auc", "or_per_sd", "n_cases"} & set(table.columns)
    markdown = (out / "assess.md").read_text()
    assert "Incremental R² (95% CI)" in markdown and "AUC" not in markdown
    assert "trait mean" in markdown and "least squares from each site's X'X" in markdown
    page = (out / "assess.html").read_text()
    images = re.findall(r"src='data:image/png;base64,([A-Za-z0-9+/=]+)'", page)
    assert len(images) == 2  # mean trait by decile, score against trait
    assert all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "ROC" not in page and "Mean trait by score decile" in page
    assert "SUM: n=1200 incremental_r2=" in capsys.readouterr().out
    record = json.loads((out / "provenance.json").read_text())
    assert record["parameters"]["phenotype_kind"] == "quantitative"


def test_a_non_numeric_trait_is_a_one_line_error(tmp_path, capsys):
    files = _files(tmp_path, *_cohort(seed=6))
    pheno = pd.read_csv(files["phenotypes"], sep="\t").astype({"height": object})
    pheno.loc[7, "height"] = "tall"
    pheno.to_csv(files["phenotypes"], sep="\t", index=False)
    argv = ["assess", "--phenotype-kind", "quantitative", "--out", str(tmp_path / "out"),
            "--scores", str(files["scores"]), "--phenotypes", str(files["phenotypes"])]  # fmt: skip
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
    assert re.search(r"phenotype 'height' .* sample S7 has the non-numeric value 'tall'", err)


def test_blank_traits_are_missing_and_a_constant_trait_or_prevalence_is_an_error(tmp_path):
    trait, score, cov, site = _cohort(seed=7)
    trait[:3] = np.nan
    data = load_assess_data(**_files(tmp_path, trait, score, cov, site),
                            phenotype_kind="quantitative")  # fmt: skip
    assert len(data.frame) == trait.size - 3
    with pytest.raises(InputDataError, match="prevalence 0.1 is for a binary phenotype"):
        assess_scores(data, prevalence=0.1)
    with pytest.raises(InputDataError, match="the phenotype is 170 for all 1200 samples"):
        load_assess_data(**_files(tmp_path, np.full(trait.size, 170.0), score, cov, site),
                         phenotype_kind="quantitative")  # fmt: skip


def test_workflow_report_assesses_the_trait_outcome_json_names(tmp_path):
    """pipelines/assess_report.py reads the federation's outcome.json: quantitative rows."""
    spec = importlib.util.spec_from_file_location("assess_report", ROOT / "pipelines" /
                                                  "assess_report.py")  # fmt: skip
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    trait, score, cov, site = _cohort(seed=8)
    results, paths = tmp_path / "results", []
    for name in ("site0", "site1", "site2"):
        rows = site == name
        path = results / "clients" / name / "samples.parquet"
        path.parent.mkdir(parents=True)
        pd.DataFrame({"sample_id": [f"{name}_{i}" for i in range(rows.sum())], "phenotype":
                      trait[rows], "prs": score[rows], "age": cov[rows, 0], "split": "train"}
                     ).to_parquet(path)  # fmt: skip
        paths.append(path)
    write_outcome(results, "quantitative", "height")
    settings = {"split": "all", "prevalence": None, "federated": False}
    table = script.main(samples=paths, settings=settings, covariates=["age"],
                        out=results / "report", inputs_table=tmp_path / "inputs.tsv")  # fmt: skip
    pooled = table.set_index("site").loc["pooled"]
    null, full, _ = _ols(trait, score, cov[:, :1])
    assert pooled["incremental_r2"] == pytest.approx(full.rsquared - null.rsquared, abs=1e-8)
    assert "Incremental R²" in (results / "report" / "assess.md").read_text()


@needs_cineca
def test_real_height_against_the_pgs001229_height_score(tmp_path):
    """The CINECA excerpt's standing height against PGS001229 (a height PRS) on its chr22.

    The excerpt's phenotypes are synthetic attributes drawn apart from its 1000 Genomes
    genotypes (sex does not even predict height there): the score explains nothing, so the
    incremental R² is small, not negative, and its interval holds 0; the fits equal statsmodels'.
    """
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.scoring import score

    scores, _ = score(open_genotypes(CINECA / "cineca_synthetic_subset"), PGS, chunk_size=500)
    scores.to_csv(tmp_path / "prs.tsv", sep="\t", index=False)
    phenotypes = CINECA / "uk1_phenotypes.tsv"
    data = load_assess_data(
        tmp_path / "prs.tsv",
        phenotypes,
        phenotype="Standing height-0.0",
        phenotype_kind="quantitative",
        score_columns=["SUM"],
        covariates=phenotypes,
        covariate_columns=["Sex"],
    )
    row = assess_scores(data).set_index("site").loc["pooled"]
    frame = data.frame
    _assert_equals_statsmodels(
        row,
        frame["phenotype"].to_numpy(),
        frame["SUM"].to_numpy(),
        frame[["cov:Sex=male"]].to_numpy(),
    )
    assert row["n"] == 2504 and 150 < frame["phenotype"].mean() < 190
    assert 0 <= row["incremental_r2"] < 0.01
    assert row["incremental_r2_lo"] == 0 < row["incremental_r2_hi"]
    assert row["beta_per_sd_lo"] < 0 < row["beta_per_sd_hi"]
