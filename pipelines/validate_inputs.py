"""Rule ``validate_inputs`` (a checkpoint): check the cohort's inputs and fix the client list.

Sample IDs must agree between the genotypes, the samples sheet and the phenotype table; the
scoring file's declared build must match ``pipeline.genome_build``; text inputs must not use CRLF
line endings; IDs must be unique; clients too small, holding one phenotype class or a constant
quantitative trait are excluded (or stop the run). Writes the validated cohort (``sample_id,
client, phenotype, ...``, in genotype-file order) and the exclusions of this step.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.cohort import check_line_endings, load_samples_sheet
from rvfedprs.genotypes.readers import open_with_options
from rvfedprs.prepare.site import check_scoring_build, phenotype_kind, validate_cohort
from rvfedprs.rulelog import logged_rule

logger = logging.getLogger("validate_inputs")

STEP = "validate_inputs"


def main(
    *,
    genotypes: Sequence[str | Path],
    samples: str | Path,
    phenotypes: str | Path,
    scoring_file: str | Path,
    pipeline: Mapping[str, Any],
    out_cohort: str | Path,
    out_exclusions: str | Path,
) -> pd.DataFrame:
    """Validate the inputs and write the cohort table and this step's exclusions.

    Parameters
    ----------
    genotypes : sequence of paths
        Genotype files (VCF, PLINK1 prefix or .bed, .pgen); several = one per chromosome.
    samples : path
        Samples sheet (``sample_id, client, ...``).
    phenotypes : path
        Phenotype table.
    scoring_file : path
        PGS Catalog scoring file (only its header is read here).
    pipeline : mapping
        The validated ``pipeline`` configuration section.
    out_cohort, out_exclusions : paths
        Outputs: ``sample_id, client, phenotype, ...`` and ``kind, id, reason, step``.

    Returns
    -------
    pandas.DataFrame
        The validated cohort.

    Raises
    ------
    InputDataError
        On any hard error, naming the file and the offending values.
    """
    check_line_endings(scoring_file)
    check_scoring_build(scoring_file, pipeline["genome_build"])
    source = open_with_options(genotypes, pipeline)
    cohort, excluded = validate_cohort(
        source,
        genotypes,
        load_samples_sheet(samples),
        phenotypes,
        pipeline,
        samples_name=f"samples sheet {samples}",
        step=STEP,
    )
    Path(out_cohort).parent.mkdir(parents=True, exist_ok=True)
    Path(out_exclusions).parent.mkdir(parents=True, exist_ok=True)
    cohort.to_csv(out_cohort, sep="\t", index=False)
    excluded.to_csv(out_exclusions, sep="\t", index=False)
    counts = phenotype_kind(pipeline).counts(cohort["phenotype"].to_numpy())
    logger.info(
        "%d samples in %d clients kept (%s); %d exclusions",
        len(cohort),
        cohort["client"].nunique(),
        f"{int(counts['n_cases'])} cases" if "n_cases" in counts else "quantitative phenotype",
        len(excluded),
    )
    return cohort


if "snakemake" in globals():
    snakemake = globals()["snakemake"]  # injected by Snakemake's `script:` directive
    with logged_rule(snakemake):
        main(
            genotypes=snakemake.params.genotypes,
            samples=snakemake.input.samples,
            phenotypes=snakemake.input.phenotypes,
            scoring_file=snakemake.input.scoring_file,
            pipeline=snakemake.params.pipeline,
            out_cohort=snakemake.output.cohort,
            out_exclusions=snakemake.output.exclusions,
        )
