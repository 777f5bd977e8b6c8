"""Tab-separated tables, byte for byte as pandas' ``to_csv(sep=TAB, index=False)`` writes them.

pandas formats each cell through a Python call per value when ``float_format`` is given, which
makes a 100,000-sample score table a quarter of a second; :func:`write_tsv` builds each column's
strings once and joins them, byte-identical to pandas (empty cells for missing values, ``True`` /
``False`` for booleans, ``repr`` for floats without a format; nullable integers and booleans
too). A table whose text cells would need quoting (a tab, quote or line break inside a cell) is
handed to pandas as it is.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
from pandas.api.extensions import ExtensionDtype
from pandas.api.types import infer_dtype, is_integer_dtype

__all__ = ["write_tsv"]

_NEEDS_QUOTES = re.compile(r'[\t"\r\n]')


def write_tsv(frame: pd.DataFrame, path: str | Path, float_format: str | None = None) -> Path:
    """Write ``frame`` to ``path`` as pandas' ``to_csv(path, sep=TAB, index=False)`` would.

    Parameters
    ----------
    frame : pandas.DataFrame
        The table; its index is not written.
    path : str or Path
        The file written.
    float_format : str, optional
        A ``%`` format for float columns (for example ``"%.10g"``); ``repr`` when omitted.

    Returns
    -------
    Path
        ``path``.
    """
    header = [str(name) for name in frame.columns]
    # One column: the csv module quotes an empty cell (a line must not be blank). Those tables,
    # a header pandas would quote and any column _column_text declines are pandas' to write.
    columns = None
    if frame.shape[1] >= 2 and not _NEEDS_QUOTES.search("\x00".join(header)):
        columns = [_column_text(frame.iloc[:, i], float_format) for i in range(frame.shape[1])]
    if columns is None or any(column is None for column in columns):
        frame.to_csv(path, sep="\t", index=False, float_format=float_format)
        return Path(path)
    with open(path, "w", newline="") as handle:
        handle.write("\t".join(header) + "\n")
        handle.writelines(line + "\n" for line in map("\t".join, zip(*columns, strict=True)))
    return Path(path)


def _column_text(values: pd.Series, float_format: str | None) -> list[str] | None:
    """The cells of one column as text; None where pandas' own rules must decide.

    Those are extension dtypes other than nullable integers and booleans (categories, dates,
    nullable floats), object cells that are not text, and text that pandas would quote.
    """
    if isinstance(values.dtype, pd.BooleanDtype) or _nullable_integer(values.dtype):
        # A scoring file's positions (Int64: harmonised rows may have none): empty where NA.
        missing = values.isna().to_numpy().tolist()
        cells = map(str, values.to_numpy(dtype=object, na_value=None).tolist())
        return ["" if gap else cell for gap, cell in zip(missing, cells, strict=True)]
    if not isinstance(values.dtype, np.dtype) or values.dtype.kind not in "fiubO":
        return None
    kind = values.dtype.kind
    items = values.tolist()
    if kind == "f":
        if float_format is None:
            if values.dtype.itemsize != 8:  # pandas writes float32 by numpy's shortest text
                return None
            if not np.isnan(values.to_numpy()).any():
                return list(map(repr, items))
            return ["" if x != x else repr(x) for x in items]
        return ["" if x != x else float_format % x for x in items]
    if kind in "iub":
        return list(map(str, items))
    if infer_dtype(values, skipna=True) not in ("string", "empty"):
        return None  # an object column holding numbers, booleans, ...: pandas' rules
    try:
        joined = "\x00".join(items)  # every cell is text: nothing missing to blank
        cells = items
    except TypeError:
        cells = ["" if x is None or x is pd.NA or x != x else x for x in items]
        joined = "\x00".join(cells)
    return None if _NEEDS_QUOTES.search(joined) else cells


def _nullable_integer(dtype) -> bool:
    return isinstance(dtype, ExtensionDtype) and is_integer_dtype(dtype)
