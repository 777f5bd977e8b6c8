"""The genotype layer: chunked readers and genotype-level computations (no learning).

``open_genotypes(path)`` reads VCF/BCF, PLINK1, PLINK2 and BGEN files (``formats``: the one
registry of suffixes; ``vcf``, ``plink``, ``bgen``: the readers; ``convert``: a VCF/BGEN to
``.pgen`` once, with plink2) into :class:`GenotypeChunk` blocks (ALT-allele dosages, samples ×
variants, NaN missing). Over them: ``frequencies``, ``qc``, ``sitecounts`` (one site's summary
counts and the coordinator's combination), ``rare``; and for polygenic scores ``scorefile``
(PGS Catalog reader and writer), ``matching`` (the match log) and ``scoring`` (the SUM).
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
