"""Genetic ancestry as pgsc_calc computes it, at one site, against a public reference panel.

``panel``: labels, the variants shared with the target (allele-matched, strand-ambiguous
removed), MAF filter and LD thinning; ``pca``: the reference PCA and the OADP projection of new
samples (not shrunk); ``assign``: a random forest on the PCs gives population probabilities;
``normalise``: the PRS adjusted on the PCs (Z_norm1 mean, Z_norm2 mean and variance); ``run``:
the whole analysis writing its tables and figure (:func:`run_ancestry`).
"""

from rvfedprs.ancestry.assign import UNDETERMINED, assign_ancestry
from rvfedprs.ancestry.normalise import normalise_prs
from rvfedprs.ancestry.pca import ReferencePCA, fit_pca, project
from rvfedprs.ancestry.run import run_ancestry

__all__ = [
    "UNDETERMINED",
    "ReferencePCA",
    "assign_ancestry",
    "fit_pca",
    "normalise_prs",
    "project",
    "run_ancestry",
]
