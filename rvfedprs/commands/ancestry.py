"""``rvfedprs ancestry``: PCA of a reference panel, projection, assignment, normalised PRS.

``rvfedprs ancestry --reference REF.pgen --target SITE.bed --out DIR`` (labels from the
reference's ``.psam`` or ``--reference-labels``; scores with ``--reference-prs``/``--target-prs``
from ``rvfedprs prepare score``) writes ``pcs.tsv``, ``ancestry.tsv``, ``prs_normalised.tsv``,
``variants.tsv``, ``pca.png`` and ``provenance.json``. Bad input stops it with a one-line error
(exit 2).
"""

from __future__ import annotations

import argparse

from rvfedprs.option_types import COUNT, FRACTION, SEED, DefaultsHelpFormatter, bounded

MAF = bounded(float, 0, 0.5)
R2 = bounded(float, 0, 1, low_open=True)
WINDOW = bounded(int, 2)
KB = bounded(float, 0, low_open=True)
PCS = bounded(int, 0)

HELP = "ancestry as pgsc_calc: reference PCA, OADP projection, assignment, PRS normalised on PCs"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Add the ``ancestry`` options."""
    parser.formatter_class = DefaultsHelpFormatter
    add = parser.add_argument
    add("--reference", required=True, help="reference panel: PLINK1 prefix/.bed or .pgen")
    add("--target", required=True, nargs="+", metavar="PATH", help="the site's genotypes")
    add("--out", required=True, help="output folder")
    add("--reference-labels", default=None, help="table of population labels (default: .psam)")
    add("--label-column", default=None, help="label column (default: SuperPop, Population...)")
    add("--reference-prs", default=None, help="prepare score output on the reference samples")
    add("--target-prs", default=None, help="prepare score output on the target samples")
    add("--n-pcs", type=COUNT, default=10, help="PCs computed and reported (K)")
    add("--n-assignment-pcs", type=COUNT, default=None, help="PCs for assignment (default: K)")
    add("--n-normalisation-pcs", type=PCS, default=4, help="PCs for PRS normalisation")
    add("--maf", type=MAF, default=0.05, help="minimum reference MAF of a PCA variant")
    add("--max-missing", type=FRACTION, default=0.1, help="largest missing fraction of a variant")
    add("--ld-thin", choices=("auto", "plink2", "distance", "none"), default="auto",
        help="LD thinning: plink2 --indep-pairwise (auto when available) or distance")  # fmt: skip
    add("--ld-r2", type=R2, default=0.05, help="plink2 --indep-pairwise r²")
    add("--ld-window", type=WINDOW, default=1000, help="plink2 --indep-pairwise window (variants)")
    add("--ld-step", type=COUNT, default=50, help="plink2 --indep-pairwise step (variants)")
    add("--thin-kb", type=KB, default=100.0, help="distance thinning window (kb)")
    add("--projection", choices=("oadp", "naive"), default="oadp", help="projection method")
    add("--threshold", type=FRACTION, default=0.5, help="least probability to assign a population")
    add("--seed", type=SEED, default=None, help="random seed (drawn and recorded if omitted)")


def run(args: argparse.Namespace) -> int:
    """Run the analysis and print a one-line summary."""
    from rvfedprs.ancestry import run_ancestry

    summary = run_ancestry(
        args.reference,
        args.target,
        args.out,
        reference_labels=args.reference_labels,
        label_column=args.label_column,
        reference_prs=args.reference_prs,
        target_prs=args.target_prs,
        n_components=args.n_pcs,
        n_assignment=args.n_assignment_pcs,
        n_normalisation=args.n_normalisation_pcs,
        maf=args.maf,
        max_missing=args.max_missing,
        ld_thin=args.ld_thin,
        ld_r2=args.ld_r2,
        ld_window=args.ld_window,
        ld_step=args.ld_step,
        thin_kb=args.thin_kb,
        projection=args.projection,
        threshold=args.threshold,
        random_seed=args.seed,
    )
    print(
        f"ancestry: {summary['n_target']} targets on {summary['n_variants_pca']} variants "
        f"({summary['thinning']}); assigned {summary['assigned']}; wrote {args.out}"
    )
    return 0
