"""The two streaming passes over the genotypes of every simulated individual.

1. :func:`count_alleles`: ALT-allele counts per population, over target and discovery
   individuals (what the architecture is chosen from);
2. :func:`write_and_test`: the target cohort's VCF/PLINK1/PLINK2 files and the discovery GWAS,
   keeping the genotypes of the LD reference panel and the validation individuals for the PGS.

Each holds one chunk of variants at a time, so memory never grows with the number of variants.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.genotypes.writers import BedWriter, PgenWriter, VcfWriter
from rvfedprs.simulate.gwas import marginal_regression

__all__ = ["GwasPass", "count_alleles", "write_and_test"]


def _progress(enabled: bool, total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, unit="variant", disable=not enabled, leave=False)


def count_alleles(source, pop: np.ndarray, is_target: np.ndarray, chunk: int, show: bool):
    """Counting pass: the variant table and ALT counts per population (target; all)."""
    n_pop = int(pop.max()) + 1
    rows = np.arange(len(pop))
    # individuals come in blocks of one population and one role
    key = pop * 2 + is_target
    starts = np.flatnonzero(np.r_[True, np.diff(key) != 0])
    blocks = list(zip(pop[starts], is_target[starts], starts, np.r_[starts[1:], len(pop)],
                      strict=True))  # fmt: skip
    tables, target_ac, all_ac = [], [], []
    with _progress(show, source.n_variants, "allele counts") as bar:
        for variants, g in source.iter_chunks(rows, chunk):
            bar.update(len(variants))
            gv = g.T  # (m, n_individuals), variant-major
            per_pop_all = np.zeros((n_pop, gv.shape[0]), dtype=np.int64)
            per_pop_target = np.zeros_like(per_pop_all)
            for k, target, start, stop in blocks:
                counts = gv[:, start:stop].sum(1, dtype=np.int32)
                per_pop_all[k] += counts
                if target:
                    per_pop_target[k] += counts
            tables.append(variants)
            target_ac.append(per_pop_target)
            all_ac.append(per_pop_all)
    table = pd.concat(tables, ignore_index=True)
    if not np.array_equal(table["sidx"].to_numpy(), np.arange(len(table))):
        raise RuntimeError("the genotype source does not stream its variants in sidx order")
    return table, np.concatenate(target_ac, axis=1), np.concatenate(all_ac, axis=1)


@dataclass
class GwasPass:
    """What the writing pass keeps for the PGS.

    Attributes
    ----------
    tested : ndarray of int
        Source columns tested (discovery MAF >= ``gwas.maf_min``), in streaming order.
    beta, p : ndarray or None
        Marginal regression on the GWAS part; None when summary statistics are drawn later
        (``gwas.sample_size``).
    reference, validation : ndarray of int8, shape (n_individuals, n_tested)
        Genotypes of the LD reference panel and the validation individuals.
    """

    tested: np.ndarray
    beta: np.ndarray | None  # None: summary statistics are drawn later (gwas.sample_size)
    p: np.ndarray | None
    reference: np.ndarray  # (n_reference, n_tested) int8
    validation: np.ndarray  # (n_validation, n_tested) int8


def write_and_test(
    source, variants, kept, y, target_rows, gwas_rows, ref_rows, val_rows, sample_ids, out,
    params, chunk, show,
) -> GwasPass:  # fmt: skip
    """Writing pass: target genotypes to VCF/PLINK1/PLINK2, marginal GWAS on the discovery part.

    Individuals are streamed as [target | LD reference | rest of the GWAS part | validation],
    so each part is a slice of the chunk.
    """
    outputs = params["output"]
    maf_min = params["gwas"]["maf_min"]
    gwas_order = np.r_[ref_rows, np.setdiff1d(gwas_rows, ref_rows)]
    order = np.r_[target_rows, gwas_order, val_rows]
    n_t, n_g, n_r = len(target_rows), len(gwas_order), len(ref_rows)
    y_gwas = y[gwas_order].astype(np.float64)
    tested, betas, pvalues, ref_parts, val_parts = [], [], [], [], []
    prefix = out / "genotypes" / "cohort"
    plink: list[BedWriter | PgenWriter] = []
    if outputs["write_plink"]:
        plink.append(BedWriter(prefix, sample_ids))
    if outputs["write_pgen"]:
        plink.append(PgenWriter(prefix, sample_ids, n_variants=int(kept.sum())))
    vcf: VcfWriter | None = None
    vcf_chrom = None
    with ExitStack() as stack:  # the writers close (or abandon their files) on the way out
        for writer in plink:
            stack.enter_context(writer)
        with _progress(show, source.n_variants, "genotypes + GWAS") as bar:
            for chunk_variants, g in source.iter_chunks(order, chunk):
                bar.update(len(chunk_variants))
                columns = chunk_variants["sidx"].to_numpy()
                gv = g.T  # (m, individuals in `order`), variant-major
                keep = kept[columns]
                if not keep.any():
                    continue
                table = chunk_variants.loc[keep].reset_index(drop=True)
                gk = gv[keep]
                gt = gk[:, :n_t]
                chrom = table["chrom"].iat[0]
                if outputs["write_vcf"] and chrom != vcf_chrom:
                    if vcf is not None:
                        vcf.close()
                    vcf = stack.enter_context(VcfWriter(
                        out / "genotypes" / f"chr{chrom}.vcf.gz", sample_ids,
                        threads=outputs["threads"], compress_level=outputs["compress_level"],
                    ))  # fmt: skip
                    vcf_chrom = chrom
                if vcf is not None:
                    vcf.write(table, gt.T)
                for writer in plink:
                    writer.write(table, gt.T)
                gd = gk[:, n_t : n_t + n_g]
                af = gd.sum(1, dtype=np.int64) / (2.0 * n_g)
                use = np.minimum(af, 1 - af) >= maf_min
                if not use.any():
                    continue
                if params["gwas"]["sample_size"] is None:
                    beta, _, p = marginal_regression(gd[use].T, y_gwas)
                    betas.append(beta)
                    pvalues.append(p)
                tested.append(columns[keep][use])
                ref_parts.append(gd[use, :n_r])
                val_parts.append(gk[use, n_t + n_g :])
    if not tested:
        raise ConfigError(
            f"no variant reaches 'simulate.gwas.maf_min' {maf_min} in the discovery cohort"
        )
    return GwasPass(
        tested=np.concatenate(tested),
        beta=np.concatenate(betas) if betas else None,
        p=np.nan_to_num(np.concatenate(pvalues), nan=1.0) if pvalues else None,
        reference=np.concatenate(ref_parts, axis=0).T,
        validation=np.concatenate(val_parts, axis=0).T,
    )
