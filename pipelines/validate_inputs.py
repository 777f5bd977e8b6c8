"""Rule ``validate_inputs`` (a checkpoint): check the cohort's inputs and fix the client list.

Sample IDs must agree between the genotypes, the samples sheet and the phenotype table; the
scoring file's declared build must match ``pipeline.genome_build``; text inputs must not use CRLF
line endings; IDs must be unique; clients too small or holding one phenotype class are excluded
(or stop the run). Writes the validated cohort (``sample_id, client, phenotype, ...``, in
genotype-file order) and the exclusions of this step.
"""

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.cohort import (
    check_clients,
    check_line_endings,
    load_covariates,
    load_phenotypes,
    load_samples_sheet,
    reconcile_samples,
    restrict_to_genotyped,
)
from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.formats import genotype_files
from rvfedprs.genotypes.readers import open_with_options
from rvfedprs.genotypes.scorefile import declared_build
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
    text_files = [f for g in genotypes for f in genotype_files(g, text_only=True)]
    for path in [scoring_file, *text_files]:
        check_line_endings(path)
    build = declared_build(scoring_file)
    if build is None:
        logger.warning("scoring file %s declares no genome build; not checked", scoring_file)
    elif build != pipeline["genome_build"]:
        raise InputDataError(
            f"scoring file {scoring_file} is on build {build} but pipeline.genome_build is "
            f"{pipeline['genome_build']}; use a scoring file harmonised to "
            f"{pipeline['genome_build']} (PGS Catalog *_hmPOS_{pipeline['genome_build']}.txt.gz)"
        )

    source = open_with_options(genotypes, pipeline)
    sheet = load_samples_sheet(samples)
    coding = pipeline["phenotype"]
    table, excluded_values = load_phenotypes(
        phenotypes,
        column=coding["column"],
        id_column=coding["id_column"],
        cases=[str(v) for v in coding["cases"]],
        controls=[str(v) for v in coding["controls"]],
        step=STEP,
    )
    if pipeline.get("covariates"):  # non-numeric values stop here; missing ones per the rule
        _, missing_covariates = load_covariates(
            phenotypes,
            columns=pipeline["covariates"],
            id_column=coding["id_column"],
            on_missing=pipeline["covariate_missing"],
            step=STEP,
        )
        dropped = missing_covariates["id"]
        table = table[~table["sample_id"].isin(dropped)]
        excluded_values = pd.concat([excluded_values, missing_covariates], ignore_index=True)
    # Individuals with an unusable phenotype value are excluded, not "absent".
    sheet_kept = sheet[~sheet["sample_id"].isin(excluded_values["id"])]
    unlabelled = excluded_values.iloc[:0]
    if pipeline.get("clients_from") is not None:  # a panel's labels: usually a superset
        sheet_kept, unlabelled = restrict_to_genotyped(
            sheet_kept,
            source.samples,
            source=f"clients_from {pipeline['clients_from']['psam']}",
            step=STEP,
        )
    genotype_ids = [s for s in source.samples if s not in set(excluded_values["id"])]
    cohort, mismatched = reconcile_samples(
        genotype_ids,
        sheet_kept,
        table,
        on_mismatch=pipeline["on_sample_mismatch"],
        sources=(
            f"the genotypes ({', '.join(map(str, genotypes))})",
            f"samples sheet {samples}",
            f"phenotype table {phenotypes}",
        ),
        step=STEP,
    )
    cohort, bad_clients = check_clients(
        cohort,
        min_samples=pipeline["min_samples_per_client"],
        min_per_class=pipeline["min_cases_per_client"],
        on_invalid=pipeline["on_invalid_client"],
        step=STEP,
    )
    excluded = pd.concat([excluded_values, unlabelled, mismatched, bad_clients], ignore_index=True)
    Path(out_cohort).parent.mkdir(parents=True, exist_ok=True)
    Path(out_exclusions).parent.mkdir(parents=True, exist_ok=True)
    cohort.to_csv(out_cohort, sep="\t", index=False)
    excluded.to_csv(out_exclusions, sep="\t", index=False)
    logger.info(
        "%d samples in %d clients kept (%d cases); %d exclusions",
        len(cohort),
        cohort["client"].nunique(),
        int(cohort["phenotype"].sum()),
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
