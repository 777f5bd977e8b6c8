"""PGS Catalog files as shipped: harmonised columns, unplaceable and complex rows, the writer."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.matching import match_scorefile
from rvfedprs.genotypes.scorefile import read_scorefile, scorefile_rows, write_scorefile

PGS = Path(__file__).resolve().parents[1] / ".." / "shared" / "data" / "pgs_catalog_scorefiles"

HM_COLUMNS = (
    "rsID chr_name chr_position effect_allele other_allele effect_weight is_haplotype "
    "hm_source hm_rsID hm_chr hm_pos hm_inferOtherAllele"
)
HM_ROWS = [
    "rs1 22 100 A G 0.5 FALSE ENSEMBL rs1 22 1100 .",  # placed on the target build
    "rs2 22 200 C . 0.25 FALSE ENSEMBL rs2 22 1200 T",  # other allele inferred by the Catalog
    "rs3 22 300 A C 1.0 FALSE ENSEMBL rs3 22_KI270879v1_alt 5000 .",  # alt contig
    "rs4 22 400 G A 1.0 FALSE Unknown rs4 . . .",  # not placed on the target build
    "rs5 6 500 HLA-DQA1*0102 . 2.0 FALSE Author-reported . . . .",  # an HLA allele
    "rs6 22 600 A G;T 1.0 TRUE ENSEMBL rs6 22 1600 .",  # a haplotype
    "rs7 22 700 G T -1.0 FALSE ENSEMBL rs7 22 1700 .",  # not in the genotypes
    "rs8 22 800 A T 1.0 FALSE ENSEMBL rs8 22 1800 .",  # strand-ambiguous
]
VARIANTS = pd.DataFrame(
    {
        "chrom": ["22"] * 5,
        "pos": [1100, 1200, 1600, 1800, 400],
        "id": ["rs1", "rs2", "rs6", "rs8", "rs4"],
        "ref": ["G", "C", "A", "A", "G"],
        "alt": ["A", "T", "G", "T", "A"],
    }
)


def write_text(path: Path, header: str, columns: str, rows: list[str]) -> Path:
    cells = [["" if c == "." else c for c in r.split(" ")] for r in rows]  # "." = a blank cell
    body = "\n".join("\t".join(c) for c in cells)
    text = header + columns.replace(" ", "\t") + "\n" + body + "\n"
    if path.suffix == ".gz":
        path.write_bytes(gzip.compress(text.encode()))
    else:
        path.write_text(text)
    return path


@pytest.fixture
def harmonised(tmp_path):
    header = "#pgs_id=PGS999999\n#genome_build=GRCh37\n#HmPOS_build=GRCh38\n"
    return write_text(tmp_path / "PGS999999_hmPOS_GRCh38.txt.gz", header, HM_COLUMNS, HM_ROWS)


def test_harmonised_rows_without_position_or_off_primary_contigs_get_their_own_status(harmonised):
    sf = read_scorefile(harmonised)
    assert sf.harmonised and sf.genome_build == "GRCh38" and sf.scores == ["PGS999999"]
    assert sf.table["pre_status"].tolist() == [
        "", "", "non_primary_contig", "no_position", "complex", "complex", "", ""
    ]  # fmt: skip
    assert sf.table["pos"].iloc[0] == 1100 and sf.table["other_allele"].iloc[1] == "T"
    log = match_scorefile(VARIANTS, sf)
    assert log["status"].tolist() == [
        "matched", "matched", "non_primary_contig", "no_position", "complex", "complex",
        "not_found", "ambiguous_dropped",
    ]  # fmt: skip
    assert log["match_status"].tolist() == [
        "matched", "matched", "unmatched", "unmatched", "excluded", "excluded", "unmatched",
        "excluded",
    ]  # fmt: skip
    assert log["match_type"].tolist()[:2] == ["altref", "refalt"]
    assert log["variant_index"].tolist()[:2] == [0, 1] and log["accession"].eq("PGS999999").all()
    # rs4 sits at position 400 in the genotypes: an unplaced harmonised row is never matched
    # by its rsID or its author-reported position
    assert log["variant_key"].iloc[3] == ""
    kept = match_scorefile(VARIANTS, sf, keep_ambiguous=True)
    assert kept["status"].iloc[7] == "matched" and kept["match_type"].iloc[7] == "refalt"
    assert kept["ambiguous"].tolist() == [False] * 7 + [True]


def test_author_reported_positions_and_rsid_only_rows(tmp_path):
    path = write_text(
        tmp_path / "custom.txt",
        "#genome_build=GRCh37\n",
        "rsID chr_name chr_position effect_allele other_allele effect_weight",
        ["rs1 22 1100 A G 0.5", "rs2 . . C T 0.2", ". . . A G 1.0", "rs9 HSCHR6_MHC 1 A G 1.0"],
    )
    sf = read_scorefile(path)
    assert sf.table["pre_status"].tolist() == ["", "", "no_position", "non_primary_contig"]
    log = match_scorefile(VARIANTS, sf)
    assert log["status"].tolist() == ["matched", "matched", "no_position", "non_primary_contig"]


def test_only_complex_rows_is_an_error_naming_the_file(tmp_path):
    path = write_text(
        tmp_path / "hla.txt",
        "",
        "rsID chr_name chr_position effect_allele effect_weight is_diplotype",
        ["rs1 6 1 HLA-B*5701 1.0 FALSE", "rs2 6 2 A 1.0 TRUE"],
    )
    with pytest.raises(InputDataError, match=r"hla.txt: none of its 2 rows can be scored"):
        read_scorefile(path)


def test_dominant_and_recessive_together_is_an_error(tmp_path):
    path = write_text(
        tmp_path / "dr.txt",
        "",
        "chr_name chr_position effect_allele effect_weight is_dominant is_recessive",
        ["22 1 A 1.0 TRUE TRUE"],
    )
    with pytest.raises(InputDataError, match=r"row 1 has is_dominant and is_recessive"):
        read_scorefile(path)


def test_writer_round_trips_and_is_reproducible(harmonised, tmp_path):
    sf = read_scorefile(harmonised)
    rows = scorefile_rows(sf, [0, 1, 6])
    header = {"pgs_id": "X", "genome_build": "GRCh38"}
    first = write_scorefile(tmp_path / "a.txt.gz", rows, header=header)
    second = write_scorefile(tmp_path / "b.txt.gz", rows, header=header)
    assert first.read_bytes() == second.read_bytes()  # gzip mtime fixed
    back = read_scorefile(first)
    assert back.header["pgs_id"] == "X" and back.genome_build == "GRCh38"
    assert back.table["pos"].tolist() == [1100, 1200, 1700]
    assert np.array_equal(back.weights[:, 0], [0.5, 0.25, -1.0])
    text = gzip.decompress(first.read_bytes()).decode().splitlines()
    assert text[1] == "#format_version=2.0"
    assert text[5] == "rsID\tchr_name\tchr_position\teffect_allele\tother_allele\teffect_weight"


@pytest.mark.skipif(not (PGS / "PGS000001_hmPOS_GRCh38.txt.gz").is_file(), reason="no PGS files")
def test_real_harmonised_catalog_files():
    for name in ("PGS000001", "PGS000002"):
        for build in ("GRCh37", "GRCh38"):
            sf = read_scorefile(PGS / f"{name}_hmPOS_{build}.txt.gz")
            assert sf.harmonised and sf.genome_build == build
            assert sf.table["pos"].notna().sum() > 70
            assert set(sf.table["pre_status"]) <= {"", "no_position", "non_primary_contig"}


def test_padded_fields_crlf_lines_and_short_rows_read_as_trimmed_values(tmp_path):
    """Spaces around a field, Windows line ends and a row short of its last fields are read
    as the trimmed values and blanks (the same file written cleanly is the oracle)."""
    columns = "rsID\tchr_name\tchr_position\teffect_allele\tother_allele\teffect_weight\tnote"
    clean = ["rs1\t22\t100\tA\tG\t0.5\tx", "rs2\t22\t200\tC\tT\t0.25\t", "rs3\t22\t300\tG\tA\t1\t"]
    messy = [
        " rs1 \t22\t 100\tA \tg\t0.5\u00a0\tx",  # padded fields, a no-break space
        "rs2\t22\t200\tC\tT\t0.25\t",
        "rs3\t22\t300\tG\tA\t1",  # short of its last field
    ]
    (tmp_path / "clean.txt").write_text(columns + "\n" + "\n".join(clean) + "\n")
    (tmp_path / "messy.txt").write_text(columns + "\r\n" + "\r\n".join(messy) + "\r\n")
    ours, oracle = read_scorefile(tmp_path / "messy.txt"), read_scorefile(tmp_path / "clean.txt")
    pd.testing.assert_frame_equal(ours.table, oracle.table)
    np.testing.assert_array_equal(ours.weights, oracle.weights)
