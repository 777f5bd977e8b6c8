"""Functional annotations of the written variants: LoF, missense, synonymous (SPEC §2).

With ``phenotype.annotations.write`` the cohort ships ``annotations/variants.tsv``, one row per
written variant, as a VEP/LOFTEE run over an exome would give:

- ``variant_key`` (``chrom:pos:ref:alt``), ``chrom``, ``pos``, ``ref``, ``alt``;
- ``gene``: the simulated gene holding the variant (:mod:`rvfedprs.simulate.genes`), empty
  outside genes;
- ``consequence``: ``lof``, ``missense``, ``synonymous`` or ``other``;
- ``lof``, ``missense``: 0/1 columns, usable as ``burden.mask_column`` or ``associate.masks``
  with ``burden.annotations`` pointing at the file (:func:`rvfedprs.burden.read_annotations`).

Rare variants (target MAF below 0.01) get a coding consequence. A rare causal variant is
``lof`` with probability ``causal_lof_fraction`` and ``missense`` otherwise: most of the rare
burden signal of complex traits comes from loss-of-function alleles (Weiner et al. 2023). A rare
non-causal variant is ``lof``, ``missense`` or ``synonymous`` with the proportions of rare
coding variants in exomes (about 4%, 63% and 33%; Karczewski et al. 2020, gnomAD). Commoner
variants, the array part of the cohort, are ``other`` (intronic or intergenic). The labels are
drawn independently of the effects: a causal missense variant draws its effect from the same
α-model as a causal LoF one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.genotypes.chunk import variant_keys

__all__ = ["CONSEQUENCES", "draw_consequences", "write_annotations", "summarise_annotations"]

#: Consequence labels, from the most to the least damaging.
CONSEQUENCES = ("lof", "missense", "synonymous", "other")

#: Rarer than this (target MAF) a variant is coding, as on an exome capture.
RARE_MAF = 0.01


def draw_consequences(
    rng: np.random.Generator,
    maf: np.ndarray,
    causal: np.ndarray,
    settings: Mapping[str, Any],
) -> np.ndarray:
    """Each variant's consequence (module docstring).

    Parameters
    ----------
    rng : numpy Generator
    maf : ndarray, shape (n_variants,)
        Target-cohort minor-allele frequency.
    causal : ndarray of bool, shape (n_variants,)
        Rare causal variants.
    settings : mapping
        ``simulate.phenotype.annotations``: ``causal_lof_fraction``, ``rare_lof_fraction``,
        ``rare_missense_fraction``.

    Returns
    -------
    ndarray of str, shape (n_variants,)

    Raises
    ------
    ConfigError
        When the rare LoF and missense fractions add up to more than 1.
    """
    lof, missense = settings["rare_lof_fraction"], settings["rare_missense_fraction"]
    if lof + missense > 1:
        raise ConfigError(
            "'simulate.phenotype.annotations': rare_lof_fraction + rare_missense_fraction must "
            f"not exceed 1, got {lof} + {missense}"
        )
    maf = np.asarray(maf, dtype=np.float64)
    causal = np.asarray(causal, dtype=bool)
    null_draw = rng.choice(3, size=len(maf), p=[lof, missense, 1.0 - lof - missense])
    causal_draw = np.where(rng.random(len(maf)) < settings["causal_lof_fraction"], 0, 1)
    code = np.where(causal, causal_draw, np.where(maf < RARE_MAF, null_draw, 3))
    return np.asarray(CONSEQUENCES, dtype=object)[code]


def write_annotations(
    out: Path, variants: pd.DataFrame, consequence: np.ndarray, gene: np.ndarray
) -> Path:
    """Write ``annotations/variants.tsv`` (module docstring); its path.

    Parameters
    ----------
    out : Path
        The cohort's folder.
    variants : DataFrame
        ``chrom, pos, ref, alt`` of the written variants.
    consequence, gene : ndarray of str, shape (n_variants,)
    """
    table = variants[["chrom", "pos", "ref", "alt"]].reset_index(drop=True)
    table.insert(0, "variant_key", variant_keys(table).to_numpy())
    table["gene"] = gene
    table["consequence"] = consequence
    for label in ("lof", "missense"):
        table[label] = (table["consequence"] == label).astype(np.int8)
    path = Path(out) / "annotations" / "variants.tsv"
    path.parent.mkdir(parents=True, exist_ok=True)
    table.to_csv(path, sep="\t", index=False)
    return path


def summarise_annotations(consequence: np.ndarray, maf: np.ndarray, causal: np.ndarray) -> dict:
    """Counts per consequence among rare (causal) variants; the share of rare causal ones LoF."""
    consequence = np.asarray(consequence, dtype=object)
    rare = np.asarray(maf) < RARE_MAF
    causal = np.asarray(causal, dtype=bool)
    labels = CONSEQUENCES[:3]
    return {
        "rare_variants": {c: int((rare & (consequence == c)).sum()) for c in labels},
        "rare_causal": {c: int((causal & (consequence == c)).sum()) for c in labels},
        "causal_lof_fraction": float((consequence[causal] == "lof").mean())
        if causal.any()
        else None,
    }
