"""The scoring pass applies the scoring file's match filters only (SPEC §3).

A cohort where one scoring variant fails Hardy–Weinberg within one site's controls and another
fails the variant call rate: by default the workflow's PRS (``samples.parquet``) still equals
``rvfedprs prepare score`` and ``plink2 --score ... cols=+scoresums`` on the same inputs; with
``pipeline.qc.apply_to_score`` both variants leave the PRS and each drop is logged with its
reason. Every row of the exclusion log has a reason.
"""

import gzip
import importlib.util
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.cli import main as cli
from rvfedprs.config import validate_config
from rvfedprs.genotypes.writers import BedWriter

HERE = Path(__file__).resolve().parent
PIPELINES = HERE.parents[1] / "pipelines"


def _module(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def load(name):
    return _module(f"pipeline_{name}", PIPELINES / f"{name}.py")


write_cohort = _module("pipelines_conftest", HERE / "conftest.py").write_cohort
needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")


def settings(**qc):
    return validate_config({"pipeline": {"qc": qc}})["pipeline"]


@pytest.fixture(scope="module")
def cohort(tmp_path_factory):
    """Two sites of 40; in the scoring file, one variant fails HWE in site0's controls (no
    heterozygote among them) and one is called in 90% of the samples; one unscored variant is
    monomorphic."""
    c = write_cohort(tmp_path_factory.mktemp("hwe"), n_clients=2, per_client=40, n_variants=60)
    g = c["genotypes"].copy()
    variants = c["variants"]
    with gzip.open(c["scoring_file"], "rt") as handle:
        scored = set(pd.read_csv(handle, sep="\t", comment="#")["rsID"])
    is_scored = variants["id"].isin(scored).to_numpy()
    common = (g.mean(axis=0) / 2 > 0.1) & is_scored
    j_hwe, j_call = np.flatnonzero(common)[:2]
    j_mono = int(np.flatnonzero(~is_scored)[0])
    phen = pd.read_csv(c["phenotypes"], sep="\t")
    sheet = pd.read_csv(c["samples"], sep="\t")
    controls = np.flatnonzero((sheet["client"] == "site0").to_numpy() & (phen["disease"] == 0))
    g[controls, j_hwe] = np.where(np.arange(len(controls)) % 2 == 0, 0, 2)
    g[np.arange(0, len(g), 10), j_call] = -1  # call rate 0.9
    g[:, j_mono] = 0
    with BedWriter(c["bed"], c["sample_ids"]) as bed:
        bed.write(variants, g)
    key = variants["chrom"] + ":" + variants["pos"].astype(str) + ":" + variants["ref"]
    keys = (key + ":" + variants["alt"]).tolist()
    return {**c, "genotypes": g, "hwe": keys[j_hwe], "call": keys[j_call], "mono": keys[j_mono]}


def run_workflow(cohort: dict, out: Path, pipe: dict) -> dict:
    """The preparation rules' scripts, as the workflow runs them."""
    genotypes = [str(cohort["bed"])]
    load("validate_inputs").main(
        genotypes=genotypes,
        samples=cohort["samples"],
        phenotypes=cohort["phenotypes"],
        scoring_file=cohort["scoring_file"],
        pipeline=pipe,
        out_cohort=out / "cohort.tsv",
        out_exclusions=out / "excl_validate.tsv",
    )
    clients = sorted(pd.read_csv(out / "cohort.tsv", sep="\t")["client"].unique())
    for client in clients:
        load("sample_qc").main(
            genotypes=genotypes,
            cohort=out / "cohort.tsv",
            client=client,
            pipeline=pipe,
            out_qc=out / f"qc_{client}.tsv",
            out_exclusions=out / f"excl_qc_{client}.tsv",
        )
        load("client_counts").main(
            genotypes=genotypes,
            qc=out / f"qc_{client}.tsv",
            pipeline=pipe,
            out_counts=out / "counts" / f"{client}.parquet",
            out_skipped=out / f"skip_{client}.tsv",
        )
    load("combine_counts").main(
        counts=[out / "counts" / f"{c}.parquet" for c in clients],
        skipped=[out / f"skip_{c}.tsv" for c in clients],
        pipeline=pipe,
        out_variants=out / "variants.tsv",
        out_rare=out / "rare_variants.tsv",
        out_exclusions=out / "excl_combine.tsv",
    )
    load("match_scores").main(
        variants=out / "variants.tsv",
        scoring_file=cohort["scoring_file"],
        pipeline=pipe,
        out_weights=out / "weights.txt.gz",
        out_match=out / "score_match.tsv",
        out_exclusions=out / "excl_match.tsv",
    )
    samples = []
    for client in clients:
        samples.append(
            load("client_features").main(
                genotypes=genotypes,
                qc=out / f"qc_{client}.tsv",
                variants=out / "variants.tsv",
                rare=out / "rare_variants.tsv",
                weights=out / "weights.txt.gz",
                pipeline=pipe,
                out_samples=out / "clients" / client / "samples.parquet",
                out_rare=out / "clients" / client / "rare_dosages.npz",
            )
        )
    parts = [
        out / "excl_validate.tsv",
        *[out / f"excl_qc_{c}.tsv" for c in clients],
        out / "excl_combine.tsv",
        out / "excl_match.tsv",
    ]
    exclusions = load("collect_exclusions").main(parts, out / "exclusions.tsv")
    return {
        "prs": pd.concat(samples).set_index("sample_id")["prs"],
        "variants": pd.read_csv(out / "variants.tsv", sep="\t", keep_default_na=False),
        "match": pd.read_csv(out / "score_match.tsv", sep="\t", keep_default_na=False),
        "dropped": pd.read_csv(out / "excl_match.tsv", sep="\t", keep_default_na=False),
        "exclusions": exclusions,
    }


@pytest.fixture(scope="module")
def default_run(cohort, tmp_path_factory):
    return run_workflow(cohort, tmp_path_factory.mktemp("default"), settings())


@pytest.fixture(scope="module")
def opt_in_run(cohort, tmp_path_factory):
    return run_workflow(cohort, tmp_path_factory.mktemp("opt_in"), settings(apply_to_score=True))


def prepare_score(genotypes: Path, scoring_file: Path, out: Path) -> pd.Series:
    """``rvfedprs prepare score``'s SUM per sample."""
    assert cli(["prepare", "score", "--genotypes", str(genotypes), "--scorefile",
                str(scoring_file), "--out", str(out)]) == 0  # fmt: skip
    return pd.read_csv(out, sep="\t", dtype={"sample_id": str}).set_index("sample_id")["SUM"]


def scoring_rows(cohort: dict) -> pd.DataFrame:
    with gzip.open(cohort["scoring_file"], "rt") as handle:
        return pd.read_csv(handle, sep="\t", comment="#")


def plink2_score(cohort: dict, rows: pd.DataFrame, tmp_path: Path) -> pd.Series:
    """``plink2 --score`` SUM per sample on the scoring file's ID, effect allele and weight."""
    path = tmp_path / "plink2_score.txt"
    rows[["rsID", "effect_allele", "effect_weight"]].to_csv(path, sep="\t", index=False)
    out = tmp_path / "p2"
    subprocess.run(
        ["plink2", "--bfile", str(cohort["bed"]), "--score", str(path), "1", "2", "3", "header",
         "cols=+scoresums", "--out", str(out)],
        check=True,
        capture_output=True,
    )  # fmt: skip
    table = pd.read_csv(f"{out}.sscore", sep="\t", dtype={"IID": str})
    return table.set_index("IID")["SCORE1_SUM"]


def test_fixture_fails_the_variant_qc(cohort, default_run):
    variants = default_run["variants"].set_index("variant_key")
    assert not variants.loc[cohort["hwe"], "qc_pass"]
    assert "HWE in controls within site (site0 p=" in variants.loc[cohort["hwe"], "reason"]
    assert variants.loc[cohort["call"], "reason"].startswith("call rate 0.9000 < ")
    assert variants.loc[cohort["mono"], "class"] == "excluded"


def test_default_prs_equals_prepare_score_despite_qc_failures(cohort, default_run, tmp_path):
    match = default_run["match"].set_index("variant_key")
    for key in (cohort["hwe"], cohort["call"]):
        assert match.loc[key, "used"] and not match.loc[key, "qc_pass"]
        assert match.loc[key, "qc_reason"] != "" and match.loc[key, "match_status"] == "matched"
    assert default_run["dropped"].empty
    expected = prepare_score(cohort["bed"], cohort["scoring_file"], tmp_path / "score.tsv")
    prs = default_run["prs"].reindex(expected.index)
    np.testing.assert_allclose(prs, expected, rtol=1e-9, atol=1e-12)  # the table holds 10 digits


@needs_plink2
def test_default_prs_equals_plink2_score(cohort, default_run, tmp_path):
    expected = plink2_score(cohort, scoring_rows(cohort), tmp_path)
    prs = default_run["prs"].reindex(expected.index).to_numpy()
    # plink2 prints 6 significant digits (the weights' 6 decimals make rounding ties)
    np.testing.assert_allclose(prs, expected.to_numpy(), rtol=1e-5, atol=1e-6)


def test_opt_in_drops_the_qc_failing_variants_with_their_reasons(
    cohort, default_run, opt_in_run, tmp_path
):
    match = opt_in_run["match"].set_index("variant_key")
    failing = [cohort["hwe"], cohort["call"]]
    assert not match.loc[failing, "used"].any()
    assert (match.loc[failing, "match_status"] == "excluded").all()
    dropped = opt_in_run["dropped"].set_index("id")
    assert sorted(dropped.index) == sorted(failing)
    assert (dropped["kind"] == "score_variant").all() and (dropped["step"] == "match_scores").all()
    reason = dropped.loc[cohort["hwe"], "reason"]
    assert "HWE in controls within site (site0 p=" in reason
    assert "< qc.hwe_p_min 1e-06" in reason and "apply_to_score: true" in reason
    assert dropped.loc[cohort["call"], "reason"].startswith("call rate 0.9000 < ")
    merged = opt_in_run["exclusions"]
    assert set(merged.loc[merged["step"] == "match_scores", "id"]) == set(failing)

    rows = scoring_rows(cohort)
    ids = cohort["variants"].set_index(
        cohort["variants"]["chrom"]
        + ":"
        + cohort["variants"]["pos"].astype(str)
        + ":"
        + cohort["variants"]["ref"]
        + ":"
        + cohort["variants"]["alt"]
    )["id"]
    kept = rows[~rows["rsID"].isin(ids[failing])]
    path = tmp_path / "kept.txt.gz"
    with gzip.open(cohort["scoring_file"], "rt") as handle:
        header = "".join(line for line in handle if line.startswith("#"))
    with gzip.open(path, "wt") as handle:
        handle.write(header + kept.to_csv(sep="\t", index=False))
    expected = prepare_score(cohort["bed"], path, tmp_path / "kept.tsv")
    prs = opt_in_run["prs"].reindex(expected.index)
    np.testing.assert_allclose(prs, expected, rtol=1e-9, atol=1e-12)  # the table holds 10 digits
    assert not np.allclose(prs, default_run["prs"].reindex(expected.index))


def test_every_exclusion_has_a_reason_with_its_value(cohort, default_run, opt_in_run):
    for run in (default_run, opt_in_run):
        merged = run["exclusions"]
        assert merged["reason"].str.strip().ne("").all()
        reasons = merged.set_index("id")["reason"]
        assert reasons[cohort["mono"]].startswith("monomorphic: minor allele count 0 of 160 ")


def test_collect_exclusions_refuses_an_empty_reason(tmp_path):
    path = tmp_path / "part.tsv"
    pd.DataFrame(
        {"kind": ["variant"], "id": ["22:1:A:G"], "reason": [""], "step": ["combine_counts"]}
    ).to_csv(path, sep="\t", index=False)
    with pytest.raises(ValueError, match=r"1 exclusion\(s\) without a reason, e.g. combine_co"):
        load("collect_exclusions").main([path], tmp_path / "out.tsv")
