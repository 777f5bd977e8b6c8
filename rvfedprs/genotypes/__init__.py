"""The genotype layer: chunked readers and genotype-level computations (no learning).

``open_genotypes(path)`` reads VCF/BCF, PLINK1 and PLINK2 files into :class:`GenotypeChunk`
blocks (ALT-allele dosages, samples × variants, NaN missing); ``frequencies``, ``qc``,
``scoring`` and ``rare`` are pure functions over those chunks.
"""

from rvfedprs.genotypes.chunk import (
    DEFAULT_CHUNK_SIZE,
    GenotypeChunk,
    GenotypeSource,
    normalise_chrom,
    variant_keys,
)
from rvfedprs.genotypes.readers import open_genotypes

__all__ = [
    "DEFAULT_CHUNK_SIZE",
    "GenotypeChunk",
    "GenotypeSource",
    "normalise_chrom",
    "open_genotypes",
    "variant_keys",
]
