"""Burden inputs in a consortium study: the map is of the study's federated variant set.

The coordinator has no ``train.data`` (the sites hold the data): the burden features of a burden
network (``model.rare_input: burden``) and of a burden GLM (``fedglm.features: burden``) are of
the rare-variant table its counts stage built, which every site's dosage columns follow. Oracle:
the burden matrix built with numpy from the pooled dosages of every site (their MAF) and the
variants' positions (fixed windows, Beta(1, 25) weights 25 (1 - MAF)^24), and, for the GLM, a
numpy Newton fit of the pooled training samples on those burdens.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp
from scipy.special import expit

sys.path.insert(0, str(Path(__file__).resolve().parent))

from rvfedprs.burden import BurdenMap  # noqa: E402
from rvfedprs.config import validate_config  # noqa: E402
from rvfedprs.exceptions import InputDataError  # noqa: E402
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint  # noqa: E402
from rvfedprs.genomic.data import load_federation  # noqa: E402
from rvfedprs.genomic.task import network_model_config  # noqa: E402

WINDOW, MAX_MAF, L2 = 20_000, 0.03, 1.0  # 0.03 x 480 alleles is no whole count: no MAF ties
BURDEN = {"window_bp": WINDOW, "max_maf": MAX_MAF}  # beta weights, (1, 25)
HIDDEN = 8


def _study(study_inputs, out: Path, engine: str = "inprocess", **sections) -> dict:
    from test_snakemake import SMALL_COHORT

    from rvfedprs.config import load_config
    from rvfedprs.study.run import run_study_config

    config = load_config(None, overrides={
        **{k: v for k, v in SMALL_COHORT.items() if k != "simulate"},
        "evaluate": {"truth": None, "samples": None},
        "burden": BURDEN,
        "study": {"enabled": True, "sites_dir": str(out / "sites"), "out": str(out),
                  "engine": engine},
        **sections,
    })  # fmt: skip
    config["train"] = {**config["train"], "data": str(out / "no_train_data")}  # the sites have it
    return run_study_config(config, scoring_file=study_inputs / "cohort" / "scores" /
                            "PGS_sim.txt.gz", samplesheet=study_inputs / "sites" /
                            "samplesheet.tsv")  # fmt: skip


def _pooled(out: Path) -> tuple[sp.csr_matrix, sp.csr_matrix, np.ndarray, np.ndarray]:
    """(every sample's dosages, the training samples' dosages, their raw PRS, phenotypes)."""
    everyone, train, prs, y = [], [], [], []
    for folder in sorted(p for p in (out / "sites").iterdir() if p.is_dir()):
        federation = load_federation(folder / "prepared")
        (client,) = federation.client_ids
        for split in (federation.train, federation.test):
            everyone.append(split[client].rare)
        train.append(federation.train[client].rare)
        samples = pd.read_parquet(folder / "prepared" / "clients" / client / "samples.parquet")
        prs.append(samples.loc[samples["split"] == "train", "prs"].to_numpy(np.float64))
        y.append(federation.train[client].y)
    pooled = sp.vstack(everyone).tocsr(), sp.vstack(train).tocsr()
    return *pooled, np.concatenate(prs), np.concatenate(y).astype(np.float64)


def _oracle_burden(
    out: Path, dosages: sp.csr_matrix, masked: set[str] | None = None
) -> tuple[np.ndarray, list[str]]:
    """B (variants × windows) and the windows' names from the pooled dosages and positions.

    ``masked``: the keys of the only variants that may enter (an annotation mask).
    """
    rare = pd.read_csv(out / "sites" / "client01" / "prepared" / "rare_variants.tsv", sep="\t",
                       dtype={"chrom": str})  # fmt: skip
    maf = np.asarray(dosages.astype(np.float64).sum(axis=0)).ravel() / (2 * dosages.shape[0])
    window = (rare["pos"].to_numpy() - 1) // WINDOW
    enter = (maf <= MAX_MAF) & (rare["variant_key"].isin(masked) if masked is not None else True)
    cells = sorted({(c, int(k)) for c, k, e in zip(rare["chrom"], window, enter, strict=True)
                    if e})  # fmt: skip
    column = {cell: g for g, cell in enumerate(cells)}
    matrix = np.zeros((len(rare), len(cells)))
    for j, (c, k, m, e) in enumerate(zip(rare["chrom"], window, maf, enter, strict=True)):
        if e:
            matrix[j, column[(c, int(k))]] = 25 * (1 - m) ** 24  # Beta(1, 25) density
    names = [f"{c}:{k * WINDOW + 1}-{(k + 1) * WINDOW}" for c, k in cells]
    return matrix, names


def _newton(x: np.ndarray, y: np.ndarray, penalised: np.ndarray, l2: float) -> np.ndarray:
    """The logistic fit minimising log-loss + l2/2 ||β[penalised]||² (Newton to 1e-12)."""
    beta = np.zeros(x.shape[1])
    ridge = l2 * penalised.astype(np.float64)
    for _ in range(100):
        p = expit(x @ beta)
        gradient = x.T @ (y - p) - ridge * beta
        step = np.linalg.solve((x * (p * (1 - p))[:, None]).T @ x + np.diag(ridge), gradient)
        beta += step
        if np.abs(step).max() < 1e-12:
            break
    return beta


def test_a_burden_network_reads_the_map_of_the_variant_table_it_is_given(tmp_path):
    """Fast: the variant table given wins over train.data, which a study coordinator lacks."""
    config = validate_config({"train": {"data": str(tmp_path / "nowhere")}, "burden": BURDEN})
    variants = pd.DataFrame({"variant_key": ["1:5:A:G", "1:25000:C:T", "2:7:G:A"],
                             "chrom": ["1", "1", "2"], "pos": [5, 25_000, 7],
                             "maf": [0.01, 0.02, 0.2]})  # fmt: skip
    model = network_model_config({"rare_input": "burden"}, config, variants=variants)
    projection = model["rare_projection"]
    assert projection["features"] == ["1:1-20000", "1:20001-40000"]  # 2:7 is above max_maf
    expected = np.zeros((3, 2))
    expected[0, 0], expected[1, 1] = 25 * 0.99**24, 25 * 0.98**24
    got = BurdenMap.matrix_from_config(projection["burden"]).toarray()
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    with pytest.raises(InputDataError, match=r"nowhere/rare_variants.tsv does not exist.*train"):
        network_model_config({"rare_input": "burden"}, config)


@pytest.mark.slow  # the cohort's per-site folders come from the Snakemake workflow
def test_a_study_trains_a_burden_network_on_the_pooled_burdens(study_inputs, tmp_path):
    out = tmp_path / "study"
    summary = _study(study_inputs, out, model={"rare_input": "burden", "rare_hidden": [HIDDEN]},
                     train={"rounds": 2, "seed": 3, "compare": ["fedavg"], "progress": False,
                            "validation_fraction": 0})  # fmt: skip
    assert summary["left_out"] == {} and summary["runs"]["fedavg"]["evaluation_failures"] == {}
    record = load_checkpoint(latest_checkpoint(out / "train" / "fedavg"))
    projection = record["model_config"]["rare_projection"]
    everyone, train, _, _ = _pooled(out)
    expected, names = _oracle_burden(out, everyone)
    assert projection["features"] == names and len(names) > 1
    got = BurdenMap.matrix_from_config(projection["burden"]).toarray()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    # every site's burden features: its dosages through the map, as the pooled ones
    np.testing.assert_allclose(train @ got, train @ expected, rtol=1e-12)
    weight = record["strategy_state"]["parameters"]["rare.input.weight"]
    assert weight.shape == (HIDDEN, len(names))
    assert [e["round"] for e in record["history"]] == [1, 2]
    assert 0 < summary["runs"]["fedavg"]["auc"] < 1


@pytest.mark.slow  # the cohort's per-site folders come from the Snakemake workflow
def test_a_study_masks_its_burdens_with_the_shared_annotation_file(study_inputs, tmp_path):
    """burden.annotations: the coordinator joins the file to the federated variant set.

    Every third variant is marked 0, every seventh is absent from the file (unannotated, left
    out by default); the sites receive the map and need no copy of the file.
    """
    bim = pd.read_csv(study_inputs / "cohort" / "genotypes" / "cohort.bim", sep=r"\s+",
                      header=None, names=["chrom", "id", "cm", "pos", "a1", "a2"],
                      dtype={"chrom": str})  # fmt: skip
    # a PLINK 1 .bim holds the ALT allele in column 5 (a1) and REF in column 6 (a2)
    keys = [f"chr{c}:{p}:{r}:{a}" for c, p, r, a in
            bim[["chrom", "pos", "a2", "a1"]].itertuples(False)]  # fmt: skip
    listed = bim["pos"].to_numpy() % 7 != 0
    lof = (bim["pos"].to_numpy() % 3 != 0).astype(int)
    annotations = pd.DataFrame({"variant_key": keys, "lof": lof})[listed]
    annotations.to_csv(tmp_path / "vep.tsv.gz", sep="\t", index=False)
    masked = {k.removeprefix("chr") for k in annotations.loc[annotations["lof"] == 1,
                                                             "variant_key"]}  # fmt: skip
    out = tmp_path / "study"
    summary = _study(study_inputs, out, model={"rare_input": "burden", "rare_hidden": [HIDDEN]},
                     burden={**BURDEN, "annotations": str(tmp_path / "vep.tsv.gz"),
                             "mask_column": "lof"},
                     train={"rounds": 1, "seed": 3, "compare": ["fedavg"], "progress": False,
                            "validation_fraction": 0})  # fmt: skip
    assert summary["left_out"] == {} and summary["runs"]["fedavg"]["evaluation_failures"] == {}
    projection = load_checkpoint(latest_checkpoint(out / "train" / "fedavg"))["model_config"][
        "rare_projection"
    ]
    everyone, _, _, _ = _pooled(out)
    expected, names = _oracle_burden(out, everyone, masked)
    unmasked, _ = _oracle_burden(out, everyone)
    assert projection["features"] == names
    assert 0 < np.count_nonzero(expected) < np.count_nonzero(unmasked)
    got = BurdenMap.matrix_from_config(projection["burden"]).toarray()
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=0)
    # nothing dropped silently: the run's exclusions table names each rare variant in no burden
    rare = pd.read_csv(out / "rare_variants.tsv", sep="\t")
    excluded = pd.read_csv(out / "train" / "fedavg" / "burden_exclusions.tsv", sep="\t")
    in_no_burden = set(rare["variant_key"][~got.any(axis=1)])
    assert set(excluded["variant_key"]) == in_no_burden and in_no_burden
    absent = {k.removeprefix("chr") for k, kept in zip(keys, listed, strict=True) if not kept}
    unannotated = set(excluded.loc[excluded["reason"] == "unannotated", "variant_key"])
    assert unannotated and unannotated <= absent


@pytest.mark.slow  # the cohort's per-site folders come from the Snakemake workflow
@pytest.mark.parametrize("engine", ["inprocess", "flower-sim"])
def test_a_study_fits_a_burden_glm_equal_to_the_pooled_fit(study_inputs, tmp_path, engine):
    """On Flower the launcher builds no strategy: the study builds it after its counts."""
    out = tmp_path / "study"
    summary = _study(study_inputs, out, engine, fedglm={"features": "burden", "l2": L2},
                     train={"rounds": 25, "seed": 3, "compare": ["fedglm"], "progress": False,
                            "validation_fraction": 0})  # fmt: skip
    assert summary["left_out"] == {} and 0 < summary["runs"]["fedglm"]["auc"] < 1
    record = load_checkpoint(latest_checkpoint(out / "train" / "fedglm"))
    assert record["round"] < 25  # converged: the run stopped early
    everyone, train, prs, y = _pooled(out)
    matrix, _ = _oracle_burden(out, everyone)
    burdens = np.asarray(train @ matrix)
    # [1, PRS, burdens]: the burden coefficients do not depend on how the unpenalised PRS is
    # standardised (per site here, federated in the study)
    x = np.column_stack([np.ones_like(prs), prs, burdens])
    penalised = np.r_[False, False, np.ones(burdens.shape[1], dtype=bool)]
    expected = _newton(x, y, penalised, L2)
    coef = np.asarray(record["strategy_state"]["coef"])
    assert coef.shape == expected.shape
    np.testing.assert_allclose(coef[2:], expected[2:], atol=1e-6)
