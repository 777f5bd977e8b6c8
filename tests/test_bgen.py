"""BGEN input (v1.2/1.3, 8/16-bit, phased/unphased, .sample): plink2 as the oracle."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.bgen import BgenSource
from rvfedprs.genotypes.frequencies import allele_counts
from rvfedprs.genotypes.scoring import score, write_plink2_scorefile

bgen = pytest.importorskip("bgen")

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
CINECA = DATA / "cineca_synthetic" / "cineca_synthetic_subset"
PGS = DATA / "pgs_catalog_scorefiles" / "PGS001229_22.txt"
needs_real = pytest.mark.skipif(
    not CINECA.with_suffix(".bed").is_file(), reason="CINECA synthetic data absent"
)
needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")


def plink2(*args: str) -> None:
    subprocess.run(["plink2", *args], check=True, capture_output=True)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """The CINECA excerpt exported by plink2 in four BGEN flavours."""
    if shutil.which("plink2") is None or not CINECA.with_suffix(".bed").is_file():
        pytest.skip("plink2 or the CINECA data absent")
    out = tmp_path_factory.mktemp("bgen")
    flavours = {
        "v12_8bit_ref_first": ("bgen-1.2", "bits=8", "ref-first"),
        "v12_16bit_ref_last": ("bgen-1.2", "bits=16", "ref-last"),
        "v13_16bit_ref_first": ("bgen-1.3", "bits=16", "ref-first"),
        "v13_8bit_ref_last": ("bgen-1.3", "bits=8", "ref-last"),
    }
    for name, (version, bits, ref) in flavours.items():
        plink2("--bfile", str(CINECA), "--export", version, bits, ref, "--out", str(out / name))
    return out


FLAVOURS = ["v12_8bit_ref_first", "v12_16bit_ref_last", "v13_16bit_ref_first", "v13_8bit_ref_last"]


@needs_real
@needs_plink2
@pytest.mark.parametrize("name", FLAVOURS)
def test_dosages_equal_the_bed_they_were_exported_from(exported, name):
    ref = "first" if "ref_first" in name else "last"
    source = open_genotypes(exported / f"{name}.bgen", bgen_ref_allele=ref)
    assert isinstance(source, BgenSource)
    bed = open_genotypes(CINECA)
    assert np.array_equal(source.samples, bed.samples)  # from the .sample file's ID_2
    pd.testing.assert_frame_equal(source.variants, bed.variants)
    subset = list(np.random.default_rng(2).permutation(bed.samples)[:400])
    for samples in (None, subset):
        ours = np.hstack([c.dosages for c in source.iter_chunks(300, samples=samples)])
        theirs = np.hstack([c.dosages for c in bed.iter_chunks(300, samples=samples)])
        assert np.array_equal(ours, theirs, equal_nan=True) and np.isnan(ours).any()
    for samples in (None, subset):  # counted on the decode buffer, equal to the bed's
        counts = allele_counts(source, samples=samples, chunk_size=200)
        assert counts.equals(allele_counts(bed, samples=samples, chunk_size=200))


@needs_real
@needs_plink2
@pytest.mark.parametrize("name", ["v12_8bit_ref_first", "v13_16bit_ref_first"])
def test_prs_equals_plink2_bgen_score(exported, name, tmp_path):
    scores, log = score(open_genotypes(exported / f"{name}.bgen"), PGS, chunk_size=256)
    assert (log["status"] == "matched").sum() == 782
    weights = write_plink2_scorefile(log, tmp_path / "w.txt")
    path = exported / name
    plink2("--bgen", f"{path}.bgen", "ref-first", "--sample", f"{path}.sample",
           "--score", str(weights), "1", "2", "3", "header", "cols=+scoresums",
           "--out", str(tmp_path / "p2"))  # fmt: skip
    theirs = pd.read_csv(tmp_path / "p2.sscore", sep="\t")
    assert theirs["IID"].tolist() == scores["sample_id"].tolist()
    assert np.allclose(scores["SUM"], theirs["SCORE1_SUM"], rtol=1e-5, atol=1e-5)


def write_bgen(path: Path, probabilities: np.ndarray, **kwargs) -> Path:
    """A small BGEN from genotype probabilities (n_variants, n_samples, k) via bgen's writer."""
    phased = kwargs.pop("phased", False)
    bits = kwargs.pop("bit_depth", 16)
    ploidy = kwargs.pop("ploidy", 2)
    samples = kwargs.pop("samples", [f"s{i}" for i in range(probabilities.shape[1])])
    with bgen.BgenWriter(str(path), probabilities.shape[1], samples=samples, **kwargs) as out:
        for j, probs in enumerate(probabilities):
            out.add_variant(
                f"v{j}", f"rs{j}", "1", 100 * (j + 1), ["A", "G"], probs,
                ploidy=ploidy, phased=phased, bit_depth=bits,
            )  # fmt: skip
    return path


@needs_plink2
def test_phased_probabilities_give_plink2s_dosages(tmp_path):
    rng = np.random.default_rng(4)
    hap = rng.dirichlet([1, 1], size=(12, 30, 2))  # per haplotype: P(first), P(second allele)
    path = write_bgen(tmp_path / "ph.bgen", hap.reshape(12, 30, 4), phased=True, bit_depth=16)
    ours = next(open_genotypes(path, bgen_ref_allele="first").iter_chunks(100)).dosages
    assert np.allclose(ours.T, hap[..., 1].sum(axis=2), atol=2 / 65535)
    plink2("--bgen", str(path), "ref-first", "--make-pgen", "--out", str(tmp_path / "ph"))
    pgen = open_genotypes(tmp_path / "ph.pgen")  # plink2 keeps dosages: 1/16384 steps
    theirs = next(pgen.iter_chunks(100)).dosages
    assert np.allclose(ours, theirs, atol=1 / 16384 + 2 / 65535)
    counts = allele_counts(pgen)  # a dosage .pgen: ALT sums from the dosages
    assert np.allclose(counts["alt_count"], theirs.sum(axis=0, dtype=np.float64))


def test_no_sample_ids_anywhere_is_an_error(tmp_path):
    probs = np.tile([[0.0, 1.0, 0.0]], (2, 5, 1))
    path = write_bgen(tmp_path / "anon.bgen", probs, samples=[])
    with pytest.raises(GenotypeFormatError, match=r"anon.bgen has no sample IDs: no anon.sample"):
        open_genotypes(path)
    (tmp_path / "anon.sample").write_text(
        "ID_1 ID_2 missing sex\n0 0 0 D\n" + "".join(f"f{i} i{i} 0 NA\n" for i in range(5))
    )
    assert open_genotypes(path).samples.tolist() == [f"i{i}" for i in range(5)]
    (tmp_path / "anon.sample").write_text("ID_1 ID_2 missing sex\n0 0 0 D\nf i 0 NA\n")
    with pytest.raises(GenotypeFormatError, match=r"anon.sample lists 1 samples, but .* holds 5"):
        open_genotypes(path)


def test_unsupported_layout_bit_depth_and_ploidy_are_named(tmp_path):
    probs = np.tile([[0.2, 0.5, 0.3]], (2, 4, 1))
    v11 = write_bgen(tmp_path / "v11.bgen", probs, layout=1, compression="zlib")
    with pytest.raises(GenotypeFormatError, match=r"v11.bgen: BGEN layout 1 \(v1.1 when 1\)"):
        open_genotypes(v11)
    deep = write_bgen(tmp_path / "deep.bgen", probs, bit_depth=24)
    with pytest.raises(GenotypeFormatError, match=r"deep.bgen: probabilities stored with 24 bits"):
        open_genotypes(deep)
    haploid = write_bgen(tmp_path / "hap.bgen", np.tile([[0.3, 0.7]], (2, 4, 1)), ploidy=1)
    with pytest.raises(
        GenotypeFormatError, match=r"hap.bgen: the first variant has samples of ploidy \[1\]"
    ):
        open_genotypes(haploid)
    with pytest.raises(GenotypeFormatError, match=r"ref_allele='middle' unknown"):
        open_genotypes(v11, bgen_ref_allele="middle")
