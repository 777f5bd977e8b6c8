"""Genes (regions) that rare causal variants can be concentrated in, and the region files.

With ``phenotype.rare_genes.n_genes`` > 0 the simulator places that many non-overlapping genes
of ``gene_length_bp`` at random on its simulated chromosome regions, draws rare causal variants
from inside them (:func:`rvfedprs.simulate.causal.choose_rare`) with one effect direction per
gene, and writes the genes with the cohort:

- ``regions/genes.tsv``: ``chrom, start, end, gene`` with a header, 1-based and inclusive (as
  VCF positions and the ``pos`` of ``truth/causal_variants.tsv``: a variant is in a gene when
  ``start <= pos <= end``);
- ``regions/genes.bed``: the same genes as BED (no header, 0-based start, end exclusive).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from rvfedprs.exceptions import ConfigError

__all__ = ["draw_genes", "gene_index", "write_regions"]


def draw_genes(
    rng: np.random.Generator,
    chromosomes: Sequence[str | int],
    *,
    region_start: int,
    region_length: int,
    n_genes: int,
    gene_length: int,
) -> pd.DataFrame:
    """Place ``n_genes`` non-overlapping genes uniformly on the simulated regions.

    The genes are spread over the chromosomes as evenly as possible (the remainder on randomly
    chosen ones); on a chromosome with ``k`` genes the starts are
    uniform among non-overlapping placements in ``[region_start, region_start +
    region_length)``. Genes are named ``GENE01``, ``GENE02``, ... in genomic order.

    Returns
    -------
    DataFrame
        ``chrom`` (str), ``start``, ``end`` (1-based, inclusive), ``gene``; one row per gene.

    Raises
    ------
    ConfigError
        When the genes of a chromosome do not fit in its region.
    """
    names = [str(c) for c in chromosomes]
    # As even as possible (a chromosome with many genes would run out of rare loci to move into
    # them: seed 2 of the gene_burden preset put 5 of 20 genes on chromosome 19); which
    # chromosomes carry the remainder is random.
    counts = np.full(len(names), n_genes // len(names))
    counts[rng.choice(len(names), size=n_genes % len(names), replace=False)] += 1
    frames = []
    for chrom, k in zip(names, counts.tolist(), strict=True):
        slack = region_length - k * gene_length
        if slack < 0:
            raise ConfigError(
                f"'simulate.phenotype.rare_genes': {k} genes of {gene_length} bp do not fit in "
                f"chromosome {chrom}'s region of {region_length} bp"
            )
        gaps = np.sort(rng.integers(0, slack + 1, size=k))  # uniform non-overlapping placements
        starts = region_start + gaps + gene_length * np.arange(k)
        ends = starts + gene_length - 1
        frames.append(pd.DataFrame({"chrom": chrom, "start": starts, "end": ends}))
    table = pd.concat(frames, ignore_index=True).astype({"start": np.int64, "end": np.int64})
    width = max(2, len(str(n_genes)))
    table["gene"] = [f"GENE{i + 1:0{width}d}" for i in range(len(table))]
    return table


def gene_index(genes: pd.DataFrame, chrom: Sequence, pos: Sequence[int]) -> np.ndarray:
    """Row of ``genes`` holding each variant (``start <= pos <= end``), -1 outside every gene.

    Parameters
    ----------
    genes : DataFrame
        ``chrom, start, end`` of non-overlapping genes (:func:`draw_genes`).
    chrom, pos : sequence, shape (n_variants,)

    Returns
    -------
    ndarray of int64, shape (n_variants,)
    """
    chrom = np.asarray(chrom).astype(str)
    pos = np.asarray(pos, dtype=np.int64)
    out = np.full(len(pos), -1, dtype=np.int64)
    for name, rows in genes.groupby(genes["chrom"].astype(str)):
        rows = rows.sort_values("start")
        on = np.flatnonzero(chrom == name)
        k = np.searchsorted(rows["start"].to_numpy(), pos[on], side="right") - 1
        inside = (k >= 0) & (pos[on] <= rows["end"].to_numpy()[np.maximum(k, 0)])
        out[on[inside]] = rows.index.to_numpy()[k[inside]]
    return out


def write_regions(out: Path, genes: pd.DataFrame) -> dict[str, Path]:
    """Write ``regions/genes.tsv`` and ``regions/genes.bed`` (module docstring); their paths."""
    folder = Path(out) / "regions"
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"genes": folder / "genes.tsv", "genes_bed": folder / "genes.bed"}
    table = genes[["chrom", "start", "end", "gene"]]
    table.to_csv(paths["genes"], sep="\t", index=False)
    table.assign(start=table["start"] - 1).to_csv(
        paths["genes_bed"], sep="\t", index=False, header=False
    )
    return paths
