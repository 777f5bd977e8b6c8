"""write_tsv writes the bytes pandas' to_csv(sep="\t", index=False) writes (pandas the oracle)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from rvfedprs.tsv import write_tsv


def _both(frame: pd.DataFrame, tmp_path, float_format=None) -> tuple[bytes, bytes]:
    ours, theirs = tmp_path / "ours.tsv", tmp_path / "pandas.tsv"
    write_tsv(frame, ours, float_format=float_format)
    frame.to_csv(theirs, sep="\t", index=False, float_format=float_format)
    return ours.read_bytes(), theirs.read_bytes()


@pytest.mark.parametrize("float_format", [None, "%.10g", "%.17g"])
def test_plain_table_equals_pandas(tmp_path, float_format):
    rng = np.random.default_rng(0)
    n = 500
    values = rng.normal(scale=10.0 ** rng.integers(-12, 12, n))
    values[::7] = np.nan
    frame = pd.DataFrame(
        {
            "sample_id": [f"S{i:05d}" for i in range(n)],
            "SUM": values,
            "n_matched": rng.integers(-5, 10**9, n),
            "flag": rng.random(n) < 0.5,
            "note": [None if i % 5 == 0 else ("" if i % 11 == 0 else "ok") for i in range(n)],
            "tiny": np.float64(1e-300) * rng.random(n),
            "u": rng.integers(0, 255, n).astype(np.uint8),
        }
    )
    ours, theirs = _both(frame, tmp_path, float_format)
    assert ours == theirs


@pytest.mark.parametrize(
    "frame",
    [
        pd.DataFrame({"a": ['say "hi"', "x"], "b": [1, 2]}),  # quoted by pandas
        pd.DataFrame({"a": ["tab\there", "x"], "b": [1, 2]}),
        pd.DataFrame(
            {
                "a": pd.array([1, None, -(2**62)], dtype="Int64"),
                "b": pd.array([None, 255, 0], dtype="UInt8"),
                "c": pd.array([True, None, False], dtype="boolean"),
                "d": pd.array([None, None, None], dtype="Int32"),
            }
        ),
        pd.DataFrame({"a": ["x", "y"], "b": pd.array([1.5, None], dtype="Float64")}),
        pd.DataFrame({"a": ["x", "y"], "b": np.array([0.1, 0.2], dtype=np.float32)}),
        pd.DataFrame({"a": ["x", 1.5], "b": [1, 2]}),  # mixed object column
        pd.DataFrame({"a": pd.Categorical(["x", "y"]), "b": [1, 2]}),
        pd.DataFrame({"only": ["", "x"]}),
        pd.DataFrame({"a": ["x", None, pd.NA, np.nan], "b": [1.0, None, 3.0, np.inf]}),
        pd.DataFrame({"a\tb": ["x"], "c": [1]}),  # a header pandas quotes
        pd.DataFrame({"a": pd.Series([], dtype=object), "b": pd.Series([], dtype=float)}),
    ],
    ids=[
        "quote",
        "tab",
        "nullable-int-bool",
        "nullable-float",
        "float32",
        "mixed",
        "category",
        "one-column",
        "missing",
        "quoted-header",
        "empty",
    ],
)
def test_cells_pandas_would_treat_specially_equal_pandas(tmp_path, frame):
    ours, theirs = _both(frame, tmp_path)
    assert ours == theirs
