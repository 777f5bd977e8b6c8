"""Polygenic scores: the SUM over matched rows of weight × effect-allele dosage (design §3).

:func:`score` reads the scoring file(s) (:mod:`~rvfedprs.genotypes.scorefile`), matches them
(:mod:`~rvfedprs.genotypes.matching`) and sums weight × effect-allele dosage per sample and
score; a missing dosage counts 2·p of the effect allele (p over the scored samples, as plink2
does, or from a given frequency table). Several scores — a list of files, or a file with
``effect_weight_<name>`` columns — are computed in one read of the genotypes, one SUM column
each.

The SUM equals ``plink2 --score FILE 1 2 3 header cols=+scoresums`` (``SCORE1_SUM``) run on the
matched variants, with FILE listing each genotype variant ID, the effect allele as written in the
genotypes (after a strand flip) and the weight (:func:`write_plink2_scorefile`). Rows flagged
``is_dominant`` / ``is_recessive`` are scored with plink2's ``dominant`` / ``recessive`` models
on the effect-allele dosage x: ``min(x, 1)`` and ``max(x - 1, 0)``; a missing genotype counts q,
the effect-allele frequency, under either model (as plink2 imputes it; tested).

A haploid call (male chrX: a BGEN sample of ploidy 1, a VCF's ``GT`` of one allele) counts as
homozygous, 0 or 2 effect alleles, as plink2 reads it; where a BGEN variant holds haploid calls
a missing one counts 2·p with a haploid call as one allele, as ``plink2 --score`` counts p when
it knows the sexes (:meth:`~rvfedprs.genotypes.bgen.BgenSource.dosage_dot`). A score that
nothing matches is refused whatever ``min_overlap`` says: its SUM would be 0 everywhere.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeSource,
    sample_index,
    variant_keys,
)
from rvfedprs.genotypes.matching import (
    MATCH_STATUSES,
    USABLE_STATUSES,
    Candidates,
    ScoreMatcher,
    check_overlap,
)
from rvfedprs.genotypes.readers import genotype_build
from rvfedprs.genotypes.scorefile import (
    ScoreFile,
    declared_build,
    normalise_build,
    read_scorefile,
)

__all__ = [
    "MATCH_STATUSES",
    "check_build",
    "ScoreFile",
    "read_scorefile",
    "score",
    "sum_columns",
    "write_plink2_scorefile",
]

logger = logging.getLogger(__name__)

ScoreFileLike = str | Path | ScoreFile


def check_build(sf: ScoreFile, expected: str | None) -> None:
    """Raise when a scoring file declares another genome build than ``expected``."""
    if expected is None:
        return
    declared = declared_build(sf)
    if declared is None:
        logger.warning("%s declares no genome build; assuming %s", sf.path, expected)
        return
    if declared != normalise_build(expected):
        raise InputDataError(
            f"{sf.path} declares genome_build={sf.genome_build}, but the genotypes are {expected}"
        )


def sum_columns(names: Sequence[str]) -> list[str]:
    """The SUM column of each score: ``SUM`` for a single score, else ``<name>_SUM``."""
    return ["SUM"] if len(names) == 1 else [f"{n}_SUM" for n in names]


def _transform(effect: np.ndarray, kind: np.ndarray) -> np.ndarray:
    """plink2's dominant / recessive models on effect-allele dosages (columns by ``kind``)."""
    out = effect.copy()
    dom = kind == "dominant"
    rec = kind == "recessive"
    out[..., dom] = np.minimum(effect[..., dom], 1.0)
    out[..., rec] = np.maximum(effect[..., rec] - 1.0, 0.0)
    return out


class _Terms:
    """The scored terms of all scores, grouped by variant.

    Built from the resolved matches of every scoring file; ``index`` are increasing variant
    positions, ``coef`` (n_variants, n_scores) the signed additive weights (``+w`` where the
    effect allele is ALT, ``-w`` where it is REF, plus ``2w`` in ``constant``); the
    non-additive rows are kept apart (``nonadd_*``), since their models are not linear.
    """

    def __init__(self, resolved: list[tuple[pd.DataFrame, np.ndarray, int]], n_scores: int):
        idx, sign, kinds, w_rows = [], [], [], []
        for table, weights, first in resolved:
            use = table["status"].isin(USABLE_STATUSES).to_numpy()
            w = np.zeros((int(use.sum()), n_scores))
            w[:, first : first + weights.shape[1]] = np.nan_to_num(weights[use])
            idx.append(table["variant_index"].to_numpy()[use])
            sign.append(table["counts_alt"].to_numpy()[use])
            kinds.append(table["effect_type"].to_numpy()[use])
            w_rows.append(w)
        index = np.concatenate(idx) if idx else np.zeros(0, np.int64)
        counts_alt = np.concatenate(sign) if sign else np.zeros(0, bool)
        kind = np.concatenate(kinds) if kinds else np.zeros(0, object)
        weights = np.concatenate(w_rows) if w_rows else np.zeros((0, n_scores))
        additive = kind == "additive"
        s = np.where(counts_alt, 1.0, -1.0)[:, None]
        self.constant = (weights[additive] * (s[additive] < 0) * 2.0).sum(axis=0)
        self.index, inverse = np.unique(index[additive], return_inverse=True)
        self.coef = np.zeros((len(self.index), n_scores))
        np.add.at(self.coef, inverse.ravel(), weights[additive] * s[additive])
        order = np.argsort(index[~additive], kind="stable")
        #: increasing distinct variants of the non-additive terms, and each term's column
        self.nonadd_index, self.nonadd_col = np.unique(index[~additive][order], return_inverse=True)
        self.nonadd_col = self.nonadd_col.ravel()
        self.nonadd_alt = counts_alt[~additive][order]
        self.nonadd_kind = kind[~additive][order]
        self.nonadd_weights = weights[~additive][order]


def _frequency_fill(
    frequencies: pd.Series | None, variants: pd.DataFrame | None, index: np.ndarray
) -> np.ndarray | None:
    """2·p(ALT) of the variants at ``index`` from a frequency table (None: the samples')."""
    if frequencies is None or variants is None:
        return None
    keys = variant_keys(variants.iloc[index]).to_numpy(dtype=object)
    fill = 2.0 * frequencies.reindex(keys).to_numpy()
    absent = np.isnan(fill)
    if absent.any():
        raise InputDataError(
            f"variant {keys[np.flatnonzero(absent)[0]]} is absent from the frequency table"
        )
    return fill


def _nonadditive_sums(
    dosages: np.ndarray, counts_alt: np.ndarray, kind: np.ndarray, weights: np.ndarray, fill
) -> np.ndarray:
    """Σ w × model(effect dosage) per sample for dominant/recessive terms.

    A missing genotype counts q, the effect-allele frequency, under both models — what plink2
    imputes for them (tested against ``plink2 --score ... dominant|recessive``); q from ``fill``
    (2·p of ALT) or the called samples.
    """
    x = np.asarray(dosages, dtype=np.float64)
    missing = np.isnan(x)
    with np.errstate(invalid="ignore"):
        mean_alt = np.nanmean(np.where(missing.all(axis=0), 0.0, x), axis=0)
    alt_fill = mean_alt if fill is None else np.asarray(fill, dtype=np.float64)
    q = np.where(counts_alt, alt_fill, 2.0 - alt_fill) / 2.0  # effect-allele frequency
    effect = _transform(np.where(counts_alt, x, 2.0 - x), kind)
    effect = np.where(missing, q, effect)
    return effect @ weights


def _score_known(
    source: GenotypeSource,
    matchers: list[ScoreMatcher],
    firsts: list[int],
    n_scores: int,
    freq: pd.Series | None,
    samples: Sequence[str] | None,
    chunk_size: int,
) -> tuple[np.ndarray, list[Candidates], list[pd.DataFrame]]:
    """Match on the variant table first, then read only the matched variants."""
    if len(source.variants) == 0:
        raise InputDataError(f"{source.path}: no variants to score")
    found = [m.candidates(source.variants) for m in matchers]
    resolved = [m.resolve(f) for m, f in zip(matchers, found, strict=True)]
    terms = _Terms(
        [(r, m.scorefile.weights, f) for r, m, f in zip(resolved, matchers, firsts, strict=True)],
        n_scores,
    )
    fill = _frequency_fill(freq, source.variants, terms.index)
    sums, _ = source.dosage_dot(terms.index, terms.coef, fill, samples, chunk_size)
    sums = np.asarray(sums).reshape(-1, n_scores) + terms.constant
    if len(terms.nonadd_index):
        fill = _frequency_fill(freq, source.variants, terms.nonadd_index)
        done = 0
        for chunk in source.iter_selected(terms.nonadd_index, chunk_size, samples, np.float64):
            part = slice(done, done + chunk.dosages.shape[1])
            done = part.stop
            cols = np.arange(part.start, part.stop)
            term = np.isin(terms.nonadd_col, cols)
            local = terms.nonadd_col[term] - part.start
            sums += _nonadditive_sums(
                chunk.dosages[:, local],
                terms.nonadd_alt[term],
                terms.nonadd_kind[term],
                terms.nonadd_weights[term],
                None if fill is None else fill[part][local],
            )
    return sums, found, resolved


def _score_streamed(
    source: GenotypeSource,
    matchers: list[ScoreMatcher],
    firsts: list[int],
    n_scores: int,
    freq: pd.Series | None,
    samples: Sequence[str] | None,
    chunk_size: int,
) -> tuple[np.ndarray, list[Candidates], list[pd.DataFrame]]:
    """Match each chunk's variants as they stream (VCF/BCF): one read for every score."""
    n_out = len(sample_index(source.samples, samples, source.path))
    sums = np.zeros((n_out, n_scores))
    found: list[list[Candidates]] = [[] for _ in matchers]
    offset = 0
    any_chunk = False
    for chunk in source.iter_chunks(chunk_size=chunk_size, samples=samples):
        any_chunk = True
        pieces = [m.candidates(chunk.variants, offset) for m in matchers]
        for parts, piece in zip(found, pieces, strict=True):
            parts.append(piece)
        picked = [(p, m.scorefile, f) for p, m, f in zip(pieces, matchers, firsts, strict=True)]
        sums += _chunk_sums(chunk.dosages, chunk.variants, picked, offset, n_scores, freq)
        offset += len(chunk.variants)
    if not any_chunk:
        raise InputDataError(f"{source.path}: no variants to score")
    joined = [Candidates.concat(p) for p in found]
    resolved = [m.resolve(f) for m, f in zip(matchers, joined, strict=True)]
    return sums, joined, resolved


def _chunk_sums(
    dosages: np.ndarray,
    variants: pd.DataFrame,
    picked: list[tuple[Candidates, ScoreFile, int]],
    offset: int,
    n_scores: int,
    freq: pd.Series | None,
) -> np.ndarray:
    """One chunk's contribution of every usable candidate (a row matched twice raises later)."""
    out = np.zeros((dosages.shape[0], n_scores))
    for cand, sf, first in picked:
        use = cand.code >= 2
        if not use.any():
            continue
        rows = cand.rows[use]
        table = pd.DataFrame(
            {
                "status": "matched",
                "variant_index": cand.index[use] - offset,
                "counts_alt": cand.counts_alt[use],
                "effect_type": sf.table["effect_type"].to_numpy()[rows],
            }
        )
        terms = _Terms([(table, sf.weights[rows], first)], n_scores)
        fill = _frequency_fill(freq, variants, terms.index)
        x = dosages[:, terms.index].astype(np.float64)
        out += _dot_filled(x, terms.coef, fill) + terms.constant
        if len(terms.nonadd_index):
            fill = _frequency_fill(freq, variants, terms.nonadd_index)
            out += _nonadditive_sums(
                dosages[:, terms.nonadd_index[terms.nonadd_col]],
                terms.nonadd_alt,
                terms.nonadd_kind,
                terms.nonadd_weights,
                None if fill is None else fill[terms.nonadd_col],
            )
    return out


def _dot_filled(x: np.ndarray, coef: np.ndarray, fill: np.ndarray | None) -> np.ndarray:
    """``x @ coef`` with NaN entries of ``x`` replaced by ``fill`` (default: column means)."""
    missing = np.isnan(x)
    if missing.any():
        if fill is None:
            with np.errstate(invalid="ignore"):
                fill = np.nanmean(np.where(missing.all(axis=0), 0.0, x), axis=0)
        x = np.where(missing, np.nan_to_num(fill)[None, :], x)
    return x @ coef


def score(
    source: GenotypeSource,
    scorefile: ScoreFileLike | Sequence[ScoreFileLike],
    *,
    frequencies: pd.DataFrame | None = None,
    min_overlap: float = 0.75,
    samples: Sequence[str] | None = None,
    chunk_size: int = DEFAULT_CHUNK_SIZE,
    genome_build: str | None = None,
    keep_ambiguous: bool = False,
    return_candidates: bool = False,
) -> tuple[pd.DataFrame, pd.DataFrame] | tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]:
    """Polygenic score SUM per sample and score.

    Parameters
    ----------
    source : GenotypeSource
    scorefile : path or ScoreFile, or a list of them
        Every score of every file is computed in one pass over the genotypes.
    frequencies : DataFrame, optional
        With ``variant_key`` and ``alt_freq`` (e.g. the global federated frequencies); used to
        impute missing dosages as 2·p of the effect allele, so every scored variant must be
        listed. Default: frequencies over the scored samples (plink2's mean imputation).
    min_overlap : float
        Fewest usable rows (matched or flipped) per score, as a fraction of its rows. Even at
        0, a score no row of which matches is refused (its SUM would be 0 for every sample),
        and one matching under 1% of its rows is refused when its file declares another build
        than the genotypes (``genome_build``, else a VCF's ``##contig`` lengths) and logged as
        a warning otherwise (:func:`~rvfedprs.genotypes.matching.check_overlap`).
    samples : sequence of str, optional
        Samples to score, in this order (default: all).
    chunk_size : int
    genome_build : str, optional
        When given, each file's declared build must equal it (``NR`` or absent passes with a
        log).
    keep_ambiguous : bool
        Score A/T and C/G rows as written instead of dropping them.
    return_candidates : bool
        Also return the candidate-level log.

    Returns
    -------
    scores : DataFrame, shape (n_samples, 1 + 2 × n_scores)
        ``sample_id``, then per score its SUM (float64; :func:`sum_columns`: ``SUM`` for one
        score, ``<name>_SUM`` for several) and ``n_matched`` (``<name>_n_matched``), the rows
        used.
    match_log : DataFrame
        One row per scoring-file row and score, see
        :func:`~rvfedprs.genotypes.matching.match_scorefile`.
    candidate_log : DataFrame
        Only with ``return_candidates``: one row per (scoring-file row, genotype variant) pair
        and score, pgsc_calc's ``not_best`` included
        (:meth:`~rvfedprs.genotypes.matching.ScoreMatcher.candidate_log`).

    Raises
    ------
    InputDataError
        When a score's usable fraction is below ``min_overlap``, no row of a score matches,
        the build disagrees, a row matches two genotype variants, a scored variant is absent
        from ``frequencies``, or two scores share a name.

    Notes
    -----
    Sources that know their variant table up front (PLINK1/2, BGEN) are matched first and then
    only the matched variants are read, through :meth:`GenotypeSource.dosage_dot`; VCF/BCF
    chunks are matched as they stream.
    """
    items = [scorefile] if isinstance(scorefile, (str, Path, ScoreFile)) else list(scorefile)
    files = [s if isinstance(s, ScoreFile) else read_scorefile(s) for s in items]
    names: list[str] = []
    firsts: list[int] = []
    for sf in files:
        check_build(sf, genome_build)
        firsts.append(len(names))
        names += sf.scores
    if len(set(names)) != len(names):
        dup = sorted({n for n in names if names.count(n) > 1})
        raise InputDataError(f"score names {dup} occur twice among {[f.path for f in files]}")
    matchers = [ScoreMatcher(sf, keep_ambiguous=keep_ambiguous) for sf in files]
    freq = None
    if frequencies is not None:
        freq = pd.Series(
            frequencies["alt_freq"].to_numpy(dtype=np.float64),
            index=frequencies["variant_key"].to_numpy(),
        )
    run = _score_known if source.variants is not None else _score_streamed
    sums, found, resolved = run(source, matchers, firsts, len(names), freq, samples, chunk_size)
    log = pd.concat(
        [m.match_log(r) for m, r in zip(matchers, resolved, strict=True)], ignore_index=True
    )
    build = normalise_build(genome_build) if genome_build else genotype_build(source)
    n_ok = check_overlap(log, min_overlap, source.path, scorefiles=files, genotype_build=build)
    rows_out = sample_index(source.samples, samples, source.path)
    scores = pd.DataFrame({"sample_id": source.samples[rows_out]})
    single = len(names) == 1
    for k, (name, column) in enumerate(zip(names, sum_columns(names), strict=True)):
        scores[column] = sums[:, k]
        count = "n_matched" if single else f"{name}_n_matched"
        scores[count] = np.full(len(scores), n_ok[name], np.int64)
    if not return_candidates:
        return scores, log
    candidate_log = pd.concat(
        [m.candidate_log(f, r) for m, f, r in zip(matchers, found, resolved, strict=True)],
        ignore_index=True,
    )
    return scores, log, candidate_log


def write_plink2_scorefile(match_log: pd.DataFrame, path: str | Path) -> Path:
    """Write the usable rows of a match log as a plink2 ``--score`` file (ID, allele, weights).

    One weight column per score (``accession``), so that ``plink2 --bfile X --score PATH 1 2
    3-N header cols=+scoresums`` gives each score's ``<name>_SUM`` equal to :func:`score`'s
    (the oracle in the tests and the benchmarks). Only additive rows are written (plink2
    applies one model to a whole file). plink2 matches rows by variant ID: where the used
    variants' IDs are missing (``.`` in a VCF) or not unique, the rows are written with
    ``chrom:pos:ref:alt`` IDs instead (said in a warning), which plink2 gives the genotypes
    with ``--set-all-var-ids @:#:$r:$a``; summing the ``.`` rows into one would be wrong.
    """
    used = match_log[match_log["status"].isin(USABLE_STATUSES)]
    if "accession" not in used.columns:
        used = used.assign(accession="SCORE1")
    ids = used.drop_duplicates("variant_key") if "variant_key" in used.columns else used
    unnamed = ids["variant_id"].astype(str).isin([".", ""]) | ids["variant_id"].duplicated(
        keep=False
    )
    if "variant_key" in used.columns and unnamed.any():
        logger.warning(
            "%d used variant(s) have no unique ID (e.g. %s at %s); %s is written with "
            "chrom:pos:ref:alt IDs: give plink2 --set-all-var-ids @:#:$r:$a",
            int(unnamed.sum()),
            ids.loc[unnamed, "variant_id"].iloc[0],
            ids.loc[unnamed, "variant_key"].iloc[0],
            path,
        )
        used = used.assign(variant_id=used["variant_key"])
    wide = used.pivot_table(
        index=["variant_id", "counted_allele"],
        columns="accession",
        values="effect_weight",
        aggfunc="sum",
        fill_value=0.0,
        sort=False,
    )
    order = list(dict.fromkeys(used["accession"]))
    out = wide[order].reset_index().rename(columns={"variant_id": "ID", "counted_allele": "A1"})
    if len(order) == 1:
        out = out.rename(columns={order[0]: "WEIGHT"})
    out.to_csv(path, sep="\t", index=False, float_format="%.17g")
    return Path(path)
