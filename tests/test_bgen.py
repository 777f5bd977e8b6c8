"""BGEN input (v1.2/1.3, 8/16-bit, phased/unphased, .sample): plink2 as the oracle."""

from __future__ import annotations

import shutil
import subprocess
import sys
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


def write_bgen(path: Path, probabilities, **kwargs) -> Path:
    """A small BGEN from genotype probabilities (n_variants, n_samples, k) via bgen's writer.

    ``probabilities`` may be a list of (n_samples, k_j) arrays; ``ploidy`` one for all (an int,
    or an array over samples) or a list with one per variant.
    """
    phased = kwargs.pop("phased", False)
    bits = kwargs.pop("bit_depth", 16)
    ploidy = kwargs.pop("ploidy", 2)
    chrom = kwargs.pop("chrom", "1")
    n_samples = len(probabilities[0])
    samples = kwargs.pop("samples", [f"s{i}" for i in range(n_samples)])
    with bgen.BgenWriter(str(path), n_samples, samples=samples, **kwargs) as out:
        for j, probs in enumerate(probabilities):
            out.add_variant(
                f"v{j}", f"rs{j}", chrom, 100 * (j + 1), ["A", "G"], probs,
                ploidy=ploidy[j] if isinstance(ploidy, list) else ploidy,
                phased=phased, bit_depth=bits,
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
    triploid = np.tile([[0.1, 0.2, 0.3, 0.4]], (2, 4, 1))
    first = write_bgen(tmp_path / "tri.bgen", triploid, ploidy=np.array([3, 2, 2, 2]))
    with pytest.raises(GenotypeFormatError, match=r"tri.bgen: the first variant has .*ploidy 3"):
        open_genotypes(first)
    later = write_bgen(  # a later variant's triploid sample: found when its block is decoded
        tmp_path / "tri2.bgen", [np.tile([0.2, 0.5, 0.3], (4, 1)), triploid[0]],
        ploidy=[2, np.array([2, 2, 2, 3])],
    )  # fmt: skip
    with pytest.raises(GenotypeFormatError, match=r"tri2.bgen: variant 1:200 rs1 has .*ploidy 3"):
        allele_counts(open_genotypes(later))
    with pytest.raises(GenotypeFormatError, match=r"ref_allele='middle' unknown"):
        open_genotypes(v11, bgen_ref_allele="middle")


def write_haploid_x_vcf(folder: Path, n_males: int = 60, n_females: int = 50) -> Path:
    """A VCF of 3 autosomal and 8 chrX (non-PAR, GRCh37) variants, with ``sex.tsv`` beside it.

    Males' chrX calls are haploid (``0``, ``1``, ``.``), females' diploid; about 10% of every
    variant's calls are missing, so that plink2's imputation of them is tested too. plink2
    imputes from frequencies only with 50 samples or more, hence the sizes.
    """
    rng = np.random.default_rng(31)
    samples = [f"m{i}" for i in range(n_males)] + [f"f{i}" for i in range(n_females)]
    male = np.array([s.startswith("m") for s in samples])
    lines = [
        "##fileformat=VCFv4.2",
        "##contig=<ID=1,length=249250621>",
        "##contig=<ID=X,length=155270560>",
        '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t" + "\t".join(samples),
    ]
    sites = [("1", 1000 + 100 * j, False) for j in range(3)]
    sites += [("X", 5_000_000 + 100 * j, True) for j in range(8)]
    for chrom, pos, is_x in sites:
        p = rng.uniform(0.05, 0.6)
        calls = []
        for is_male in male:
            a, b = (int(x) for x in rng.random(2) < p)
            missing = rng.random() < 0.1
            if is_x and is_male:
                calls.append("." if missing else str(a))
            else:
                calls.append("./." if missing else f"{a}/{b}")
        lines.append(f"{chrom}\t{pos}\t{chrom}_{pos}\tA\tG\t.\tPASS\t.\tGT\t" + "\t".join(calls))
    vcf = folder / "hapx.vcf"
    vcf.write_text("\n".join(lines) + "\n")
    sexes = "".join(f"{s}\t{1 if m else 2}\n" for s, m in zip(samples, male, strict=True))
    (folder / "sex.tsv").write_text("#IID\tSEX\n" + sexes)
    return vcf


@pytest.fixture(scope="module")
def haploid_x(tmp_path_factory):
    """The VCF, and plink2's BGEN v1.2 and v1.3 exports of it (males' chrX of ploidy 1)."""
    if shutil.which("plink2") is None:
        pytest.skip("plink2 not installed")
    out = tmp_path_factory.mktemp("hapx")
    vcf = write_haploid_x_vcf(out)
    for version in ("bgen-1.2", "bgen-1.3"):
        plink2("--vcf", str(vcf), "--update-sex", str(out / "sex.tsv"),
               "--export", version, "ref-first", "--out", str(out / version))  # fmt: skip
    return out


def _haploid_scorefile(folder: Path) -> Path:
    """Every variant, effect allele G (ALT) on even rows and A (REF) on odd ones."""
    rows = ["rsID\tchr_name\tchr_position\teffect_allele\tother_allele\teffect_weight"]
    lines = (folder / "hapx.vcf").read_text().splitlines()
    for k, line in enumerate(line for line in lines if not line.startswith("#")):
        chrom, pos, vid = line.split("\t")[:3]
        effect, other = ("G", "A") if k % 2 == 0 else ("A", "G")
        rows.append(f"{vid}\t{chrom}\t{pos}\t{effect}\t{other}\t{0.1 * (k + 1) - 0.45:.2f}")
    path = folder / "hapx_weights.txt"
    path.write_text("#genome_build=GRCh37\n" + "\n".join(rows) + "\n")
    return path


@needs_plink2
@pytest.mark.parametrize("version", ["bgen-1.2", "bgen-1.3"])
def test_haploid_male_chrx_scores_and_counts_equal_plink2(haploid_x, version, tmp_path):
    """Issue 31: plink2's BGEN of a VCF with haploid male chrX calls, scored and counted.

    plink2 reads a haploid call as homozygous (dosage 2 × P(ALT)) and imputes a missing one as
    2·p, p counting a haploid call as one allele; the PRS (through the CLI) equals ``plink2
    --score`` on the BGEN with its ``.sample`` (which holds the sexes), and plink2 on the BGEN
    equals plink2 on the VCF. The counts equal ``plink2 --geno-counts`` with the haploid
    columns folded into the homozygous ones, and ``plink2 --freq counts`` where it counts a
    haploid call as homozygous too (the sexes left out).
    """
    path = haploid_x / version
    source = open_genotypes(f"{path}.bgen")
    dosages = next(source.iter_chunks(100)).dosages
    x = (source.variants["chrom"] == "X").to_numpy()
    male = np.char.startswith(source.samples.astype(str), "m")
    assert set(np.unique(dosages[np.ix_(male, x)][~np.isnan(dosages[np.ix_(male, x)])])) == {
        0.0,
        2.0,
    }
    weights = _haploid_scorefile(haploid_x)
    out = tmp_path / "prs.tsv"
    done = subprocess.run(
        [sys.executable, "-m", "rvfedprs", "prepare", "score", "--genotypes", f"{path}.bgen",
         "--scorefile", str(weights), "--out", str(out)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    ours = pd.read_csv(out, sep="\t")
    log = pd.read_csv(out.with_name("prs.match.tsv"), sep="\t")
    assert (log["status"] == "matched").all() and len(log) == 11
    plink_weights = write_plink2_scorefile(log, tmp_path / "w.txt")
    for name, genotypes in [
        ("bgen", ["--bgen", f"{path}.bgen", "ref-first", "--sample", f"{path}.sample"]),
        ("vcf", ["--vcf", str(haploid_x / "hapx.vcf"), "--update-sex", str(haploid_x / "sex.tsv")]),
    ]:
        plink2(*genotypes, "--score", str(plink_weights), "1", "2", "3", "header",
               "cols=+scoresums", "--out", str(tmp_path / name))  # fmt: skip
    theirs = pd.read_csv(tmp_path / "bgen.sscore", sep="\t")
    via_vcf = pd.read_csv(tmp_path / "vcf.sscore", sep="\t")
    assert theirs["#IID"].tolist() == ours["sample_id"].tolist()
    assert np.array_equal(theirs["SCORE1_SUM"], via_vcf["SCORE1_SUM"])
    delta = np.abs(ours["SUM"] - theirs["SCORE1_SUM"])
    assert delta.max() < 1e-5 * np.maximum(1, np.abs(theirs["SCORE1_SUM"])).max()  # print digits
    # the counts: plink2 with the sexes (haploid columns) and without (haploid as homozygous)
    plink2("--bgen", f"{path}.bgen", "ref-first", "--sample", f"{path}.sample",
           "--geno-counts", "--out", str(tmp_path / "g"))  # fmt: skip
    genos = pd.read_csv(tmp_path / "g.gcount", sep="\t")
    assert (genos.loc[x, "HAP_REF_CT"] + genos.loc[x, "HAP_ALT_CTS"]).min() > 40
    expected = np.stack(
        [
            genos["HOM_REF_CT"] + genos["HAP_REF_CT"],
            genos["HET_REF_ALT_CTS"],
            genos["TWO_ALT_GENO_CTS"] + genos["HAP_ALT_CTS"],
            genos["MISSING_CT"],
        ],
        axis=1,
    )
    counted = np.vstack([c for _, _, c in source.iter_counts(chunk_size=4)])
    assert np.array_equal(counted, expected)
    sample = (haploid_x / f"{version}.sample").read_text().splitlines()
    no_sex = [sample[0], sample[1]] + [" ".join(r.split()[:3] + ["NA"]) for r in sample[2:]]
    (tmp_path / "nosex.sample").write_text("\n".join(no_sex) + "\n")
    plink2("--bgen", f"{path}.bgen", "ref-first", "--sample", str(tmp_path / "nosex.sample"),
           "--freq", "counts", "--out", str(tmp_path / "f"))  # fmt: skip
    acount = pd.read_csv(tmp_path / "f.acount", sep="\t")
    counts = allele_counts(source, chunk_size=3)
    assert np.array_equal(counts["alt_count"], acount["ALT_CTS"])
    assert np.array_equal(counts["allele_number"], acount["OBS_CT"])


@needs_plink2
def test_haploid_probabilities_read_as_plink2_imports_them(tmp_path):
    """Dosages (not hard calls) of haploid samples, phased and not, mixed with diploid ones."""
    rng = np.random.default_rng(5)
    n = 8
    ploidy = np.array([1, 1, 1, 1, 2, 2, 2, 2])
    probs = []
    for phased in (False, True):
        for _ in range(3):
            hap = rng.dirichlet([1, 1], size=n)
            if phased:
                second = rng.dirichlet([1, 1], size=n)
                p = np.hstack([hap, np.where(ploidy[:, None] == 2, second, np.nan)])
            else:
                dip = rng.dirichlet([1, 1, 1], size=n)
                p = np.where(ploidy[:, None] == 1, np.hstack([hap, np.full((n, 1), np.nan)]), dip)
            p[rng.integers(n)] = np.nan  # one missing call
            probs.append(p)
    paths = []
    for phased in (False, True):
        part = probs[:3] if not phased else probs[3:]
        path = write_bgen(
            tmp_path / f"mix{int(phased)}.bgen", part, ploidy=ploidy, phased=phased, chrom="X"
        )
        paths.append(path)
        ours = next(open_genotypes(path).iter_chunks(10)).dosages
        plink2("--bgen", str(path), "ref-first", "--make-pgen", "--out", str(tmp_path / "p"))
        theirs = next(open_genotypes(tmp_path / "p.pgen").iter_chunks(10)).dosages
        assert np.isnan(ours).sum() == 3 and np.array_equal(np.isnan(ours), np.isnan(theirs))
        assert np.allclose(ours, theirs, atol=1 / 16384 + 2 / 65535, equal_nan=True)
        assert np.nanmax(ours[ploidy == 1]) > 1  # read as homozygous: 2 × P(ALT)
        last = next(open_genotypes(path, bgen_ref_allele="last").iter_chunks(10)).dosages
        assert np.allclose(last, 2.0 - ours, equal_nan=True)
    # a missing dosage of a variant with haploid calls: 2·p, a haploid call one allele
    source = open_genotypes(paths[0])
    x = next(source.iter_chunks(10)).dosages.astype(np.float64)
    sums, n_missing = source.dosage_dot(np.arange(3), np.eye(3))
    assert n_missing.tolist() == [1, 1, 1]
    called = ~np.isnan(x)
    weight = np.where(ploidy == 1, 0.5, 1.0)[:, None] * called
    fill = (weight * np.nan_to_num(x)).sum(axis=0) / weight.sum(axis=0)
    assert np.allclose(sums, np.where(called, x, fill[None, :]))
