"""QC: HWE exact test and call rates against plink2 --hardy / --missing."""

from __future__ import annotations

import shutil
import subprocess
from math import comb
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.qc import genotype_counts, hwe_exact, hwe_exact_many, sample_call_rates

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
CINECA = DATA / "cineca_synthetic" / "cineca_synthetic_subset"
needs_real = pytest.mark.skipif(
    not CINECA.with_suffix(".pgen").is_file() or shutil.which("plink2") is None,
    reason="CINECA data or plink2 absent",
)


def _counts_and_hwe(source, chunk_size):
    """genotype_counts with the call rate and the HWE exact p-value of each variant."""
    table = genotype_counts(source, chunk_size=chunk_size)
    n = table[["n_hom_ref", "n_het", "n_hom_alt", "n_missing"]].sum(axis=1).to_numpy()
    table["call_rate"] = 1.0 - table["n_missing"] / n
    table["hwe_p"] = hwe_exact_many(table["n_het"], table["n_hom_ref"], table["n_hom_alt"])
    return table


def naive_hwe(n_het: int, n_aa: int, n_bb: int) -> float:
    """Exact HWE p-value by enumerating every heterozygote count (Levene's formula)."""
    n = n_het + n_aa + n_bb
    n_a = 2 * n_aa + n_het

    def prob(het: int) -> float:
        aa = (n_a - het) // 2
        return comb(n, het) * comb(n - het, aa) * 2**het / comb(2 * n, n_a)

    probs = {h: prob(h) for h in range(n_a % 2, min(n_a, 2 * n - n_a) + 1, 2)}
    return min(1.0, sum(p for p in probs.values() if p <= probs[n_het] * (1 + 1e-12)))


@pytest.mark.parametrize(
    "counts", [(0, 0, 10), (1, 0, 9), (5, 3, 2), (0, 5, 5), (57, 14, 29), (2, 40, 1), (10, 0, 0)]
)
def test_hwe_exact_matches_enumeration(counts):
    assert hwe_exact(*counts) == pytest.approx(naive_hwe(*counts), rel=1e-9)


@pytest.mark.parametrize(
    "counts",
    [(1500, 1000, 500), (1300, 1100, 600), (1700, 900, 400), (900, 1550, 550), (2200, 790, 10),
     (60, 2900, 40), (4, 2996, 0), (0, 2998, 2), (2, 2998, 0)],
)  # fmt: skip
def test_hwe_exact_matches_enumeration_at_a_site_of_3000_in_the_tails(counts):
    """Where each side is taken only over a window around the mode: the mode, excesses and
    deficits of heterozygotes far in the tails (p down to ~1e-277), rare variants."""
    expected = naive_hwe(*counts)
    assert hwe_exact(*counts) == pytest.approx(expected, rel=1e-9, abs=1e-300)


@needs_real
def test_hwe_and_call_rates_match_plink2(tmp_path):
    subprocess.run(
        ["plink2", "--pfile", str(CINECA), "--hardy", "--missing", "--out", str(tmp_path / "q")],
        check=True,
        capture_output=True,
    )
    hardy = pd.read_csv(tmp_path / "q.hardy", sep="\t")
    vmiss = pd.read_csv(tmp_path / "q.vmiss", sep="\t")
    smiss = pd.read_csv(tmp_path / "q.smiss", sep="\t")
    source = open_genotypes(CINECA.with_suffix(".pgen"))
    table = _counts_and_hwe(source, chunk_size=200)
    assert np.array_equal(table["n_het"], hardy["HET_A1_CT"])
    assert np.allclose(table["hwe_p"], hardy["P"], rtol=1e-5)
    assert np.allclose(table["call_rate"], 1 - vmiss["F_MISS"], atol=1e-6)
    samples = sample_call_rates(source, min_call_rate=0.999, chunk_size=300)
    assert samples["sample_id"].tolist() == smiss["IID"].tolist()
    assert np.allclose(samples["call_rate"], 1 - smiss["F_MISS"], atol=1e-6)
    assert samples["excluded"].sum() == (smiss["F_MISS"] > 0.001).sum()


def test_hwe_exact_many_equals_one_by_one():
    rng = np.random.default_rng(4)
    het, hom_1, hom_2 = rng.integers(0, 60, size=(3, 300))
    hom_2[:50] = hom_1[:50]  # repeated and mirrored triples share one computation
    het[50:100], hom_1[50:100], hom_2[50:100] = het[:50], hom_2[:50], hom_1[:50]
    many = hwe_exact_many(het, hom_1, hom_2)
    assert np.array_equal(many, [hwe_exact(*t) for t in zip(het, hom_1, hom_2, strict=True)])
    assert len(hwe_exact_many([], [], [])) == 0


@needs_real
def test_bed_genotype_counts_match_plink2_hardy(tmp_path):
    subprocess.run(
        ["plink2", "--bfile", str(CINECA), "--hardy", "--out", str(tmp_path / "h")],
        check=True,
        capture_output=True,
    )
    hardy = pd.read_csv(tmp_path / "h.hardy", sep="\t")
    table = _counts_and_hwe(open_genotypes(CINECA), chunk_size=300)  # packed-byte counts
    assert np.array_equal(table["n_het"], hardy["HET_A1_CT"])
    assert table["ref"].tolist() == hardy["A1"].tolist()  # plink2 --hardy's A1 is REF here
    assert np.array_equal(table["n_hom_ref"], hardy["HOM_A1_CT"])
    assert np.array_equal(table["n_hom_alt"], hardy["TWO_AX_CT"])
    assert np.allclose(table["hwe_p"], hardy["P"], rtol=1e-5)


@pytest.mark.skipif(not CINECA.with_suffix(".bed").is_file(), reason="CINECA data absent")
def test_sample_missing_from_pgenlib_equals_the_generic_pass():
    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.chunk import GenotypeSource

    for path in (CINECA, CINECA.with_suffix(".pgen")):
        source = open_genotypes(path)
        subset = list(np.random.default_rng(1).permutation(source.samples)[:97])
        for samples in (None, subset, []):
            fast = source.sample_missing(samples=samples, chunk_size=100)
            slow = GenotypeSource.sample_missing(source, samples=samples, chunk_size=100)
            assert np.array_equal(fast[0], slow[0]) and fast[1] == slow[1] == 829
        assert source.sample_missing()[0].sum() > 0
