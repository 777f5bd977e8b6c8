"""Genotype readers: oracles (bcftools, plink2, the same data in three formats) and bad input."""

from __future__ import annotations

import gzip
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.exceptions import GenotypeFormatError, InputDataError
from rvfedprs.genotypes import GenotypeChunk, normalise_chrom, open_genotypes

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
CINECA = DATA / "cineca_synthetic" / "cineca_synthetic_subset"
needs_cineca = pytest.mark.skipif(
    not CINECA.with_suffix(".bed").is_file(), reason="CINECA synthetic data absent"
)
needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")
needs_bcftools = pytest.mark.skipif(shutil.which("bcftools") is None, reason="bcftools absent")

HEADER = (
    "##fileformat=VCFv4.2\n##contig=<ID=1>\n##contig=<ID=2>\n"
    '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">\n'
    '##FORMAT=<ID=DS,Number=1,Type=Float,Description="ALT dosage">\n'
)


def write_vcf(path: Path, rows: list[str], samples=("s1", "s2", "s3"), header=HEADER) -> Path:
    cols = "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t" + "\t".join(samples)
    text = header + cols + "\n" + "".join(r.replace(" ", "\t") + "\n" for r in rows)
    if path.suffix == ".gz":
        plain = path.with_suffix("")
        plain.write_text(text)
        subprocess.run(["bgzip", "-f", str(plain)], check=True)
    else:
        path.write_text(text)
    return path


def read_all(source, chunk_size=4096, samples=None):
    chunks = list(source.iter_chunks(chunk_size=chunk_size, samples=samples))
    variants = pd.concat([c.variants for c in chunks], ignore_index=True)
    return variants, np.hstack([c.dosages for c in chunks]), chunks


def _gt_count(gt: str) -> float:
    alleles = gt.replace("|", "/").split("/")
    if "." in alleles:
        return np.nan
    counts = [int(a) > 0 for a in alleles]
    return 2.0 * counts[0] if len(counts) == 1 else float(sum(counts))


def parse_bcftools(text: str) -> np.ndarray:
    """GT strings from bcftools query → ALT counts (NaN for any missing allele), samples × sites."""
    cells = np.array([ln.rstrip("\t").split("\t") for ln in text.strip().split("\n")])
    values, inverse = np.unique(cells, return_inverse=True)
    counts = np.array([_gt_count(v) for v in values], dtype=np.float32)
    return counts[inverse].reshape(cells.shape).T


@needs_cineca
def test_bed_pgen_vcf_of_the_same_data_give_identical_dosages():
    results = [
        read_all(open_genotypes(p), chunk_size=300)
        for p in (CINECA, CINECA.with_suffix(".pgen"), CINECA.with_suffix(".vcf.gz"))
    ]
    (v_bed, x_bed, _), (v_pgen, x_pgen, _), (v_vcf, x_vcf, _) = results
    assert x_bed.shape == (2504, 829) and x_bed.dtype == np.float32
    assert np.isnan(x_bed).sum() > 0  # the data has missing calls: NaN must agree too
    assert np.array_equal(x_bed, x_pgen, equal_nan=True)
    assert np.array_equal(x_bed, x_vcf, equal_nan=True)
    pd.testing.assert_frame_equal(v_bed, v_pgen)
    pd.testing.assert_frame_equal(v_bed, v_vcf)
    assert v_bed.loc[0, ["ref", "alt"]].tolist() == ["G", "A"]  # .bim col 6 REF, col 5 ALT
    fam = pd.read_csv(CINECA.with_suffix(".fam"), sep=" ", header=None)
    vcf_ids = open_genotypes(CINECA.with_suffix(".vcf.gz")).samples
    assert list(vcf_ids) == [f"{a}_{b}" for a, b in zip(fam[0], fam[1], strict=True)]


@needs_cineca
@needs_bcftools
def test_vcf_reader_matches_bcftools_query():
    vcf = CINECA.with_suffix(".vcf.gz")
    out = subprocess.run(
        ["bcftools", "query", "-f", r"[%GT\t]\n", str(vcf)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    _, x, _ = read_all(open_genotypes(vcf), chunk_size=97)
    assert np.array_equal(x, parse_bcftools(out), equal_nan=True)


@needs_cineca
@needs_plink2
def test_bed_reader_matches_plink2_export_a(tmp_path):
    bim = pd.read_csv(CINECA.with_suffix(".bim"), sep="\t", header=None)
    bim[[1, 4]].to_csv(tmp_path / "alt.txt", sep="\t", header=False, index=False)
    subprocess.run(
        [
            "plink2",
            "--bfile",
            str(CINECA),
            "--export",
            "A",
            "--export-allele",
            str(tmp_path / "alt.txt"),
            "--out",
            str(tmp_path / "x"),
        ],
        check=True,
        capture_output=True,
    )
    raw = pd.read_csv(tmp_path / "x.raw", sep="\t")
    expected = raw.iloc[:, 6:].to_numpy(dtype=np.float32)  # counts of the named (ALT) allele
    variants, x, _ = read_all(open_genotypes(CINECA.with_suffix(".bed")), chunk_size=128)
    named = [c.rsplit("_", 1)[1] for c in raw.columns[6:]]
    assert named == variants["alt"].tolist()
    assert np.array_equal(x, expected, equal_nan=True)


def test_gaston_bed_counts_alt_column_against_vcf():
    prefix = DATA / "1kg_LCT_gaston" / "LCT"
    if not prefix.with_suffix(".bed").is_file():
        pytest.skip("1kg_LCT_gaston data absent")
    vb, xb, _ = read_all(open_genotypes(prefix))
    vv, xv, _ = read_all(open_genotypes(prefix.with_suffix(".vcf.gz")))
    swapped = (vb["ref"] == vv["alt"]) & (vb["alt"] == vv["ref"])
    assert swapped.sum() > 0 and ((vb["ref"] == vv["ref"]) | swapped).all()
    assert np.array_equal(xb, np.where(swapped.to_numpy(), 2 - xv, xv), equal_nan=True)


def test_chunking_and_sample_subset_preserve_values(tmp_path):
    rows = [
        f"1 {10 * i} rs{i} A G . . . GT {g}"
        for i, g in enumerate(["0/1 1/1 ./.", "0|0 1|0 0/1", "1/1 0/0 0/0", "0/. 1 0"], start=1)
    ]
    vcf = write_vcf(tmp_path / "a.vcf.gz", rows)
    source = open_genotypes(vcf)
    _, full, _ = read_all(source, chunk_size=10)
    # the half-call 0/. reads as a haploid 0 by default (vcf_half_call), missing when asked
    expected = np.array([[1, 2, np.nan], [0, 1, 1], [2, 0, 0], [0, 2, 0]], np.float32).T
    assert np.array_equal(full, expected, equal_nan=True)
    _, as_missing, _ = read_all(open_genotypes(vcf, half_call="missing"), chunk_size=10)
    assert np.isnan(as_missing[0, 3]) and np.array_equal(
        np.delete(as_missing.ravel(), 3), np.delete(expected.ravel(), 3), equal_nan=True
    )
    _, small, chunks = read_all(source, chunk_size=3)
    assert [c.dosages.shape[1] for c in chunks] == [3, 1]
    assert np.array_equal(small, expected, equal_nan=True)
    _, sub, chunks = read_all(source, samples=["s3", "s1"])
    assert np.array_equal(sub, expected[[2, 0]], equal_nan=True)
    assert list(chunks[0].samples) == ["s3", "s1"]
    with pytest.raises(InputDataError, match="absent from .*: nobody"):
        read_all(source, samples=["s1", "nobody"])


@needs_bcftools
def test_ds_field_matches_bcftools_and_field_choice(tmp_path):
    rows = [
        "1 10 rs1 A G . . . GT:DS 0/1:0.9 1/1:1.75 ./.:.",
        "1 20 rs2 C T . . . GT:DS 0/0:0.1 0/1:1.2 1/1:2",
    ]
    vcf = write_vcf(tmp_path / "ds.vcf.gz", rows)
    out = subprocess.run(
        ["bcftools", "query", "-f", r"[%DS\t]\n", str(vcf)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    expected = np.array(
        [
            [np.nan if v == "." else float(v) for v in ln.rstrip("\t").split("\t")]
            for ln in out.strip().split("\n")
        ],
        dtype=np.float32,
    ).T
    _, auto, _ = read_all(open_genotypes(vcf))
    assert np.array_equal(auto, expected, equal_nan=True)
    _, gt, _ = read_all(open_genotypes(vcf, field="GT"))
    assert np.array_equal(gt, np.array([[1, 2, np.nan], [0, 1, 2]], np.float32).T, equal_nan=True)


def test_per_chromosome_files_read_as_one_source(tmp_path):
    a = write_vcf(tmp_path / "chr1.vcf", ["chr1 5 a A G . . . GT 0/1 0/0 1/1"])
    b = write_vcf(tmp_path / "chr2.vcf", ["chr2 7 b C T . . . GT 1/1 0/1 0/0"])
    variants, x, _ = read_all(open_genotypes([a, b]))
    assert variants["chrom"].tolist() == ["1", "2"]
    assert np.array_equal(x, np.array([[1, 0, 2], [2, 1, 0]], np.float32).T)
    c = write_vcf(
        tmp_path / "chr3.vcf", ["2 9 c C T . . . GT 1/1 0/1 0/0"], samples=("s1", "s3", "s2")
    )
    with pytest.raises(GenotypeFormatError, match="same IDs in a different order"):
        open_genotypes([a, c])


def test_normalise_chrom():
    assert [normalise_chrom(c) for c in ("chr1", "01", "23", "chrX", "chrM", "MT", "x")] == [
        "1",
        "1",
        "X",
        "X",
        "MT",
        "MT",
        "X",
    ]
    with pytest.raises(GenotypeFormatError, match="unknown chromosome name 'chrUn_gl000220'"):
        normalise_chrom("chrUn_gl000220")


def test_chunk_shape_is_checked():
    with pytest.raises(ValueError, match="do not match"):
        GenotypeChunk(
            pd.DataFrame({"chrom": ["1"]}), np.zeros((2, 2), np.float32), np.array(["a", "b"])
        )


# ---------------------------------------------------------------- bad input


def test_truncated_bgzip_is_rejected(tmp_path):
    rows = [f"1 {i} . A G . . . GT 0/1 0/0 1/1" for i in range(1, 3000)]
    good = write_vcf(tmp_path / "g.vcf.gz", rows)
    data = good.read_bytes()
    bad = tmp_path / "bad.vcf.gz"
    bad.write_bytes(data[: len(data) // 2])
    with pytest.raises(GenotypeFormatError, match=r"bad\.vcf\.gz: truncated or corrupt bgzip"):
        open_genotypes(bad)
    plain = tmp_path / "plain.vcf.gz"  # ordinary gzip, cut short
    plain.write_bytes(gzip.compress(gzip.decompress(data))[:-40])
    with pytest.raises(GenotypeFormatError, match=r"plain\.vcf\.gz: truncated or corrupt gzip"):
        open_genotypes(plain)


def test_vcf_without_gt_or_ds(tmp_path):
    header = (
        "##fileformat=VCFv4.2\n##contig=<ID=1>\n"
        '##FORMAT=<ID=AD,Number=R,Type=Integer,Description="depth">\n'
    )
    vcf = write_vcf(tmp_path / "nogt.vcf", ["1 5 . A G . . . AD 1,2 3,0 0,4"], header=header)
    with pytest.raises(GenotypeFormatError, match=r"nogt\.vcf: no FORMAT/GT .*declared: \['AD'\]"):
        open_genotypes(vcf)
    with pytest.raises(GenotypeFormatError, match="genotype field 'PL' unknown"):
        open_genotypes(write_vcf(tmp_path / "x.vcf", []), field="PL")


def test_duplicate_sample_ids(tmp_path):
    vcf = write_vcf(
        tmp_path / "dup.vcf", ["1 5 . A G . . . GT 0/1 0/0 1/1"], samples=("s1", "s2", "s1")
    )
    with pytest.raises(GenotypeFormatError, match=r"1 duplicate sample IDs in .*dup\.vcf: s1"):
        open_genotypes(vcf)


def test_unknown_chromosome_names_the_file(tmp_path):
    vcf = write_vcf(
        tmp_path / "chr.vcf",
        ["chrUn_x 5 . A G . . . GT 0/1 0/0 1/1"],
        header=HEADER.replace("<ID=2>", "<ID=chrUn_x>"),
    )
    with pytest.raises(GenotypeFormatError, match=r"'chrUn_x' in .*chr\.vcf"):
        read_all(open_genotypes(vcf))


def test_multiallelic_error_or_logged_exclusion(tmp_path, caplog):
    rows = [
        "1 5 rsA A G . . . GT 0/1 0/0 1/1",
        "1 9 rsM C T,G . . . GT 0/2 1/1 0/0",
        "1 12 rsB G A . . . GT 0/0 0/0 0/1",
    ]
    vcf = write_vcf(tmp_path / "m.vcf", rows)
    with pytest.raises(
        GenotypeFormatError, match=r"multi-allelic record 1:9 rsM C>T,G \(record 2\)"
    ):
        read_all(open_genotypes(vcf, multiallelic="error"))
    source = open_genotypes(vcf)  # exclude by default, as the pipeline's on_multiallelic
    variants, x, _ = read_all(source)
    assert variants["id"].tolist() == ["rsA", "rsB"]
    assert source.excluded == [("1", 9, "rsM", "C", "T,G", "multiallelic")]
    assert "excluded 1 multi-allelic record(s), first 1:9 rsM C>T,G" in caplog.text


@needs_plink2
def test_mismatched_bed_bim_fam(tmp_path):
    vcf = write_vcf(
        tmp_path / "x.vcf",
        [f"1 {i} v{i} A G . . . GT 0/1 0/0 1/1 0/1 0/0" for i in (1, 2)],
        samples=("s1", "s2", "s3", "s4", "s5"),
    )
    subprocess.run(
        ["plink2", "--vcf", str(vcf), "--make-bed", "--out", str(tmp_path / "x")],
        check=True,
        capture_output=True,
    )
    _, x, _ = read_all(open_genotypes(tmp_path / "x"))
    assert np.array_equal(x[:, 0], [1, 0, 2, 1, 0])
    with (tmp_path / "x.fam").open("a") as fam:
        fam.write("s6 s6 0 0 0 -9\n")  # a sample and a variant more than the .bed holds
    with (tmp_path / "x.bim").open("a") as bim:
        bim.write("1\tv3\t0\t3\tG\tA\n")
    with pytest.raises(GenotypeFormatError, match=r"x\.bed: 7 bytes, but 3 variants .* need 9"):
        open_genotypes(tmp_path / "x.bed")
    lines = (tmp_path / "x.fam").read_text().splitlines()
    (tmp_path / "x.fam").write_text("\n".join(lines[:-2] + ["s1 s1 0 0 0 -9"]) + "\n")
    with pytest.raises(GenotypeFormatError, match=r"duplicate sample IDs in .*x\.fam: s1"):
        open_genotypes(tmp_path / "x")
    (tmp_path / "x.fam").write_text("\n".join(lines[:-2] + ["s5 s5 0 0 0 -9"]) + "\n")
    bim_lines = (tmp_path / "x.bim").read_text().splitlines()
    (tmp_path / "x.bim").write_text("\n".join(bim_lines[:2]) + "\n")
    assert open_genotypes(tmp_path / "x").samples.tolist() == ["s1", "s2", "s3", "s4", "s5"]
    (tmp_path / "x.bed").write_bytes(b"\x00\x00\x00" + b"\x00" * 4)
    with pytest.raises(GenotypeFormatError, match="not a SNP-major PLINK1 .bed"):
        open_genotypes(tmp_path / "x")


def test_unknown_format_and_missing_files(tmp_path):
    (tmp_path / "geno.txt").write_text("x")
    with pytest.raises(
        GenotypeFormatError, match=r"cannot tell the genotype format of .*geno\.txt"
    ):
        open_genotypes(tmp_path / "geno.txt")
    with pytest.raises(GenotypeFormatError, match=r"missing\.vcf\.gz does not exist"):
        open_genotypes(tmp_path / "missing.vcf.gz")


def test_pgen_with_multiallelic_variants_against_vcf():
    folder = DATA / "1kg_chr21_start_plinkng"
    if not (folder / "chr21_phase3_start.pgen").is_file():
        pytest.skip("1kg chr21 data absent")
    with pytest.raises(GenotypeFormatError, match=r"multi-allelic variant 21:9415721 rs569225703"):
        open_genotypes(folder / "chr21_phase3_start.pgen", multiallelic="error")
    pgen = open_genotypes(folder / "chr21_phase3_start.pgen")
    assert len(pgen.excluded) == 3
    vp, xp, _ = read_all(pgen, chunk_size=100)
    vv, xv, _ = read_all(open_genotypes(folder / "1kg_phase3_chr21_start.vcf.gz"))
    index = pd.Series(
        np.arange(len(vv)),
        index=vv["chrom"] + ":" + vv["pos"].astype(str) + ":" + vv["ref"] + ":" + vv["alt"],
    )
    columns = index[
        (vp["chrom"] + ":" + vp["pos"].astype(str) + ":" + vp["ref"] + ":" + vp["alt"]).to_numpy()
    ].to_numpy()
    assert len(columns) == 482
    assert np.array_equal(xp, xv[:, columns], equal_nan=True)


def _engine_chunks(prefix, engine, chunk_size, samples=None):
    from rvfedprs.genotypes.plink import BedSource

    return list(BedSource(prefix, engine=engine).iter_chunks(chunk_size, samples=samples))


def _assert_same_chunks(a, b):
    assert len(a) == len(b)
    for x, y in zip(a, b, strict=True):
        assert x.dosages.dtype == y.dosages.dtype == np.float32
        assert np.array_equal(x.dosages, y.dosages, equal_nan=True)
        assert np.array_equal(x.samples, y.samples)
        pd.testing.assert_frame_equal(x.variants, y.variants)


@needs_cineca
def test_bed_engines_pgenlib_and_pandas_plink_give_identical_chunks():
    rng = np.random.default_rng(3)
    subset = list(rng.permutation(open_genotypes(CINECA).samples)[:301])
    for chunk_size, samples in ((256, None), (1000, subset)):
        ours = _engine_chunks(CINECA, "pgenlib", chunk_size, samples)
        theirs = _engine_chunks(CINECA, "pandas-plink", chunk_size, samples)
        _assert_same_chunks(ours, theirs)
    assert sum(np.isnan(c.dosages).sum() for c in ours) > 0  # the data has missing calls


@needs_plink2
@pytest.mark.parametrize("inplace", [False, True], ids=["numpy-sums", "blas-inplace-sums"])
def test_bed_engines_and_packed_counts_on_odd_sample_count_with_missing(
    tmp_path, monkeypatch, inplace
):
    from rvfedprs.genotypes import kernels
    from rvfedprs.genotypes.chunk import GenotypeSource
    from rvfedprs.genotypes.plink import BedSource

    if inplace:  # every product added by BLAS dgemv in place, as on a large cohort
        monkeypatch.setattr(kernels, "INPLACE_MIN_CELLS", 0)

    rng = np.random.default_rng(5)
    genotypes = np.array(["0/0", "0/1", "1/1", "./."])[rng.choice(4, size=(40, 7))]
    rows = [f"1 {10 * (i + 1)} v{i} A G . . . GT " + " ".join(g) for i, g in enumerate(genotypes)]
    vcf = write_vcf(tmp_path / "m.vcf", rows, samples=tuple(f"s{i}" for i in range(7)))
    subprocess.run(
        ["plink2", "--vcf", str(vcf), "--make-bed", "--out", str(tmp_path / "m")],
        check=True,
        capture_output=True,
    )
    expected = np.where(
        genotypes == "./.", np.nan, np.char.count(genotypes.astype(str), "1")
    ).T.astype(np.float32)
    for samples in (None, ["s6", "s0", "s3"]):
        chunks = _engine_chunks(tmp_path / "m", "pgenlib", 16, samples)
        _assert_same_chunks(chunks, _engine_chunks(tmp_path / "m", "pandas-plink", 16, samples))
        rows_ = slice(None) if samples is None else [6, 0, 3]
        assert np.array_equal(np.hstack([c.dosages for c in chunks]), expected[rows_], True)
        source = BedSource(tmp_path / "m")
        fast = list(source.iter_counts(16, samples=samples))
        slow = list(GenotypeSource.iter_counts(source, 16, samples=samples))
        for (v1, s1, c1), (v2, s2, c2) in zip(fast, slow, strict=True):
            pd.testing.assert_frame_equal(v1, v2)
            assert np.array_equal(s1, s2) and np.array_equal(c1, c2)
        coef = np.linspace(-1, 2, 40)[::-1]
        sums, n_missing = source.dosage_dot(np.arange(40), coef, samples=samples, chunk_size=16)
        assert np.allclose(sums, _naive_dot(expected[rows_], coef), rtol=1e-12)
        assert np.array_equal(n_missing, np.isnan(expected[rows_]).sum(axis=0))
        two = np.column_stack([coef, np.cos(coef)])  # two scores in one pass
        sums2, _ = source.dosage_dot(np.arange(40), two, samples=samples, chunk_size=16)
        assert np.allclose(sums2, _naive_dot(expected[rows_], two), rtol=1e-12)
    with pytest.raises(ValueError, match="unknown .bed engine 'plink'"):
        BedSource(tmp_path / "m", engine="plink")


def _naive_dot(x: np.ndarray, coef: np.ndarray, fill=None) -> np.ndarray:
    """Mean- (or ``fill``-) imputed dosages times coef, the plain way."""
    x = x.astype(np.float64)
    value = np.nanmean(x, axis=0) if fill is None else fill
    return np.where(np.isnan(x), value, x) @ coef


@needs_cineca
def test_bed_packed_dosage_dot_equals_dense_reference():
    from rvfedprs.genotypes.chunk import GenotypeSource
    from rvfedprs.genotypes.plink import BedSource

    source = BedSource(CINECA)
    _, x, _ = read_all(source)
    rng = np.random.default_rng(7)
    index = np.sort(rng.choice(x.shape[1], size=400, replace=False))
    coef = rng.normal(size=len(index))
    fill = rng.uniform(0, 2, size=len(index))
    subset = list(rng.permutation(source.samples)[:333])
    rows = pd.Index(source.samples).get_indexer(subset)
    for samples, sub in ((None, slice(None)), (subset, rows)):
        for value in (None, fill):
            fast, missing = source.dosage_dot(index, coef, value, samples, chunk_size=150)
            dense, missing_dense = GenotypeSource.dosage_dot(
                source, index, coef, value, samples, chunk_size=150
            )
            expected = _naive_dot(x[sub][:, index], coef, value)
            assert np.allclose(fast, expected, rtol=1e-12, atol=1e-9)
            assert np.allclose(dense, expected, rtol=1e-12, atol=1e-9)
            assert np.array_equal(missing, np.isnan(x[sub][:, index]).sum(axis=0))
            assert np.array_equal(missing, missing_dense) and missing.sum() > 0
    with pytest.raises(ValueError, match="strictly increasing"):
        source.dosage_dot(index[::-1], coef)


def _rare_and_common_cohort(folder: Path, n: int = 300, m: int = 60) -> tuple[np.ndarray, tuple]:
    """A VCF of rare, common and mostly-hom-ALT variants with missing calls, and plink2's
    ``.pgen`` and ``.bed`` of it (prefix ``folder/r``); chromosome 1 then 2.

    Returns the calls (variants × samples: 0, 1, 2 ALT alleles, 3 missing) and sample IDs.
    """
    rng = np.random.default_rng(11)
    calls = np.zeros((m, n), dtype=int)
    for j in range(m):
        if j % 3 == 0:  # common: plink2 stores the full genotype vector
            calls[j] = rng.choice(3, size=n, p=[0.5, 0.35, 0.15])
        else:  # rare: a handful of carriers, stored as their list
            carriers = rng.choice(n, size=rng.integers(0, 9), replace=False)
            calls[j, carriers] = rng.choice([1, 2], size=len(carriers), p=[0.8, 0.2])
            if j % 5 == 2:  # the rare allele is REF: a list against hom ALT
                calls[j] = 2 - calls[j]
        if j % 4 == 1:
            calls[j, rng.choice(n, size=rng.integers(1, 4), replace=False)] = 3
    calls[5, :] = 0
    calls[5, [3, 40]] = 3  # only missing calls besides hom REF
    text = np.array(["0/0", "0/1", "1/1", "./."])[calls]
    rows = [
        f"{1 + (j >= m // 2)} {100 * (j + 1)} v{j} A G . . . GT " + " ".join(g)
        for j, g in enumerate(text)
    ]
    samples = tuple(f"s{i}" for i in range(n))
    vcf = write_vcf(folder / "r.vcf", rows, samples=samples)
    for make in ("--make-pgen", "--make-bed"):
        subprocess.run(
            ["plink2", "--vcf", str(vcf), make, "--out", str(folder / "r")],
            check=True,
            capture_output=True,
        )
    return calls, samples


def _stored_sparse(pgen: Path, allele: int) -> list[bool]:
    import pgenlib

    reader = pgenlib.PgenReader(bytes(pgen))
    try:
        return [reader.has_sparse(j, allele) for j in range(reader.get_variant_ct())]
    finally:
        reader.close()


@needs_plink2
@pytest.mark.parametrize("batch", [1 << 20, 5])
def test_pgen_sparse_records_dot_equals_dense_reference(tmp_path, monkeypatch, batch):
    """Rare variants that plink2 stores as carrier lists are scored from those lists."""
    from rvfedprs.genotypes import kernels
    from rvfedprs.genotypes.chunk import GenotypeSource

    monkeypatch.setattr(kernels, "SPARSE_BATCH", batch)  # 5: a sum every few variants
    calls, samples = _rare_and_common_cohort(tmp_path)
    m = len(calls)
    stored_sparse = _stored_sparse(tmp_path / "r.pgen", 1)
    assert 0 < sum(stored_sparse) < m  # both the carrier lists and the decoded blocks are used
    source = open_genotypes(tmp_path / "r.pgen")
    x = np.where(calls == 3, np.nan, calls).T
    rng = np.random.default_rng(12)
    index = np.flatnonzero(np.arange(m) % 7 != 6)
    coef = rng.normal(size=len(index))
    fill = rng.uniform(0, 2, size=len(index))
    subset = list(rng.permutation(samples)[:211])
    for chosen, rows_ in ((None, slice(None)), (subset, [int(s[1:]) for s in subset])):
        for value in (None, fill):
            for weights in (coef, np.column_stack([coef, np.sin(coef)])):
                sums, missing = source.dosage_dot(index, weights, value, chosen, chunk_size=16)
                dense, missing_dense = GenotypeSource.dosage_dot(
                    source, index, weights, value, chosen, chunk_size=16
                )
                expected = _naive_dot(x[rows_][:, index], weights, value)
                np.testing.assert_allclose(sums, expected, rtol=1e-12, atol=1e-12)
                np.testing.assert_allclose(dense, expected, rtol=1e-12, atol=1e-12)
                assert np.array_equal(missing, np.isnan(x[rows_][:, index]).sum(axis=0))
                assert np.array_equal(missing, missing_dense) and missing.sum() > 0


def _carriers_dense(source, index, count_ref, samples, n_rows: int) -> np.ndarray:
    """``iter_carriers`` laid out densely (0 where no entry), each entry checked to be new."""
    out = np.zeros((n_rows, len(index)), dtype=np.float32)
    seen = np.zeros(out.shape, dtype=bool)
    for variant, sample, dosage in source.iter_carriers(index, count_ref, 7, samples):
        assert dosage.dtype == np.float32 and not (dosage == 0).any()
        assert not seen[sample, variant].any()
        seen[sample, variant] = True
        out[sample, variant] = dosage
    return out


@needs_plink2
@pytest.mark.parametrize("batch", [1 << 20, 5])
def test_carriers_of_pgen_bed_vcf_and_per_chromosome_files_equal_dense_reference(
    tmp_path, monkeypatch, batch
):
    """Carrier lists (.pgen), int8 codes (.bed) and float chunks (VCF) give the same entries."""
    from rvfedprs.genotypes import kernels

    monkeypatch.setattr(kernels, "SPARSE_BATCH", batch)
    calls, samples = _rare_and_common_cohort(tmp_path)
    m = len(calls)
    for chrom in ("1", "2"):
        subprocess.run(
            ["plink2", "--pfile", str(tmp_path / "r"), "--chr", chrom, "--make-pgen", "--out",
             str(tmp_path / f"c{chrom}")],
            check=True,
            capture_output=True,
        )  # fmt: skip
    assert any(_stored_sparse(tmp_path / "r.pgen", 0))  # REF counted from a list too
    assert any(_stored_sparse(tmp_path / "r.pgen", 1))
    sources = {
        "pgen": open_genotypes(tmp_path / "r.pgen"),
        "bed": open_genotypes(tmp_path / "r"),
        "vcf": open_genotypes(tmp_path / "r.vcf"),
        "per chromosome": open_genotypes([tmp_path / "c1.pgen", tmp_path / "c2.pgen"]),
    }
    x = np.where(calls == 3, np.nan, calls).T.astype(np.float32)
    rng = np.random.default_rng(13)
    index = np.flatnonzero(np.arange(m) % 6 != 4)
    count_ref = rng.random(len(index)) < 0.4
    count_ref[np.flatnonzero(np.arange(m)[index] % 5 == 2)] = True  # REF-minor variants
    subset = list(rng.permutation(samples)[:180])
    for chosen, rows_ in ((None, slice(None)), (subset, [int(s[1:]) for s in subset])):
        chosen_x = x[rows_][:, index]
        want = np.where(count_ref, 2 - chosen_x, chosen_x)
        for name, source in sources.items():
            got = _carriers_dense(source, index, count_ref, chosen, len(chosen_x))
            np.testing.assert_array_equal(got, want, err_msg=name)
        coef = rng.normal(size=len(index))
        multi, missing = sources["per chromosome"].dosage_dot(index, coef, None, chosen, 5)
        np.testing.assert_allclose(multi, _naive_dot(chosen_x, coef), rtol=1e-12, atol=1e-12)
        assert np.array_equal(missing, np.isnan(chosen_x).sum(axis=0))
    with pytest.raises(ValueError, match="count_ref must have"):
        next(sources["pgen"].iter_carriers(index, count_ref[:-1]))


def test_nonzero_cells_equals_numpy():
    from rvfedprs.genotypes.kernels import nonzero_cells

    rng = np.random.default_rng(14)
    for shape in [(0, 5), (3, 0), (1, 1), (7, 13), (100, 37), (64, 8), (5, 1001)]:
        block = np.where(rng.random(shape) < 0.02, rng.choice([1, 2, -9], size=shape), 0)
        block = np.ascontiguousarray(block.astype(np.int8))
        rows, cols = nonzero_cells(block)
        want_rows, want_cols = np.nonzero(block)
        assert np.array_equal(rows, want_rows) and np.array_equal(cols, want_cols), shape


def test_hardcall_counts_equal_rounding_in_either_layout():
    from rvfedprs.genotypes.chunk import hardcall_counts

    values = np.array([0, 0.49999, 0.5, 0.5000001, 1, 1.4999, 1.5, 1.7, 2, np.nan], np.float32)
    dosages = np.random.default_rng(3).choice(values, size=(401, 37))
    dosages[:, 4] = np.nan  # a variant with no call
    calls = np.rint(dosages)  # the oracle: plink2's hard calls are the rounded dosages
    missing = np.isnan(calls).sum(axis=0)
    n1, n2 = (calls == 1).sum(axis=0), (calls == 2).sum(axis=0)
    want = np.stack([len(dosages) - missing - n1 - n2, n1, n2, missing], axis=1)
    want_sum = np.nansum(dosages, axis=0, dtype=np.float64)
    for block, variant_major in ((dosages, False), (np.ascontiguousarray(dosages.T), True)):
        counts, alt_sum = hardcall_counts(block, variant_major=variant_major)
        np.testing.assert_array_equal(counts, want)
        np.testing.assert_array_equal(alt_sum, want_sum)


def _carrier_triplets(parts) -> np.ndarray:
    """The (variant, sample, dosage) triplets of ``iter_carriers`` as rows, sorted."""
    parts = list(parts)
    if not parts:
        return np.empty((0, 3))
    variant, sample, dosage = (np.concatenate(column) for column in zip(*parts, strict=True))
    order = np.lexsort((sample, variant))
    return np.column_stack([variant[order], sample[order], dosage[order]])


class _OneChunkReader:
    """Genotypes held variant-major in memory by a reader that implements only reading a chunk.

    Everything else (chunks, selections, PRS sums, counts, missingness) is the base class's
    chunk loop (``GenotypeSource._blocks``). Records every ``read`` and how many files are open.
    """

    def __new__(cls, dosages: np.ndarray):
        from contextlib import contextmanager

        from rvfedprs.genotypes.chunk import GenotypeSource, make_variant_table, sample_index

        class Reader(GenotypeSource):
            @contextmanager
            def _chunk_reader(self, samples, dtype, chunk_size):
                rows = sample_index(self.samples, samples, self.path)
                self.open += 1
                try:

                    def read(positions, out):
                        self.reads.append((positions.copy(), out.dtype))
                        out[:] = self.by_variant[positions][:, rows]

                    yield read
                finally:
                    self.open -= 1

        reader = Reader()
        n_samples, n_variants = dosages.shape
        reader.path, reader.samples = "memory", np.array([f"s{i}" for i in range(n_samples)])
        reader.variants = make_variant_table(
            ["1"] * n_variants, np.arange(1, n_variants + 1) * 10,
            [f"v{j}" for j in range(n_variants)], ["A"] * n_variants, ["G"] * n_variants,
        )  # fmt: skip
        reader.by_variant = np.ascontiguousarray(dosages.T)
        reader.reads, reader.open = [], 0
        return reader


def test_a_reader_that_reads_one_chunk_gets_every_operation_from_the_base_chunk_loop():
    from rvfedprs.genotypes.chunk import hardcall_counts

    rng = np.random.default_rng(11)
    x = rng.choice([0.0, 1.0, 2.0, np.nan], p=[0.6, 0.25, 0.1, 0.05], size=(9, 23))
    x = x.astype(np.float32)
    source = _OneChunkReader(x)
    index = np.array([0, 3, 4, 5, 11, 12, 20, 22])
    coef = np.linspace(-1.0, 1.0, len(index))
    for samples, rows in ((None, np.arange(9)), (["s8", "s0", "s4"], [8, 0, 4]), ([], [])):
        want = x[rows]
        chunks = list(source.iter_chunks(7, samples=samples))
        assert [len(c.variants) for c in chunks] == [7, 7, 7, 2]
        assert all(c.dosages.dtype == np.float32 and c.dosages.flags.f_contiguous for c in chunks)
        assert np.array_equal(np.hstack([c.dosages for c in chunks]), want, equal_nan=True)
        assert list(chunks[0].samples) == list(source.samples[rows])
        source.reads.clear()
        picked = list(source.iter_selected(index, 3, samples, np.float64))
        assert np.array_equal(np.hstack([c.dosages for c in picked]), want[:, index], True)
        assert [list(p) for p, _ in source.reads] == [[0, 3, 4], [5, 11, 12], [20, 22]]
        assert {dtype for _, dtype in source.reads} == {np.dtype(np.float64)}  # only the picked
        if len(rows):
            sums, n_missing = source.dosage_dot(index, coef, samples=samples, chunk_size=3)
            assert np.allclose(sums, _naive_dot(want[:, index], coef), rtol=1e-12)
            assert np.array_equal(n_missing, np.isnan(want[:, index]).sum(axis=0))
        counts = np.vstack([c for _, _, c in source.iter_counts(5, samples=samples)])
        assert np.array_equal(counts, hardcall_counts(want)[0])
        missing, n_variants = source.sample_missing(samples=samples, chunk_size=4)
        assert n_variants == 23 and np.array_equal(missing, np.isnan(want).sum(axis=1))
    chunks = source.iter_chunks(7)
    next(chunks)
    assert source.open == 1
    chunks.close()  # a caller that stops early closes the file
    assert source.open == 0


@pytest.mark.slow
@needs_cineca
def test_bed_engines_give_bit_identical_selections_sums_counts_and_carriers():
    """pandas-plink decodes the chunks into pgenlib's layout; all else is the same code."""
    from rvfedprs.genotypes.plink import BedSource

    ours, theirs = BedSource(CINECA), BedSource(CINECA, engine="pandas-plink")
    rng = np.random.default_rng(4)
    index = np.sort(rng.choice(len(ours.variants), 200, replace=False))
    coef = rng.normal(size=(200, 2))
    for samples in (None, list(rng.permutation(ours.samples)[:300]), []):
        a, b = (list(s.iter_selected(index, 300, samples, np.float64)) for s in (ours, theirs))
        for x, y in zip(a, b, strict=True):
            assert np.array_equal(x.dosages, y.dosages, equal_nan=True)
            pd.testing.assert_frame_equal(x.variants, y.variants)
        for left, right in zip(
            ours.dosage_dot(index, coef, None, samples, 300),
            theirs.dosage_dot(index, coef, None, samples, 300),
            strict=True,
        ):
            assert np.array_equal(left, right)  # bit for bit, not close
        for left, right in zip(ours.sample_missing(samples, 300),
                               theirs.sample_missing(samples, 300), strict=True):  # fmt: skip
            assert np.array_equal(left, right)
        counts = [np.vstack([c for *_, c in s.iter_counts(300, samples)]) for s in (ours, theirs)]
        assert np.array_equal(*counts)
        every = np.arange(len(ours.variants))  # with the variants holding missing calls
        flip = rng.random(len(every)) < 0.5
        carriers = [_carrier_triplets(s.iter_carriers(every, flip, 300, samples))
                    for s in (ours, theirs)]  # fmt: skip
        assert np.array_equal(*carriers, equal_nan=True)
        assert samples == [] or np.isnan(carriers[0][:, 2]).any()
