"""Match scoring-file rows to genotype variants (plink2 ``--score`` rules), giving the match log.

Rules (design §3): a row is paired with the genotype variants at its chr:pos (its rsID when it has
no position), the allele pairs are compared as sets, a strand flip is accepted where the pair is
not A/T or C/G, and A/T, C/G pairs are dropped unless ``keep_ambiguous`` (then they count as
written, on the genotypes' strand, as plink2 and pgsc_calc do). A row keeps its one usable
variant (two is an error: plink2 would count it twice), else its last ambiguous one, else its
last one (an allele mismatch).

The match log has one row per scoring-file row and score (``accession``), with our ``status``
(:data:`MATCH_STATUSES`) and pgsc_calc's vocabulary beside it — ``match_type`` (``refalt``,
``altref``, ``refalt_flip``, ``altref_flip``, ``no_oa_ref``, ``no_oa_alt``) and
``match_status`` (``matched``, ``excluded``, ``unmatched``) — so that a log can be diffed
against a pgsc_calc run; its ``candidates`` column counts the genotype variants a row was paired
with. pgsc_calc's own log has one row per candidate (scoring-file row × genotype variant), where
the candidates a row did not keep are ``not_best``: :meth:`ScoreMatcher.candidate_log` gives that
table. Matching is vectorised: one table lookup per chunk of variants.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.alleles import complement, upper
from rvfedprs.genotypes.chunk import variant_keys
from rvfedprs.genotypes.scorefile import ScoreFile, declared_build

__all__ = [
    "LOW_MATCH_SHARE",
    "MATCH_STATUSES",
    "MATCH_TYPES",
    "USABLE_STATUSES",
    "Candidates",
    "ScoreMatcher",
    "check_overlap",
    "match_scorefile",
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
    "no_position",
    "non_primary_contig",
    "complex",
)
#: Statuses whose rows are scored.
USABLE_STATUSES = ("matched", "flipped")
#: A score with a usable share below this is suspect whatever ``min_overlap`` allows: the share
#: a scoring file on another genome build gets (positions agree only by chance).
LOW_MATCH_SHARE = 0.01
#: pgsc_calc's match types (which genotype allele the effect allele is, on which strand).
MATCH_TYPES = ("refalt", "altref", "refalt_flip", "altref_flip", "no_oa_ref", "no_oa_alt")
#: Our status → pgsc_calc's ``match_status``.
PGSC_STATUS = {
    "matched": "matched",
    "flipped": "matched",
    "ambiguous_dropped": "excluded",
    "duplicate": "excluded",
    "complex": "excluded",
    "allele_mismatch": "unmatched",
    "not_found": "unmatched",
    "no_position": "unmatched",
    "non_primary_contig": "unmatched",
}

# status codes of a (score row, genotype variant) pair, in order of precedence within a row
_MISMATCH, _AMBIGUOUS, _MATCHED, _FLIPPED = 0, 1, 2, 3
_CODE_NAMES = np.array(["allele_mismatch", "ambiguous_dropped", "matched", "flipped"], object)
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


def classify(
    effect: np.ndarray,
    other: np.ndarray,
    effect_flip: np.ndarray,
    other_flip: np.ndarray,
    ref: np.ndarray,
    alt: np.ndarray,
    keep_ambiguous: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Status of score rows against genotype variants, pair by pair (all arrays of shape (n,)).

    ``effect``/``other`` are the row's alleles (``other`` ``""`` when absent), ``*_flip`` their
    strand complements, ``ref``/``alt`` the genotype alleles (upper case).

    Returns
    -------
    status : ndarray of int8, shape (n,)
        ``_MISMATCH``, ``_AMBIGUOUS``, ``_MATCHED`` or ``_FLIPPED``.
    counts_alt : ndarray of bool, shape (n,)
        For matched/flipped pairs, whether the effect allele is the genotype ALT (else REF).
    ambiguous : ndarray of bool, shape (n,)
        The pair is A/T or C/G (the row's, or the genotype's when the row has no other allele).
    """
    has_other = other != ""
    direct = _same_pair(effect, other, ref, alt)
    flipped = _same_pair(effect_flip, other_flip, ref, alt)
    ambiguous = np.where(has_other, _is_ambiguous(effect, other), _is_ambiguous(ref, alt))
    ambiguous_code = _MATCHED if keep_ambiguous else _AMBIGUOUS
    with_other = np.select(
        [ambiguous & direct, ambiguous, direct, flipped],
        [ambiguous_code, _MISMATCH if keep_ambiguous else _AMBIGUOUS, _MATCHED, _FLIPPED],
        _MISMATCH,
    )
    alone = np.select(
        [
            ambiguous & ((effect == ref) | (effect == alt)),
            ambiguous,
            (effect == ref) | (effect == alt),
        ],
        [ambiguous_code, _MISMATCH if keep_ambiguous else _AMBIGUOUS, _MATCHED],
        _MISMATCH,
    )
    status = np.where(has_other, with_other, alone).astype(np.int8)
    counts_alt = np.where(status == _FLIPPED, effect_flip == alt, effect == alt)
    return status, counts_alt.astype(bool), ambiguous.astype(bool)


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
    code = pd.Series(chrom).map(_CHROM_CODES).to_numpy(dtype=np.float64)
    code = np.where(np.isnan(code), -1, code).astype(np.int64)
    return code * (1 << 40) + np.asarray(pos, dtype=np.int64)


def _duplicate_rows(scorefile: ScoreFile) -> np.ndarray:
    """Rows repeating an earlier row's variant and alleles with the same weights (dropped).

    As plink2 (which stops on any repeated variant), a variant listed twice with different
    weights in any score is an error: which weight was meant cannot be guessed. Identical
    repeats are dropped (status ``duplicate``) and counted in the log.

    Raises
    ------
    InputDataError
        Naming up to five conflicting variants, their data rows (1-based) and weights.
    """
    table = scorefile.table
    keys = _row_key(table)
    usable = (table["pre_status"] == "").to_numpy()
    repeated = keys.duplicated(keep=False).to_numpy() & usable
    if repeated.any():
        weights = pd.DataFrame(scorefile.weights[repeated]).fillna(np.inf)  # blank = blank
        weights["key"] = keys[repeated].to_numpy()
        differ = weights.groupby("key", sort=False).nunique().gt(1).any(axis=1)
        conflicting = differ[differ].index.tolist()
        if conflicting:
            shown = []
            for key in conflicting[:5]:
                rows = np.flatnonzero((keys == key).to_numpy() & usable)
                weight = ", ".join(f"{w:g}" for w in scorefile.weights[rows, 0])
                lines = ", ".join(str(int(r) + 1) for r in table["row"].to_numpy()[rows])
                shown.append(f"{key} (data rows {lines}: weights {weight})")
            more = f" and {len(conflicting) - 5} more" if len(conflicting) > 5 else ""
            raise InputDataError(
                f"scoring file {scorefile.path}: {len(conflicting)} variant(s) listed more than "
                f"once with different weights: {'; '.join(shown)}{more}. Keep one row per "
                "variant and allele pair (plink2 --score refuses such a file too)"
            )
    duplicate = keys.duplicated().to_numpy() & usable
    if duplicate.any():
        logger.warning(
            "scoring file %s: %d identical repeated row(s) dropped (status 'duplicate' in the "
            "match log)", scorefile.path, int(duplicate.sum()),
        )  # fmt: skip
    return duplicate


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


@dataclass
class Candidates:
    """Every (scoring-file row, genotype variant) pair of one block of variants.

    All arrays have shape (n_pairs,) and are in variant order.
    """

    rows: np.ndarray
    code: np.ndarray
    counts_alt: np.ndarray
    ambiguous: np.ndarray
    allele: np.ndarray
    key: np.ndarray
    id: np.ndarray
    index: np.ndarray

    @classmethod
    def concat(cls, parts: Sequence[Candidates]) -> Candidates:
        """One block from several (e.g. the chunks of a streamed VCF)."""
        if not parts:
            empty = np.zeros(0, np.int64)
            obj = np.zeros(0, object)
            return cls(empty, empty.astype(np.int8), empty.astype(bool), empty.astype(bool),
                       obj, obj, obj, empty)  # fmt: skip
        fields = cls.__dataclass_fields__
        return cls(**{f: np.concatenate([getattr(p, f) for p in parts]) for f in fields})


class ScoreMatcher:
    """One scoring file's matchable rows, ready to be paired with blocks of genotype variants.

    Parameters
    ----------
    scorefile : ScoreFile
    keep_ambiguous : bool
        Score A/T and C/G rows as written (no strand flip) instead of dropping them.
    """

    def __init__(self, scorefile: ScoreFile, *, keep_ambiguous: bool = False) -> None:
        self.scorefile = scorefile
        self.keep_ambiguous = keep_ambiguous
        table = scorefile.table
        self.duplicate = _duplicate_rows(scorefile)
        usable = table[(table["pre_status"] == "").to_numpy() & ~self.duplicate]
        placed = usable["pos"].notna().to_numpy()
        self._by_pos = _Lookup(
            _position_keys(usable["chrom"][placed], usable["pos"][placed].to_numpy(np.int64)),
            usable["row"].to_numpy()[placed],
        )
        named = ~placed & (usable["rsid"] != "").to_numpy()
        if scorefile.harmonised:  # unplaced harmonised rows are "no_position", not rsID-matched
            named &= False
        self._by_id = _Lookup(usable["rsid"].to_numpy()[named], usable["row"].to_numpy()[named])
        effect, other = table["effect_allele"], table["other_allele"]
        self._alleles = (
            effect.to_numpy(dtype=object),
            other.to_numpy(dtype=object),
            complement(effect.to_numpy(dtype=object)),
            complement(other.to_numpy(dtype=object)),
        )

    def candidates(self, variants: pd.DataFrame, offset: int = 0) -> Candidates:
        """Every pair of a row with one of ``variants`` (positions ``offset + i``)."""
        j_pos, rows_pos = self._by_pos.pairs(
            _position_keys(variants["chrom"], variants["pos"].to_numpy())
        )
        j_id, rows_id = self._by_id.pairs(variants["id"].to_numpy())
        j = np.concatenate([j_pos, j_id])
        rows = np.concatenate([rows_pos, rows_id])
        order = np.argsort(j, kind="stable")  # variant order: a row's last candidate counts
        j, rows = j[order], rows[order]
        picked = variants.iloc[j]
        ref = upper(picked["ref"].to_numpy(dtype=object))
        alt = upper(picked["alt"].to_numpy(dtype=object))
        effect, other, effect_flip, other_flip = (a[rows] for a in self._alleles)
        code, counts_alt, ambiguous = classify(
            effect, other, effect_flip, other_flip, ref, alt, self.keep_ambiguous
        )
        return Candidates(
            rows=rows,
            code=code,
            counts_alt=counts_alt,
            ambiguous=ambiguous,
            allele=np.where(counts_alt, alt, ref),
            key=variant_keys(picked).to_numpy(dtype=object),
            id=picked["id"].to_numpy(dtype=object),
            index=(j + offset).astype(np.int64),
        )

    def resolve(self, found: Candidates) -> pd.DataFrame:
        """Each row's outcome (score-independent): one row per scoring-file row.

        Returns
        -------
        DataFrame
            The scoring-file table plus ``status``, ``variant_key``, ``variant_id``,
            ``variant_index`` (-1 when unused), ``counted_allele``, ``counts_alt``,
            ``ambiguous`` and ``match_type``.

        Raises
        ------
        InputDataError
            When a row has two or more usable variants (naming up to five rows).
        """
        table = self.scorefile.table
        out = table.drop(columns=["effect_weight"]).copy()
        status = table["pre_status"].to_numpy(dtype=object).copy()
        status[status == ""] = "not_found"
        status[self.duplicate] = "duplicate"
        n = len(table)
        key = np.full(n, "", dtype=object)
        ids = np.full(n, "", dtype=object)
        allele = np.full(n, "", dtype=object)
        index = np.full(n, -1, dtype=np.int64)
        counts_alt = np.zeros(n, dtype=bool)
        ambiguous = np.zeros(n, dtype=bool)
        match_type = np.full(n, "", dtype=object)
        if len(found.rows):
            pick = self._best(found)
            target = found.rows[pick]
            status[target] = _CODE_NAMES[found.code[pick]]
            key[target] = found.key[pick]
            ids[target] = found.id[pick]
            ok = found.code[pick] >= _MATCHED
            allele[target] = np.where(ok, found.allele[pick], "")
            index[target] = np.where(ok, found.index[pick], -1)
            counts_alt[target] = found.counts_alt[pick] & ok
            ambiguous[target] = found.ambiguous[pick]
            match_type[target] = self._match_types(found, pick)
        out["status"] = status
        out["variant_key"] = key
        out["variant_id"] = ids
        out["variant_index"] = index
        out["counted_allele"] = allele
        out["counts_alt"] = counts_alt
        out["ambiguous"] = ambiguous
        out["match_type"] = match_type
        out["candidates"] = np.bincount(found.rows, minlength=n).astype(np.int64)
        return out

    def _best(self, found: Candidates) -> np.ndarray:
        """Position in ``found`` of each paired row's kept candidate, by row.

        A usable pair (matched/flipped) wins, then an ambiguous one, then a mismatch; among
        equals the last in variant order.

        Raises
        ------
        InputDataError
            When a row has two or more usable variants (naming up to five rows).
        """
        usable = found.code >= _MATCHED
        n_usable = np.bincount(found.rows[usable])
        if (n_usable > 1).any():
            twice = np.flatnonzero(n_usable > 1)
            shown = ", ".join(str(r + 1) for r in twice[:5])
            raise InputDataError(
                f"{self.scorefile.path}: {len(twice)} scoring-file rows (rows {shown}) match "
                "more than one genotype variant; deduplicate the genotypes"
            )
        rank = np.where(usable, 2, np.where(found.code == _AMBIGUOUS, 1, 0))
        order = np.lexsort((np.arange(len(found.rows)), rank, found.rows))
        last = np.flatnonzero(np.append(found.rows[order][1:] != found.rows[order][:-1], True))
        return order[last]

    def _match_types(self, found: Candidates, which: np.ndarray) -> np.ndarray:
        """pgsc_calc's ``match_type`` of the pairs ``found[which]`` (``""`` for a mismatch)."""
        has_other = self._alleles[1][found.rows[which]] != ""
        alt_side = found.counts_alt[which]
        typed = np.where(
            has_other,
            np.where(alt_side, "altref", "refalt"),
            np.where(alt_side, "no_oa_alt", "no_oa_ref"),
        ).astype(object)
        typed = np.where(found.code[which] == _FLIPPED, typed + "_flip", typed)
        return np.where(found.code[which] == _MISMATCH, "", typed).astype(object)

    def candidate_log(self, found: Candidates, resolved: pd.DataFrame) -> pd.DataFrame:
        """pgsc_calc's candidate-level log: one row per (scoring-file row, genotype variant) pair.

        A row paired with no genotype variant appears once, as in :meth:`match_log`. The pair
        a row kept (:meth:`resolve`) carries the row's outcome; every other pair of the row is
        ``match_status`` ``not_best``, its own ``status`` saying why it lost
        (``allele_mismatch``, ``ambiguous_dropped``). Sections per score and columns are those
        of :meth:`match_log`, ``variant_key``/``variant_id`` naming the pair's variant.

        Parameters
        ----------
        found : Candidates
            The pairs given to :meth:`resolve`.
        resolved : DataFrame
            What :meth:`resolve` returned for them.
        """
        kept = np.zeros(len(found.rows), dtype=bool)
        if len(found.rows):
            kept[self._best(found)] = True
        others = np.flatnonzero(~kept)
        pairs = resolved.iloc[found.rows[others]].copy()
        usable = found.code[others] >= _MATCHED
        pairs["status"] = _CODE_NAMES[found.code[others]]
        pairs["variant_key"] = found.key[others]
        pairs["variant_id"] = found.id[others]
        pairs["variant_index"] = np.where(usable, found.index[others], -1)
        pairs["counted_allele"] = np.where(usable, found.allele[others], "")
        pairs["counts_alt"] = found.counts_alt[others] & usable
        pairs["ambiguous"] = found.ambiguous[others]
        pairs["match_type"] = self._match_types(found, others)
        pairs["_not_best"] = True
        pairs["_order"] = found.index[others]
        order = np.full(len(resolved), -1, dtype=np.int64)
        order[found.rows[kept]] = found.index[kept]
        rows = resolved.assign(_not_best=False, _order=order)
        table = pd.concat([rows, pairs]).sort_values(["row", "_order"], kind="stable")
        log = self.match_log(table.drop(columns="_order").reset_index(drop=True))
        not_best = log.pop("_not_best").to_numpy(dtype=bool)
        log.loc[not_best, "match_status"] = "not_best"
        return log

    def match_log(self, resolved: pd.DataFrame) -> pd.DataFrame:
        """The long match log: one section per score (``accession``), rows in file order.

        A row with no weight for a score (a blank ``effect_weight_<name>`` cell) is absent from
        that score's section.
        """
        sf = self.scorefile
        weights = sf.weights[resolved["row"].to_numpy()]
        parts = []
        for k, name in enumerate(sf.scores):
            weight = weights[:, k]
            section = resolved[~np.isnan(weight)].copy()
            w = weight[~np.isnan(weight)]
            section.insert(0, "accession", name)
            section.insert(section.columns.get_loc("effect_type"), "effect_weight", w)
            usable = section["status"].isin(USABLE_STATUSES).to_numpy()
            section["weight_used"] = np.where(usable, w, 0.0)
            section["match_status"] = section["status"].map(PGSC_STATUS)
            parts.append(section)
        log = pd.concat(parts, ignore_index=True)
        return log.drop(columns=["pre_status"])


def _build_note(scorefile: ScoreFile | None, genotype_build: str | None) -> str:
    """What the builds say, for a message about a score that (almost) nothing matched."""
    if scorefile is None:
        return ""
    declared = declared_build(scorefile)
    if declared is None:
        return (
            f"; {scorefile.path} declares no genome build: check that it and the genotypes are "
            "on the same one"
        )
    if genotype_build is None:
        return (
            f"; {scorefile.path} declares genome_build={declared} and the genotypes' build is "
            "unknown: if they are on another one, use the scoring file harmonised to theirs "
            "(PGS Catalog *_hmPOS_GRCh37/38)"
        )
    if genotype_build != declared:
        return (
            f"; {scorefile.path} declares genome_build={declared}, but the genotypes are "
            f"{genotype_build}: use the scoring file harmonised to {genotype_build} "
            f"(PGS Catalog *_hmPOS_{genotype_build})"
        )
    return f"; both {scorefile.path} and the genotypes are {declared}"


def check_overlap(
    log: pd.DataFrame,
    min_overlap: float,
    genotypes: str,
    *,
    scorefiles: Sequence[ScoreFile] = (),
    genotype_build: str | None = None,
) -> dict[str, int]:
    """Usable rows per score; raise when a score's usable share is below ``min_overlap``.

    Whatever ``min_overlap`` allows (0 turns that check off), a score with no usable row is
    refused: its PRS would be 0 for every sample, which is never a result. A score with a
    usable share below :data:`LOW_MATCH_SHARE` is refused when the scoring file declares
    another build than ``genotype_build``, and logged as a warning otherwise.

    Parameters
    ----------
    log : DataFrame
        The match log (:meth:`ScoreMatcher.match_log`).
    min_overlap : float
    genotypes : str
        What the genotypes are, for the messages.
    scorefiles : sequence of ScoreFile
        The files of the scores, to name them and their declared build in the messages.
    genotype_build : str, optional
        The genotypes' build when known (``GRCh37``/``GRCh38``).

    Returns
    -------
    dict of str to int
        Usable (matched or flipped) rows per ``accession``.

    Raises
    ------
    InputDataError
        Naming the score, its file, the counts, the statuses and what the builds say.
    """
    files = {name: sf for sf in scorefiles for name in sf.scores}
    usable: dict[str, int] = {}
    for name, section in log.groupby("accession", sort=False):
        n_ok = int(section["status"].isin(USABLE_STATUSES).sum())
        n_rows = len(section)
        counts = section["status"].value_counts().to_dict()
        logger.info("score %s: %d of %d rows usable (%s)", name, n_ok, n_rows, counts)
        fraction = n_ok / max(n_rows, 1)
        sf = files.get(str(name))
        label = f"score {name}" + (f" ({sf.path})" if sf is not None else "")
        note = _build_note(sf, genotype_build) if fraction < LOW_MATCH_SHARE else ""
        if fraction < min_overlap:
            raise InputDataError(
                f"only {n_ok} of {n_rows} rows of {label} ({fraction:.1%}) match the "
                f"genotypes in {genotypes}, below min_overlap={min_overlap:g}; statuses: "
                f"{counts}{note}"
            )
        if n_ok == 0:
            raise InputDataError(
                f"none of the {n_rows} rows of {label} matches the genotypes in {genotypes} "
                f"(statuses: {counts}): its PRS would be 0 for every sample, so none is "
                f"written{note}"
            )
        if fraction < LOW_MATCH_SHARE:
            declared = declared_build(sf) if sf is not None else None
            message = (
                f"only {n_ok} of {n_rows} rows of {label} ({fraction:.2%}) match the "
                f"genotypes in {genotypes} (statuses: {counts}){note}"
            )
            if declared is not None and genotype_build not in (None, declared):
                raise InputDataError(message)
            logger.warning("%s; min_overlap=%g lets it through", message, min_overlap)
        usable[str(name)] = n_ok
    return usable


def match_scorefile(
    variants: pd.DataFrame,
    scorefile: ScoreFile,
    *,
    keep_ambiguous: bool = False,
    min_overlap: float = 0.0,
    genotypes: str = "the genotypes",
    return_candidates: bool = False,
) -> pd.DataFrame | tuple[pd.DataFrame, pd.DataFrame]:
    """Match a scoring file to a variant table and return the match log.

    Parameters
    ----------
    variants : DataFrame
        ``chrom, pos, id, ref, alt`` (a source's :attr:`~GenotypeSource.variants`, or the
        global variant table of the workflow); row ``i`` is ``variant_index`` ``i``.
    scorefile : ScoreFile
    keep_ambiguous : bool
    min_overlap : float
        Fewest usable rows per score, as a fraction of its rows.
    genotypes : str
        What the variants are, for the error message.
    return_candidates : bool
        Also return the candidate-level log (:meth:`ScoreMatcher.candidate_log`).

    Returns
    -------
    log : DataFrame
        One row per scoring-file row and score: ``accession``, the row's fields, ``status``
        (:data:`MATCH_STATUSES`), ``variant_key``, ``variant_id``, ``variant_index``,
        ``counted_allele``, ``counts_alt``, ``ambiguous``, ``match_type``, ``candidates``,
        ``weight_used``, ``match_status``.
    candidate_log : DataFrame
        Only with ``return_candidates``: one row per (scoring-file row, genotype variant) pair
        and score, ``not_best`` included.

    Raises
    ------
    InputDataError
        See :func:`check_overlap` (a score no row of which matches is refused).
    """
    matcher = ScoreMatcher(scorefile, keep_ambiguous=keep_ambiguous)
    found = matcher.candidates(variants)
    resolved = matcher.resolve(found)
    log = matcher.match_log(resolved)
    check_overlap(log, min_overlap, genotypes, scorefiles=[scorefile])
    if not return_candidates:
        return log
    return log, matcher.candidate_log(found, resolved)
