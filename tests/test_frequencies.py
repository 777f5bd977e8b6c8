"""Allele counts and frequencies: plink2 --freq oracle, federated sum = pooled, rare split."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.frequencies import (
    allele_counts,
    allele_frequencies,
    combine_allele_counts,
    read_frequency_file,
    split_common_rare,
)

DATA = Path(__file__).resolve().parents[1] / ".." / "shared" / "data"
CINECA = DATA / "cineca_synthetic" / "cineca_synthetic_subset"
needs_cineca = pytest.mark.skipif(
    not CINECA.with_suffix(".pgen").is_file(), reason="no CINECA data"
)
needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")


@needs_cineca
@needs_plink2
def test_counts_match_plink2_freq_and_federated_sum_equals_pooled(tmp_path):
    subprocess.run(
        [
            "plink2",
            "--pfile",
            str(CINECA),
            "--freq",
            "--set-all-var-ids",
            "@:#:$r:$a",
            "--out",
            str(tmp_path / "f"),
        ],
        check=True,
        capture_output=True,
    )
    afreq = pd.read_csv(tmp_path / "f.afreq", sep="\t")
    source = open_genotypes(CINECA.with_suffix(".pgen"))
    pooled = allele_frequencies(allele_counts(source, chunk_size=100))
    assert pooled["variant_key"].tolist() == afreq["ID"].tolist()
    assert np.array_equal(pooled["allele_number"], afreq["OBS_CT"])
    assert np.allclose(pooled["alt_freq"], afreq["ALT_FREQS"], rtol=1e-5)

    samples = source.samples
    parts = [allele_counts(source, samples=samples[i::3], chunk_size=300) for i in range(3)]
    combined = allele_frequencies(combine_allele_counts(parts))
    assert np.array_equal(combined["allele_number"], pooled["allele_number"])
    assert np.allclose(combined["alt_count"], pooled["alt_count"], rtol=0, atol=1e-9)
    assert combine_allele_counts(parts[::-1])["alt_count"].equals(
        combine_allele_counts(parts)["alt_count"]
    )

    external = read_frequency_file(tmp_path / "f.afreq")
    assert external["variant_key"].tolist() == pooled["variant_key"].tolist()
    assert np.allclose(external["maf"], pooled["maf"], rtol=1e-5)


def test_combine_rejects_different_variant_sets():
    a = pd.DataFrame(
        {
            "variant_key": ["1:1:A:G", "1:2:C:T"],
            "chrom": "1",
            "pos": [1, 2],
            "id": ".",
            "ref": ["A", "C"],
            "alt": ["G", "T"],
            "alt_count": [1.0, 2.0],
            "allele_number": [10, 10],
        }
    )
    b = a.iloc[[0]].assign(alt_count=3.0)
    with pytest.raises(InputDataError, match=r"table 1 \(1 variants\) does not match .*1:2:C:T"):
        combine_allele_counts([a, b])
    with pytest.raises(InputDataError, match="another order"):
        combine_allele_counts([a, a.iloc[::-1]])
    total = combine_allele_counts([a, a])
    assert total["alt_count"].tolist() == [2.0, 4.0] and total["allele_number"].tolist() == [20, 20]


def test_split_common_rare_labels_every_variant():
    counts = pd.DataFrame(
        {
            "variant_key": list("abcdef"),
            "ref": "A",
            "alt": "G",
            "alt_count": [0.0, 1.0, 150.0, 995.0, 999.0, 0.0],
            "allele_number": [1000, 1000, 1000, 1000, 1000, 0],
        }
    )
    freqs = allele_frequencies(counts)
    assert freqs["minor_allele"].tolist() == ["G", "G", "G", "A", "A", "G"]
    assert np.allclose(freqs["maf"].iloc[:5], [0, 0.001, 0.15, 0.005, 0.001])
    split = split_common_rare(freqs, rare_maf_max=0.01, min_minor_count=2)
    assert split["class"].tolist() == [
        "excluded",
        "excluded",
        "common",
        "rare",
        "excluded",
        "excluded",
    ]
    assert split["reason"].tolist() == [
        "monomorphic",
        "minor_count<2",
        "",
        "",
        "minor_count<2",
        "no_calls",
    ]
    with pytest.raises(InputDataError, match="rare_maf_max must lie in"):
        split_common_rare(freqs, rare_maf_max=0.6)


def test_read_frequency_file_our_layout(tmp_path):
    path = tmp_path / "freq.tsv"
    path.write_text("variant_key\talt_freq\nchr1:5:A:G\t0.9\n1:7:C:T\t0.002\n")
    table = read_frequency_file(path)
    assert table["variant_key"].tolist() == ["1:5:A:G", "1:7:C:T"]
    assert table["minor_allele"].tolist() == ["A", "T"]
    assert np.allclose(table["maf"], [0.1, 0.002])
    path.write_text("variant_key\talt_freq\n1:5:A:G\t1.3\n")
    with pytest.raises(InputDataError, match=r"alt_freq '1.3' of 1:5:A:G outside \[0, 1\]"):
        read_frequency_file(path)


@needs_cineca
@needs_plink2
def test_bed_packed_counts_match_plink2_freq_for_all_and_a_subset(tmp_path):
    fam = pd.read_csv(CINECA.with_suffix(".fam"), sep=r"\s+", header=None)
    keep = fam.iloc[np.random.default_rng(2).permutation(len(fam))[:777]]
    keep[[0, 1]].to_csv(tmp_path / "keep.txt", sep="\t", header=False, index=False)
    source = open_genotypes(CINECA)  # PLINK1 .bed, numpy engine: counts from packed bytes
    for name, extra, samples in (
        ("all", [], None),
        ("sub", ["--keep", str(tmp_path / "keep.txt")], keep[1].tolist()),
    ):
        subprocess.run(
            ["plink2", "--bfile", str(CINECA), "--freq", *extra, "--out", str(tmp_path / name)],
            check=True,
            capture_output=True,
        )
        afreq = pd.read_csv(tmp_path / f"{name}.afreq", sep="\t")
        counts = allele_counts(source, samples=samples, chunk_size=300)
        assert counts["id"].tolist() == afreq["ID"].tolist()
        assert np.array_equal(counts["allele_number"], afreq["OBS_CT"])
        assert np.allclose(
            counts["alt_count"] / counts["allele_number"], afreq["ALT_FREQS"], rtol=1e-5
        )
        assert (counts["allele_number"] < 2 * (len(samples or fam))).any()  # missing calls
