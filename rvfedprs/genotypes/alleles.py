"""Allele text of whole columns at once: upper case, the other strand, the letters used.

A scoring file or a variant table holds one allele per row; converting each with its own Python
call (pandas' ``.str`` methods, a comprehension) costs about a microsecond per row. Everything
here works character by character, so it runs once over the column's cells joined by the NUL
character (which no allele holds): one C call per column.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

__all__ = ["complement", "spelled_with", "upper"]

_COMPLEMENT = str.maketrans("ACGT", "TGCA")
_SEP = "\x00"


def _joined(cells: list) -> str | None:
    """The cells joined by NUL; None when a cell is not text (None, NaN)."""
    try:
        return _SEP.join(cells)
    except TypeError:
        return None


def _per_character(values: Sequence, convert: Callable[[str], str]) -> np.ndarray:
    cells = list(values)
    out = np.empty(len(cells), dtype=object)
    joined = _joined(cells)
    if joined is None:  # a missing cell stays as it is, as in pandas' .str methods
        out[:] = [convert(c) if isinstance(c, str) else c for c in cells]
    elif joined.count(_SEP) != max(len(cells) - 1, 0):  # a cell holds the separator itself
        out[:] = [convert(c) for c in cells]
    elif cells:
        out[:] = convert(joined).split(_SEP)
    return out


def upper(values: Sequence[str]) -> np.ndarray:
    """Each allele in upper case, as an object array."""
    return _per_character(values, str.upper)


def complement(values: Sequence[str]) -> np.ndarray:
    """Each allele on the other strand (A<->T, C<->G; other characters kept), not reversed."""
    return _per_character(values, lambda text: text.translate(_COMPLEMENT))


def spelled_with(values: Sequence, letters: str) -> np.ndarray:
    """Whether each cell is a non-empty word of ``letters`` (``ACGTN``: a plain allele).

    Deleting ``letters`` from the cells joined by NUL characters leaves only the NULs exactly
    when every cell qualifies (one C call per column); otherwise each cell is checked.
    """
    cells = list(values)
    strip = str.maketrans("", "", letters)
    joined = _joined(cells)
    if joined and joined.translate(strip) == _SEP * (len(cells) - 1):
        if _SEP * 2 not in joined and joined[0] != _SEP and joined[-1] != _SEP:
            return np.ones(len(cells), dtype=bool)
    return np.fromiter(
        (isinstance(c, str) and c != "" and c.translate(strip) == "" for c in cells),
        bool,
        len(cells),
    )
