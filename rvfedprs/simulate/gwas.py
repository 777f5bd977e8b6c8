"""The discovery GWAS behind the simulated PGS: marginal regressions, clumping, PGS Catalog file."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats

__all__ = ["marginal_regression", "clump_by_distance", "write_pgs_catalog"]


def marginal_regression(
    genotypes: np.ndarray, y: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-variant simple linear regression of ``y`` on allele count.

    Parameters
    ----------
    genotypes : ndarray, shape (n_samples, n_variants)
        ALT-allele counts (no missing values).
    y : ndarray, shape (n_samples,)

    Returns
    -------
    beta, se, p : ndarray, shape (n_variants,)
        Slope, its standard error and the two-sided t-test p-value (NaN for monomorphic
        variants).
    """
    x = np.asarray(genotypes, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    n = x.shape[0]
    xc = x - x.mean(axis=0)
    yc = y - y.mean()
    sxx = np.einsum("ij,ij->j", xc, xc)
    sxy = xc.T @ yc
    syy = yc @ yc
    with np.errstate(divide="ignore", invalid="ignore"):
        beta = sxy / sxx
        resid = np.maximum(syy - beta * sxy, 0.0)
        se = np.sqrt(resid / (n - 2) / sxx)
        t = beta / se
    p = 2 * stats.t.sf(np.abs(t), df=n - 2)
    return beta, se, p


def clump_by_distance(
    chrom: np.ndarray, pos: np.ndarray, p: np.ndarray, window_bp: int
) -> np.ndarray:
    """Greedy distance clumping: keep the best p-value, drop others within ``window_bp``.

    Parameters
    ----------
    chrom, pos, p : ndarray, shape (n_variants,)

    Returns
    -------
    ndarray of bool, shape (n_variants,)
        True for the index variants kept.
    """
    keep = np.zeros(len(p), dtype=bool)
    chrom = np.asarray(chrom).astype(str)
    for c in np.unique(chrom):
        members = np.flatnonzero(chrom == c)
        order = members[np.argsort(p[members], kind="stable")]
        kept_pos = np.empty(0, dtype=np.int64)
        for i in order:
            if window_bp > 0 and len(kept_pos):
                j = np.searchsorted(kept_pos, pos[i])
                near = (j < len(kept_pos) and kept_pos[j] - pos[i] <= window_bp) or (
                    j > 0 and pos[i] - kept_pos[j - 1] <= window_bp
                )
                if near:
                    continue
            keep[i] = True
            kept_pos = np.insert(kept_pos, np.searchsorted(kept_pos, pos[i]), pos[i])
    return keep


def write_pgs_catalog(
    path: str | Path,
    weights: pd.DataFrame,
    *,
    pgs_id: str,
    pgs_name: str,
    trait: str,
    genome_build: str = "GRCh37",
) -> Path:
    """Write a gzipped PGS Catalog scoring file (format 2.0 header).

    Parameters
    ----------
    weights : DataFrame
        Columns ``chr_name, chr_position, effect_allele, other_allele, effect_weight`` (an
        ``rsID`` column is written first when present), sorted as they should appear.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = ["chr_name", "chr_position", "effect_allele", "other_allele", "effect_weight"]
    if "rsID" in weights.columns:
        columns = ["rsID", *columns]
    header = [
        "###PGS CATALOG SCORING FILE - see https://www.pgscatalog.org/downloads/#dl_ftp_scoring "
        "for additional information",
        "#format_version=2.0",
        "##POLYGENIC SCORE (PGS) INFORMATION",
        f"#pgs_id={pgs_id}",
        f"#pgs_name={pgs_name}",
        f"#trait_reported={trait}",
        "#weight_type=beta",
        f"#genome_build={genome_build}",
        f"#variants_number={len(weights)}",
    ]
    body = weights[columns].to_csv(sep="\t", index=False, float_format="%.6g")
    # mtime=0 keeps the file byte-identical between runs with the same seed
    with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as handle:
        handle.write(("\n".join(header) + "\n" + body).encode())
    return path
