"""A VCF input is converted once to .pgen (plink2) and every later step reads the copy."""

import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes import open_genotypes
from rvfedprs.genotypes.convert import to_pgen

ROOT = Path(__file__).resolve().parents[2]
needs_plink2 = pytest.mark.skipif(shutil.which("plink2") is None, reason="plink2 not installed")


@needs_plink2
def test_converted_pgen_reads_like_the_vcf(tiny_cohort, tmp_path):
    vcf = open_genotypes(tiny_cohort["vcf"])
    pgen = open_genotypes(to_pgen(tiny_cohort["vcf"], tmp_path / "c"))
    assert np.array_equal(pgen.samples, vcf.samples)
    a = next(vcf.iter_chunks(10_000))
    b = next(pgen.iter_chunks(10_000))
    pd.testing.assert_frame_equal(a.variants, b.variants)
    assert np.array_equal(a.dosages, b.dosages, equal_nan=True) and np.isnan(a.dosages).any()


@needs_plink2
def test_phase_is_erased_so_rare_records_are_carrier_lists(tmp_path):
    """A phased VCF's copy holds unphased hard calls, with its rare variant as a carrier list."""
    import pgenlib

    header = (
        "##fileformat=VCFv4.2\n##contig=<ID=1>\n"
        '##FORMAT=<ID=GT,Number=1,Type=String,Description="GT">\n'
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\t"
        + "\t".join(f"s{i}" for i in range(64))
        + "\n"
    )
    common = ["0|1", "1|0", "1|1", "0|0"] * 16
    rare = ["0|0"] * 63 + ["1|0"]
    rows = [f"1\t{10 * (j + 1)}\tv{j}\tA\tG\t.\t.\t.\tGT\t" + "\t".join(g) + "\n"
            for j, g in enumerate([common, rare])]  # fmt: skip
    (tmp_path / "p.vcf").write_text(header + "".join(rows))
    pgen = to_pgen(tmp_path / "p.vcf", tmp_path / "p")
    reader = pgenlib.PgenReader(bytes(pgen))
    try:
        assert not reader.hardcall_phase_present()
        assert [reader.has_sparse(j) for j in range(2)] == [False, True]
    finally:
        reader.close()
    direct = next(open_genotypes(tmp_path / "p.vcf").iter_chunks()).dosages
    assert np.array_equal(next(open_genotypes(pgen).iter_chunks()).dosages, direct)


@needs_plink2
def test_ds_dosages_keep_plink2_precision_and_bad_input_is_named(tmp_path):
    header = (
        "##fileformat=VCFv4.2\n##contig=<ID=1>\n"
        '##FORMAT=<ID=GT,Number=1,Type=String,Description="GT">\n'
        '##FORMAT=<ID=DS,Number=1,Type=Float,Description="DS">\n'
        "#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ta\tb\tc\n"
    )
    rows = "1\t10\tv1\tA\tG\t.\t.\t.\tGT:DS\t0/0:0.123\t0/1:1.5\t1/1:1.999\n"
    (tmp_path / "d.vcf").write_text(header + rows)
    direct = next(open_genotypes(tmp_path / "d.vcf").iter_chunks()).dosages
    copy = next(open_genotypes(to_pgen(tmp_path / "d.vcf", tmp_path / "d")).iter_chunks()).dosages
    assert np.allclose(copy, direct, atol=1 / 16384) and not np.array_equal(copy, direct)
    (tmp_path / "dup.vcf").write_text(header.replace("\tb\tc", "\ta\tc") + rows)
    with pytest.raises(GenotypeFormatError, match=r"duplicate sample IDs in .*dup.vcf: a"):
        to_pgen(tmp_path / "dup.vcf", tmp_path / "dup")
    with pytest.raises(GenotypeFormatError, match=r"is a bfile file; only \['vcf', 'bgen'\]"):
        to_pgen(tmp_path / "x.bed", tmp_path / "x")


@needs_plink2
@pytest.mark.slow
def test_workflow_on_vcf_converts_once_and_equals_the_bed_run(tiny_cohort, tmp_path):
    """Preparation from the VCF (converted) and from the bed give the same client files."""
    outputs = {}
    for name, genotypes in (("vcf", tiny_cohort["vcf"]), ("bed", tiny_cohort["bed"])):
        work = tmp_path / name
        work.mkdir()
        config = {
            "pipeline": {
                "cohort": {
                    "simulate": False,
                    "genotypes": [str(genotypes)],
                    "samples": str(tiny_cohort["samples"]),
                    "phenotypes": str(tiny_cohort["phenotypes"]),
                    "scoring_file": str(tiny_cohort["scoring_file"]),
                },
                "min_samples_per_client": 20,
            }
        }
        (work / "c.yaml").write_text(yaml.safe_dump(config))
        done = subprocess.run(
            [sys.executable, "-m", "snakemake", "results/clients.tsv", "--snakefile",
             str(ROOT / "Snakefile"), "--cores", "2", "--directory", str(work), "--configfile",
             str(work / "c.yaml"), "-q"],
            capture_output=True, text=True, timeout=600,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
        outputs[name] = work / "results"
    assert (outputs["vcf"] / "prepare" / "genotypes" / "0.pgen").is_file()
    assert not (outputs["bed"] / "prepare" / "genotypes").exists()
    for client in pd.read_csv(outputs["bed"] / "clients.tsv", sep="\t")["client"]:
        a = pd.read_parquet(outputs["vcf"] / "clients" / client / "samples.parquet")
        b = pd.read_parquet(outputs["bed"] / "clients" / client / "samples.parquet")
        pd.testing.assert_frame_equal(a, b)
