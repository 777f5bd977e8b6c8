"""Male chrX half-calls (``1/.``, as 1000 Genomes phase 3 codes them) are read as one stated choice.

``pipeline.vcf_half_call`` / ``prepare score --vcf-half-call``: ``haploid`` (the default) reads a
half-call as a haploid call of its one allele, which plink2 stores as homozygous and
``plink2 --score`` counts 2 for a hemizygous ALT; ``missing`` makes it missing (mean-imputed);
``error`` stops naming the record, the sample and the option. The oracle is plink2 itself with the
same ``--vcf-half-call``: the PRS of every sample, males (half-calls on chrX) and females
(diploid), by the default ``.pgen`` path and by the direct reader.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from test_scoring_default_path import plink2_sums, prepare_score, write_scorefile  # noqa: E402

from rvfedprs.genotypes import open_genotypes  # noqa: E402

needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")

N_MALES, N_FEMALES, N_AUTOSOMAL, N_CHRX = 30, 30, 10, 20


def write_vcf(path: Path) -> Path:
    """Diploid autosomes; chrX (outside the PARs) diploid in females, ``a/.`` in males."""
    rng = np.random.default_rng(11)
    males = [f"m{i}" for i in range(N_MALES)]
    females = [f"f{i}" for i in range(N_FEMALES)]
    lines = [
        "##fileformat=VCFv4.2",
        "##contig=<ID=1,length=249250621>",
        "##contig=<ID=X,length=155270560>",
        '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t" + "\t".join(males + females),
    ]
    for j in range(N_AUTOSOMAL + N_CHRX):
        chrom, pos = ("1", 1000 + 10 * j) if j < N_AUTOSOMAL else ("X", 5_000_000 + 100 * j)
        hemizygous = [f"{a}/." for a in rng.integers(0, 2, size=N_MALES)]
        diploid = [f"{a}/{b}" for a, b in rng.integers(0, 2, size=(N_FEMALES + N_MALES, 2))]
        calls = diploid[:N_MALES] if chrom == "1" else hemizygous
        calls = calls + diploid[N_MALES:]
        lines.append(f"{chrom}\t{pos}\tv{j}\tA\tG\t.\tPASS\t.\tGT\t" + "\t".join(calls))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_weights(path: Path) -> Path:
    rng = np.random.default_rng(12)
    rows = []
    for j, w in enumerate(rng.normal(size=N_AUTOSOMAL + N_CHRX)):
        chrom, pos = ("1", 1000 + 10 * j) if j < N_AUTOSOMAL else ("X", 5_000_000 + 100 * j)
        rows.append(f"{chrom}\t{pos}\tG\tA\t{w:.4f}")
    return write_scorefile(path, rows)


@pytest.fixture
def inputs(tmp_path) -> tuple[Path, Path]:
    return write_vcf(tmp_path / "x.vcf"), write_weights(tmp_path / "w.txt")


@needs_plink2
@pytest.mark.parametrize("choice", ["haploid", "missing"])
def test_chrx_prs_equals_plink2_under_the_same_half_call_choice(inputs, tmp_path, choice):
    vcf, weights = inputs
    option = ["--vcf-half-call", choice]
    cache = ["--pgen-cache", str(tmp_path / "cache")]
    converted = prepare_score(vcf, weights, tmp_path / "a.tsv", *option, *cache)
    direct = prepare_score(vcf, weights, tmp_path / "d.tsv", *option, "--direct")
    theirs = plink2_sums(["--vcf", str(vcf), *option], tmp_path / "a.match.tsv", tmp_path)
    assert (converted["n_matched"] == N_AUTOSOMAL + N_CHRX).all()
    np.testing.assert_allclose(converted["SUM"], theirs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(direct["SUM"], converted["SUM"], rtol=1e-9, atol=1e-9)


def test_a_hemizygous_alt_counts_two_as_a_haploid_call_and_is_missing_if_asked(inputs):
    vcf, _ = inputs
    reads = {}
    for choice in ("haploid", "missing"):
        source = open_genotypes(str(vcf), half_call=choice)
        reads[choice] = np.hstack([chunk.dosages for chunk in source.iter_chunks()])
        assert source.half_calls == N_MALES * N_CHRX  # counted under either choice
    males_chrx = reads["haploid"][:N_MALES, N_AUTOSOMAL:]
    assert set(np.unique(males_chrx)) <= {0.0, 2.0} and (males_chrx == 2).any()
    assert np.isnan(reads["missing"][:N_MALES, N_AUTOSOMAL:]).all()
    # females and every autosome read the same under both choices
    np.testing.assert_array_equal(reads["haploid"][N_MALES:], reads["missing"][N_MALES:])
    np.testing.assert_array_equal(
        reads["haploid"][:, :N_AUTOSOMAL], reads["missing"][:, :N_AUTOSOMAL]
    )


@pytest.mark.parametrize("how", ["--direct", "--via-pgen"])
def test_error_refuses_the_first_half_call_by_name(inputs, tmp_path, how):
    if how == "--via-pgen" and shutil.which("plink2") is None:
        pytest.skip("plink2 not installed")
    vcf, weights = inputs
    done = subprocess.run(
        [sys.executable, "-m", "rvfedprs", "prepare", "score", "--genotypes", str(vcf),
         "--scorefile", str(weights), "--out", str(tmp_path / "e.tsv"),
         "--vcf-half-call", "error", how, "--pgen-cache", str(tmp_path / "cache")],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode != 0 and not (tmp_path / "e.tsv").exists()
    assert "Traceback" not in done.stderr
    assert "half-call" in done.stderr and str(vcf) in done.stderr


def test_an_unknown_choice_is_refused_by_name(inputs):
    vcf, _ = inputs
    with pytest.raises(Exception, match="half_call='diploid' unknown"):
        open_genotypes(str(vcf), half_call="diploid")
