"""The preparation workflow with a quantitative phenotype (``pipeline.phenotype.kind``).

The end-to-end tests run every rule's script, as the workflow calls them, on the real CINECA
excerpt (``../shared/data``, skipped with the reason where it is absent) with its standing height
as the trait and the 1000 Genomes super-populations as the clients; the oracle is the phenotype
table read with pandas directly. The unit tests pin the table logic on small frames.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs import cohort
from rvfedprs.config import validate_config
from rvfedprs.exceptions import InputDataError
from rvfedprs.genomic.data import load_federation

ROOT = Path(__file__).resolve().parents[1]
PIPELINES = ROOT / "pipelines"
DATA = ROOT / ".." / "shared" / "data"
CINECA = DATA / "cineca_synthetic"
PHENOTYPES = CINECA / "uk1_phenotypes.tsv"
PSAM = DATA / "1kg_chr21_start_plinkng" / "chr21_phase3_start.psam"
SCORES = DATA / "pgs_catalog_scorefiles" / "PGS001229_22.txt"  # standing height, chr22
TRAIT = "Standing height-0.0"
ID = "Subject id"
#: samples whose height the fixture blanks, and how (all three read as missing)
BLANKED = {"HG00096": "", "HG00097": "NA", "HG00099": "NaN", "NA18525": "", "NA19017": "NA"}

needs_cineca = pytest.mark.skipif(
    not all(
        p.is_file() for p in (CINECA / "cineca_synthetic_subset.bed", PHENOTYPES, PSAM, SCORES)
    ),
    reason="needs ../shared/data (the CINECA excerpt, the 1000 Genomes psam, PGS001229)",
)


def load(name):
    """The rule script ``pipelines/{name}.py`` as a module."""
    spec = importlib.util.spec_from_file_location(f"pipeline_{name}", PIPELINES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def pipeline_settings(**phenotype):
    """The validated pipeline section of the CINECA preset, with ``phenotype`` overrides."""
    pipeline = {
        "phenotype": {"id_column": ID, **phenotype},
        "clients_from": {"psam": str(PSAM), "column": "SuperPop"},
        "genome_build": "GRCh37",
        "min_samples_per_client": 40,
        "qc": {"hwe_p_min": 0},
    }
    return validate_config({"pipeline": pipeline})["pipeline"]


def phenotype_table(tmp_path: Path, changes: dict[str, str]) -> Path:
    """A copy of the CINECA phenotype table with some heights replaced (as text)."""
    table = pd.read_csv(PHENOTYPES, sep="\t", dtype=str, keep_default_na=False)
    for sample, value in changes.items():
        table.loc[table[ID] == sample, TRAIT] = value
    path = tmp_path / "phenotypes.tsv"
    table.to_csv(path, sep="\t", index=False)
    return path


def prepare(out: Path, phenotypes: Path, pipeline) -> dict:
    """Every preparation rule's script in the workflow's order; returns the outputs' paths."""
    genotypes = [str(CINECA / "cineca_synthetic_subset")]
    load("make_samples_sheet").main(PSAM, out / "sheet.tsv", column="SuperPop")
    load("validate_inputs").main(
        genotypes=genotypes,
        samples=out / "sheet.tsv",
        phenotypes=phenotypes,
        scoring_file=SCORES,
        pipeline=pipeline,
        out_cohort=out / "cohort.tsv",
        out_exclusions=out / "excl.tsv",
    )
    clients = sorted(pd.read_csv(out / "cohort.tsv", sep="\t")["client"].unique())
    for client in clients:
        load("sample_qc").main(
            genotypes=genotypes,
            cohort=out / "cohort.tsv",
            client=client,
            pipeline=pipeline,
            out_qc=out / f"qc_{client}.tsv",
            out_exclusions=out / f"excl_qc_{client}.tsv",
        )
        load("client_counts").main(
            genotypes=genotypes,
            qc=out / f"qc_{client}.tsv",
            pipeline=pipeline,
            out_counts=out / f"counts_{client}.parquet",
            out_skipped=out / f"skip_{client}.tsv",
        )
    load("combine_counts").main(
        counts=[out / f"counts_{c}.parquet" for c in clients],
        skipped=[out / f"skip_{c}.tsv" for c in clients],
        pipeline=pipeline,
        out_variants=out / "variants.tsv",
        out_rare=out / "rare_variants.tsv",
        out_exclusions=out / "excl_combine.tsv",
    )
    load("match_scores").main(
        variants=out / "variants.tsv",
        scoring_file=SCORES,
        pipeline=pipeline,
        out_weights=out / "weights.txt.gz",
        out_match=out / "score_match.tsv",
        out_exclusions=out / "excl_match.tsv",
    )
    samples = [out / "clients" / c / "samples.parquet" for c in clients]
    rare = [out / "clients" / c / "rare_dosages.npz" for c in clients]
    for client, samples_path, rare_path in zip(clients, samples, rare, strict=True):
        load("client_features").main(
            genotypes=genotypes,
            qc=out / f"qc_{client}.tsv",
            variants=out / "variants.tsv",
            rare=out / "rare_variants.tsv",
            weights=out / "weights.txt.gz",
            pipeline=pipeline,
            out_samples=samples_path,
            out_rare=rare_path,
            phenotypes=phenotypes,
        )
    load("summarize_clients").main(
        samples,
        rare,
        out / "clients.tsv",
        phenotype=pipeline["phenotype"],
        out_outcome=out / "outcome.json",
    )
    load("collect_exclusions").main(
        [
            out / "excl.tsv",
            *[out / f"excl_qc_{c}.tsv" for c in clients],
            out / "excl_combine.tsv",
            out / "excl_match.tsv",
        ],
        out / "exclusions.tsv",
    )
    return {"out": out, "clients": clients, "samples": samples, "phenotypes": phenotypes}


@pytest.fixture(scope="module")
def height(tmp_path_factory):
    """The CINECA excerpt prepared with its standing height as a quantitative trait."""
    out = tmp_path_factory.mktemp("height")
    phenotypes = phenotype_table(out, BLANKED)
    return prepare(out, phenotypes, pipeline_settings(kind="quantitative", column=TRAIT))


# --- end to end on the CINECA excerpt ------------------------------------------------------


@needs_cineca
def test_outcome_json_records_a_quantitative_trait(height):
    record = json.loads((height["out"] / "outcome.json").read_text())
    assert record == {"kind": "quantitative", "column": TRAIT}


@needs_cineca
def test_samples_parquet_holds_the_tables_values_as_float64(height):
    oracle = pd.read_csv(height["phenotypes"], sep="\t", usecols=[ID, TRAIT])
    oracle = oracle.set_index(ID)[TRAIT]
    n_kept = 0
    for path in height["samples"]:
        samples = pd.read_parquet(path)
        assert samples["phenotype"].dtype == np.float64
        expected = oracle.loc[samples["sample_id"]].to_numpy()
        np.testing.assert_array_equal(samples["phenotype"].to_numpy(), expected)
        n_kept += len(samples)
    assert n_kept == 2504 - len(BLANKED)  # every sample with a height, none without


@needs_cineca
def test_missing_values_are_logged_exclusions_with_their_count(height):
    excluded = pd.read_csv(
        height["out"] / "exclusions.tsv", sep="\t", dtype=str, keep_default_na=False
    )
    missing = excluded[excluded["reason"].str.startswith(f"phenotype {TRAIT!r} missing")]
    assert len(missing) == len(BLANKED)
    assert sorted(missing["id"]) == sorted(BLANKED)
    assert set(missing["kind"]) == {"sample"} and set(missing["step"]) == {"validate_inputs"}


@needs_cineca
def test_a_non_numeric_value_is_an_error_naming_column_value_and_sample(tmp_path):
    phenotypes = phenotype_table(tmp_path, {"HG00100": "abc", "HG00101": "tall"})
    load("make_samples_sheet").main(PSAM, tmp_path / "sheet.tsv", column="SuperPop")
    with pytest.raises(InputDataError, match=r"Standing height-0\.0.*'abc'.*HG00100") as info:
        load("validate_inputs").main(
            genotypes=[str(CINECA / "cineca_synthetic_subset")],
            samples=tmp_path / "sheet.tsv",
            phenotypes=phenotypes,
            scoring_file=SCORES,
            pipeline=pipeline_settings(kind="quantitative", column=TRAIT),
            out_cohort=tmp_path / "cohort.tsv",
            out_exclusions=tmp_path / "excl.tsv",
        )
    assert "'tall'" in str(info.value) and "2 value(s)" in str(info.value)


@needs_cineca
def test_clients_tsv_has_no_case_count_and_the_report_gives_the_trait(height, tmp_path):
    out = height["out"]
    clients = pd.read_csv(out / "clients.tsv", sep="\t")
    assert clients["client"].tolist() == ["AFR", "AMR", "EAS", "EUR", "SAS"]
    assert clients["n_cases"].isna().all()
    assert (clients["n_train"] + clients["n_test"] == clients["n_samples"]).all()
    html = load("data_report").main(
        clients=out / "clients.tsv",
        variants=out / "variants.tsv",
        score_match=out / "score_match.tsv",
        exclusions=out / "exclusions.tsv",
        client_samples=height["samples"],
        out_html=tmp_path / "data_report.html",
    )
    text = Path(html).read_text()
    assert "trait_mean" in text and "quantitative trait, mean" in text and "cases" not in text


@needs_cineca
def test_split_keeps_each_clients_quintiles_in_proportion(height):
    for path in height["samples"]:
        samples = pd.read_parquet(path)
        quintile = pd.qcut(samples["phenotype"].rank(method="first"), 5, labels=False)
        share = (samples["split"] == "test").groupby(quintile).mean()
        assert share.between(0.15, 0.25).all(), share  # test_fraction 0.2 in every quintile


@needs_cineca
def test_load_federation_standardises_the_training_trait(height):
    federation = load_federation(height["out"])
    assert federation.outcome.kind == "quantitative"
    y = np.concatenate([d.y for d in federation.train.values()]).astype(np.float64)
    assert abs(y.mean()) < 1e-5 and abs(y.std() - 1.0) < 1e-5  # population sd
    raw = np.concatenate(
        [
            pd.read_parquet(p).query("split == 'train'")["phenotype"].to_numpy()
            for p in height["samples"]
        ]
    )
    assert federation.trait_mean == pytest.approx(raw.mean(), rel=1e-9)
    assert federation.trait_sd == pytest.approx(raw.std(), rel=1e-9)


@needs_cineca
def test_binary_preparation_records_its_outcome_too(tmp_path):
    pipeline = pipeline_settings(column="Ever smoked-0.0", cases=["Yes"], controls=["No"])
    prepared = prepare(tmp_path, PHENOTYPES, pipeline)
    record = json.loads((tmp_path / "outcome.json").read_text())
    assert record == {"kind": "binary", "column": "Ever smoked-0.0"}
    for path in prepared["samples"]:
        assert pd.read_parquet(path)["phenotype"].dtype == np.int8
    clients = pd.read_csv(tmp_path / "clients.tsv", sep="\t")
    assert clients["n_cases"].sum() == 1252  # Yes/No, 1252/1252


# --- the table logic ------------------------------------------------------------------------


def write_tsv(path: Path, frame: pd.DataFrame) -> Path:
    frame.to_csv(path, sep="\t", index=False)
    return path


def test_load_phenotypes_quantitative_reads_floats_and_logs_missing(tmp_path):
    frame = pd.DataFrame(
        {ID: ["A", "B", "C", "D", "E"], "ldl": ["3.1", " 2.5 ", "", "NA", "-1e-3"]}
    )
    table, excluded = cohort.load_phenotypes(
        write_tsv(tmp_path / "p.tsv", frame), column="ldl", kind="quantitative"
    )
    assert table["sample_id"].tolist() == ["A", "B", "E"]
    assert table["phenotype"].dtype == np.float64
    assert table["phenotype"].tolist() == [3.1, 2.5, -0.001]
    assert excluded["id"].tolist() == ["C", "D"]
    assert excluded["reason"].tolist() == [
        "phenotype 'ldl' missing ('')",
        "phenotype 'ldl' missing ('NA')",
    ]


@pytest.mark.parametrize("value", ["abc", "inf", "1.2.3"])
def test_load_phenotypes_quantitative_refuses_non_numbers_by_name(tmp_path, value):
    frame = pd.DataFrame({ID: ["A", "B"], "ldl": ["3.1", value]})
    with pytest.raises(
        InputDataError, match=rf"'ldl'.*not finite numbers: '{value}' \(samples B \(line 3\)\)"
    ):
        cohort.load_phenotypes(
            write_tsv(tmp_path / "p.tsv", frame), column="ldl", kind="quantitative"
        )


def test_reconcile_keeps_a_quantitative_trait_whole():
    sheet = pd.DataFrame({"sample_id": ["A", "B"], "client": ["x", "x"]})
    phen = pd.DataFrame({"sample_id": ["A", "B"], "phenotype": [1.75, -0.5]})
    kept, _ = cohort.reconcile_samples(["B", "A"], sheet, phen)
    assert kept["phenotype"].dtype == np.float64 and kept["phenotype"].tolist() == [-0.5, 1.75]


def test_check_clients_quantitative_needs_samples_and_a_varying_trait():
    rng = np.random.default_rng(0)
    rows = {"ok": rng.normal(size=30), "small": rng.normal(size=10), "flat": np.full(30, 2.5)}
    data = pd.DataFrame(
        [
            {"sample_id": f"{c}{i}", "client": c, "phenotype": v}
            for c, values in rows.items()
            for i, v in enumerate(values)
        ]
    )
    kept, excluded = cohort.check_clients(data, min_samples=20, kind="quantitative")
    assert set(kept["client"]) == {"ok"}
    reasons = excluded[excluded["kind"] == "client"].set_index("id")["reason"].to_dict()
    assert reasons == {
        "flat": "a constant phenotype (30 samples, all 2.5)",
        "small": "10 samples, fewer than min_samples_per_client=20",
    }
    with pytest.raises(InputDataError, match="client 'flat' has a constant phenotype"):
        cohort.check_clients(data, min_samples=20, kind="quantitative", on_invalid="error")


def test_binary_split_is_the_one_before_outcomes():
    """The test indices the split gave before it asked the outcome for strata (same seed)."""
    rng = np.random.default_rng(11)
    clients = np.repeat(["a", "b", "c"], [25, 30, 17])
    y = (rng.random(clients.size) < 0.3).astype(np.int8)
    data = pd.DataFrame(
        {"sample_id": [f"s{i}" for i in range(clients.size)], "client": clients, "phenotype": y}
    )
    for kind in ("binary", None):
        options = {} if kind is None else {"kind": kind}
        split = cohort.assign_splits(data, test_fraction=0.25, random_seed=7, **options)
        assert np.flatnonzero(split.to_numpy() == "test").tolist() == [
            6, 10, 12, 13, 20, 22, 32, 34, 45, 46, 48, 49, 53, 55, 59, 60, 64,
        ]  # fmt: skip


def test_quantitative_split_is_seeded_and_stratified_on_quintiles():
    rng = np.random.default_rng(3)
    data = pd.DataFrame(
        {
            "sample_id": [f"s{i}" for i in range(100)],
            "client": "a",
            "phenotype": rng.normal(size=100),
        }
    )
    split = cohort.assign_splits(data, test_fraction=0.2, random_seed=1, kind="quantitative")
    again = cohort.assign_splits(data, test_fraction=0.2, random_seed=1, kind="quantitative")
    assert split.tolist() == again.tolist()
    quintile = pd.qcut(data["phenotype"], 5, labels=False)
    assert (split == "test").groupby(quintile).sum().tolist() == [4, 4, 4, 4, 4]


@needs_cineca
def test_a_study_site_prepares_a_quantitative_trait_and_records_it(height, tmp_path):
    import gzip

    from rvfedprs.genomic.data import read_outcome
    from rvfedprs.study.samplesheet import SiteInputs
    from rvfedprs.study.site import StudySite

    pipeline = {**pipeline_settings(kind="quantitative", column=TRAIT), "clients_from": None}
    inputs = SiteInputs(
        "uk1", (str(CINECA / "cineca_synthetic_subset"),), "bfile", str(height["phenotypes"])
    )
    site = StudySite(inputs, tmp_path / "uk1")
    released = site.counts(pipeline)
    assert released["n_samples"] == 2504 - len(BLANKED)
    assert {"site": "uk1", "step": "validate_inputs", "reason": "phenotype", "n_samples": 5} in (
        released["exclusions"]
    )
    out = height["out"]
    variants = pd.read_csv(out / "variants.tsv", sep="\t")
    match = pd.read_csv(out / "score_match.tsv", sep="\t")
    used = set(match.loc[match["used"].astype(bool), "variant_key"])
    with gzip.open(out / "weights.txt.gz", "rt") as handle:
        weights = handle.read()
    summary = site.features(
        pipeline,
        rare=pd.read_csv(out / "rare_variants.tsv", sep="\t", dtype={"chrom": str}),
        weights=weights,
        frequencies=variants.loc[variants["variant_key"].isin(used), ["variant_key", "alt_freq"]],
    )
    prepared = tmp_path / "uk1" / "prepared"
    assert summary["n_cases"] is None and summary["n_samples"] == 2504 - len(BLANKED)
    assert read_outcome(prepared).kind == "quantitative"
    samples = pd.read_parquet(prepared / "clients" / "uk1" / "samples.parquet")
    assert samples["phenotype"].dtype == np.float64
    assert load_federation(prepared).outcome.kind == "quantitative"
