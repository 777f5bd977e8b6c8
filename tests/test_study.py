"""A consortium study: every site prepares, trains and evaluates on its own folder.

One small simulated cohort (4 clients) runs twice through the real Snakemake workflow: pooled
(one process reads every client's genotypes) and as a study (the cohort split into one folder
per site, the study on the in-process engine). The per-site features must be bit-identical, the
metrics equal where the protocol is exact (per-site AUCs, losses) and within the reported tie
bound where pooled from histograms; no coordinator file may hold an individual-level record.
The same study then runs on a real SuperLink and three SuperNodes over TLS with node
authentication, each node given only its own site's configuration.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _flower_processes import make_certificates, site_nodes  # noqa: E402
from test_snakemake import SMALL_COHORT  # noqa: E402

from rvfedprs.config import load_config  # noqa: E402
from rvfedprs.exceptions import ConfigError, InputDataError  # noqa: E402
from rvfedprs.federation.rounds import FederationError  # noqa: E402
from rvfedprs.study.run import run_study_config  # noqa: E402
from rvfedprs.study.samplesheet import read_samplesheet  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "--snakefile", str(ROOT / "Snakefile")]
STRATEGIES = ["fedavg", "fedce"]
# validation_fraction 0: the pooled workflow trains on every training sample, as a study does
TRAIN = {"rounds": 2, "seed": 3, "compare": STRATEGIES, "progress": False,
         "validation_fraction": 0}  # fmt: skip


def _snakemake(directory: Path, config: dict) -> None:
    path = directory / "config.yaml"
    directory.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [*SNAKEMAKE, "--cores", "2", "--configfile", str(path), "--directory", str(directory)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    base = {**SMALL_COHORT, "train": TRAIN, "fedce": {"n_clusters": 2}}
    _snakemake(root / "pooled", base)
    _snakemake(root / "study", {**base, "study": {"enabled": True}})
    return root


def _metrics(folder: Path, strategy: str) -> dict:
    return json.loads((folder / strategy / "metrics.json").read_text())


@pytest.mark.slow
def test_site_features_are_bit_identical_to_the_pooled_workflow(runs):
    pooled = runs / "pooled" / "results"
    sites = runs / "study" / "results" / "sites"
    clients = pd.read_csv(pooled / "clients.tsv", sep="\t")["client"].tolist()
    assert sorted(p.name for p in sites.iterdir() if p.is_dir()) == clients
    for client in clients:
        mine = sites / client / "prepared" / "clients" / client
        theirs = pooled / "clients" / client
        pd.testing.assert_frame_equal(
            pd.read_parquet(mine / "samples.parquet"), pd.read_parquet(theirs / "samples.parquet")
        )
        a, b = sp.load_npz(mine / "rare_dosages.npz"), sp.load_npz(theirs / "rare_dosages.npz")
        assert a.shape == b.shape and (a != b).nnz == 0
    coordinator = runs / "study" / "results" / "coordinator"
    assert (coordinator / "rare_variants.tsv").read_text() == (
        pooled / "rare_variants.tsv"
    ).read_text()


@pytest.mark.slow
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_metrics_equal_the_pooled_workflow(runs, strategy):
    pooled = _metrics(runs / "pooled" / "results" / "train", strategy)
    study = _metrics(runs / "study" / "results" / "coordinator" / "train", strategy)
    for key in ("strategy", "seed", "auc", "auprc", "carrier_auc", "client_auc", "clusters"):
        assert key in study, key
    for client, auc in pooled["client_auc"].items():  # exact at every site
        assert study["client_auc"][client] == pytest.approx(auc, abs=1e-9)
    assert abs(study["auc"] - pooled["auc"]) <= study["auc_tie_bound"] + 1e-12
    assert abs(study["auc"] - pooled["auc"]) < 1e-3
    assert study["clusters"] == pooled["clusters"]
    for a, b in zip(study["history"], pooled["history"], strict=True):
        assert a["loss"] == pytest.approx(b["loss"], abs=1e-9)
    if pooled["ari"] is None:
        assert study["ari"] is None
    else:
        assert study["ari"] == pytest.approx(pooled["ari"])


@pytest.mark.slow
def test_no_coordinator_file_holds_an_individual_record(runs):
    sheet = pd.read_csv(runs / "study" / "results" / "cohort" / "samples.tsv", sep="\t")
    ids = set(sheet["sample_id"].astype(str))
    coordinator = runs / "study" / "results" / "coordinator"
    checked = 0
    for path in coordinator.rglob("*"):
        if not path.is_file() or path.suffix in (".pt", ".png"):
            continue  # model checkpoints and figures hold no text IDs (weights only)
        text = path.read_text(errors="replace")
        found = [s for s in ids if s in text]
        assert not found, f"{path} names samples {found[:3]}"
        checked += 1
    assert checked >= 8
    summary = json.loads((coordinator / "study.json").read_text())
    assert summary["left_out"] == {} and len(summary["sites"]) == 4


def _study_config(
    runs: Path, sites_dir: Path, out: Path, model: dict | None = None, **study
) -> tuple[dict, Path]:
    cohort = runs / "study" / "results" / "cohort"
    config = load_config(
        None,
        overrides={
            **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
            **({"model": model} if model else {}),
            "train": TRAIN,
            "fedce": {"n_clusters": 2},
            "evaluate": {"truth": None, "samples": None},
            "study": {"enabled": True, "sites_dir": str(sites_dir), "out": str(out), **study},
        },
    )
    return config, cohort / "scores" / "PGS_sim.txt.gz"


def _copy_sites(runs: Path, target: Path) -> Path:
    """The split sites' inputs (not their prepared files) in a fresh sheet."""
    sheet = read_samplesheet(runs / "study" / "results" / "sites" / "samplesheet.tsv")
    rows = []
    for site, inputs in sheet.items():
        for g in inputs.genotypes:
            rows.append(
                {"site": site, "genotypes": g, "format": inputs.format,
                 "phenotypes": inputs.phenotypes, "samples": inputs.samples or ""}
            )  # fmt: skip
    target.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_csv(target / "samplesheet.tsv", sep="\t", index=False)
    return target / "samplesheet.tsv"


@pytest.mark.slow
def test_a_site_with_a_missing_file_is_named_and_left_out_or_stops_the_study(runs, tmp_path):
    sheet = _copy_sites(runs, tmp_path / "in")
    table = pd.read_csv(sheet, sep="\t")
    victim = table["site"].iloc[0]
    table.loc[table["site"] == victim, "phenotypes"] = str(tmp_path / "gone.tsv")
    table.to_csv(sheet, sep="\t", index=False)
    config, scores = _study_config(runs, tmp_path / "sites", tmp_path / "out")
    with pytest.raises(FederationError, match=rf"{victim}.*phenotype table not found.*gone\.tsv"):
        run_study_config(config, scoring_file=scores, samplesheet=sheet)
    config, scores = _study_config(runs, tmp_path / "sites", tmp_path / "out2", min_replies=3)
    summary = run_study_config(config, scoring_file=scores, samplesheet=sheet)
    assert victim not in summary["sites"] and "gone.tsv" in summary["left_out"][victim]


@pytest.mark.slow
def test_min_cell_count_excludes_suppressed_variants_everywhere(runs, tmp_path):
    sheet = _copy_sites(runs, tmp_path / "in")
    config, scores = _study_config(runs, tmp_path / "sites", tmp_path / "out", min_cell_count=3)
    config["train"] = {**config["train"], "compare": ["fedavg"], "rounds": 1}
    config["pipeline"] = {**config["pipeline"], "min_overlap": 0.0}  # scored variants go too
    run_study_config(config, scoring_file=scores, samplesheet=sheet)
    variants = pd.read_csv(tmp_path / "out" / "variants.tsv", sep="\t")
    suppressed = variants["reason"].fillna("").str.contains("below min_cell_count")
    assert suppressed.any()
    assert (variants.loc[suppressed, "class"] == "excluded").all()
    rare = pd.read_csv(tmp_path / "out" / "rare_variants.tsv", sep="\t")
    assert not set(rare["variant_key"]) & set(variants.loc[suppressed, "variant_key"])
    excluded = pd.read_csv(tmp_path / "out" / "exclusions.tsv", sep="\t")
    assert (excluded["step"] == "site_counts").sum() == int(suppressed.sum())


@pytest.mark.slow
def test_secure_counts_give_the_plain_tables_without_any_site_table(runs, tmp_path):
    """The secure sum equals the plain per-site sums; HWE flags equal the per-site p-values."""
    sheet = _copy_sites(runs, tmp_path / "in")
    tables = {}
    for mode in ("plain", "secure"):
        config, scores = _study_config(
            runs, tmp_path / f"sites-{mode}", tmp_path / mode, count_aggregation=mode
        )
        config["train"] = {**config["train"], "compare": ["fedavg"], "rounds": 1}
        config["pipeline"] = {
            **config["pipeline"],
            "qc": {**config["pipeline"]["qc"], "hwe_p_min": 0.05},
        }
        run_study_config(config, scoring_file=scores, samplesheet=sheet)
        tables[mode] = pd.read_csv(tmp_path / mode / "variants.tsv", sep="\t")
    plain, secure = tables["plain"], tables["secure"]
    assert secure["hwe_p"].isna().all() and plain["hwe_p"].notna().all()
    hwe = plain["reason"].fillna("").str.contains("HWE")
    assert hwe.any() and (plain.loc[hwe, "class"] == "excluded").all()
    columns = [c for c in plain.columns if c not in ("hwe_p", "reason")]
    pd.testing.assert_frame_equal(plain[columns], secure[columns])
    # the same variants fail HWE at the same sites (plain also names the p-values)
    strip = lambda r: r.str.replace(r" p=[0-9.e+-]+", "", regex=True)  # noqa: E731
    assert strip(plain["reason"].fillna("")).equals(secure["reason"].fillna(""))
    for site in (tmp_path / "sites-plain").iterdir():
        a = sp.load_npz(site / "prepared" / "clients" / site.name / "rare_dosages.npz")
        b = sp.load_npz(
            tmp_path
            / "sites-secure"
            / site.name
            / "prepared"
            / "clients"
            / site.name
            / "rare_dosages.npz"
        )
        assert (a != b).nnz == 0


@pytest.mark.slow
def test_a_site_answering_secure_counts_sends_no_count(runs, tmp_path):
    from rvfedprs.genotypes.sitecounts import site_hwe_p
    from rvfedprs.study.counts import HELD, SUMMED_COLUMNS
    from rvfedprs.study.site import StudySite

    inputs = next(
        iter(read_samplesheet(runs / "study" / "results" / "sites" / "samplesheet.tsv").values())
    )
    config, _ = _study_config(runs, tmp_path / "sites", tmp_path / "out")
    from rvfedprs.study.task import StudyTask

    task, state = StudyTask(), {}
    site = StudySite(inputs, tmp_path / "site")
    payload = {"pipeline": config["pipeline"], "min_cell_count": 0, "secure": True}
    reply = task.step_counts(site, payload, state)
    plain = site.counts(config["pipeline"])
    assert "counts" not in reply and reply["n_variants"] == len(plain["suppressed"])
    held = state["secagg"]["held"][HELD]
    for column in SUMMED_COLUMNS:
        scale = 1 << 14 if column == "alt_count" else 1
        np.testing.assert_array_equal(
            held[column], np.rint(np.asarray(plain["counts"][column]) * scale)
        )
    table = pd.DataFrame({c: plain["counts"][c] for c in ("n_hom_ref", "n_het", "n_hom_alt")})
    threshold = config["pipeline"]["qc"]["hwe_p_min"]
    np.testing.assert_array_equal(reply["hwe_failing"], site_hwe_p(table) < threshold)


@pytest.mark.slow
def test_secure_counts_of_too_few_sites_are_refused(runs, tmp_path):
    sheet = _copy_sites(runs, tmp_path / "in")
    table = pd.read_csv(sheet, sep="\t")
    table[table["site"].isin(sorted(set(table["site"]))[:2])].to_csv(sheet, sep="\t", index=False)
    config, scores = _study_config(runs, tmp_path / "sites", tmp_path / "out")
    with pytest.raises(
        ConfigError, match=r"secagg.min_clients=3 sites, got 2.*count_aggregation: plain"
    ):
        run_study_config(config, scoring_file=scores, samplesheet=sheet)


def test_bad_site_sheets_are_named(tmp_path):
    path = tmp_path / "sheet.tsv"
    path.write_text("site\tgenotypes\tformat\tphenotypes\na\tg\tcram\tp\n")
    with pytest.raises(InputDataError, match=r"line 2: format 'cram' of site 'a' unknown"):
        read_samplesheet(path)
    path.write_text("site\tgenotypes\tformat\na\tg\tvcf\n")
    with pytest.raises(InputDataError, match=r"lacks columns \['phenotypes'\]"):
        read_samplesheet(path)
    path.write_text("site\tgenotypes\tformat\tphenotypes\na\tg1\tvcf\tp\na\tg2\tbfile\tp\n")
    with pytest.raises(InputDataError, match=r"site 'a' has different 'format' values"):
        read_samplesheet(path)


@pytest.mark.slow
def test_deployment_over_tls_with_one_folder_per_node_equals_inprocess(runs, tmp_path):
    from rvfedprs.federation.flower.superlink import start_local

    sheet = _copy_sites(runs, tmp_path / "in")
    sites = sorted(read_samplesheet(sheet))[:3]  # three SuperNodes
    table = pd.read_csv(sheet, sep="\t")
    table[table["site"].isin(sites)].to_csv(sheet, sep="\t", index=False)
    # no floor fit: each deployment exchange starts a ClientApp (the floor's fit is tested
    # in-process and on flower-sim)
    floorless = {"start_from_floor": False}
    reference, scores = _study_config(runs, tmp_path / "ref-sites", tmp_path / "ref", floorless)
    run_study_config(reference, scoring_file=scores, samplesheet=sheet)

    config, scores = _study_config(
        runs, tmp_path / "sites", tmp_path / "deploy", floorless, engine="flower-deploy"
    )
    nodes = site_nodes(read_samplesheet(sheet), sites, tmp_path / "sites", tmp_path / "node")
    certs = tmp_path / "certs"
    make_certificates(certs, list(nodes))
    keys = {label: certs / "keys" / label for label in nodes}
    with start_local(
        tmp_path / "link",
        simulation=False,
        nodes=nodes,
        certificates=certs,
        node_keys=keys,
        clientapp="warm",  # as sites run them (rvfedprs site's default)
    ) as link:
        run_study_config(config, scoring_file=scores, samplesheet=sheet, superlink=link)
    for site in sites:  # each node wrote into its own folder only
        assert (tmp_path / "sites" / site / "prepared" / "clients" / site).is_dir()
        assert not (tmp_path / "sites" / site / "prepared" / "clients" / "x").exists()
    for strategy in STRATEGIES:
        want = _metrics(tmp_path / "ref" / "train", strategy)
        got = _metrics(tmp_path / "deploy" / "train", strategy)
        assert got["client_auc"] == pytest.approx(want["client_auc"], abs=1e-9)
        assert got["auc"] == pytest.approx(want["auc"], abs=1e-12)
        assert [h["loss"] for h in got["history"]] == pytest.approx(
            [h["loss"] for h in want["history"]], abs=1e-9
        )
    status = json.loads((tmp_path / "deploy" / "flower" / "status.json").read_text())
    assert status["status"] == "completed" and sorted(status["sites"]) == sites
    np.testing.assert_array_equal(
        pd.read_csv(tmp_path / "deploy" / "rare_variants.tsv", sep="\t")["variant_key"],
        pd.read_csv(tmp_path / "ref" / "rare_variants.tsv", sep="\t")["variant_key"],
    )


@pytest.mark.slow
def test_flower_simulation_equals_inprocess(runs, tmp_path):
    sheet = _copy_sites(runs, tmp_path / "in")
    reference, scores = _study_config(runs, tmp_path / "ref-sites", tmp_path / "ref")
    reference["train"] = {**reference["train"], "compare": ["fedce"]}
    run_study_config(reference, scoring_file=scores, samplesheet=sheet)
    config, scores = _study_config(runs, tmp_path / "sites", tmp_path / "sim", engine="flower-sim")
    config["train"] = {**config["train"], "compare": ["fedce"]}
    run_study_config(config, scoring_file=scores, samplesheet=sheet)
    want = _metrics(tmp_path / "ref" / "train", "fedce")
    got = _metrics(tmp_path / "sim" / "train", "fedce")
    assert got["client_auc"] == pytest.approx(want["client_auc"], abs=1e-9)
    assert got["clusters"] == want["clusters"]
    assert [h["loss"] for h in got["history"]] == pytest.approx(
        [h["loss"] for h in want["history"]], abs=1e-9
    )
