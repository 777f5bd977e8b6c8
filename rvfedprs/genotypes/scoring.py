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
from rvfedprs.genotypes.chunk import DEFAULT_CHUNK_SIZE, GenotypeSource, normalise_chrom

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
_AMBIGUOUS = {frozenset("AT"), frozenset("CG")}
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
        table["chrom"] = [
            normalise_chrom(c, source=str(path)) if k else ""
            for c, k in zip(chroms, known, strict=True)
        ]
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


def _classify(effect: str, other: str, ref: str, alt: str) -> tuple[str, str | None]:
    """Status of one score row against one genotype variant, and the effect allele as coded there.

    Returns ``(status, allele)`` where ``allele`` is ``ref`` or ``alt`` (None when unusable).
    """
    ref, alt = ref.upper(), alt.upper()
    if other:
        pair = frozenset((effect, other))
        if pair in _AMBIGUOUS:
            return "ambiguous_dropped", None
        if pair == frozenset((ref, alt)):
            return "matched", alt if effect == alt else ref
        flipped = (effect.translate(_COMPLEMENT), other.translate(_COMPLEMENT))
        if frozenset(flipped) == frozenset((ref, alt)):
            return "flipped", alt if flipped[0] == alt else ref
        return "allele_mismatch", None
    if frozenset((ref, alt)) in _AMBIGUOUS:
        return "ambiguous_dropped", None
    if effect in (ref, alt):
        return "matched", effect
    return "allele_mismatch", None


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
        impute missing dosages as 2·p of the effect allele. Default: frequencies over the scored
        samples (plink2's mean imputation).
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
        When the usable fraction is below ``min_overlap`` or the build disagrees.
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
    by_pos: dict[tuple[str, int], list[int]] = {}
    by_id: dict[str, list[int]] = {}
    for row, chrom, pos, rsid in zip(
        usable["row"], usable["chrom"], usable["pos"], usable["rsid"], strict=True
    ):
        if pos is pd.NA:
            if rsid:
                by_id.setdefault(rsid, []).append(int(row))
        else:
            by_pos.setdefault((chrom, int(pos)), []).append(int(row))
    freq_lookup = None
    if frequencies is not None:
        freq_lookup = pd.Series(
            frequencies["alt_freq"].to_numpy(dtype=np.float64),
            index=frequencies["variant_key"].to_numpy(),
        )
    effect = table["effect_allele"].to_numpy()
    other = table["other_allele"].to_numpy()
    weights = table["effect_weight"].to_numpy()
    status = log["status"].to_numpy(dtype=object)
    counted = log["counted_allele"].to_numpy(dtype=object)
    vkey = log["variant_key"].to_numpy(dtype=object)
    vid = log["variant_id"].to_numpy(dtype=object)
    total = None
    out_samples = None
    n_used = 0
    for chunk in source.iter_chunks(chunk_size=chunk_size, samples=samples):
        out_samples = chunk.samples
        if total is None:
            total = np.zeros(len(chunk.samples), dtype=np.float64)
        v = chunk.variants
        keys = chunk.keys.to_numpy()
        cols, signs, offsets, wts = [], [], [], []
        for j, (chrom, pos, ident, ref, alt) in enumerate(
            zip(v["chrom"], v["pos"], v["id"], v["ref"], v["alt"], strict=True)
        ):
            rows = by_pos.get((chrom, int(pos)), [])
            if ident in by_id:
                rows = rows + by_id[ident]
            for row in rows:
                state, allele = _classify(effect[row], other[row], ref, alt)
                if status[row] in ("matched", "flipped"):
                    if allele is not None:  # a second genotype variant for the same row
                        status[row] = "duplicate"
                        logger.warning("%s: row %d matches two variants", sf.path, row + 1)
                    continue
                if state == "allele_mismatch" and status[row] == "ambiguous_dropped":
                    continue
                status[row], vkey[row], vid[row] = state, keys[j], ident
                if allele is None:
                    continue
                counted[row] = allele
                cols.append(j)
                signs.append(1.0 if allele == alt.upper() else -1.0)
                offsets.append(0.0 if allele == alt.upper() else 2.0)
                wts.append(weights[row])
        if not cols:
            continue
        dos = chunk.dosages[:, cols].astype(np.float64)
        sign = np.asarray(signs)
        effect_dosage = offsets + sign * dos  # ALT dosage, or 2 - ALT dosage
        missing = np.isnan(effect_dosage)
        if missing.any():
            if freq_lookup is not None:
                alt_p = freq_lookup.reindex(keys[cols]).to_numpy()
                if np.isnan(alt_p).any():
                    absent = keys[cols][np.isnan(alt_p)][0]
                    raise InputDataError(f"variant {absent} is absent from the frequency table")
            else:
                alt_p = np.nanmean(dos, axis=0) / 2.0
            effect_p = np.where(sign > 0, alt_p, 1.0 - alt_p)
            effect_dosage = np.where(missing, 2.0 * effect_p, effect_dosage)
        total += effect_dosage @ np.asarray(wts)
        n_used += len(cols)
    # rows whose status changed to duplicate after contributing must not stay counted
    if total is None:
        raise InputDataError(f"{source.path}: no variants to score")
    log["status"], log["variant_key"], log["variant_id"] = status, vkey, vid
    log["counted_allele"] = counted
    log["weight_used"] = np.where(np.isin(status, ["matched", "flipped"]), weights, 0.0)
    n_ok = int(np.isin(status, ["matched", "flipped"]).sum())
    if n_used != n_ok:
        raise InputDataError(
            f"{sf.path}: some scoring-file rows match more than one genotype variant "
            f"(see the 'duplicate' rows in the match log); deduplicate the genotypes"
        )
    fraction = n_ok / max(len(table), 1)
    counts = log["status"].value_counts().to_dict()
    logger.info("%s: %d of %d rows usable (%s)", sf.path, n_ok, len(table), counts)
    if fraction < min_overlap:
        raise InputDataError(
            f"only {n_ok} of {len(table)} rows of {sf.path} ({fraction:.1%}) match the genotypes "
            f"in {source.path}, below min_overlap={min_overlap:g}; statuses: {counts}"
        )
    scores = pd.DataFrame(
        {"sample_id": out_samples, "SUM": total, "n_matched": np.full(len(total), n_ok, np.int64)}
    )
    return scores, log


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
