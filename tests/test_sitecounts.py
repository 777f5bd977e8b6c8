"""Per-site counts and the coordinator's combination: HWE within sites (Wahlund effect)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.chunk import GenotypeChunk, GenotypeSource, make_variant_table
from rvfedprs.genotypes.frequencies import allele_counts
from rvfedprs.genotypes.qc import genotype_counts, hwe_exact
from rvfedprs.genotypes.sitecounts import combine_site_counts, site_counts
from rvfedprs.genotypes.writers import BedWriter


class ArraySource(GenotypeSource):
    """Genotypes held in memory (the generic, non-PLINK code path)."""

    def __init__(self, genotypes: np.ndarray, variants: pd.DataFrame) -> None:
        self.path = "memory"
        self.samples = np.array([f"s{i}" for i in range(genotypes.shape[0])])
        self._x = np.where(genotypes < 0, np.nan, genotypes).astype(np.float32)
        self._v = variants

    def iter_chunks(self, chunk_size=4096, samples=None):
        rows = np.arange(len(self.samples)) if samples is None else [
            int(s[1:]) for s in samples
        ]  # fmt: skip
        for start in range(0, self._x.shape[1], chunk_size):
            cols = slice(start, start + chunk_size)
            yield GenotypeChunk(
                self._v.iloc[cols].reset_index(drop=True), self._x[rows][:, cols],
                self.samples[rows],
            )  # fmt: skip


def hwe_genotypes(rng, n: int, p: float) -> np.ndarray:
    return rng.binomial(2, p, size=n)


@pytest.fixture
def two_sites(tmp_path):
    """Two sites in HWE with opposite allele frequencies: the pooled sample is not."""
    rng = np.random.default_rng(0)
    n = 400
    variants = make_variant_table(["1"] * 3, [100, 200, 300], ["a", "b", "c"], list("AAA"),
                                  list("GGG"))  # fmt: skip
    site_a = np.column_stack(
        [hwe_genotypes(rng, n, 0.1), hwe_genotypes(rng, n, 0.3), hwe_genotypes(rng, n, 0.3)]
    )
    site_b = np.column_stack(
        [hwe_genotypes(rng, n, 0.9), hwe_genotypes(rng, n, 0.3), hwe_genotypes(rng, n, 0.3)]
    )
    site_b[:, 2] = np.where(rng.random(n) < 0.5, 0, 2)  # variant c: no heterozygotes in site B
    genotypes = np.vstack([site_a, site_b]).astype(np.int8)
    samples = [f"s{i}" for i in range(2 * n)]
    with BedWriter(tmp_path / "g", samples) as bed:
        bed.write(variants, genotypes)
    return {"bed": tmp_path / "g", "genotypes": genotypes, "variants": variants, "n": n}


def test_site_counts_equal_the_library_counts_on_both_code_paths(two_sites):
    from rvfedprs.genotypes import open_genotypes

    n = two_sites["n"]
    samples = [f"s{i}" for i in range(n)]
    controls = samples[::3]
    for source in (
        open_genotypes(two_sites["bed"]),
        ArraySource(two_sites["genotypes"], two_sites["variants"]),
    ):
        table = site_counts(source, samples=samples, controls=controls, chunk_size=2)
        alleles = allele_counts(source, samples=samples)
        hard = genotype_counts(source, samples=controls)
        assert table["alt_count"].tolist() == alleles["alt_count"].tolist()
        assert table["allele_number"].tolist() == alleles["allele_number"].tolist()
        assert table["n_het"].tolist() == hard["n_het"].tolist()
        assert (table["n_samples"] == n).all()
    with pytest.raises(InputDataError, match=r"control s9999 is not among the samples"):
        site_counts(ArraySource(two_sites["genotypes"], two_sites["variants"]),
                    samples=samples, controls=["s9999"])  # fmt: skip


def test_hwe_runs_within_sites_never_on_the_pooled_sum(two_sites):
    from rvfedprs.genotypes import open_genotypes

    n = two_sites["n"]
    source = open_genotypes(two_sites["bed"])
    a = [f"s{i}" for i in range(n)]
    b = [f"s{i}" for i in range(n, 2 * n)]
    tables = {
        "A": site_counts(source, samples=a, controls=a),
        "B": site_counts(source, samples=b, controls=b),
    }
    out = combine_site_counts(tables, hwe_p_min=1e-6, rare_maf_max=0.01)
    pooled = (
        tables["A"][["n_het", "n_hom_ref", "n_hom_alt"]]
        + tables["B"][["n_het", "n_hom_ref", "n_hom_alt"]]
    )
    assert hwe_exact(*pooled.iloc[0]) < 1e-6  # the Wahlund effect: pooling fails variant a
    per_site = [hwe_exact(*t[["n_het", "n_hom_ref", "n_hom_alt"]].iloc[2]) for t in tables.values()]
    assert out["hwe_p"].iloc[2] == pytest.approx(min(per_site), rel=1e-12)
    assert out["qc_pass"].tolist() == [True, True, False]
    reason = out["reason"].iloc[2]
    assert reason.startswith("HWE in controls within site (B p=") and "hwe_p_min 1e-06" in reason
    assert "A p=" not in reason
    assert out["alt_freq"].iloc[0] == pytest.approx(two_sites["genotypes"][:, 0].mean() / 2)
