"""Gene/region burden features: rare dosages collapsed where each variant has few carriers.

A causal rare variant has a handful of carriers per site, too few to estimate its own effect;
the rare-variant field pools carriers over a gene or region (burden tests, SKAT, STAAR,
REGENIE's gene-based tests). A burden score of sample i in region g is
``Σ_{j ∈ g} w_j a_ij`` over the region's rare variants, with MAF weights w_j (SKAT's
Beta(1, 25) density by default, up-weighting the rarest), a MAF ceiling and an optional
functional mask column — of an annotation file (VEP/ANNOVAR-style, joined on the variant key)
or of ``rare_variants.tsv`` itself. The map from the federation's variant set
(``rare_variants.tsv``, the same at every site) to the regions is a sparse P × G matrix B, so a
site's burdens are ``A @ B`` and a linear model on burdens is a linear model on dosages with
coefficients ``B @ β`` — which is how a burden GLM is served as two-pathway network parameters.

Regions come from a file — BED (0-based start, end exclusive, name in column 4) or a table with
a header ``chrom, start, end`` and a name column (``gene``/``region``/``name``; 1-based,
inclusive, as the simulator's ``regions/genes.tsv``) — or fixed windows over the variants'
positions. Every variant left out of every burden (MAF above the ceiling, masked, unannotated,
outside every region) is listed with its reason.

An annotation file is public metadata of the variant set, read only where the map is built (a
consortium study's coordinator; the sites receive B): a TSV, optionally gzipped, keyed by a
``variant_key`` column (``chrom:pos:ref:alt``, as the pipeline's tables) or else by ``chrom, pos,
ref, alt`` columns, alleles as in the genotypes. A variant of the set without a mask value (absent
from the file, or an empty cell) is *unannotated*: counted, logged, and left out (``exclude``,
listed with that reason) or kept (``include``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.exceptions import ConfigError, InputDataError

__all__ = [
    "BurdenMap",
    "read_regions",
    "window_regions",
    "read_annotations",
    "variant_mask",
    "burden_map",
    "burden_from_config",
    "write_exclusions",
]

#: The file, in a run's output folder, listing the variants left out of every burden.
EXCLUSIONS_FILE = "burden_exclusions.tsv"

log = logging.getLogger(__name__)

_NAME_COLUMNS = ("gene", "region", "name")
_KEY_COLUMNS = ("chrom", "pos", "ref", "alt")
_TRUE, _FALSE = ("1", "1.0", "true"), ("0", "0.0", "false")
#: What :func:`burden_map` does with a variant without a mask value.
UNANNOTATED_RULES = ("exclude", "include")


@dataclass(frozen=True)
class BurdenMap:
    """The map from rare-variant columns to region burdens.

    Attributes
    ----------
    matrix : scipy.sparse.csr_matrix, shape (n_rare, n_regions)
        B: entry (j, g) is variant j's weight in region g.
    regions : list of str
        Region names, column order of B.
    excluded : pandas.DataFrame
        ``variant_key, reason`` of every variant in no burden.
    unannotated : list of str
        Keys of the variants without a mask value (left out or kept per the rule).
    """

    matrix: sp.csr_matrix
    regions: list[str]
    excluded: pd.DataFrame
    unannotated: list[str] = field(default_factory=list)

    @property
    def n_regions(self) -> int:
        """G, the number of burden features."""
        return len(self.regions)

    def to_config(self) -> dict[str, Any]:
        """B as JSON-like lists (what a GLM round sends every site)."""
        coo = self.matrix.tocoo()
        return {
            "rows": coo.row.tolist(),
            "cols": coo.col.tolist(),
            "weights": coo.data.tolist(),
            "shape": list(self.matrix.shape),
        }

    @staticmethod
    def matrix_from_config(config: Mapping[str, Any]) -> sp.csr_matrix:
        """B back from :meth:`to_config`."""
        shape = tuple(int(v) for v in config["shape"])
        return sp.csr_matrix(
            (np.asarray(config["weights"], float), (config["rows"], config["cols"])), shape=shape
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        """B as packed arrays, what a GLM round sends a site.

        int32 ``rows``/``cols`` and float64 ``weights`` of its non-zero entries in row-major
        order, int64 ``shape``.
        """
        coo = sp.csr_matrix(self.matrix, copy=True)
        coo.sum_duplicates()
        coo = coo.tocoo()
        return {
            "rows": coo.row.astype(np.int32),
            "cols": coo.col.astype(np.int32),
            "weights": coo.data.astype(np.float64),
            "shape": np.asarray(self.matrix.shape, dtype=np.int64),
        }

    @staticmethod
    def matrix_from_arrays(arrays: Mapping[str, np.ndarray]) -> sp.csr_matrix:
        """B back from :meth:`to_arrays`.

        Raises
        ------
        ConfigError
            When an array is missing or the entries do not fit the shape.
        """
        missing = sorted({"rows", "cols", "weights", "shape"} - set(arrays))
        if missing:
            raise ConfigError(f"a burden map's arrays lack {missing}")
        shape = tuple(int(v) for v in np.asarray(arrays["shape"]).reshape(-1))
        rows, cols = np.asarray(arrays["rows"]), np.asarray(arrays["cols"])
        weights = np.asarray(arrays["weights"], dtype=np.float64)
        if len(shape) != 2 or not rows.shape == cols.shape == weights.shape:
            raise ConfigError(
                f"a burden map's arrays do not fit: shape {list(shape)}, {rows.size} rows, "
                f"{cols.size} cols, {weights.size} weights"
            )
        if rows.size and (rows.min() < 0 or rows.max() >= shape[0] or cols.min() < 0
                          or cols.max() >= shape[1]):  # fmt: skip
            raise ConfigError(f"a burden map's entries fall outside its shape {list(shape)}")
        return sp.csr_matrix((weights, (rows, cols)), shape=shape)


def read_regions(path: str | Path) -> pd.DataFrame:
    """Regions of a BED file or a ``chrom, start, end, name`` table, 1-based inclusive.

    Raises
    ------
    InputDataError
        For a missing file, missing columns, non-integer or reversed coordinates (named with
        the line), or no region at all.
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"region file {path} does not exist")
    if path.name.endswith((".bed", ".bed.gz")):
        raw = pd.read_csv(path, sep="\t", header=None, comment="#", dtype=str)
        if raw.shape[1] < 3:
            raise InputDataError(f"{path}: a BED file needs 3 columns or more, got {raw.shape[1]}")
        names = raw[3] if raw.shape[1] > 3 else None
        table = pd.DataFrame({"chrom": raw[0], "start": raw[1], "end": raw[2]})
        offset = 1  # 0-based half-open → 1-based inclusive
    else:
        raw = pd.read_csv(path, sep="\t", dtype=str)
        missing = [c for c in ("chrom", "start", "end") if c not in raw.columns]
        if missing:
            raise InputDataError(f"{path} lacks the columns {missing} (has {list(raw.columns)})")
        name = next((c for c in _NAME_COLUMNS if c in raw.columns), None)
        names = raw[name] if name else None
        table = raw[["chrom", "start", "end"]].copy()
        offset = 0
    for column in ("start", "end"):
        values = pd.to_numeric(table[column], errors="coerce")
        bad = np.flatnonzero(values.isna().to_numpy())
        if bad.size:
            raise InputDataError(
                f"{path}: {column} {table[column].iloc[bad[0]]!r} on region {bad[0] + 1} is not "
                "an integer"
            )
        table[column] = values.astype(np.int64)
    table["start"] += offset
    reversed_rows = np.flatnonzero((table["end"] < table["start"]).to_numpy())
    if reversed_rows.size:
        i = int(reversed_rows[0])
        raise InputDataError(
            f"{path}: region {i + 1} ends before it starts ({table['start'][i]}-{table['end'][i]})"
        )
    if table.empty:
        raise InputDataError(f"{path} holds no region")
    table["chrom"] = table["chrom"].astype(str).str.removeprefix("chr")
    table["region"] = (
        names.astype(str).to_numpy()
        if names is not None
        else [f"{c}:{s}-{e}" for c, s, e in table[["chrom", "start", "end"]].itertuples(False)]
    )
    return table.reset_index(drop=True)


def window_regions(variants: pd.DataFrame, window_bp: int) -> pd.DataFrame:
    """Fixed windows ``[k·w + 1, (k + 1)·w]`` per chromosome that hold at least one variant."""
    if int(window_bp) < 1:
        raise InputDataError(f"burden window must be >= 1 bp, got {window_bp}")
    w = int(window_bp)
    chrom = variants["chrom"].astype(str).str.removeprefix("chr")
    index = (variants["pos"].astype(np.int64) - 1) // w
    pairs = pd.DataFrame({"chrom": chrom, "k": index}).drop_duplicates()
    pairs = pairs.sort_values(["chrom", "k"])
    start = pairs["k"].to_numpy() * w + 1
    return pd.DataFrame(
        {
            "chrom": pairs["chrom"].to_numpy(),
            "start": start,
            "end": start + w - 1,
            "region": [f"{c}:{s}-{s + w - 1}" for c, s in zip(pairs["chrom"], start, strict=True)],
        }
    )


def _mask_values(values: pd.Series, column: str, source: str) -> np.ndarray:
    """A mask column as 1.0 / 0.0, NaN where empty; any other value is an error, named."""
    text = values.astype("string").str.strip().str.lower()
    empty = text.isna() | (text == "")
    out = np.where(text.isin(_TRUE), 1.0, np.where(text.isin(_FALSE), 0.0, np.nan))
    bad = np.flatnonzero(np.isnan(out) & ~empty.to_numpy())
    if bad.size:
        raise InputDataError(
            f"{source}: column {column!r} holds {values.iloc[bad[0]]!r} on data row "
            f"{bad[0] + 1}; a mask value must be 0/1 or true/false ({bad.size} such rows)"
        )
    return out


def variant_mask(
    variants: pd.DataFrame, column: str, annotations: pd.Series | None = None
) -> np.ndarray:
    """Each variant's mask value, 1.0 / 0.0, NaN where it has none.

    From ``annotations`` (:func:`read_annotations`, joined on the variant key) when given, else
    from the variant table's own ``column``.

    Raises
    ------
    InputDataError
        For a value other than 0/1/true/false in the table's column.
    """
    if annotations is not None:
        return annotations.reindex(variants["variant_key"].astype(str)).to_numpy(np.float64)
    return _mask_values(variants[column], column, "the rare-variant table")


def read_annotations(path: str | Path, column: str) -> pd.Series:
    """The mask column of an annotation file, by variant key.

    Parameters
    ----------
    path : str or Path
        A TSV (``.gz`` read as gzip) with a ``variant_key`` column (``chrom:pos:ref:alt``) or
        else ``chrom, pos, ref, alt`` columns, and ``column``.
    column : str
        The 0/1 or true/false mask column; empty cells stay NaN (unannotated).

    Returns
    -------
    Series of float (1.0, 0.0 or NaN), indexed by variant key, one row per key

    Raises
    ------
    InputDataError
        For a missing file, no key columns, a missing mask column, a value other than
        0/1/true/false, or a key listed twice with different values (each named).
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"annotation file {path} does not exist")
    table = pd.read_csv(path, sep="\t", dtype=str, keep_default_na=False, na_values=[""])
    if column not in table.columns:
        raise InputDataError(
            f"annotation file {path} lacks the mask column {column!r} (has {list(table.columns)})"
        )
    if "variant_key" in table.columns:
        keys = table["variant_key"].astype(str)
    elif all(c in table.columns for c in _KEY_COLUMNS):
        keys = table[list(_KEY_COLUMNS)].astype(str).agg(":".join, axis=1)
    else:
        raise InputDataError(
            f"annotation file {path} needs a variant_key column or chrom, pos, ref, alt columns "
            f"(has {list(table.columns)})"
        )
    keys = keys.str.strip().str.replace(r"^chr", "", case=False, regex=True)
    mask = pd.Series(_mask_values(table[column], column, str(path)), index=keys, name=column)
    values = mask.fillna(-1.0).groupby(level=0).nunique()
    if (values > 1).any():
        key = str(values.index[values > 1][0])
        raise InputDataError(
            f"annotation file {path} lists {key} more than once with different {column!r} "
            f"values {table.loc[(keys == key).to_numpy(), column].tolist()}"
        )
    return mask[~mask.index.duplicated()]


def burden_map(
    variants: pd.DataFrame,
    regions: pd.DataFrame,
    *,
    max_maf: float = 0.01,
    weights: str = "beta",
    beta: tuple[float, float] = (1.0, 25.0),
    mask_column: str | None = None,
    annotations: pd.Series | None = None,
    unannotated: str = "exclude",
) -> BurdenMap:
    """The map B from the variant table's rows to the regions' burdens.

    Parameters
    ----------
    variants : DataFrame
        ``rare_variants.tsv``: ``variant_key, chrom, pos, maf`` (+ ``mask_column``), in the
        dosage matrices' column order.
    regions : DataFrame
        :func:`read_regions` or :func:`window_regions`.
    max_maf : float
        Variants with a (federated) MAF above it are left out.
    weights : {"beta", "flat"}
        w_j = Beta(maf_j; a, b) density (SKAT), or 1.
    beta : (float, float)
        The Beta distribution's (a, b).
    mask_column : str, optional
        A 0/1 or true/false column (of ``annotations`` when given, else of ``variants``): only
        true variants enter (e.g. predicted loss of function).
    annotations : Series, optional
        The mask by variant key (:func:`read_annotations`), joined to ``variants``.
    unannotated : {"exclude", "include"}
        A variant without a mask value (not in ``annotations``, or an empty cell) is left out
        (reason ``unannotated``) or enters; either way counted, logged and listed in
        :attr:`BurdenMap.unannotated`.

    Returns
    -------
    BurdenMap
        Regions without any variant are dropped.

    Raises
    ------
    InputDataError
        For missing columns, a mask value other than 0/1/true/false, an unknown weighting or
        rule, or no variant in any region.
    """
    in_table = mask_column if mask_column and annotations is None else None
    needed = ["variant_key", "chrom", "pos", "maf"] + ([in_table] if in_table else [])
    missing = [c for c in needed if c not in variants.columns]
    if missing:
        raise InputDataError(f"the rare-variant table lacks the columns {missing}")
    if weights not in ("beta", "flat"):
        raise InputDataError(f"burden weights {weights!r} unknown; choose beta or flat")
    if unannotated not in UNANNOTATED_RULES:
        raise InputDataError(
            f"burden.unannotated {unannotated!r} unknown; choose exclude or include"
        )
    maf = variants["maf"].to_numpy(np.float64)
    reason = np.full(len(variants), "", dtype=object)
    reason[maf > max_maf] = f"maf above {max_maf}"
    missing_mask = np.zeros(len(variants), dtype=bool)
    if mask_column:
        mask = variant_mask(variants, mask_column, annotations)
        missing_mask = np.isnan(mask)
        if missing_mask.any():
            keys = variants["variant_key"].to_numpy()[missing_mask]
            log.warning(
                "burden: %d of %d variants have no %r value (e.g. %s): %s (burden.unannotated)",
                keys.size, len(variants), mask_column, ", ".join(map(str, keys[:3])),
                "left out" if unannotated == "exclude" else "kept",
            )  # fmt: skip
            if unannotated == "exclude":
                reason[(reason == "") & missing_mask] = "unannotated"
        reason[(reason == "") & (mask == 0.0)] = f"{mask_column} false"
    if weights == "beta":
        from scipy.stats import beta as beta_distribution

        w = beta_distribution.pdf(maf, *beta)
    else:
        w = np.ones(len(variants))
    chrom = variants["chrom"].astype(str).str.removeprefix("chr").to_numpy()
    pos = variants["pos"].to_numpy(np.int64)
    rows, cols = [], []
    for g, (c, start, end) in enumerate(regions[["chrom", "start", "end"]].itertuples(False)):
        on = np.flatnonzero((chrom == str(c)) & (pos >= start) & (pos <= end))
        rows.append(on)
        cols.append(np.full(on.size, g))
    rows_a, cols_a = np.concatenate(rows), np.concatenate(cols)
    usable = reason[rows_a] == ""
    rows_a, cols_a = rows_a[usable], cols_a[usable]
    in_region = np.zeros(len(variants), dtype=bool)
    in_region[rows_a] = True
    reason[(reason == "") & ~in_region] = "outside every region"
    used = np.unique(cols_a)
    if used.size == 0:
        raise InputDataError(
            f"no rare variant (of {len(variants)}) falls in any of the {len(regions)} regions "
            f"at MAF <= {max_maf}: wrong build or chromosome names?"
        )
    remap = np.full(len(regions), -1)
    remap[used] = np.arange(used.size)
    matrix = sp.csr_matrix(
        (w[rows_a], (rows_a, remap[cols_a])), shape=(len(variants), used.size), dtype=np.float64
    )
    left_out = reason != ""
    excluded = pd.DataFrame(
        {"variant_key": variants["variant_key"].to_numpy()[left_out], "reason": reason[left_out]}
    )
    return BurdenMap(
        matrix,
        regions["region"].to_numpy()[used].astype(str).tolist(),
        excluded,
        variants["variant_key"].to_numpy()[missing_mask].astype(str).tolist(),
    )


def burden_from_config(
    variants: str | Path | pd.DataFrame, section: Mapping[str, Any]
) -> BurdenMap:
    """The burden map of a variant set from a ``burden`` config section.

    ``regions`` (a region file) or else ``window_bp`` fixed windows; ``max_maf``, ``weights``,
    ``beta``; ``mask_column``, a column of the ``annotations`` file (joined on the variant key)
    or, without one, of the variant table; ``unannotated``.

    Parameters
    ----------
    variants : str, Path or DataFrame
        A prepared federation's folder (its ``rare_variants.tsv``), or the rare-variant table
        itself (a consortium study's federated one, which no folder of the coordinator holds
        before its counts stage).
    section : mapping
        The validated ``burden`` section.

    Raises
    ------
    ConfigError
        For ``annotations`` without ``mask_column``.
    InputDataError
        For a missing table, or bad regions or annotations (:func:`read_regions`,
        :func:`read_annotations`, :func:`burden_map`).
    """
    mask_column = section.get("mask_column")
    annotations = None
    if section.get("annotations"):
        if not mask_column:
            raise ConfigError(
                f"burden.annotations {section['annotations']!r} is given without "
                "burden.mask_column: name its 0/1 column that selects the variants"
            )
        annotations = read_annotations(section["annotations"], mask_column)
    if not isinstance(variants, pd.DataFrame):
        path = Path(variants) / "rare_variants.tsv"
        if not path.is_file():
            raise InputDataError(
                f"the burden map is built from the federation's rare-variant table, and {path} "
                "does not exist (is train.data the prepared federation's folder?)"
            )
        variants = pd.read_csv(path, sep="\t", dtype={"chrom": str})
    if section.get("regions"):
        regions = read_regions(section["regions"])
    else:
        regions = window_regions(variants, int(section["window_bp"]))
    return burden_map(
        variants,
        regions,
        max_maf=float(section["max_maf"]),
        weights=str(section["weights"]),
        beta=tuple(float(v) for v in section["beta"]),
        mask_column=mask_column,
        annotations=annotations,
        unannotated=str(section.get("unannotated", "exclude")),
    )


def write_exclusions(burden: BurdenMap, folder: str | Path) -> Path:
    """Write ``folder/burden_exclusions.tsv``: ``variant_key, reason`` of each variant in no burden.

    The project's rule: no silent drops. The reasons are those of :func:`burden_map` (MAF above
    the ceiling, the mask false, unannotated, outside every region); a map that leaves nothing
    out writes the header alone.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / EXCLUSIONS_FILE
    burden.excluded[["variant_key", "reason"]].to_csv(path, sep="\t", index=False)
    return path
