"""Each pipeline script's ``main`` on a tiny cohort, against numpy oracles."""

import gzip
import importlib.util
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from rvfedprs.config import validate_config
from rvfedprs.exceptions import InputDataError

PIPELINES = Path(__file__).resolve().parents[2] / "pipelines"


def load(name):
    spec = importlib.util.spec_from_file_location(f"pipeline_{name}", PIPELINES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def settings(**overrides):
    return validate_config({"pipeline": overrides})["pipeline"]


def validate(cohort, out, **kwargs):
    args = dict(
        genotypes=[str(cohort["bed"])],
        samples=cohort["samples"],
        phenotypes=cohort["phenotypes"],
        scoring_file=cohort["scoring_file"],
        pipeline=settings(),
        out_cohort=out / "cohort.tsv",
        out_exclusions=out / "excl.tsv",
    )
    args.update(kwargs)
    return load("validate_inputs").main(**args)


@pytest.fixture(scope="module")
def prepared(tiny_cohort, tmp_path_factory):
    """Run every step of the pipeline on the tiny cohort, as the workflow would."""
    out = tmp_path_factory.mktemp("prepared")
    pipe = settings()
    genotypes = [str(tiny_cohort["bed"])]
    validate(tiny_cohort, out)
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
            out_counts=out / f"counts_{client}.parquet",
            out_skipped=out / f"skip_{client}.tsv",
        )
    load("combine_counts").main(
        counts=[out / f"counts_{c}.parquet" for c in clients],
        skipped=[out / f"skip_{c}.tsv" for c in clients],
        pipeline=pipe,
        out_variants=out / "variants.tsv",
        out_rare=out / "rare_variants.tsv",
        out_exclusions=out / "excl_combine.tsv",
    )
    load("match_scores").main(
        variants=out / "variants.tsv",
        scoring_file=tiny_cohort["scoring_file"],
        pipeline=pipe,
        out_weights=out / "weights.txt.gz",
        out_match=out / "score_match.tsv",
    )
    for client in clients:
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
    return {"out": out, "clients": clients, "cohort": tiny_cohort}


# --- validation: each bad input with its message pinned ---------------------------------


def test_validate_keeps_everyone_in_genotype_order(tiny_cohort, tmp_path):
    cohort = validate(tiny_cohort, tmp_path)
    assert cohort["sample_id"].tolist() == tiny_cohort["sample_ids"]
    assert set(cohort.columns) >= {"sample_id", "client", "phenotype"}
    assert pd.read_csv(tmp_path / "excl.tsv", sep="\t").empty


def test_sample_mismatch_lists_the_names(tiny_cohort, tmp_path):
    phen = pd.read_csv(tiny_cohort["phenotypes"], sep="\t", dtype=str)
    phen.loc[0, "Subject id"] = "GHOST1"
    phen = phen.drop(index=[5])
    path = tmp_path / "phen.tsv"
    phen.to_csv(path, sep="\t", index=False)
    with pytest.raises(InputDataError) as info:
        validate(tiny_cohort, tmp_path, phenotypes=path)
    message = str(info.value)
    assert "1 sample(s) in phenotype table" in message and ": GHOST1" in message
    assert "are absent from phenotype table" in message and "S0000, S0005" in message


def test_sample_mismatch_excluded_is_logged(tiny_cohort, tmp_path):
    phen = pd.read_csv(tiny_cohort["phenotypes"], sep="\t", dtype=str).drop(index=[3, 4])
    path = tmp_path / "phen.tsv"
    phen.to_csv(path, sep="\t", index=False)
    cohort = validate(
        tiny_cohort, tmp_path, phenotypes=path, pipeline=settings(on_sample_mismatch="exclude")
    )
    excluded = pd.read_csv(tmp_path / "excl.tsv", sep="\t")
    assert sorted(excluded["id"]) == ["S0003", "S0004"]
    assert excluded["reason"].str.contains("absent from phenotype table").all()
    assert "S0003" not in set(cohort["sample_id"])


def test_crlf_phenotypes_named(tiny_cohort, tmp_path):
    path = tmp_path / "phen.tsv"
    path.write_bytes(Path(tiny_cohort["phenotypes"]).read_bytes().replace(b"\n", b"\r\n"))
    with pytest.raises(InputDataError, match=r"phen.tsv has Windows \(CRLF\) line endings"):
        validate(tiny_cohort, tmp_path, phenotypes=path)


def test_duplicate_sample_ids_named(tiny_cohort, tmp_path):
    sheet = pd.read_csv(tiny_cohort["samples"], sep="\t", dtype=str)
    sheet = pd.concat([sheet, sheet.iloc[[7]]])
    path = tmp_path / "samples.tsv"
    sheet.to_csv(path, sep="\t", index=False)
    with pytest.raises(
        InputDataError, match=r"1 duplicate ID\(s\) in samples sheet .*S0007 \(x2\)"
    ):
        validate(tiny_cohort, tmp_path, samples=path)


def test_single_class_client_is_excluded_or_an_error(tiny_cohort, tmp_path):
    phen = pd.read_csv(tiny_cohort["phenotypes"], sep="\t", dtype=str)
    sheet = pd.read_csv(tiny_cohort["samples"], sep="\t", dtype=str)
    phen.loc[sheet["client"] == "site1", "disease"] = "0"
    path = tmp_path / "phen.tsv"
    phen.to_csv(path, sep="\t", index=False)
    excluding = settings(on_invalid_client="exclude")
    cohort = validate(tiny_cohort, tmp_path, phenotypes=path, pipeline=excluding)
    assert "site1" not in set(cohort["client"])
    excluded = pd.read_csv(tmp_path / "excl.tsv", sep="\t")
    client_row = excluded[excluded["kind"] == "client"]
    assert client_row["id"].tolist() == ["site1"]
    assert "single phenotype class (30 controls" in client_row["reason"].iloc[0]
    assert (excluded["kind"] == "sample").sum() == 30
    with pytest.raises(InputDataError, match=r"client 'site1' has a single phenotype class"):
        validate(tiny_cohort, tmp_path, phenotypes=path)  # the default stops the run


def test_build_mismatch_names_both_builds(tiny_cohort, tmp_path):
    path = tmp_path / "score38.txt.gz"
    with gzip.open(tiny_cohort["scoring_file"], "rt") as handle:
        text = handle.read().replace("#genome_build=GRCh37", "#genome_build=hg38")
    with gzip.open(path, "wt") as handle:
        handle.write(text)
    with pytest.raises(
        InputDataError,
        match=r"score38.txt.gz is on build GRCh38 but pipeline.genome_build is GRCh37",
    ):
        validate(tiny_cohort, tmp_path, scoring_file=path)


def test_all_clients_too_small_is_an_error(tiny_cohort, tmp_path):
    with pytest.raises(
        InputDataError, match="no client left.*30 samples, fewer than min_samples_per_client=31"
    ):
        validate(
            tiny_cohort,
            tmp_path,
            pipeline=settings(min_samples_per_client=31, on_invalid_client="exclude"),
        )


# --- frequencies, QC, split -------------------------------------------------------------


def test_federated_frequencies_equal_pooled_numpy(prepared):
    variants = pd.read_csv(prepared["out"] / "variants.tsv", sep="\t")
    g = prepared["cohort"]["genotypes"].astype(float)
    g[g < 0] = np.nan
    expected = np.nanmean(g, axis=0) / 2
    np.testing.assert_allclose(variants["alt_freq"], expected, rtol=1e-12)
    called = np.isfinite(g).mean(axis=0)
    np.testing.assert_allclose(variants["call_rate"], called, rtol=1e-12)
    failing = variants.loc[~variants["qc_pass"], "variant_key"]
    assert set(failing) == set(variants.loc[called < 0.95, "variant_key"])


def test_rare_split_and_exclusion_log(prepared):
    out = prepared["out"]
    variants = pd.read_csv(out / "variants.tsv", sep="\t")
    rare = pd.read_csv(out / "rare_variants.tsv", sep="\t")
    assert list(rare.columns) == [
        "variant_key",
        "chrom",
        "pos",
        "id",
        "ref",
        "alt",
        "minor_allele",
        "maf",
    ]
    ok = variants["qc_pass"] & (variants["maf"] > 0) & (variants["maf"] <= 0.01)
    assert rare["variant_key"].tolist() == variants.loc[ok, "variant_key"].tolist()
    excluded = pd.read_csv(out / "excl_combine.tsv", sep="\t")
    assert set(excluded["id"]) == set(variants.loc[variants["class"] == "excluded", "variant_key"])
    assert excluded["reason"].str.len().gt(0).all()


def test_hwe_p_within_each_site_matches_plink2(prepared, tmp_path):
    """HWE runs on each site's controls (never the pooled sum); hwe_p is the smallest."""
    import shutil
    import subprocess

    if shutil.which("plink2") is None:
        pytest.skip("plink2 not installed")
    out = prepared["out"]
    cohort = pd.read_csv(out / "cohort.tsv", sep="\t")
    per_site = []
    for client, group in cohort.groupby("client"):
        keep = tmp_path / f"controls_{client}.txt"
        ids = group.loc[group["phenotype"] == 0, "sample_id"]
        pd.DataFrame({"FID": ids, "IID": ids}).to_csv(keep, sep="\t", index=False, header=False)
        subprocess.run(
            ["plink2", "--bfile", str(prepared["cohort"]["bed"]), "--keep", str(keep),
             "--hardy", "--out", str(tmp_path / f"h_{client}")],
            check=True,
            capture_output=True,
        )  # fmt: skip
        per_site.append(pd.read_csv(tmp_path / f"h_{client}.hardy", sep="\t")["P"].to_numpy())
    variants = pd.read_csv(out / "variants.tsv", sep="\t")
    np.testing.assert_allclose(variants["hwe_p"], np.min(per_site, axis=0), rtol=1e-4)


def test_client_features_contract_and_prs_oracle(prepared):
    out = prepared["out"]
    g = prepared["cohort"]["genotypes"].astype(float)
    g[g < 0] = np.nan
    ids = prepared["cohort"]["sample_ids"]
    variants = pd.read_csv(out / "variants.tsv", sep="\t")
    match = pd.read_csv(out / "score_match.tsv", sep="\t")
    used = match[match["used"]]
    column = variants.reset_index().set_index("variant_key")["index"]
    rare = pd.read_csv(out / "rare_variants.tsv", sep="\t")
    for client in prepared["clients"]:
        table = pd.read_parquet(out / "clients" / client / "samples.parquet")
        assert list(table.columns) == ["sample_id", "prs", "phenotype", "split"]
        assert table["prs"].dtype == np.float64 and table["phenotype"].dtype == np.int8
        assert set(table["split"]) == {"train", "test"}
        rows = [ids.index(s) for s in table["sample_id"]]
        prs = np.zeros(len(rows))
        for _, row in used.iterrows():
            j = column[row["variant_key"]]
            alt_freq = variants.loc[j, "alt_freq"]
            dosage = g[rows, j]
            alt = variants.loc[j, "alt"]
            if row["counted_allele"] == alt:
                dosage = np.where(np.isnan(dosage), 2 * alt_freq, dosage)
            else:
                dosage = np.where(np.isnan(dosage), 2 * (1 - alt_freq), 2 - dosage)
            prs += row["weight_used"] * dosage
        np.testing.assert_allclose(table["prs"], prs, rtol=1e-6, atol=1e-9)

        dosages = sp.load_npz(out / "clients" / client / "rare_dosages.npz")
        assert sp.isspmatrix_csr(dosages) and dosages.dtype == np.float32
        assert dosages.shape == (len(table), len(rare))
        idx = [column[k] for k in rare["variant_key"]]
        dense = g[np.ix_(rows, idx)]
        minor_is_ref = (rare["minor_allele"] == variants.loc[idx, "ref"].to_numpy()).to_numpy()
        dense[:, minor_is_ref] = 2 - dense[:, minor_is_ref]
        dense = np.where(np.isnan(dense), 2 * rare["maf"].to_numpy()[None, :], dense)
        np.testing.assert_allclose(dosages.toarray(), dense, rtol=1e-6)


def test_split_is_stratified_and_reproducible(prepared, tmp_path):
    out = prepared["out"]
    client = prepared["clients"][0]
    table = pd.read_parquet(out / "clients" / client / "samples.parquet")
    for label in (0, 1):
        group = table[table["phenotype"] == label]
        assert (group["split"] == "test").sum() == max(1, round(0.2 * len(group)))


def test_min_overlap_after_qc_is_enforced(prepared, tmp_path):
    out = prepared["out"]
    with gzip.open(prepared["cohort"]["scoring_file"], "rt") as handle:
        text = handle.read()
    extra = "".join(f"rsX{i}\t22\t{50_000_000 + i}\tA\tG\t0.1\n" for i in range(60))
    path = tmp_path / "padded.txt.gz"
    with gzip.open(path, "wt") as handle:
        handle.write(text + extra)
    with pytest.raises(
        InputDataError,
        match=r"of 132 rows of .*padded.txt.gz .* are usable, below min_overlap=0.75",
    ):
        load("match_scores").main(
            variants=out / "variants.tsv",
            scoring_file=path,
            pipeline=settings(),
            out_weights=tmp_path / "w.txt.gz",
            out_match=tmp_path / "m.tsv",
        )


# --- summaries, exclusions, report -------------------------------------------------------


def test_summary_exclusions_and_report(prepared, tmp_path):
    out = prepared["out"]
    clients = prepared["clients"]
    samples = [out / "clients" / c / "samples.parquet" for c in clients]
    rare = [out / "clients" / c / "rare_dosages.npz" for c in clients]
    summary = load("summarize_clients").main(samples, rare, tmp_path / "clients.tsv")
    assert list(summary.columns[:5]) == ["client", "n_samples", "n_cases", "n_train", "n_test"]
    assert summary["n_samples"].tolist() == [30, 30, 30]
    assert (summary["n_train"] + summary["n_test"] == summary["n_samples"]).all()
    merged = load("collect_exclusions").main(
        [out / "excl.tsv", *[out / f"excl_qc_{c}.tsv" for c in clients], out / "excl_combine.tsv"],
        tmp_path / "exclusions.tsv",
    )
    assert list(merged.columns) == ["kind", "id", "reason", "step"]
    assert len(merged) == len(pd.read_csv(out / "excl_combine.tsv", sep="\t"))
    html = load("data_report").main(
        clients=tmp_path / "clients.tsv",
        variants=out / "variants.tsv",
        score_match=out / "score_match.tsv",
        exclusions=tmp_path / "exclusions.tsv",
        client_samples=samples,
        out_html=tmp_path / "report" / "data_report.html",
    )
    text = Path(html).read_text()
    assert text.count("data:image/png;base64,") == 3
    assert "site0" in text and "matched" in text
    for name in ("clients.png", "maf_spectrum.png", "prs_by_client.png"):
        assert (tmp_path / "report" / "figures" / name).stat().st_size > 5000


def test_samples_sheet_from_psam_script(tmp_path):
    psam = tmp_path / "x.psam"
    psam.write_text("#IID\tPAT\tMAT\tSEX\tSuperPop\tPopulation\nHG1\t0\t0\t1\tEUR\tGBR\n")
    load("make_samples_sheet").main(psam, tmp_path / "s.tsv", column="SuperPop")
    sheet = pd.read_csv(tmp_path / "s.tsv", sep="\t")
    assert sheet.to_dict("list") == {"sample_id": ["HG1"], "client": ["EUR"], "population": ["EUR"]}


def test_clients_from_psam_naming_more_samples_keeps_the_intersection(tiny_cohort, tmp_path):
    """Issue 16: a .psam labelling more samples than the genotypes hold is the usual case."""
    sheet = pd.read_csv(tiny_cohort["samples"], sep="\t", dtype=str)
    extra = pd.DataFrame(
        {"sample_id": ["NA00001", "NA00002"], "client": "site0", "population": "site0"}
    )
    grown = pd.concat([sheet[["sample_id", "client", "population"]], extra], ignore_index=True)
    grown.to_csv(tmp_path / "sheet.tsv", sep="\t", index=False)
    pipe = settings(clients_from={"psam": "panel.psam"})
    cohort = validate(tiny_cohort, tmp_path, samples=tmp_path / "sheet.tsv", pipeline=pipe)
    assert cohort["sample_id"].tolist() == tiny_cohort["sample_ids"]
    logged = pd.read_csv(tmp_path / "excl.tsv", sep="\t")
    rows = logged[logged["id"].isin(["NA00001", "NA00002"])]
    assert len(rows) == 2 and rows["reason"].str.contains("absent from the genotypes").all()
    with pytest.raises(InputDataError, match=r"2 sample\(s\) in samples sheet .*NA00001"):
        validate(tiny_cohort, tmp_path, samples=tmp_path / "sheet.tsv")


@pytest.mark.parametrize("rule", ["exclude", "impute_mean"])
def test_covariates_reach_samples_parquet_as_float64_columns(prepared, tmp_path, rule):
    """pipeline.covariates: validated early, written per client, missing ones per the rule."""
    cohort = prepared["cohort"]
    table = pd.read_csv(cohort["phenotypes"], sep="\t", dtype=str)
    rng = np.random.default_rng(3)
    table["age"] = rng.integers(40, 70, len(table)).astype(str)
    table["PC1"] = rng.normal(size=len(table)).round(4).astype(str)
    table.loc[5, "age"] = "NA"  # S0005, client site0
    table.to_csv(tmp_path / "pheno.tsv", sep="\t", index=False)
    pipe = settings(covariates=["age", "PC1"], covariate_missing=rule)
    validated = validate(cohort, tmp_path, phenotypes=tmp_path / "pheno.tsv", pipeline=pipe)
    excluded = pd.read_csv(tmp_path / "excl.tsv", sep="\t")
    assert ("S0005" in excluded["id"].tolist()) == (rule == "exclude")
    assert ("S0005" in validated["sample_id"].tolist()) == (rule == "impute_mean")
    out = prepared["out"]
    qc = pd.read_csv(out / "qc_site0.tsv", sep="\t")
    qc = qc[qc["sample_id"].isin(validated["sample_id"])]
    qc.to_csv(tmp_path / "qc_site0.tsv", sep="\t", index=False)
    samples = load("client_features").main(
        genotypes=[str(cohort["bed"])],
        qc=tmp_path / "qc_site0.tsv",
        variants=out / "variants.tsv",
        rare=out / "rare_variants.tsv",
        weights=out / "weights.txt.gz",
        pipeline=pipe,
        out_samples=tmp_path / "samples.parquet",
        out_rare=tmp_path / "rare.npz",
        phenotypes=tmp_path / "pheno.tsv",
    )
    written = pd.read_parquet(tmp_path / "samples.parquet")
    assert list(written.columns) == ["sample_id", "prs", "phenotype", "split", "age", "PC1"]
    assert written[["age", "PC1"]].dtypes.tolist() == [np.float64, np.float64]
    assert not written[["age", "PC1"]].isna().any().any()
    expected = table.set_index("Subject id").loc[written["sample_id"], "PC1"].astype(float)
    assert np.array_equal(written["PC1"], expected)
    if rule == "impute_mean":
        others = written.loc[written["sample_id"] != "S0005", "age"]
        assert written.set_index("sample_id").loc["S0005", "age"] == pytest.approx(others.mean())
    assert samples.equals(written)
    table.loc[7, "PC1"] = "high"
    table.to_csv(tmp_path / "pheno.tsv", sep="\t", index=False)
    with pytest.raises(InputDataError, match=r"covariate 'PC1' .* sample 'S0007': 'high'"):
        validate(cohort, tmp_path, phenotypes=tmp_path / "pheno.tsv", pipeline=pipe)
