"""Rare dosages: sparse CSR of minor-allele counts against a dense numpy reference."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scipy.sparse as sp

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.frequencies import allele_counts, allele_frequencies, split_common_rare
from rvfedprs.genotypes.rare import rare_dosages

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
CHR21 = DATA / "1kg_chr21_start_plinkng" / "1kg_phase3_chr21_start.vcf.gz"

HEADER = (
    "##fileformat=VCFv4.2\n##contig=<ID=1>\n"
    '##FORMAT=<ID=GT,Number=1,Type=String,Description="GT">\n'
)


def test_minor_allele_orientation_imputation_and_column_order(tmp_path):
    vcf = tmp_path / "r.vcf"
    rows = [
        "1 10 a A G . . . GT 0/0 0/1 ./. 0/0",
        "1 20 b C T . . . GT 1/1 1/1 0/1 ./.",
        "1 30 c G A . . . GT 0/0 0/0 0/0 0/0",
    ]
    vcf.write_text(
        HEADER
        + "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts1\ts2\ts3\ts4\n"
        + "".join(r.replace(" ", "\t") + "\n" for r in rows)
    )
    rare = pd.DataFrame(
        {
            "variant_key": ["1:20:C:T", "1:10:A:G"],
            "ref": ["C", "A"],
            "alt": ["T", "G"],
            "minor_allele": ["C", "G"],
            "maf": [0.05, 0.01],
        }
    )
    matrix = rare_dosages(open_genotypes(vcf), rare, samples=["s4", "s1", "s2", "s3"], chunk_size=1)
    assert isinstance(matrix, sp.csr_matrix) and matrix.dtype == np.float32
    expected = np.array([[0.1, 0], [0, 0], [0, 1], [1, 0.02]], dtype=np.float32)
    assert np.allclose(matrix.toarray(), expected)
    assert matrix.nnz == 4  # zeros are not stored
    with pytest.raises(InputDataError, match=r"1 rare variants are absent from .*r\.vcf: 1:99:A:G"):
        rare_dosages(
            open_genotypes(vcf), pd.concat([rare, rare.iloc[[0]].assign(variant_key="1:99:A:G")])
        )
    with pytest.raises(InputDataError, match=r"minor allele 'X' is neither REF nor ALT"):
        rare_dosages(open_genotypes(vcf), rare.assign(minor_allele=["C", "X"]))


def test_real_data_against_dense_reference():
    if not CHR21.is_file():
        pytest.skip("1kg chr21 data absent")
    source = open_genotypes(CHR21, multiallelic="exclude")
    freqs = split_common_rare(allele_frequencies(allele_counts(source)), rare_maf_max=0.01)
    rare = freqs[freqs["class"] == "rare"].sample(frac=1.0, random_state=1)  # shuffled order
    assert len(rare) > 100
    samples = source.samples[::-1][:500]
    matrix = rare_dosages(source, rare, samples=samples, chunk_size=64)
    chunk = next(source.iter_chunks(chunk_size=100_000, samples=samples))
    index = pd.Series(np.arange(len(chunk.keys)), index=chunk.keys)
    dense = chunk.dosages[:, index[rare["variant_key"]].to_numpy()]
    minor_ref = (rare["minor_allele"] == rare["ref"]).to_numpy()
    dense = np.where(minor_ref, 2 - dense, dense)
    dense = np.where(np.isnan(dense), 2 * rare["maf"].to_numpy(), dense)
    assert matrix.shape == (500, len(rare))
    assert np.allclose(matrix.toarray(), dense)
    assert matrix.nnz < 0.05 * matrix.shape[0] * matrix.shape[1]


@pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")
def test_bed_pgen_and_vcf_give_identical_matrices(tmp_path):
    """The .pgen's carrier lists and the .bed's int8 codes against the VCF's float chunks."""
    if not CHR21.is_file():
        pytest.skip("1kg chr21 data absent")
    import pgenlib

    # phase erased: a hard-call .pgen, whose rare variants plink2 stores as carrier lists
    for make in (["--make-pgen", "erase-phase"], ["--make-bed"]):
        subprocess.run(
            ["plink2", "--vcf", str(CHR21), "--max-alleles", "2", *make, "--out",
             str(tmp_path / "c")],
            check=True,
            capture_output=True,
        )  # fmt: skip
    reader = pgenlib.PgenReader(bytes(tmp_path / "c.pgen"))
    assert sum(reader.has_sparse(v) for v in range(reader.get_variant_ct())) > 100
    reader.close()
    vcf = open_genotypes(CHR21, multiallelic="exclude")
    # every polymorphic variant "rare", so that common ones and REF-minor ones are read too
    freqs = split_common_rare(allele_frequencies(allele_counts(vcf)), rare_maf_max=0.49)
    rare = freqs[freqs["class"] == "rare"].sample(frac=1.0, random_state=2)
    assert (rare["minor_allele"] == rare["ref"]).any()  # REF counted for some
    samples = list(np.random.default_rng(3).permutation(vcf.samples)[:700])
    want = rare_dosages(vcf, rare, samples=samples, chunk_size=50)
    assert want.nnz > 0
    for path in (tmp_path / "c.pgen", tmp_path / "c"):
        for chosen in (samples, None):
            got = rare_dosages(open_genotypes(path), rare, samples=chosen, chunk_size=50)
            ref = want if chosen is not None else rare_dosages(vcf, rare, chunk_size=500)
            assert got.shape == ref.shape and (got != ref).nnz == 0, path
            assert np.array_equal(got.indptr, ref.indptr) and np.array_equal(got.data, ref.data)
