"""The one registry of genotype formats: suffixes, the files behind a path, and its users."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from rvfedprs.exceptions import GenotypeFormatError
from rvfedprs.genotypes.formats import GENOTYPE_FORMATS, genotype_files, genotype_format

ROOT = Path(__file__).resolve().parents[1]


def touch(*paths: Path) -> None:
    for path in paths:
        path.write_text("x\n")


def test_every_suffix_names_its_format(tmp_path):
    for fmt in GENOTYPE_FORMATS.values():
        for suffix in fmt.suffixes:
            assert genotype_format(f"cohort/chr22{suffix}") == fmt.name
    assert genotype_format("x.vcf.bgz") == "vcf"  # the suffix the Snakemake helper once lacked
    touch(tmp_path / "p.pgen", tmp_path / "b.bgen")
    assert genotype_format(tmp_path / "p") == "pfile"
    assert genotype_format(tmp_path / "b") == "bgen"
    with pytest.raises(GenotypeFormatError, match=r"cannot tell the genotype format of .*\.txt'"):
        genotype_format(tmp_path / "geno.txt")


def test_files_behind_a_path(tmp_path):
    p = str(tmp_path / "c")
    assert genotype_files(p) == [f"{p}.bed", f"{p}.bim", f"{p}.fam"]  # before they exist
    assert genotype_files(f"{p}.vcf.bgz") == [f"{p}.vcf.bgz"]
    touch(Path(f"{p}.pgen"), Path(f"{p}.pvar.zst"), Path(f"{p}.psam"))
    assert genotype_files(f"{p}.pgen") == [f"{p}.pgen", f"{p}.pvar.zst", f"{p}.psam"]
    assert genotype_files(f"{p}.pgen", text_only=True) == [f"{p}.psam"]
    touch(Path(f"{p}.bgen"), Path(f"{p}.sample"))
    assert genotype_files(f"{p}.bgen") == [f"{p}.bgen", f"{p}.sample"]
    touch(Path(f"{p}.bgen.bgi"))
    assert genotype_files(f"{p}.bgen") == [f"{p}.bgen", f"{p}.sample", f"{p}.bgen.bgi"]


def test_snakemake_and_schema_derive_from_the_registry():
    common = (ROOT / "snakemake" / "common.smk").read_text()
    assert "from rvfedprs.genotypes.formats import genotype_files" in common
    # no suffix list of its own (the only suffix named is the .pgen import_genotypes writes)
    assert not re.search(r"\.(vcf|bcf|bed|bim|fam|pvar|psam|bgen|sample)\b", common)


# --- a format a researcher adds: one reader, one registration ------------------------------------
_VCF = """##fileformat=VCFv4.2
##contig=<ID=22>
##FORMAT=<ID=GT,Number=1,Type=String,Description="Genotype">
#CHROM\tPOS\tID\tREF\tALT\tQUAL\tFILTER\tINFO\tFORMAT\ts1\ts2\ts3
22\t100\trs1\tA\tG\t.\tPASS\t.\tGT\t0/1\t1/1\t0/0
22\t200\trs2\tC\tT\t.\tPASS\t.\tGT\t0/0\t./.\t0/1
"""


def test_a_format_added_with_one_registration_opens_by_its_suffix(tmp_path):
    import numpy as np

    from rvfedprs.genotypes import open_genotypes
    from rvfedprs.genotypes.formats import GenotypeFormat, register_genotype_format

    (tmp_path / "g.vcf").write_text(_VCF)
    (tmp_path / "g.gtx").write_text(_VCF)  # the same calls under a suffix no format reads
    with pytest.raises(GenotypeFormatError, match="cannot tell the genotype format"):
        open_genotypes(tmp_path / "g.gtx")
    added = GenotypeFormat(
        "gtx",
        (".gtx",),
        reader="rvfedprs.genotypes.vcf:VcfSource",
        reader_options=("field", "multiallelic", "half_call"),
        prefix=False,
    )
    register_genotype_format(added)
    try:
        assert genotype_format(tmp_path / "g.gtx") == "gtx"
        assert genotype_files(tmp_path / "g.gtx") == [str(tmp_path / "g.gtx")]
        (mine,) = open_genotypes(tmp_path / "g.gtx").iter_chunks()
        (vcf,) = open_genotypes(tmp_path / "g.vcf").iter_chunks()
        np.testing.assert_array_equal(mine.dosages, vcf.dosages)
        assert list(mine.samples) == ["s1", "s2", "s3"]
        with pytest.raises(GenotypeFormatError, match="'gtx' is already registered"):
            register_genotype_format(added)
    finally:
        del GENOTYPE_FORMATS["gtx"]
    clash = GenotypeFormat("mine", (".bed",), reader="x:Y")
    with pytest.raises(GenotypeFormatError, match=r"\['\.bed'\] already read as \['bfile'\]"):
        register_genotype_format(clash)
    with pytest.raises(GenotypeFormatError, match="must look like 'module:Class'"):
        register_genotype_format(GenotypeFormat("mine", (".mine",)))
    assert "mine" not in GENOTYPE_FORMATS
