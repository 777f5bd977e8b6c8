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
