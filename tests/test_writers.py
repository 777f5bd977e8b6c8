"""Genotype writers against bcftools and plink2 as oracles."""

import gzip
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes.writers import BedWriter, PgenWriter, VcfWriter

needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in ("bcftools", "plink2", "bgzip", "tabix")),
    reason="bcftools, plink2, bgzip and tabix are needed as oracles",
)


def _random_chunks(rng, n_samples=23, n_variants=57, chunk=10):
    variants = []
    pos = np.sort(rng.choice(np.arange(1, 10_000), size=n_variants, replace=False))
    bases = np.array(list("ACGT"))
    for j, p in enumerate(pos):
        ref, alt = rng.choice(bases, size=2, replace=False)
        chrom = "21" if j < n_variants // 2 else "22"
        variants.append((chrom, int(p), f"{chrom}:{p}:{ref}:{alt}", ref, alt))
    table = pd.DataFrame(variants, columns=["chrom", "pos", "id", "ref", "alt"])
    # re-sort positions within each chromosome
    table = table.sort_values(["chrom", "pos"], kind="stable").reset_index(drop=True)
    g = rng.integers(-1, 3, size=(n_samples, n_variants)).astype(np.int8)
    chunks = [(table.iloc[s : s + chunk], g[:, s : s + chunk]) for s in range(0, n_variants, chunk)]
    return table, g, chunks


def _run(args):
    done = subprocess.run(args, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return done


@needs_tools
def test_vcf_writer_matches_bcftools_query(tmp_path):
    rng = np.random.default_rng(1)
    table, g, chunks = _random_chunks(rng)
    samples = [f"SIM{i:06d}" for i in range(1, g.shape[0] + 1)]
    path = tmp_path / "x.vcf.gz"
    with VcfWriter(path, samples) as vcf:
        for variants, genotypes in chunks:
            vcf.write(variants, genotypes)
    assert (tmp_path / "x.vcf.gz.tbi").exists()
    view = _run(["bcftools", "view", "-H", str(path)])
    assert "warn" not in view.stderr.lower()
    out = _run(["bcftools", "query", "-f", "%CHROM\t%POS\t%ID\t%REF\t%ALT[\t%GT]\n", str(path)])
    rows = [line.split("\t") for line in out.stdout.strip().split("\n")]
    assert [r[:5] for r in rows] == table.astype(str).to_numpy().tolist()
    decode = {"./.": -1, "0/0": 0, "0/1": 1, "1/1": 2}
    back = np.array([[decode[c] for c in r[5:]] for r in rows]).T
    np.testing.assert_array_equal(back, g)
    header = _run(["bcftools", "query", "-l", str(path)]).stdout.split()
    assert header == samples
    # the index works: a region query returns only chromosome 22
    region = _run(["bcftools", "view", "-H", "-r", "22", str(path)]).stdout.strip().split("\n")
    assert len(region) == (table["chrom"] == "22").sum()


@needs_tools
def test_bed_writer_matches_plink2_export(tmp_path):
    rng = np.random.default_rng(2)
    table, g, chunks = _random_chunks(rng, n_samples=22)  # not a multiple of 4: tests padding
    samples = [f"SIM{i:06d}" for i in range(1, g.shape[0] + 1)]
    prefix = tmp_path / "cohort"
    with BedWriter(prefix, samples) as bed:
        for variants, genotypes in chunks:
            bed.write(variants, genotypes)
    freq = _run(["plink2", "--bfile", str(prefix), "--freq", "--out", str(tmp_path / "f")])
    assert "warning" not in (freq.stdout + freq.stderr).lower()
    _run(["plink2", "--bfile", str(prefix), "--export", "A", "--out", str(tmp_path / "a")])
    raw = pd.read_csv(tmp_path / "a.raw", sep="\t")
    assert raw["IID"].tolist() == samples
    dosage_cols = raw.columns[6:]
    # plink2 names columns ID_COUNTEDALLELE; this plink2 counts REF (2.00a3.5) and newer ones
    # may count ALT: convert according to the allele named in the column
    counted = np.array([c.rsplit("_", 1)[1] for c in dosage_cols])
    is_alt = counted == table["alt"].to_numpy()
    assert np.all(is_alt | (counted == table["ref"].to_numpy()))
    counts = raw[dosage_cols].to_numpy(dtype=float)
    alt_counts = np.where(is_alt, counts, 2 - counts)
    back = np.where(np.isnan(alt_counts), -1, alt_counts).astype(int)
    np.testing.assert_array_equal(back, g)
    # and plink2's own view of the alleles: bim column 5 is ALT
    _run(["plink2", "--bfile", str(prefix), "--make-just-pvar", "--out", str(tmp_path / "p")])
    pvar = pd.read_csv(tmp_path / "p.pvar", sep="\t")
    assert pvar["ALT"].tolist() == table["alt"].tolist()
    assert pvar["REF"].tolist() == table["ref"].tolist()


@needs_tools
def test_vcf_and_bed_agree_through_plink2(tmp_path):
    rng = np.random.default_rng(3)
    table, g, chunks = _random_chunks(rng, n_samples=9, n_variants=30)
    samples = [f"S{i}" for i in range(9)]
    with VcfWriter(tmp_path / "v.vcf.gz", samples) as vcf, BedWriter(tmp_path / "b", samples) as b:
        for variants, genotypes in chunks:
            vcf.write(variants, genotypes)
            b.write(variants, genotypes)
    for flag, src, name in (("--vcf", "v.vcf.gz", "fv"), ("--bfile", "b", "fb")):
        done = _run(["plink2", flag, str(tmp_path / src), "--freq", "--out", str(tmp_path / name)])
        assert "warning" not in (done.stdout + done.stderr).lower()
    fv = pd.read_csv(tmp_path / "fv.afreq", sep="\t")
    fb = pd.read_csv(tmp_path / "fb.afreq", sep="\t")
    pd.testing.assert_frame_equal(fv, fb)
    observed = np.where(g >= 0, g, 0).sum(0) / (2 * (g >= 0).sum(0))
    np.testing.assert_allclose(fv["ALT_FREQS"], observed, atol=1e-6)


@needs_tools
def test_pgen_and_bed_agree_through_plink2(tmp_path):
    """The same chunks as .pgen and .bed: plink2's --freq and --export A agree, and give g."""
    rng = np.random.default_rng(4)
    table, g, chunks = _random_chunks(rng, n_samples=22, n_variants=57)
    g[:, ::3] = np.where(rng.random((22, 19)) < 0.97, 0, g[:, ::3])  # rare: carrier lists
    chunks = [(table.iloc[s : s + 10], g[:, s : s + 10]) for s in range(0, 57, 10)]
    samples = [f"SIM{i:06d}" for i in range(1, 23)]
    with (
        BedWriter(tmp_path / "b", samples) as bed,
        PgenWriter(tmp_path / "p", samples, n_variants=len(table)) as pgen,
    ):
        for variants, genotypes in chunks:
            bed.write(variants, genotypes)
            pgen.write(variants, genotypes)
    raws = {}
    for flag, name in (("--bfile", "b"), ("--pfile", "p")):
        for args in (["--freq"], ["--export", "A"]):
            done = _run(["plink2", flag, str(tmp_path / name), *args,
                         "--out", str(tmp_path / f"o{name}")])  # fmt: skip
            assert "warning" not in (done.stdout + done.stderr).lower()
        raws[name] = pd.read_csv(tmp_path / f"o{name}.raw", sep="\t")
    pd.testing.assert_frame_equal(
        pd.read_csv(tmp_path / "ob.afreq", sep="\t"), pd.read_csv(tmp_path / "op.afreq", sep="\t")
    )
    pd.testing.assert_frame_equal(raws["b"], raws["p"])
    raw = raws["p"]
    assert raw["IID"].tolist() == samples and raw["FID"].tolist() == samples
    counted = np.array([c.rsplit("_", 1)[1] for c in raw.columns[6:]])
    counts = raw[raw.columns[6:]].to_numpy(dtype=float)
    alt_counts = np.where(counted == table["alt"].to_numpy(), counts, 2 - counts)
    np.testing.assert_array_equal(np.where(np.isnan(alt_counts), -1, alt_counts).astype(int), g)
    pvar = pd.read_csv(tmp_path / "p.pvar", sep="\t")
    assert pvar["REF"].tolist() == table["ref"].tolist()
    assert pvar["ALT"].tolist() == table["alt"].tolist()


def test_pgen_writer_checks_the_declared_count_and_chunks(tmp_path):
    table = pd.DataFrame({"chrom": "1", "pos": [5, 3], "id": ["a", "b"], "ref": "A", "alt": "G"})
    g = np.zeros((2, 2), dtype=np.int8)
    with pytest.raises(GenotypeFormatError, match=r"position 1:3 is not after 1:5"):
        with PgenWriter(tmp_path / "t", ["a", "b"], n_variants=2) as pgen:
            pgen.write(table, g)
    with pytest.raises(GenotypeFormatError, match=r"1 variants written, 2 declared"):
        with PgenWriter(tmp_path / "t", ["a", "b"], n_variants=2) as pgen:
            pgen.write(table.iloc[:1], g[:, :1])
    with pytest.raises(GenotypeFormatError, match=r"2 variants written, more than the 1"):
        with PgenWriter(tmp_path / "t", ["a", "b"], n_variants=1) as pgen:
            pgen.write(table.iloc[::-1], g)
    with pytest.raises(GenotypeFormatError, match=r"t.psam: sample IDs must be non-empty"):
        PgenWriter(tmp_path / "t", ["a b"], n_variants=1)


def test_bed_bytes_match_naive_reference(tmp_path):
    g = np.array([[0, 1, 2, -1, 2], [2, 2, 0, 0, -1], [1, -1, 1, 2, 0]], dtype=np.int8).T
    table = pd.DataFrame(
        {"chrom": "1", "pos": [5, 9, 11], "id": ["a", "b", "c"], "ref": "A", "alt": "G"}
    )
    with BedWriter(tmp_path / "t", [f"s{i}" for i in range(5)]) as bed:
        bed.write(table, g)
    data = (tmp_path / "t.bed").read_bytes()
    assert data[:3] == bytes([0x6C, 0x1B, 0x01])
    code = {-1: 0b01, 0: 0b11, 1: 0b10, 2: 0b00}
    expected = []
    for j in range(3):
        calls = [code[int(x)] for x in g[:, j]] + [0] * 3
        expected += [sum(c << (2 * k) for k, c in enumerate(calls[b : b + 4])) for b in (0, 4)]
    assert list(data[3:]) == expected


def test_writers_reject_bad_chunks(tmp_path):
    table = pd.DataFrame({"chrom": "1", "pos": [5, 3], "id": ["a", "b"], "ref": "A", "alt": "G"})
    g = np.zeros((2, 2), dtype=np.int8)
    with pytest.raises(GenotypeFormatError, match=r"position 1:3 is not after 1:5"):
        with BedWriter(tmp_path / "t", ["a", "b"]) as bed:
            bed.write(table, g)
    with pytest.raises(GenotypeFormatError, match=r"shape \(2, 3\), expected \(2, 2\)"):
        with BedWriter(tmp_path / "t", ["a", "b"]) as bed:
            bed.write(table, np.zeros((2, 3), dtype=np.int8))
    with pytest.raises(GenotypeFormatError, match="genotype value 3 outside"):
        with BedWriter(tmp_path / "t", ["a", "b"]) as bed:
            bed.write(table.iloc[:1], np.full((2, 1), 3, dtype=np.int8))
    bad = table.iloc[:1].assign(alt="0")
    with pytest.raises(GenotypeFormatError, match="alt allele '0' is not A/C/G/T"):
        with VcfWriter(tmp_path / "v.vcf.gz", ["a", "b"]) as vcf:
            vcf.write(bad, np.zeros((2, 1), dtype=np.int8))
    with pytest.raises(GenotypeFormatError, match="duplicate sample IDs"):
        BedWriter(tmp_path / "t", ["a", "a"])


def test_vcf_is_bgzf(tmp_path):
    if shutil.which("bgzip") is None:
        pytest.skip("bgzip needed")
    table = pd.DataFrame({"chrom": "22", "pos": [5], "id": ["a"], "ref": "A", "alt": "G"})
    with VcfWriter(tmp_path / "v.vcf.gz", ["x"], index=False) as vcf:
        vcf.write(table, np.array([[1]], dtype=np.int8))
    raw = (tmp_path / "v.vcf.gz").read_bytes()
    assert raw[12:14] == b"BC"  # the BGZF extra field
    text = gzip.decompress(raw).decode()
    assert text.splitlines()[-1] == "22\t5\ta\tA\tG\t.\tPASS\t.\tGT\t0/1"
