"""Ancestry (pgsc_calc-style): OADP projection, assignment, PRS normalisation, the command."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest
from _kg_panel import DATA, PANEL, split_panel

from rvfedprs.ancestry import assign_ancestry, fit_pca, normalise_prs, project
from rvfedprs.ancestry.panel import match_variants
from rvfedprs.ancestry.pca import standardise
from rvfedprs.cli import main


def _balding_nichols(rng, n_per_pop, n_variants, *, n_pops=3, fst=0.05, anc=None):
    if anc is None:
        p0 = rng.uniform(0.05, 0.5, n_variants)
        shape = (1 - fst) / fst
        anc = rng.beta(p0 * shape, (1 - p0) * shape, (n_pops, n_variants))
    x = np.vstack([rng.binomial(2, anc[k], (n_per_pop, n_variants)) for k in range(n_pops)])
    return x.astype(float), np.repeat(np.arange(n_pops), n_per_pop), anc


@pytest.fixture(scope="module")
def wide_panel():
    """Variants outnumber reference samples 14:1, where naive projections shrink."""
    rng = np.random.default_rng(7)
    ref, ref_pop, anc = _balding_nichols(rng, 70, 3000)
    tgt, tgt_pop, _ = _balding_nichols(rng, 100, 3000, anc=anc)
    p = ref.mean(axis=0) / 2
    ok = (p > 0) & (p < 1)
    return ref[:, ok], ref_pop, tgt[:, ok], tgt_pop, p[ok]


def test_oadp_projection_is_not_shrunk(wide_panel):
    ref, _, tgt, _, p = wide_panel
    pca = fit_pca(ref, p, n_components=4)
    ref_var = pca.reference_scores.var(axis=0)[:2]
    naive = project(pca, tgt, method="naive").var(axis=0)[:2] / ref_var
    oadp = project(pca, tgt, method="oadp").var(axis=0)[:2] / ref_var
    assert np.all(naive < 0.85)  # ≈ 0.75: shrunk
    assert np.all(np.abs(oadp - 1) < 0.1)  # ≈ 0.97-1.00


def test_oadp_matches_augmentation_decomposition_procrustes(wide_panel):
    """Oracle: the SVD of the reference plus the sample, then Procrustes, done in full."""
    ref, _, tgt, _, p = wide_panel
    pca = fit_pca(ref, p, n_components=2)
    z_ref = standardise(ref, p)
    a = pca.reference_scores
    for i in range(3):
        u, s, _ = np.linalg.svd(np.vstack([z_ref, standardise(tgt[i : i + 1], p)]), False)
        aug = (u * s)[:, :2]
        b = aug[:-1] - aug[:-1].mean(axis=0)
        left, sigma, right = np.linalg.svd(b.T @ a)
        rho = sigma.sum() / (b**2).sum()
        full = rho * (aug[-1] - aug[:-1].mean(axis=0)) @ (left @ right)
        np.testing.assert_allclose(project(pca, tgt[i : i + 1])[0], full, rtol=0.01)


def test_assignment_recovers_populations(wide_panel):
    ref, ref_pop, tgt, tgt_pop, p = wide_panel
    pca = fit_pca(ref, p, n_components=4)
    table = assign_ancestry(
        pca.reference_scores, ref_pop.astype(str), project(pca, tgt), random_seed=0
    )
    assert (table["population"].to_numpy() == tgt_pop.astype(str)).mean() >= 0.99
    assert np.allclose(table.filter(like="P_").sum(axis=1), 1)


def test_normalised_score_is_standard_within_each_population():
    rng = np.random.default_rng(3)
    centres = np.array([[0.0, 0.0], [6.0, 0.0], [0.0, 6.0]])
    pop = np.repeat(np.arange(3), 400)
    pcs = centres[pop] + rng.normal(size=(1200, 2))
    prs = np.array([0.0, 2.0, -1.0])[pop] + np.array([1.0, 2.5, 0.5])[pop] * rng.normal(size=1200)
    z1, z2 = normalise_prs(pcs, prs, pcs, prs)
    for k in range(3):
        assert abs(z1[pop == k].mean()) < 0.2  # raw offsets: 0, 2, -1
        assert abs(z2[pop == k].mean()) < 0.1
        assert abs(z2[pop == k].std() - 1) < 0.1
    assert abs(z1[pop == 1].std() - 2.5) < 0.2  # Z_norm1 keeps each population's spread


def test_match_variants_swaps_flips_and_drops_ambiguous():
    ref = pd.DataFrame(
        {"chrom": ["1"] * 5, "pos": [1, 2, 3, 4, 5], "ref": list("AAACG"), "alt": list("GGTGT")}
    )
    tgt = pd.DataFrame(
        {"chrom": ["1"] * 5, "pos": [1, 2, 3, 4, 6], "ref": list("GTAGA"), "alt": list("ACTCC")}
    )
    pairs, status = match_variants(ref, tgt)
    assert pairs["ref_row"].tolist() == [0, 1]
    assert pairs["swap"].tolist() == [True, False]  # row 1: the other strand, same order
    assert status.tolist() == ["used", "used", "ambiguous", "ambiguous", "not_in_target"]


@pytest.fixture(scope="module")
def split_1000g(tmp_path_factory):
    if not (PANEL.with_suffix(".pgen")).is_file() or shutil.which("plink2") is None:
        pytest.skip(f"needs the 1000 Genomes excerpt in {DATA} and plink2")
    tmp = tmp_path_factory.mktemp("kg")
    psam, held_out = split_panel(tmp)
    # A score with population offsets and spreads, plus a little genotype-independent noise.
    rng = np.random.default_rng(1)
    pops = psam.set_index("#IID")["SuperPop"]
    offset = {"AFR": 2.0, "AMR": 0.5, "EAS": -1.0, "EUR": 0.0, "SAS": 1.0}
    spread = {"AFR": 1.5, "AMR": 1.0, "EAS": 0.7, "EUR": 1.0, "SAS": 1.2}
    score = pops.map(offset) + pops.map(spread) * rng.normal(size=len(pops))
    for name, mask in (("ref", ~held_out), ("tgt", held_out)):
        ids = psam.loc[mask, "#IID"]
        table = pd.DataFrame({"sample_id": ids, "SUM": score[ids].to_numpy(), "n_matched": 9})
        table.to_csv(tmp / f"{name}_prs.tsv", sep="\t", index=False)
    return tmp, pops


def _run(tmp, out, *extra):
    return main(
        [
            "ancestry", "--reference", str(tmp / "ref.pgen"), "--target", str(tmp / "tgt.bed"),
            "--out", str(out), "--maf", "0.001", "--ld-r2", "0.5", "--seed", "1",
            "--reference-prs", str(tmp / "ref_prs.tsv"), "--target-prs", str(tmp / "tgt_prs.tsv"),
            *extra,
        ]
    )  # fmt: skip


def _variance_ratio(pcs: pd.DataFrame, n: int = 5) -> np.ndarray:
    names = [f"PC{i + 1}" for i in range(n)]
    by_source = pcs.groupby("source")[names].var()
    return (by_source.loc["target"] / by_source.loc["reference"]).to_numpy()


def test_ancestry_command_on_1000_genomes(split_1000g):
    tmp, pops = split_1000g
    out = tmp / "out"
    assert _run(tmp, out) == 0
    for name in ("pcs.tsv", "ancestry.tsv", "prs_normalised.tsv", "variants.tsv", "pca.png"):
        assert (out / name).is_file()
    assert (out / "provenance.json").is_file()
    pcs = pd.read_csv(out / "pcs.tsv", sep="\t")
    ancestry = pd.read_csv(out / "ancestry.tsv", sep="\t")
    truth = pops[ancestry["sample_id"]].to_numpy()
    # 85 variants in 15 kb of chr21 only: the most probable population is right for ~55% of the
    # held-out samples (chance: 27%, the AFR share), AFR for ~80%.
    proba = ancestry.filter(like="P_")
    best = proba.columns.str.removeprefix("P_").to_numpy()[proba.to_numpy().argmax(axis=1)]
    assert (best == truth).mean() > 0.45
    assert (best == truth)[truth == "AFR"].mean() > 0.7
    assigned = ancestry["population"] != "undetermined"
    assert (ancestry["population"] == truth)[assigned].mean() > 0.55
    # Projected PCs of the held-out half: OADP spreads them as the reference's on PC1 (ratio
    # ≈ 1.0); the naive projection is shrunk (ratios below OADP's on PC1-PC5).
    assert _run(tmp, tmp / "naive", "--projection", "naive") == 0
    naive = pd.read_csv(tmp / "naive" / "pcs.tsv", sep="\t")
    ratios = {name: _variance_ratio(table) for name, table in (("oadp", pcs), ("naive", naive))}
    print(ratios)
    assert abs(ratios["oadp"][0] - 1) < 0.1
    assert np.all(ratios["naive"] <= ratios["oadp"] + 0.01)
    assert ratios["naive"].mean() < ratios["oadp"].mean() - 0.03
    # Normalised on the PCs, the score is centred and of unit SD in the reference; the ancestry
    # offsets the PCs capture are gone.
    norm = pd.read_csv(out / "prs_normalised.tsv", sep="\t")
    norm_ref = norm[norm["source"] == "reference"].set_index("sample_id")
    z2 = norm_ref["Z_norm2"]
    assert abs(z2.mean()) < 0.05 and abs(z2.std() - 1) < 0.05
    by_pop = norm_ref.groupby(pops[norm_ref.index].to_numpy())
    assert by_pop["Z_norm2"].mean().abs().max() < by_pop["raw"].mean().abs().max() / 2


def test_ancestry_command_bad_input_exits_2(split_1000g, tmp_path, capsys):
    tmp, _ = split_1000g
    labels = tmp_path / "labels.tsv"
    labels.write_text("IID\tcontinent\nNA1\tEUR\n")
    assert _run(tmp, tmp_path / "o", "--reference-labels", str(labels)) == 2
    assert "no population column" in capsys.readouterr().err
