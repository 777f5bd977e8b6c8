"""Issue 31 item 5: bad scoring inputs stop ``prepare score`` with a named error (exit 2).

Each case runs the real command line in a subprocess and checks the exit status, a message
naming the problem and the file or value, no traceback, and no output file left behind. The
multi-allelic case reads a real 1000 Genomes excerpt (skipped when ../shared/data is absent).
"""

from __future__ import annotations

import gzip
import logging
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.readers import skipped_variants
from rvfedprs.genotypes.scorefile import read_scorefile
from rvfedprs.genotypes.scoring import score
from rvfedprs.genotypes.vcf import build_from_contigs

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
KG21 = DATA / "1kg_chr21_start_plinkng"
COLUMNS = "rsID\tchr_name\tchr_position\teffect_allele\tother_allele\teffect_weight"
N_VARIANTS = 40


def prepare_score(*args: str | Path) -> subprocess.CompletedProcess:
    """``python -m rvfedprs prepare score ARGS`` as a user runs it."""
    command = [sys.executable, "-m", "rvfedprs", "prepare", "score", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True)


def assert_refused(done: subprocess.CompletedProcess, out: Path, *patterns: str) -> None:
    """Exit 2, every pattern in stderr, no traceback, and nothing written beside ``out``."""
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    for pattern in patterns:
        assert re.search(pattern, done.stderr), (pattern, done.stderr)
    assert not out.parent.exists() or not list(out.parent.iterdir())


def write_vcf(path: Path, *, contig_lengths: bool = True) -> Path:
    """Five samples, :data:`N_VARIANTS` biallelic SNPs on chromosome 1 (GRCh37 lengths)."""
    rng = np.random.default_rng(3)
    length = ",length=249250621" if contig_lengths else ""
    lines = [
        "##fileformat=VCFv4.2",
        f"##contig=<ID=1{length}>",
        '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts1\ts2\ts3\ts4\ts5",
    ]
    for j in range(N_VARIANTS):
        calls = "\t".join(f"{a}/{b}" for a, b in rng.integers(0, 2, size=(5, 2)))
        lines.append(f"1\t{1000 + 10 * j}\trs{j}\tA\tG\t.\tPASS\t.\tGT\t{calls}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_scores(path: Path, positions, *, build: str = "GRCh37") -> Path:
    """A scoring file with one row per position (effect G, other A)."""
    rows = [f"r{k}\t1\t{pos}\tG\tA\t0.{k + 1}" for k, pos in enumerate(positions)]
    path.write_text(f"#pgs_id=PGS_TEST\n#genome_build={build}\n{COLUMNS}\n" + "\n".join(rows))
    return path


@pytest.fixture(autouse=True)
def pgen_cache(tmp_path, monkeypatch) -> Path:
    """The .pgen copies of the VCFs (made by default) go under tmp_path, not ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg_cache"))
    return tmp_path / "xdg_cache"


@pytest.fixture
def vcf(tmp_path) -> Path:
    return write_vcf(tmp_path / "geno.vcf")


def test_header_only_scoring_file_is_named(vcf, tmp_path):
    for name, opener in (("empty.txt", open), ("empty.txt.gz", gzip.open)):
        empty = tmp_path / name
        with opener(empty, "wt") as handle:
            handle.write("###PGS CATALOG SCORING FILE\n#genome_build=GRCh37\n" + COLUMNS + "\n")
        out = tmp_path / "out" / "prs.tsv"
        done = prepare_score("--genotypes", vcf, "--scorefile", empty, "--out", out)
        assert_refused(done, out, rf"{name}: the scoring file has no variant rows")
    with pytest.raises(InputDataError, match=r"empty.txt.gz: the scoring file has no variant"):
        read_scorefile(tmp_path / "empty.txt.gz")


def test_a_score_column_blank_on_every_row_is_named(tmp_path):
    path = tmp_path / "two.txt"
    path.write_text(
        "rsID\tchr_name\tchr_position\teffect_allele\teffect_weight_a\teffect_weight_b\n"
        "r1\t1\t1000\tG\t0.1\t\nr2\t1\t1010\tG\t0.2\t\n"
    )
    with pytest.raises(InputDataError, match=r"two.txt: effect_weight_b is blank on every row"):
        read_scorefile(path)


def test_wrong_build_with_the_overlap_check_off_is_refused(vcf, tmp_path):
    """Nothing matches a GRCh38 file on GRCh37 genotypes: refused even at min_overlap 0."""
    lifted = write_scores(tmp_path / "wrong38.txt", [1003 + 10 * j for j in range(120)],
                          build="GRCh38")  # fmt: skip
    out = tmp_path / "out" / "prs.tsv"
    done = prepare_score(
        "--genotypes", vcf, "--scorefile", lifted, "--min-overlap", "0", "--out", out
    )
    assert_refused(
        done,
        out,
        r"none of the 120 rows of score PGS_TEST \(.*wrong38.txt\) matches the genotypes",
        r"its PRS would be 0 for every sample, so none is written",
        r"wrong38.txt declares genome_build=GRCh38, but the genotypes are GRCh37",
    )
    with pytest.raises(InputDataError, match=r"none of the 120 rows of score PGS_TEST"):
        score(open_genotypes(vcf), lifted, min_overlap=0.0)


def test_a_handful_of_chance_matches_on_another_build_is_refused_or_warned(vcf, tmp_path):
    """1 of 150 rows (0.67%) match: refused when the builds are known to differ, else warned."""
    positions = [1000] + [1003 + 10 * j for j in range(149)]  # one lands on a real variant
    lifted = write_scores(tmp_path / "chance38.txt", positions, build="GRCh38")
    out = tmp_path / "out" / "prs.tsv"
    done = prepare_score(
        "--genotypes", vcf, "--scorefile", lifted, "--min-overlap", "0", "--out", out
    )
    assert_refused(
        done,
        out,
        r"only 1 of 150 rows of score PGS_TEST \(.*chance38.txt\) \(0.67%\) match",
        r"declares genome_build=GRCh38, but the genotypes are GRCh37",
    )
    unknown = write_vcf(tmp_path / "nolength.vcf", contig_lengths=False)  # build unknown
    done = prepare_score(
        "--genotypes", unknown, "--scorefile", lifted, "--min-overlap", "0", "--out", out
    )
    assert done.returncode == 0, done.stderr
    assert "WARNING" in done.stderr and "only 1 of 150 rows of score PGS_TEST" in done.stderr
    assert "min_overlap=0 lets it through" in done.stderr
    assert "declares genome_build=GRCh38 and the genotypes' build is unknown" in done.stderr
    log = pd.read_csv(out.with_name("prs.match.tsv"), sep="\t")
    assert log["status"].value_counts().to_dict() == {"not_found": 149, "matched": 1}


def test_contig_lengths_tell_the_build():
    assert build_from_contigs({"chr1": 249250621, "chrX": 155270560, "chrUn_x": 5}) == "GRCh37"
    assert build_from_contigs({"1": 248956422, "22": 50818468}) == "GRCh38"
    assert build_from_contigs({"1": 248956422, "22": 51304566}) is None  # mixed
    assert build_from_contigs({"22": 51174940}) is None  # a synthetic reference
    assert build_from_contigs({}) is None


@pytest.fixture(scope="module")
def kg21_vcf(tmp_path_factory) -> Path:
    """The 1000 Genomes chr21 excerpt (485 records, 3 multi-allelic) as a VCF, by plink2."""
    if not (KG21 / "chr21_phase3_start.pgen").is_file():
        pytest.skip("1000 Genomes excerpt (../shared/data/1kg_chr21_start_plinkng) absent")
    if shutil.which("plink2") is None:
        pytest.skip("plink2 not installed")
    out = tmp_path_factory.mktemp("kg21") / "kg21"
    subprocess.run(
        ["plink2", "--pfile", str(KG21 / "chr21_phase3_start"), "vzs",
         "--export", "vcf", "bgz", "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    return out.with_suffix(".vcf.gz")


def test_readme_snippet_reads_a_real_vcf_with_multiallelic_sites(kg21_vcf, caplog):
    """The README's open_genotypes loop: multi-allelic records skipped, logged and listed."""
    caplog.set_level(logging.WARNING)
    source = open_genotypes(kg21_vcf)  # as in the README
    n = 0
    for chunk in source.iter_chunks(chunk_size=4096):
        chunk.variants, chunk.dosages, chunk.samples  # noqa: B018 (the README's line)
        n += chunk.dosages.shape[1]
    assert n == 482 and len(source.samples) == 2504
    skipped = skipped_variants(source)
    assert skipped["pos"].tolist() == [9415721, 9417961, 9418260]
    assert skipped.iloc[0].tolist() == ["21", 9415721, "rs569225703", "T", "A,C", "multiallelic"]
    said = "excluded 3 multi-allelic record(s), first 21:9415721 rs569225703 T>A,C"
    assert caplog.text.count(said) == 1 and "multi-allelic record 21:9417961" not in caplog.text
    pgen = open_genotypes(KG21 / "chr21_phase3_start.pgen")  # the same policy for a .pgen
    assert len(pgen.variants) == 482 and len(skipped_variants(pgen)) == 3


def test_prepare_score_on_a_real_vcf_with_multiallelic_sites(kg21_vcf, tmp_path):
    """Excluded by default (listed in FILE.excluded.tsv), or a named error on request."""
    variants = next(open_genotypes(kg21_vcf).iter_chunks(4096)).variants.iloc[:30]
    rows = [f"{v.id}\t21\t{v.pos}\t{v.alt}\t{v.ref}\t0.01" for v in variants.itertuples()]
    rows.append("rs569225703\t21\t9415721\tA\tT\t0.5")  # at the first multi-allelic site
    weights = tmp_path / "w.txt"
    weights.write_text("#genome_build=GRCh37\n" + COLUMNS + "\n" + "\n".join(rows) + "\n")
    out = tmp_path / "out" / "prs.tsv"
    done = prepare_score("--genotypes", kg21_vcf, "--scorefile", weights, "--out", out)
    assert done.returncode == 0, done.stderr
    excluded = pd.read_csv(out.with_name("prs.excluded.tsv"), sep="\t")
    assert excluded["id"].tolist() == ["rs569225703", "rs66525445", "rs1850106"]
    log = pd.read_csv(out.with_name("prs.match.tsv"), sep="\t")
    assert log.set_index("rsid").loc["rs569225703", "status"] == "not_found"
    assert len(pd.read_csv(out, sep="\t")) == 2504
    refused = tmp_path / "refused" / "prs.tsv"
    done = prepare_score(
        "--genotypes", kg21_vcf, "--scorefile", weights, "--on-multiallelic", "error",
        "--out", refused,
    )  # fmt: skip
    # read through its .pgen copy (the default): the message names the VCF, not the copy
    assert_refused(
        done, refused, rf"{kg21_vcf}: multi-allelic (record|variant) 21:9415721 rs569225703 T>A,C"
    )
