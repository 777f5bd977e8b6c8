"""Polygenic scores from PGS Catalog scoring files, with ``plink2 --score`` semantics (SPEC §3).

:func:`read_scorefile` parses the file (``#key=value`` header, gz or plain; positions from
``hm_chr``/``hm_pos`` when harmonised, else ``chr_name``/``chr_position``, else rsIDs only).
:func:`score` matches each row to the genotypes on chr:pos and the allele pair (rsID when the row
has no position), flips strands where unambiguous, drops A/T and C/G pairs, and sums
weight × effect-allele dosage chunk by chunk; a missing dosage counts 2·p of the effect allele.
Every scoring-file row gets a status in the match log; nothing is dropped silently.

The sum equals ``plink2 --score FILE 1 2 3 header cols=+scoresums`` (``SCORE1_SUM``) run on the
matched variants, with FILE listing each genotype variant ID, the effect allele as written in the
genotypes (after a strand flip) and the weight; plink2 mean-imputes from the frequencies of the
scored samples, as :func:`score` does by default (see ``write_plink2_scorefile``).
"""

from __future__ import annotations

import gzip
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeSource,
    dot_dosages,
    normalise_chrom,
    sample_index,
    variant_keys,
)

__all__ = [
    "MATCH_STATUSES",
    "ScoreFile",
    "read_scorefile",
    "score",
    "write_plink2_scorefile",
]

logger = logging.getLogger(__name__)

#: Status of each scoring-file row in the match log.
MATCH_STATUSES = (
    "matched",
    "flipped",
    "ambiguous_dropped",
    "allele_mismatch",
    "not_found",
    "duplicate",
)
_COMPLEMENT = str.maketrans("ACGT", "TGCA")
_UNSUPPORTED_TRUE = ("is_dominant", "is_recessive", "is_haplotype", "is_diplotype")


class ScoreFile:
    """A parsed scoring file.

    Attributes
    ----------
    path : str
    table : DataFrame, shape (n_rows, 7)
        ``row`` (0-based row number), ``rsid``, ``chrom``, ``pos`` (Int64, NA when absent),
        ``effect_allele``, ``other_allele`` (``""`` when absent), ``effect_weight`` (float64).
    header : dict of str to str
        The ``#key=value`` lines (``genome_build``, ``pgs_id``, ``HmPOS_build``, ...).
    genome_build : str or None
        ``HmPOS_build`` when positions are harmonised, else ``genome_build`` (``None`` if absent).
    """

    def __init__(self, path: str, table: pd.DataFrame, header: dict[str, str], build: str | None):
        self.path, self.table, self.header, self.genome_build = path, table, header, build

    def __repr__(self) -> str:
        return f"ScoreFile({self.path!r}, n_rows={len(self.table)}, build={self.genome_build!r})"


def _open_text(path: Path):
    with path.open("rb") as handle:
        gz = handle.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rt") if gz else path.open("rt")


def read_scorefile(path: str | Path) -> ScoreFile:
    """Read a PGS Catalog scoring file (format 2.0 or a custom file with the same columns).

    Parameters
    ----------
    path : str or Path
        Plain or gzip-compressed; ``#`` lines before the column header hold metadata.

    Returns
    -------
    ScoreFile

    Raises
    ------
    InputDataError
        Missing ``effect_allele``/``effect_weight`` columns, no position and no rsID, a
        non-numeric weight (naming the row), or dominant/recessive/haplotype rows (plink2
        ``--score`` has no such model).
    """
    path = Path(path)
    if not path.is_file():
        raise InputDataError(f"scoring file {path} does not exist")
    header: dict[str, str] = {}
    try:
        with _open_text(path) as handle:
            n_comment = 0
            for line in handle:
                if not line.startswith("#"):
                    break
                n_comment += 1
                key, sep, value = line.lstrip("#").strip().partition("=")
                if sep:
                    header[key.strip()] = value.strip()
        with _open_text(path) as handle:
            raw = pd.read_csv(
                handle, sep="\t", skiprows=n_comment, dtype=str, keep_default_na=False
            )
    except (OSError, EOFError, UnicodeDecodeError, pd.errors.ParserError) as exc:
        raise InputDataError(f"{path}: cannot read the scoring file ({exc})") from exc
    raw.columns = [c.strip() for c in raw.columns]
    for column in ("effect_allele", "effect_weight"):
        if column not in raw.columns:
            raise InputDataError(
                f"{path}: no {column!r} column (columns: {list(raw.columns)}); "
                "expected a PGS Catalog scoring file"
            )
    for column in _UNSUPPORTED_TRUE:
        if column in raw.columns:
            flagged = raw[column].str.upper().isin(["TRUE", "1"])
            if flagged.any():
                raise InputDataError(
                    f"{path}: {int(flagged.sum())} rows with {column}=True (first: row "
                    f"{int(np.flatnonzero(flagged)[0]) + 1}); only additive weights are supported"
                )
    harmonised = {"hm_chr", "hm_pos"} <= set(raw.columns)
    chrom_col, pos_col = ("hm_chr", "hm_pos") if harmonised else ("chr_name", "chr_position")
    has_pos = chrom_col in raw.columns and pos_col in raw.columns
    rsid = raw["hm_rsID"] if harmonised and "hm_rsID" in raw.columns else raw.get("rsID")
    if not has_pos and rsid is None:
        raise InputDataError(
            f"{path}: neither positions (chr_name/chr_position or hm_chr/hm_pos) nor rsID"
        )
    weights = pd.to_numeric(raw["effect_weight"], errors="coerce")
    if weights.isna().any():
        bad = int(np.flatnonzero(weights.isna())[0])
        raise InputDataError(
            f"{path}: effect_weight {raw['effect_weight'].iloc[bad]!r} on row {bad + 1} "
            "is not a number"
        )
    table = pd.DataFrame({"row": np.arange(len(raw), dtype=np.int64)})
    table["rsid"] = rsid.to_numpy(dtype=str) if rsid is not None else ""
    if has_pos:
        chroms = raw[chrom_col].str.strip()
        positions = pd.to_numeric(raw[pos_col], errors="coerce").astype("Int64")
        known = (chroms != "") & positions.notna()
        names = {c: normalise_chrom(c, source=str(path)) for c in pd.unique(chroms[known])}
        table["chrom"] = chroms.map(names).where(known, "").to_numpy(dtype=object)
        table["pos"] = positions.where(known)
    else:
        table["chrom"] = ""
        table["pos"] = pd.array([pd.NA] * len(raw), dtype="Int64")
    table["effect_allele"] = raw["effect_allele"].str.strip().str.upper().to_numpy()
    other = raw["other_allele"] if "other_allele" in raw.columns else pd.Series("", index=raw.index)
    table["other_allele"] = other.str.strip().str.upper().to_numpy()
    table["effect_weight"] = weights.to_numpy(dtype=np.float64)
    build = header.get("HmPOS_build") if harmonised else header.get("genome_build")
    return ScoreFile(str(path), table, header, build)


# status codes of a (score row, genotype variant) pair, in order of precedence within a row
_MISMATCH, _AMBIGUOUS_CODE, _MATCHED, _FLIPPED = 0, 1, 2, 3
_STATUS_NAMES = np.array(["allele_mismatch", "ambiguous_dropped", "matched", "flipped"], object)
_CHROM_CODES = {c: i for i, c in enumerate([str(i) for i in range(1, 23)] + ["X", "Y", "XY", "MT"])}


def _is_ambiguous(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Whether the allele pairs ``{x, y}`` are ``{A, T}`` or ``{C, G}`` (element-wise)."""
    return (
        ((x == "A") & (y == "T"))
        | ((x == "T") & (y == "A"))
        | ((x == "C") & (y == "G"))
        | ((x == "G") & (y == "C"))
    )


def _same_pair(x: np.ndarray, y: np.ndarray, ref: np.ndarray, alt: np.ndarray) -> np.ndarray:
    """Whether the sets ``{x, y}`` and ``{ref, alt}`` are equal (element-wise)."""
    return (
        ((x == ref) | (x == alt))
        & ((y == ref) | (y == alt))
        & ((ref == x) | (ref == y))
        & ((alt == x) | (alt == y))
    )


def _classify(
    effect: np.ndarray,
    other: np.ndarray,
    effect_flip: np.ndarray,
    other_flip: np.ndarray,
    ref: np.ndarray,
    alt: np.ndarray,
) -> tuple[np.ndarray, np.ndarray]:
    """Status of score rows against genotype variants, pair by pair (all arrays of shape (n,)).

    ``effect``/``other`` are the row's alleles (``other`` ``""`` when absent), ``*_flip`` their
    strand complements, ``ref``/``alt`` the genotype alleles (upper case).

    Returns
    -------
    status : ndarray of int8, shape (n,)
        ``_MISMATCH``, ``_AMBIGUOUS_CODE``, ``_MATCHED`` or ``_FLIPPED``.
    counts_alt : ndarray of bool, shape (n,)
        For matched/flipped pairs, whether the effect allele is the genotype ALT (else REF).
    """
    has_other = other != ""
    direct = _same_pair(effect, other, ref, alt)
    flipped = _same_pair(effect_flip, other_flip, ref, alt)
    with_other = np.select(
        [_is_ambiguous(effect, other), direct, flipped],
        [_AMBIGUOUS_CODE, _MATCHED, _FLIPPED],
        _MISMATCH,
    )
    alone = np.select(
        [_is_ambiguous(ref, alt), (effect == ref) | (effect == alt)],
        [_AMBIGUOUS_CODE, _MATCHED],
        _MISMATCH,
    )
    status = np.where(has_other, with_other, alone).astype(np.int8)
    counts_alt = np.where(status == _FLIPPED, effect_flip == alt, effect == alt)
    return status, counts_alt.astype(bool)


class _Lookup:
    """Score rows grouped by a key, to pair them with genotype variants in one vectorised step."""

    def __init__(self, keys: np.ndarray, rows: np.ndarray) -> None:
        codes, uniques = pd.factorize(pd.Series(keys))
        self.index = pd.Index(uniques)
        order = np.argsort(codes, kind="stable")
        self.rows = np.asarray(rows)[order]
        self.sizes = np.bincount(codes, minlength=len(uniques))
        self.starts = np.concatenate([[0], np.cumsum(self.sizes)[:-1]]).astype(np.int64)

    def pairs(self, keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(position in ``keys``, score row) of every pair with equal keys, by position."""
        if len(self.index) == 0 or len(keys) == 0:
            return np.zeros(0, np.int64), np.zeros(0, np.int64)
        where = self.index.get_indexer(pd.Series(keys))
        hit = np.flatnonzero(where >= 0)
        group = where[hit]
        sizes = self.sizes[group]
        j = np.repeat(hit, sizes)
        first = np.repeat(self.starts[group] - (np.cumsum(sizes) - sizes), sizes)
        return j.astype(np.int64), self.rows[first + np.arange(len(j))]


def _position_keys(chrom: pd.Series, pos: np.ndarray) -> np.ndarray:
    """One int64 per (chrom, pos): chromosome code × 2^40 + position."""
    code = chrom.map(_CHROM_CODES).to_numpy(dtype=np.float64)
    code = np.where(np.isnan(code), -1, code).astype(np.int64)
    return code * (1 << 40) + np.asarray(pos, dtype=np.int64)


def _complement(alleles: pd.Series) -> np.ndarray:
    return alleles.str.translate(_COMPLEMENT).to_numpy(dtype=object)


def _row_key(table: pd.DataFrame) -> pd.Series:
    return (
        table["chrom"]
        + ":"
        + table["pos"].astype(str)
        + ":"
        + table["rsid"].where(table["pos"].isna(), "")
        + ":"
        + table["effect_allele"]
        + ":"
        + table["other_allele"]
    )


def score(
    source: GenotypeSource,
    scorefile: str | Path | ScoreFile,
    *,
    frequencies: pd.DataFrame | None = None,
    min_overlap: float = 0.75,
    samples: Sequence[str] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    genome_build: str | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Polygenic score SUM per sample.

    Parameters
    ----------
    source : GenotypeSource
    scorefile : path or ScoreFile
    frequencies : DataFrame, optional
        With ``variant_key`` and ``alt_freq`` (e.g. the global federated frequencies); used to
        impute missing dosages as 2·p of the effect allele, so every scored variant must be
        listed. Default: frequencies over the scored samples (plink2's mean imputation).
    min_overlap : float
        Fewest usable rows (matched or flipped) as a fraction of the scoring file.
    samples : sequence of str, optional
        Samples to score, in this order (default: all).
    chunk_size : int
    genome_build : str, optional
        When given, the file's declared build must equal it (``NR`` or absent passes with a log).

    Returns
    -------
    scores : DataFrame, shape (n_samples, 3)
        ``sample_id``, ``SUM`` (float64), ``n_matched`` (variants used, int64).
    match_log : DataFrame, shape (n_score_rows, 12)
        One row per scoring-file row: the row's fields, ``status`` (one of
        :data:`MATCH_STATUSES`), the matched ``variant_key``/``variant_id``, the genotype allele
        counted (``counted_allele``) and the weight used.

    Raises
    ------
    InputDataError
        When the usable fraction is below ``min_overlap``, the build disagrees, a row matches
        two genotype variants, or a scored variant is absent from ``frequencies``.

    Notes
    -----
    Sources that know their variant table up front (PLINK1/2) are matched first and then only
    the matched variants are read, through :meth:`GenotypeSource.dosage_dot` (for a ``.bed``,
    on the packed bytes); VCF/BCF chunks are matched as they stream. Matching is vectorised:
    one table lookup on chr:pos (rsID) per chunk, allele-pair rules on whole arrays.
    """
    sf = scorefile if isinstance(scorefile, ScoreFile) else read_scorefile(scorefile)
    _check_build(sf, genome_build)
    table = sf.table
    log = table.copy()
    log["status"] = "not_found"
    log["variant_key"] = ""
    log["variant_id"] = ""
    log["counted_allele"] = ""
    dup = _row_key(table).duplicated().to_numpy()
    log.loc[dup, "status"] = "duplicate"
    usable = table[~dup]
    placed = usable["pos"].notna().to_numpy()
    by_pos = _Lookup(
        _position_keys(usable["chrom"][placed], usable["pos"][placed].to_numpy(dtype=np.int64)),
        usable["row"].to_numpy()[placed],
    )
    named = ~placed & (usable["rsid"] != "").to_numpy()
    by_id = _Lookup(usable["rsid"].to_numpy()[named], usable["row"].to_numpy()[named])
    freq_lookup = None
    if frequencies is not None:
        freq_lookup = pd.Series(
            frequencies["alt_freq"].to_numpy(dtype=np.float64),
            index=frequencies["variant_key"].to_numpy(),
        )
    alleles = (
        table["effect_allele"].to_numpy(dtype=object),
        table["other_allele"].to_numpy(dtype=object),
        _complement(table["effect_allele"]),
        _complement(table["other_allele"]),
    )
    weights = table["effect_weight"].to_numpy(dtype=np.float64)
    rows_out = sample_index(source.samples, samples, source.path)
    total = np.zeros(len(rows_out), dtype=np.float64)
    found = []  # (row, status, counts_alt, allele, variant key, variant id, variant index) pairs
    if source.variants is not None:  # match on the variant table, then read matched variants
        if len(source.variants) == 0:
            raise InputDataError(f"{source.path}: no variants to score")
        pairs = _match(source.variants, by_pos, by_id, alleles)
        found.append(pairs)
        n_ok = _resolve_statuses(log, found, sf.path, len(table), min_overlap, source.path)
        rows, state, counts_alt, _, _, _, j = pairs
        use = state >= _MATCHED
        index, inverse = np.unique(j[use], return_inverse=True)
        sign = np.where(counts_alt[use], 1.0, -1.0)
        w = weights[rows[use]]
        coef = np.bincount(inverse, weights=w * sign, minlength=len(index))
        fill, keys = None, None
        if freq_lookup is not None:
            keys = variant_keys(source.variants.iloc[index]).to_numpy(dtype=object)
            fill = 2.0 * freq_lookup.reindex(keys).to_numpy()
        _check_frequencies(fill, keys)
        sums, _ = source.dosage_dot(index, coef, fill, samples, chunk_size)
        total += float(w @ np.where(sign > 0, 0.0, 2.0)) + sums
    else:  # stream: match each chunk's variants as they come
        offset = 0
        any_chunk = False
        for chunk in source.iter_chunks(chunk_size=chunk_size, samples=samples):
            any_chunk = True
            pairs = _match(chunk.variants, by_pos, by_id, alleles, offset)
            offset += len(chunk.variants)
            found.append(pairs)
            rows, state, counts_alt, _, keys, _, j = pairs
            use = state >= _MATCHED
            if use.any():
                total += _weighted_sum(
                    chunk.dosages,
                    j[use] - (offset - len(chunk.variants)),
                    np.where(counts_alt[use], 1.0, -1.0),
                    weights[rows[use]],
                    keys[use],
                    freq_lookup,
                )
        if not any_chunk:
            raise InputDataError(f"{source.path}: no variants to score")
        n_ok = _resolve_statuses(log, found, sf.path, len(table), min_overlap, source.path)
    status = log["status"].to_numpy(dtype=object)
    log["weight_used"] = np.where(np.isin(status, ["matched", "flipped"]), weights, 0.0)
    scores = pd.DataFrame(
        {
            "sample_id": source.samples[rows_out],
            "SUM": total,
            "n_matched": np.full(len(total), n_ok, np.int64),
        }
    )
    return scores, log


def _match(
    variants: pd.DataFrame,
    by_pos: _Lookup,
    by_id: _Lookup,
    alleles: tuple[np.ndarray, ...],
    offset: int = 0,
) -> tuple[np.ndarray, ...]:
    """Every (score row, genotype variant) pair on chr:pos (rsID for rows without a position).

    Returns
    -------
    tuple of arrays, each of shape (n_pairs,), in variant order
        ``rows``, ``status`` (int8 codes), ``counts_alt`` (bool), the counted ``allele``, the
        variant ``key`` and ``id``, and the variant index (``offset`` + position in ``variants``).
    """
    j_pos, rows_pos = by_pos.pairs(_position_keys(variants["chrom"], variants["pos"].to_numpy()))
    j_id, rows_id = by_id.pairs(variants["id"].to_numpy())
    j = np.concatenate([j_pos, j_id])
    rows = np.concatenate([rows_pos, rows_id])
    order = np.argsort(j, kind="stable")  # variant order: a row's last candidate counts
    j, rows = j[order], rows[order]
    picked = variants.iloc[j]
    ref = picked["ref"].str.upper().to_numpy(dtype=object)
    alt = picked["alt"].str.upper().to_numpy(dtype=object)
    effect, other, effect_flip, other_flip = (a[rows] for a in alleles)
    state, counts_alt = _classify(effect, other, effect_flip, other_flip, ref, alt)
    keys = variant_keys(picked).to_numpy(dtype=object)
    ids = picked["id"].to_numpy(dtype=object)
    return rows, state, counts_alt, np.where(counts_alt, alt, ref), keys, ids, j + offset


def _weighted_sum(
    dosages: np.ndarray,
    cols: np.ndarray,
    sign: np.ndarray,
    weights: np.ndarray,
    keys: np.ndarray,
    freq_lookup: pd.Series | None,
) -> np.ndarray:
    """Σ weight × effect-allele dosage per sample over the columns ``cols`` of a chunk.

    Parameters
    ----------
    dosages : ndarray, shape (n_samples, n_variants)
        ALT dosages, NaN missing.
    cols : ndarray of int, shape (n_terms,)
        Column of each term.
    sign, weights : ndarray of float64, shape (n_terms,)
        +1 when the effect allele is ALT, −1 when it is REF (effect dosage 2 − ALT dosage).
    keys : ndarray of str, shape (n_terms,)
        Variant keys, to look up ``freq_lookup``.
    freq_lookup : Series or None
        ALT frequency by variant key; None imputes from the scored samples (plink2).

    Returns
    -------
    ndarray of float64, shape (n_samples,)

    Notes
    -----
    The effect dosage is ``offset + sign × ALT dosage`` (offset 2 for a REF effect allele), and
    a missing ALT dosage counts 2·p, so a missing effect dosage counts 2·p of the effect allele.
    """
    fill = None if freq_lookup is None else 2.0 * freq_lookup.reindex(keys).to_numpy()
    _check_frequencies(fill, keys)
    sums, _ = dot_dosages(dosages[:, cols], weights * sign, fill)
    return float(weights @ np.where(sign > 0, 0.0, 2.0)) + sums


def _check_frequencies(fill: np.ndarray | None, keys: np.ndarray | None) -> None:
    """Raise when a scored variant is absent from the given frequency table.

    Every scored variant must have a frequency, whether or not it has missing genotypes (so
    the outcome does not depend on the chunk size).
    """
    if fill is None:
        return
    absent = np.isnan(fill)
    if absent.any():
        raise InputDataError(
            f"variant {keys[np.flatnonzero(absent)[0]]} is absent from the frequency table"
        )


def _resolve_statuses(
    log: pd.DataFrame,
    found: list,
    path: str,
    n_rows: int,
    min_overlap: float,
    genotypes: str,
) -> int:
    """Fill the match log from every (row, variant) pair found; return the usable row count.

    A row keeps its one matched/flipped variant; with none, its last ambiguous variant, else its
    last variant (allele mismatch).

    Raises
    ------
    InputDataError
        When a row has two or more usable variants (plink2 would count it twice), or the
        usable fraction of rows is below ``min_overlap``.
    """
    rows = np.zeros(0, np.int64)
    if found:
        rows, state, _, allele, keys, ids, _ = (
            np.concatenate(parts) for parts in zip(*found, strict=True)
        )
    if len(rows):
        usable = state >= _MATCHED
        n_usable = np.bincount(rows[usable], minlength=len(log))
        if (n_usable > 1).any():
            twice = np.flatnonzero(n_usable > 1)
            shown = ", ".join(str(r + 1) for r in twice[:5])
            raise InputDataError(
                f"{path}: {len(twice)} scoring-file rows (rows {shown}) match more than one "
                f"genotype variant; deduplicate the genotypes"
            )
        rank = np.where(usable, 2, np.where(state == _AMBIGUOUS_CODE, 1, 0))
        order = np.lexsort((np.arange(len(rows)), rank, rows))  # last of the best rank per row
        last = np.flatnonzero(np.append(rows[order][1:] != rows[order][:-1], True))
        pick = order[last]
        target = rows[pick]
        log.loc[target, "status"] = _STATUS_NAMES[state[pick]]
        log.loc[target, "variant_key"] = keys[pick]
        log.loc[target, "variant_id"] = ids[pick]
        log.loc[target, "counted_allele"] = np.where(usable[pick], allele[pick], "")
    status = log["status"].to_numpy(dtype=object)
    n_ok = int(np.isin(status, ["matched", "flipped"]).sum())
    fraction = n_ok / max(n_rows, 1)
    counts = log["status"].value_counts().to_dict()
    logger.info("%s: %d of %d rows usable (%s)", path, n_ok, n_rows, counts)
    if fraction < min_overlap:
        raise InputDataError(
            f"only {n_ok} of {n_rows} rows of {path} ({fraction:.1%}) match the genotypes "
            f"in {genotypes}, below min_overlap={min_overlap:g}; statuses: {counts}"
        )
    return n_ok


def _check_build(sf: ScoreFile, expected: str | None) -> None:
    declared = sf.genome_build
    if expected is None:
        return
    if declared in (None, "", "NR"):
        logger.warning("%s declares no genome build; assuming %s", sf.path, expected)
        return
    aliases = {"hg19": "GRCh37", "hg38": "GRCh38", "GRCh37": "GRCh37", "GRCh38": "GRCh38"}
    if aliases.get(declared, declared) != aliases.get(expected, expected):
        raise InputDataError(
            f"{sf.path} declares genome_build={declared}, but the genotypes are {expected}"
        )


def write_plink2_scorefile(match_log: pd.DataFrame, path: str | Path) -> Path:
    """Write the usable rows of a match log as a plink2 ``--score`` file (ID, allele, weight).

    ``plink2 --bfile X --score PATH 1 2 3 header cols=+scoresums`` then gives ``SCORE1_SUM``
    equal to :func:`score`'s ``SUM`` (the oracle in the tests and the benchmark).
    """
    used = match_log[match_log["status"].isin(["matched", "flipped"])]
    out = pd.DataFrame(
        {"ID": used["variant_id"], "A1": used["counted_allele"], "WEIGHT": used["effect_weight"]}
    )
    out.to_csv(path, sep="\t", index=False, float_format="%.17g")
    return Path(path)
