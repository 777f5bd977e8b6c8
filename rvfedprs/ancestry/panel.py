"""The reference panel's side of the ancestry analysis: labels, shared variants, thinning.

Variants used for the PCA are those of the reference panel that the target genotypes also hold
(matched on chromosome, position and allele pair, either orientation, either strand), with the
strand-ambiguous A/T and C/G pairs removed, passing a MAF and missingness filter, and LD-thinned
(plink2 ``--indep-pairwise`` as pgsc_calc does; or keeping one variant per distance window where
plink2 is absent or the reference is not a PLINK fileset). Every variant of the reference gets a
status in the log table, so nothing is dropped unseen.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes import GenotypeSource, normalise_chrom
from rvfedprs.genotypes.alleles import complement, spelled_with, upper
from rvfedprs.genotypes.formats import genotype_format

__all__ = [
    "LABEL_COLUMNS",
    "THINNING",
    "frequency_filter",
    "match_variants",
    "read_labels",
    "read_matrix",
    "thin_variants",
    "variant_table",
]

#: Columns tried in turn for the population label when none is named (the .psam of 1000 Genomes
#: has ``SuperPop`` and ``Population``; pgsc_calc's reference has ``SuperPop``).
LABEL_COLUMNS = ("SuperPop", "superpop", "SUPERPOP", "Population", "population", "POP", "pop")

#: LD-thinning methods: "auto" is plink2 when available for a PLINK reference, else distance.
THINNING = ("auto", "plink2", "distance", "none")

_AMBIGUOUS = {frozenset("AT"), frozenset("CG")}


def read_labels(
    path: str | Path, samples: Sequence[str], *, column: str | None = None
) -> pd.Series:
    """Population labels of the reference ``samples`` from a table or a ``.psam``.

    Parameters
    ----------
    path : str or Path
        A tab- or whitespace-separated table with a header: a sample column (``IID``, ``#IID``,
        ``sample_id`` or ``sample``) and the label column.
    samples : sequence of str
        The reference panel's sample IDs.
    column : str, optional
        The label column (default: the first of :data:`LABEL_COLUMNS` present).

    Returns
    -------
    Series of str, indexed by sample ID, in the order of ``samples``.

    Raises
    ------
    InputDataError
        Without a sample or label column, or when a panel sample has no label (naming them).
    """
    table = pd.read_csv(path, sep=None, engine="python", dtype=str)
    table.columns = [c.lstrip("#") for c in table.columns]
    id_col = next((c for c in ("IID", "sample_id", "sample", "FID") if c in table.columns), None)
    if id_col is None:
        raise InputDataError(
            f"{path}: no sample column; expected one of IID, sample_id, sample "
            f"(columns: {list(table.columns)})"
        )
    if column is None:
        column = next((c for c in LABEL_COLUMNS if c in table.columns), None)
        if column is None:
            raise InputDataError(
                f"{path}: no population column; name one with --label-column "
                f"(columns: {list(table.columns)}; tried {list(LABEL_COLUMNS)})"
            )
    elif column not in table.columns:
        raise InputDataError(
            f"label column {column!r} is absent from {path}; columns: {list(table.columns)}"
        )
    labels = table.set_index(id_col)[column]
    labels = labels[~labels.index.duplicated()]
    wanted = pd.Index(list(samples))
    found = labels.reindex(wanted)
    missing = wanted[found.isna().to_numpy()]
    if len(missing):
        shown = ", ".join(map(str, missing[:5]))
        raise InputDataError(
            f"{len(missing)} reference samples have no {column!r} label in {path}: {shown}"
        )
    if found.nunique() < 2:
        raise InputDataError(
            f"the reference labels in {path} ({column!r}) name {found.nunique()} population; "
            "ancestry assignment needs at least 2"
        )
    return found.astype(str)


def variant_table(source: GenotypeSource) -> pd.DataFrame:
    """The variant table of ``source`` (read through once when the format does not list it)."""
    if source.variants is not None:
        return source.variants.reset_index(drop=True)
    parts = [chunk.variants for chunk in source.iter_chunks(samples=source.samples[:1])]
    if not parts:
        return pd.DataFrame(columns=["chrom", "pos", "id", "ref", "alt"])
    return pd.concat(parts, ignore_index=True)


def _unique_positions(variants: pd.DataFrame) -> pd.DataFrame:
    frame = variants[["chrom", "pos", "ref", "alt"]].copy()
    frame["pos"] = frame["pos"].astype("int64")
    frame["row"] = np.arange(len(frame))
    return frame[~frame.duplicated(["chrom", "pos"], keep=False)]


def match_variants(reference: pd.DataFrame, target: pd.DataFrame) -> tuple[pd.DataFrame, pd.Series]:
    """Pair the reference's variants with the target's by position and allele pair.

    Parameters
    ----------
    reference, target : DataFrame
        Variant tables (``chrom``, ``pos``, ``ref``, ``alt``).

    Returns
    -------
    pairs : DataFrame
        ``ref_row``, ``target_row`` (positions in each table) and ``swap`` (True where the
        target's ALT is the reference's REF: its dosage is read as ``2 − dosage``), sorted by
        ``ref_row``.
    status : Series of str, shape (len(reference),)
        ``used``, ``not_in_target``, ``duplicate_position``, ``ambiguous``, ``not_snv`` or
        ``allele_mismatch`` per reference variant.
    """
    status = pd.Series("not_in_target", index=range(len(reference)), dtype=object)
    ref = _unique_positions(reference)
    status[np.setdiff1d(np.arange(len(reference)), ref["row"].to_numpy())] = "duplicate_position"
    tgt = _unique_positions(target)
    both = ref.merge(tgt, on=["chrom", "pos"], suffixes=("_r", "_t"))
    r_ref, r_alt = upper(both["ref_r"]), upper(both["alt_r"])
    t_ref, t_alt = upper(both["ref_t"]), upper(both["alt_t"])
    plain = (
        spelled_with(r_ref, "ACGT")
        & spelled_with(r_alt, "ACGT")
        & spelled_with(t_ref, "ACGT")
        & spelled_with(t_alt, "ACGT")
    )
    ambiguous = np.array(
        [frozenset((a, b)) in _AMBIGUOUS for a, b in zip(r_ref, r_alt, strict=True)], bool
    )
    c_ref, c_alt = complement(t_ref), complement(t_alt)
    same = ((t_ref == r_ref) & (t_alt == r_alt)) | ((c_ref == r_ref) & (c_alt == r_alt))
    swap = ((t_ref == r_alt) & (t_alt == r_ref)) | ((c_ref == r_alt) & (c_alt == r_ref))
    rows = both["row_r"].to_numpy()
    status[rows] = np.where(
        ~plain,
        "not_snv",
        np.where(ambiguous, "ambiguous", np.where(same | swap, "used", "allele_mismatch")),
    )
    keep = plain & ~ambiguous & (same | swap)
    pairs = pd.DataFrame(
        {
            "ref_row": rows[keep],
            "target_row": both["row_t"].to_numpy()[keep],
            "swap": swap[keep] & ~same[keep],
        }
    ).sort_values("ref_row", ignore_index=True)
    return pairs, status


def frequency_filter(
    source: GenotypeSource,
    rows: np.ndarray,
    *,
    maf: float,
    max_missing: float,
    chunk_size: int = 4096,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """ALT frequency and missing fraction of the variants at ``rows``, and which pass.

    Returns
    -------
    alt_freq, missing : ndarray of float64, shape (len(rows),)
    passes : ndarray of bool, shape (len(rows),)
        MAF ≥ ``maf`` and missing fraction ≤ ``max_missing``.
    """
    alt_freq = np.empty(len(rows))
    missing = np.empty(len(rows))
    done = 0
    for chunk in source.iter_selected(
        np.asarray(rows, dtype=np.int64), chunk_size, None, np.float64
    ):
        x = chunk.dosages
        k = x.shape[1]
        called = (~np.isnan(x)).sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            alt_freq[done : done + k] = np.nansum(x, axis=0) / (2.0 * called)
        missing[done : done + k] = 1.0 - called / x.shape[0]
        done += k
    minor = np.minimum(alt_freq, 1.0 - alt_freq)
    passes = np.nan_to_num(minor, nan=0.0) >= maf
    passes &= missing <= max_missing
    passes &= np.isfinite(alt_freq) & (minor > 0)
    return alt_freq, missing, passes


def read_matrix(
    source: GenotypeSource,
    rows: np.ndarray,
    *,
    samples: Sequence[str] | None = None,
    chunk_size: int = 4096,
) -> np.ndarray:
    """ALT dosages at ``rows`` (any order), shape (n_samples, len(rows)), NaN missing."""
    rows = np.asarray(rows, dtype=np.int64)
    order = np.argsort(rows, kind="stable")
    n = len(source.samples) if samples is None else len(samples)
    out = np.empty((n, len(rows)), dtype=np.float64)
    done = 0
    for chunk in source.iter_selected(rows[order], chunk_size, samples, np.float64):
        k = chunk.dosages.shape[1]
        out[:, order[done : done + k]] = chunk.dosages
        done += k
    return out


def _plink_prefix(source: GenotypeSource) -> tuple[str, str] | None:
    """(plink2 input flag, prefix) for a PLINK1/PLINK2 reference, else None."""
    try:
        kind = genotype_format(source.path)
    except Exception:  # noqa: BLE001 - any path plink2 cannot read falls back to distance
        return None
    prefix = str(source.path)
    for suffix in (".bed", ".pgen"):
        prefix = prefix.removesuffix(suffix)
    if kind == "bfile":
        return "--bfile", prefix
    if kind == "pfile":
        return "--pfile", prefix
    return None


def thin_variants(
    source: GenotypeSource,
    variants: pd.DataFrame,
    *,
    method: str = "auto",
    r2: float = 0.05,
    window: int = 1000,
    step: int = 50,
    distance_kb: float = 100.0,
) -> tuple[np.ndarray, str]:
    """Which of ``variants`` (rows of the reference's table) remain after LD thinning.

    Parameters
    ----------
    source : GenotypeSource
        The reference panel (a PLINK1/PLINK2 fileset for plink2 thinning).
    variants : DataFrame
        The candidate variants (``chrom``, ``pos``; positions unique).
    method : {"auto", "plink2", "distance", "none"}
        ``plink2``: ``--indep-pairwise window step r2`` on the reference samples, as pgsc_calc
        (which also removes long-range LD regions; not done here). ``distance``: the first
        variant of each ``distance_kb`` window per chromosome. ``auto``: plink2 when it is on the
        PATH and the reference is a PLINK fileset, else distance.

    Returns
    -------
    keep : ndarray of bool, shape (len(variants),)
    used : str
        The method applied, with its parameters (for the provenance record).
    """
    if method not in THINNING:
        raise InputDataError(f"LD thinning {method!r} unknown; choose from {list(THINNING)}")
    plink = _plink_prefix(source)
    if method == "auto":
        method = "plink2" if plink is not None and shutil.which("plink2") else "distance"
    if method == "none" or len(variants) == 0:
        return np.ones(len(variants), dtype=bool), "none"
    if method == "distance":
        bins = variants["pos"].to_numpy(np.int64) // int(distance_kb * 1000)
        keep = ~pd.DataFrame({"c": variants["chrom"].to_numpy(), "b": bins}).duplicated().to_numpy()
        return keep, f"distance: first variant per {distance_kb:g} kb window"
    if plink is None or not shutil.which("plink2"):
        raise InputDataError(
            "LD thinning 'plink2' needs plink2 on the PATH and a PLINK1/PLINK2 reference "
            f"({source.path}); use --ld-thin distance"
        )
    flag, prefix = plink
    with tempfile.TemporaryDirectory(prefix="rvfedprs_ld_") as tmp:
        ranges = Path(tmp) / "candidates.bed1"
        table = pd.DataFrame(
            {"chrom": variants["chrom"].to_numpy(), "a": variants["pos"], "b": variants["pos"]}
        )
        table.to_csv(ranges, sep="\t", header=False, index=False)
        cmd = [
            "plink2", flag, prefix, "--set-all-var-ids", "@:#", "--extract", "bed1", str(ranges),
            "--indep-pairwise", str(window), str(step), str(r2),
            "--threads", "1", "--out", str(Path(tmp) / "ld"),
        ]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        kept = Path(tmp) / "ld.prune.in"
        if done.returncode != 0 or not kept.is_file():
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise InputDataError(f"plink2 --indep-pairwise failed on {prefix}: {' | '.join(tail)}")
        ids = [line.strip() for line in kept.read_text().splitlines() if line.strip()]
    chrom_pos = {(normalise_chrom(i.rsplit(":", 1)[0]), int(i.rsplit(":", 1)[1])) for i in ids}
    keys = zip(variants["chrom"].tolist(), variants["pos"].astype("int64").tolist(), strict=True)
    keep = np.array([k in chrom_pos for k in keys], dtype=bool)
    return keep, f"plink2 --indep-pairwise {window} {step} {r2}"
