"""Whole-column allele text equals the per-cell conversion (Python's own str methods the oracle)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from rvfedprs.genotypes.alleles import complement, spelled_with, upper

CASES = {
    "snvs": ["A", "c", "G", "t", "N"],
    "indels-and-symbolic": ["ACGTTA", "", "<DEL>", "*", "aCgT", "."],
    "non-ascii": ["ß", "é", "A"],
    "separator-inside": ["A\x00C", "g"],
    "empty": [],
}


@pytest.mark.parametrize("cells", list(CASES.values()), ids=list(CASES))
def test_equals_each_cell_converted_on_its_own(cells):
    assert upper(cells).tolist() == [c.upper() for c in cells]
    table = str.maketrans("ACGT", "TGCA")
    assert complement(cells).tolist() == [c.translate(table) for c in cells]
    assert upper(np.array(cells, dtype=object)).dtype == object


def test_missing_cells_are_kept():
    out = upper(["a", None, np.nan, "c"])
    assert out[0] == "A" and out[1] is None and np.isnan(out[2]) and out[3] == "C"


def test_spelled_with_equals_a_full_regex_match_per_cell():
    rng = np.random.default_rng(1)
    pieces = [*"ACGTNacgt*-", "\x00", ""]
    for _ in range(2000):
        cells = ["".join(rng.choice(pieces, rng.integers(0, 4))) for _ in range(rng.integers(0, 6))]
        for letters in ("ACGTN", "ACGT"):
            oracle = [re.fullmatch(f"[{letters}]+", c) is not None for c in cells]
            assert spelled_with(cells, letters).tolist() == oracle, (cells, letters)
    assert spelled_with(["A", None, np.nan], "ACGT").tolist() == [True, False, False]
