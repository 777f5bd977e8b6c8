"""Burden masks from an annotation file (rvfedprs/burden.py, ``burden.annotations``).

Oracle: the burden matrix built with numpy from the variants' positions, MAFs and the mask
values written into the file (only true variants, per the unannotated rule), checked against
``burden_from_config``, the function every caller (train, the GLMs, burden networks, the
workflow, a study's coordinator) builds its map with.
"""

from __future__ import annotations

import gzip
import logging

import numpy as np
import pandas as pd
import pytest

from rvfedprs.burden import burden_from_config, burden_map, read_regions
from rvfedprs.config import validate_config
from rvfedprs.exceptions import ConfigError, InputDataError

WINDOW, MAX_MAF = 10_000, 0.02
POS = np.array([100, 2_500, 9_000, 12_000, 15_000, 18_000, 30_000, 31_000, 4_000])
CHROM = ["1"] * 8 + ["2"]
MAF = np.array([1e-3, 5e-3, 0.03, 2e-3, 1e-4, 8e-3, 4e-3, 6e-3, 1e-2])
LOF = {0: 1, 1: 0, 2: 1, 3: 1, 4: 1, 5: 0, 6: 1, 8: 1}  # variant 7 is unannotated


def _variants() -> pd.DataFrame:
    keys = [f"{c}:{p}:A:G" for c, p in zip(CHROM, POS, strict=True)]
    return pd.DataFrame({"variant_key": keys, "chrom": CHROM, "pos": POS, "maf": MAF})


def _section(**burden) -> dict:
    base = {"window_bp": WINDOW, "max_maf": MAX_MAF, "mask_column": "lof"}
    return validate_config({"burden": {**base, **burden}})["burden"]


def _write(path, rows: list[str], header: str = "variant_key\tconsequence\tlof") -> str:
    text = "\n".join([header, *rows]) + "\n"
    if path.name.endswith(".gz"):
        with gzip.open(path, "wt") as handle:
            handle.write(text)
    else:
        path.write_text(text)
    return str(path)


def _annotation_rows(values=None) -> list[str]:
    values = LOF if values is None else values
    # VEP-style: a chr prefix and several transcripts of one variant (same mask value)
    rows = [f"chr{CHROM[j]}:{POS[j]}:A:G\tmissense\t{'true' if v else 'FALSE'}"
            for j, v in values.items()]  # fmt: skip
    return rows + [rows[0]]


def _oracle(enter: np.ndarray) -> np.ndarray:
    """B: Beta(1, 25) weights of the entering variants in their non-empty 10 kb windows."""
    cells = sorted({(CHROM[j], (POS[j] - 1) // WINDOW) for j in np.flatnonzero(enter)})
    matrix = np.zeros((len(POS), len(cells)))
    for j in np.flatnonzero(enter):
        matrix[j, cells.index((CHROM[j], (POS[j] - 1) // WINDOW))] = 25 * (1 - MAF[j]) ** 24
    return matrix


def _enter(unannotated: bool) -> np.ndarray:
    masked = np.array([LOF.get(j, 1 if unannotated else 0) == 1 for j in range(len(POS))])
    return masked & (MAF <= MAX_MAF)


def test_only_the_masked_variants_enter_and_the_unannotated_are_left_out(tmp_path, caplog):
    path = _write(tmp_path / "vep.tsv.gz", _annotation_rows())
    with caplog.at_level(logging.WARNING, logger="rvfedprs.burden"):
        found = burden_from_config(_variants(), _section(annotations=path))
    np.testing.assert_allclose(found.matrix.toarray(), _oracle(_enter(False)), rtol=1e-12)
    assert found.unannotated == ["1:31000:A:G"]
    reasons = dict(zip(found.excluded["variant_key"], found.excluded["reason"], strict=True))
    assert reasons == {"1:2500:A:G": "lof false", "1:9000:A:G": f"maf above {MAX_MAF}",
                       "1:18000:A:G": "lof false", "1:31000:A:G": "unannotated"}  # fmt: skip
    assert "1 of 9 variants have no 'lof' value (e.g. 1:31000:A:G): left out" in caplog.text


def test_include_keeps_the_unannotated_and_counts_them(tmp_path, caplog):
    path = _write(tmp_path / "vep.tsv", _annotation_rows())
    with caplog.at_level(logging.WARNING, logger="rvfedprs.burden"):
        found = burden_from_config(_variants(), _section(annotations=path, unannotated="include"))
    np.testing.assert_allclose(found.matrix.toarray(), _oracle(_enter(True)), rtol=1e-12)
    assert found.unannotated == ["1:31000:A:G"]
    assert "1:31000:A:G" not in set(found.excluded["variant_key"])
    assert "1 of 9 variants have no 'lof' value (e.g. 1:31000:A:G): kept" in caplog.text


def test_separate_allele_columns_and_the_variant_table_column_give_the_same_map(tmp_path):
    rows = [f"{CHROM[j]}\t{POS[j]}\tA\tG\t{v}" for j, v in LOF.items()]
    path = _write(tmp_path / "annovar.tsv", rows, header="chrom\tpos\tref\talt\tlof")
    by_alleles = burden_from_config(_variants(), _section(annotations=path))
    # backward compatible: the mask column in the variant table itself, 7 empty
    table = _variants().assign(lof=[LOF.get(j, "") for j in range(len(POS))])
    by_table = burden_from_config(table, _section())
    for found in (by_alleles, by_table):
        np.testing.assert_allclose(found.matrix.toarray(), _oracle(_enter(False)), rtol=1e-12)
        assert found.unannotated == ["1:31000:A:G"]


def test_bad_annotations_are_named(tmp_path):
    conflict = _annotation_rows() + ["1:100:A:G\tstop_gained\t0"]
    path = _write(tmp_path / "conflict.tsv", conflict)
    with pytest.raises(InputDataError, match=r"conflict.tsv lists 1:100:A:G more than once with "
                       r"different 'lof' values \['true', 'true', '0'\]"):  # fmt: skip
        burden_from_config(_variants(), _section(annotations=path))
    path = _write(tmp_path / "bad.tsv", _annotation_rows() + ["1:5:A:G\tmissense\tlikely"])
    with pytest.raises(InputDataError, match=r"bad.tsv: column 'lof' holds 'likely' on data "
                       r"row 10; a mask value must be 0/1 or true/false"):  # fmt: skip
        burden_from_config(_variants(), _section(annotations=path))
    path = _write(tmp_path / "vep.tsv", _annotation_rows())
    with pytest.raises(InputDataError, match=r"vep.tsv lacks the mask column 'plof' \(has "):
        burden_from_config(_variants(), _section(annotations=path, mask_column="plof"))
    with pytest.raises(ConfigError, match="burden.annotations .*vep.tsv' is given without"):
        burden_from_config(_variants(), _section(annotations=path, mask_column=None))
    path = _write(tmp_path / "nokey.tsv", ["1\tA\t1"], header="chrom\tref\tlof")
    with pytest.raises(InputDataError, match="nokey.tsv needs a variant_key column or chrom"):
        burden_from_config(_variants(), _section(annotations=path))
    with pytest.raises(InputDataError, match="annotation file .*absent.tsv does not exist"):
        burden_from_config(_variants(), _section(annotations=str(tmp_path / "absent.tsv")))
    # the variant table's own mask column is held to the same values
    table = _variants().assign(lof=["yes"] * len(POS))
    regions = read_regions(
        _write(tmp_path / "g.tsv", ["1\t1\t40000\tG"], "chrom\tstart\tend\tgene")
    )
    with pytest.raises(InputDataError, match="the rare-variant table: column 'lof' holds 'yes'"):
        burden_map(table, regions, mask_column="lof")
