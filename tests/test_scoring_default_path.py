"""Issue 31 item 6: ``prepare score`` reads a VCF through a cached ``.pgen`` copy by default.

The default path must give the direct reader's sums (and plink2's), reuse its copy on a second
run, make a new one when the input changes, and fall back to the direct reader, saying so on
stderr, when plink2 is not on the PATH. A BGEN is read directly unless ``--via-pgen``.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.cli import main
from rvfedprs.genotypes.scoring import write_plink2_scorefile

needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")

N_SAMPLES, N_VARIANTS = 60, 50  # plink2 imputes from 50 samples or more


def write_vcf(path: Path, *, named: bool = True) -> Path:
    """Hard calls (some missing, some haploid) of :data:`N_VARIANTS` SNPs on chromosome 1.

    ``named=False``: every ID is ``.``, as many imputation servers write them.
    """
    rng = np.random.default_rng(7)
    samples = "\t".join(f"s{i}" for i in range(N_SAMPLES))
    lines = [
        "##fileformat=VCFv4.2",
        "##contig=<ID=1>",
        '##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">',
        f"#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t{samples}",
    ]
    for j in range(N_VARIANTS):
        calls = [f"{a}/{b}" for a, b in rng.integers(0, 2, size=(N_SAMPLES, 2))]
        calls[j % N_SAMPLES] = "./." if j % 3 else "1"  # a missing call or a haploid one
        name = f"rs{j}" if named else "."
        lines.append(f"1\t{1000 + 10 * j}\t{name}\tA\tG\t.\tPASS\t.\tGT\t" + "\t".join(calls))
    path.write_text("\n".join(lines) + "\n")
    return path


def write_scorefile(path: Path, rows: list[str]) -> Path:
    """A GRCh37 PGS Catalog scoring file of ``rows`` (chrom, position, alleles, weight)."""
    head = (
        "#genome_build=GRCh37\nchr_name\tchr_position\teffect_allele\tother_allele\teffect_weight"
    )
    path.write_text(head + "\n" + "\n".join(rows) + "\n")
    return path


def write_weights(path: Path) -> Path:
    """A scoring file over every variant, effect allele G or A."""
    rng = np.random.default_rng(8)
    rows = [
        f"1\t{1000 + 10 * j}\t{'G' if j % 4 else 'A'}\t{'A' if j % 4 else 'G'}\t{w:.4f}"
        for j, w in enumerate(rng.normal(size=N_VARIANTS))
    ]
    return write_scorefile(path, rows)


@pytest.fixture
def inputs(tmp_path) -> tuple[Path, Path]:
    return write_vcf(tmp_path / "geno.vcf"), write_weights(tmp_path / "w.txt")


def prepare_score(genotypes: Path, weights: Path, out: Path, *extra: str) -> pd.DataFrame:
    """Run ``prepare score`` in this process; return the sums table."""
    argv = ["prepare", "score", "--genotypes", str(genotypes), "--scorefile", str(weights)]
    assert main([*argv, "--out", str(out), *extra]) == 0
    return pd.read_csv(out, sep="\t")


def plink2_sums(genotypes: list[str], match_log: Path, tmp_path: Path) -> np.ndarray:
    """``plink2 GENOTYPES --score`` with the matched rows of a match log: SCORE1_SUM."""
    scorefile = write_plink2_scorefile(pd.read_csv(match_log, sep="\t"), tmp_path / "p2.txt")
    out = tmp_path / "p2"
    subprocess.run(
        ["plink2", *genotypes, "--score", str(scorefile), "1", "2", "3", "header",
         "cols=+scoresums", "--out", str(out)],
        check=True, capture_output=True,
    )  # fmt: skip
    return pd.read_csv(f"{out}.sscore", sep="\t")["SCORE1_SUM"].to_numpy()


def copies(cache: Path) -> list[Path]:
    return sorted(cache.glob("*.pgen"))


@needs_plink2
def test_default_path_equals_the_direct_reader_and_plink2_and_reuses_its_copy(
    inputs, tmp_path, caplog
):
    caplog.set_level(logging.INFO, logger="rvfedprs.genotypes.convert")
    vcf, weights = inputs
    cache = tmp_path / "cache"
    default = prepare_score(vcf, weights, tmp_path / "a.tsv", "--pgen-cache", str(cache))
    direct = prepare_score(vcf, weights, tmp_path / "d.tsv", "--direct")
    assert len(copies(cache)) == 1 and "converting" in caplog.text
    assert default["sample_id"].tolist() == direct["sample_id"].tolist()
    assert (default["n_matched"] == N_VARIANTS).all()
    np.testing.assert_allclose(default["SUM"], direct["SUM"], rtol=1e-12, atol=1e-12)
    theirs = plink2_sums(["--vcf", str(vcf)], tmp_path / "a.match.tsv", tmp_path)
    np.testing.assert_allclose(default["SUM"], theirs, rtol=1e-5, atol=1e-5)  # 6 digits printed

    (pgen,) = copies(cache)
    stamp = pgen.stat().st_mtime_ns
    caplog.clear()
    again = prepare_score(vcf, weights, tmp_path / "b.tsv", "--pgen-cache", str(cache))
    assert f"reusing the .pgen copy of {vcf}" in caplog.text and "converting" not in caplog.text
    assert copies(cache) == [pgen] and pgen.stat().st_mtime_ns == stamp
    assert again.equals(default)

    os.utime(vcf, ns=(stamp + 10**9, stamp + 10**9))  # the input changed: a new copy replaces it
    prepare_score(vcf, weights, tmp_path / "c.tsv", "--pgen-cache", str(cache))
    assert len(copies(cache)) == 1 and copies(cache) != [pgen]
    assert sorted(p.suffix for p in cache.iterdir()) == [".pgen", ".psam", ".pvar"]


@needs_plink2
def test_bgen_is_read_directly_by_default_and_converted_on_request(inputs, tmp_path):
    vcf, weights = inputs
    bgen = tmp_path / "geno"
    subprocess.run(
        ["plink2", "--vcf", str(vcf), "--export", "bgen-1.2", "bits=8", "ref-first",
         "--out", str(bgen)],
        check=True, capture_output=True,
    )  # fmt: skip
    cache = tmp_path / "cache"
    path = bgen.with_suffix(".bgen")
    default = prepare_score(path, weights, tmp_path / "a.tsv", "--pgen-cache", str(cache))
    assert not cache.exists()
    direct = prepare_score(path, weights, tmp_path / "d.tsv", "--direct")
    assert default.equals(direct)
    converted = prepare_score(
        path, weights, tmp_path / "v.tsv", "--via-pgen", "--pgen-cache", str(cache)
    )
    assert len(copies(cache)) == 1
    np.testing.assert_allclose(converted["SUM"], default["SUM"], rtol=1e-12, atol=1e-12)
    from_vcf = prepare_score(vcf, weights, tmp_path / "vcf.tsv", "--pgen-cache", str(cache))
    np.testing.assert_allclose(default["SUM"], from_vcf["SUM"], rtol=1e-12, atol=1e-12)
    genotypes = ["--bgen", str(path), "ref-first", "--sample", str(bgen.with_suffix(".sample"))]
    theirs = plink2_sums(genotypes, tmp_path / "a.match.tsv", tmp_path)
    np.testing.assert_allclose(default["SUM"], theirs, rtol=1e-5, atol=1e-5)


def test_without_plink2_the_direct_reader_is_used_with_a_note(inputs, tmp_path):
    vcf, weights = inputs
    path = os.pathsep.join(
        d for d in os.environ.get("PATH", "").split(os.pathsep)
        if d and not (Path(d) / "plink2").exists()
    )  # fmt: skip
    env = {**os.environ, "PATH": path}

    def run(out: Path, *extra: str) -> subprocess.CompletedProcess:
        command = [sys.executable, "-m", "rvfedprs", "prepare", "score", "--genotypes", str(vcf),
                   "--scorefile", str(weights), "--out", str(out), "--pgen-cache",
                   str(tmp_path / "cache"), *extra]  # fmt: skip
        return subprocess.run(command, capture_output=True, text=True, env=env)

    done = run(tmp_path / "a.tsv")
    assert done.returncode == 0, done.stderr
    assert f"plink2 is not on the PATH, so {vcf} is read directly" in done.stderr
    assert "--direct" in done.stderr and not (tmp_path / "cache").exists()
    done = run(tmp_path / "d.tsv", "--direct")
    assert done.returncode == 0 and "plink2" not in done.stderr
    assert (tmp_path / "a.tsv").read_text() == (tmp_path / "d.tsv").read_text()
    done = run(tmp_path / "v.tsv", "--via-pgen")
    assert done.returncode == 2 and "plink2 is not installed" in done.stderr
    assert "Traceback" not in done.stderr


def test_direct_and_via_pgen_exclude_each_other(inputs, tmp_path, capsys):
    vcf, weights = inputs
    with pytest.raises(SystemExit):
        prepare_score(vcf, weights, tmp_path / "x.tsv", "--direct", "--via-pgen")
    assert "not allowed with argument" in capsys.readouterr().err
