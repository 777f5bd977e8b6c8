"""The preparation steps one site runs on its own files.

Each function takes the site's genotype source (or paths) and tables and returns tables; none
writes files or reads another site's data. What a site releases to the coordinator is the
output of :func:`count_alleles` only (summary counts, no sample ID); everything else stays at the
site. The phenotype is binary or quantitative (``pipeline.phenotype.kind``,
:func:`phenotype_kind`); the kind decides the checks, the split's strata, the samples' HWE is
tested over (controls, or every sample of a quantitative trait) and ``n_cases``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.cohort import (
    assign_splits,
    check_clients,
    check_line_endings,
    exclusions,
    impute_covariates,
    load_covariates,
    load_phenotypes,
    reconcile_samples,
    restrict_to_genotyped,
)
from rvfedprs.exceptions import InputDataError
from rvfedprs.genotypes.chunk import GenotypeSource
from rvfedprs.genotypes.formats import genotype_files
from rvfedprs.genotypes.qc import sample_call_rates
from rvfedprs.genotypes.rare import rare_dosages
from rvfedprs.genotypes.readers import skipped_variants
from rvfedprs.genotypes.scorefile import declared_build
from rvfedprs.genotypes.scoring import score
from rvfedprs.genotypes.sitecounts import site_counts
from rvfedprs.outcomes import Outcome, outcome

__all__ = [
    "SUMMARY_COLUMNS",
    "phenotype_kind",
    "hwe_samples",
    "check_scoring_build",
    "validate_cohort",
    "sample_qc",
    "count_alleles",
    "client_features",
    "client_summary",
]

log = logging.getLogger(__name__)

#: Columns of ``clients.tsv`` (one row per client, see :func:`client_summary`); ``n_cases`` is
#: empty (NA) for a quantitative phenotype, which has no cases.
SUMMARY_COLUMNS = (
    "client",
    "n_samples",
    "n_cases",
    "n_train",
    "n_test",
    "n_carriers",
    "n_rare_carried",
    "rare_alleles_per_sample",
)


def phenotype_kind(pipeline: Mapping[str, Any]) -> Outcome:
    """The phenotype's outcome, ``pipeline.phenotype.kind`` (absent: binary)."""
    return outcome((pipeline.get("phenotype") or {}).get("kind", "binary"))


def hwe_samples(qc: pd.DataFrame, kind: str | Outcome = "binary") -> list[str]:
    """The QC-passing samples HWE is tested over: the controls, or all for a quantitative trait.

    As plink's ``--hwe``: a case/control phenotype is tested in controls, a quantitative one in
    every sample.
    """
    kept = _kept(qc)
    if outcome(kind).kind == "binary":
        kept = kept[kept["phenotype"] == 0]
    return kept["sample_id"].tolist()


def check_scoring_build(scoring_file: str | Path, genome_build: str) -> None:
    """Fail when the scoring file declares another build than ``genome_build``.

    Raises
    ------
    InputDataError
        Naming both builds and the harmonised file to use instead.
    """
    build = declared_build(scoring_file)
    if build is None:
        log.warning("scoring file %s declares no genome build; not checked", scoring_file)
    elif build != genome_build:
        raise InputDataError(
            f"scoring file {scoring_file} is on build {build} but pipeline.genome_build is "
            f"{genome_build}; use a scoring file harmonised to {genome_build} "
            f"(PGS Catalog *_hmPOS_{genome_build}.txt.gz)"
        )


def validate_cohort(
    source: GenotypeSource,
    genotypes: Sequence[str | Path],
    sheet: pd.DataFrame,
    phenotypes: str | Path,
    pipeline: Mapping[str, Any],
    *,
    samples_name: str = "samples sheet",
    step: str = "validate_inputs",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Reconcile genotypes, samples sheet and phenotypes; drop clients too small to train on.

    Parameters
    ----------
    source : GenotypeSource
        The genotypes (their sample IDs are read).
    genotypes : sequence of paths
        The same genotype files, for messages and the CRLF check.
    sheet : DataFrame
        Samples sheet (``sample_id``, ``client``, ...).
    phenotypes : path
        Phenotype table.
    pipeline : mapping
        The validated ``pipeline`` section.
    samples_name : str
        How messages name the samples sheet.
    step : str
        Step name in the exclusion table.

    Returns
    -------
    cohort : DataFrame
        ``sample_id, client, phenotype, ...`` in genotype-file order.
    excluded : DataFrame
        ``kind, id, reason, step`` of every sample and client left out.

    Raises
    ------
    InputDataError
        On any hard error, naming the file and the offending values.
    """
    for path in [f for g in genotypes for f in genotype_files(g, text_only=True)]:
        check_line_endings(path)
    coding = pipeline["phenotype"]
    kind = phenotype_kind(pipeline)
    table, excluded_values = load_phenotypes(
        phenotypes,
        column=coding["column"],
        id_column=coding["id_column"],
        cases=[str(v) for v in coding.get("cases", ["1"])],
        controls=[str(v) for v in coding.get("controls", ["0"])],
        kind=kind,
        step=step,
        missing=[str(v) for v in coding.get("missing", [])],
    )
    if pipeline.get("covariates"):  # non-numeric values stop here; missing ones per the rule
        _, missing_covariates = load_covariates(
            phenotypes,
            columns=pipeline["covariates"],
            id_column=coding["id_column"],
            on_missing=pipeline["covariate_missing"],
            step=step,
        )
        table = table[~table["sample_id"].isin(missing_covariates["id"])]
        excluded_values = pd.concat([excluded_values, missing_covariates], ignore_index=True)
    # Individuals with an unusable phenotype value are excluded, not "absent".
    sheet_kept = sheet[~sheet["sample_id"].isin(excluded_values["id"])]
    unlabelled = excluded_values.iloc[:0]
    if pipeline.get("clients_from") is not None:  # a panel's labels: usually a superset
        sheet_kept, unlabelled = restrict_to_genotyped(
            sheet_kept,
            source.samples,
            source=f"clients_from {pipeline['clients_from']['psam']}",
            step=step,
        )
    dropped = set(excluded_values["id"])
    genotype_ids = [s for s in source.samples if s not in dropped]
    cohort, mismatched = reconcile_samples(
        genotype_ids,
        sheet_kept,
        table,
        on_mismatch=pipeline["on_sample_mismatch"],
        sources=(
            f"the genotypes ({', '.join(map(str, genotypes))})",
            samples_name,
            f"phenotype table {phenotypes}",
        ),
        step=step,
    )
    cohort, bad_clients = check_clients(
        cohort,
        min_samples=pipeline["min_samples_per_client"],
        min_per_class=pipeline["min_cases_per_client"],
        kind=kind,
        on_invalid=pipeline["on_invalid_client"],
        step=step,
        listed=sheet.loc[sheet["sample_id"].isin(set(source.samples)), "client"].unique(),
    )
    excluded = pd.concat([excluded_values, unlabelled, mismatched, bad_clients], ignore_index=True)
    return cohort, excluded


def sample_qc(
    source: GenotypeSource,
    members: pd.DataFrame,
    pipeline: Mapping[str, Any],
    *,
    step: str = "sample_qc",
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Call rate of a client's samples over every variant (plink ``--mind``).

    Returns
    -------
    qc : DataFrame
        ``sample_id, client, phenotype, call_rate, excluded, reason`` of ``members``.
    excluded : DataFrame
        The samples below ``qc.sample_call_rate_min`` (``kind, id, reason, step``).
    """
    threshold = pipeline["qc"]["sample_call_rate_min"]
    rates = sample_call_rates(
        source,
        samples=members["sample_id"].tolist(),
        min_call_rate=threshold,
        chunk_size=pipeline["chunk_size"],
    )
    qc = members[["sample_id", "client", "phenotype"]].merge(
        rates[["sample_id", "call_rate", "excluded"]], on="sample_id", how="left", validate="1:1"
    )
    qc["reason"] = [
        f"call rate {rate:.4f} < qc.sample_call_rate_min {threshold}" if bad else ""
        for rate, bad in zip(qc["call_rate"], qc["excluded"], strict=True)
    ]
    dropped = qc[qc["excluded"]]
    return qc, exclusions("sample", dropped["sample_id"], dropped["reason"], step)


def _kept(qc: pd.DataFrame) -> pd.DataFrame:
    return qc[~qc["excluded"].astype(bool)].reset_index(drop=True)


def count_alleles(
    source: GenotypeSource, qc: pd.DataFrame, pipeline: Mapping[str, Any]
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """What a site releases: summary counts over its QC-passing samples (and :func:`hwe_samples`).

    Returns
    -------
    counts : DataFrame
        :data:`~rvfedprs.genotypes.sitecounts.SITE_COUNT_COLUMNS`.
    skipped : DataFrame
        Variants the reader skipped (``chrom, pos, id, ref, alt, reason``).
    """
    kept = _kept(qc)
    counts = site_counts(
        source,
        samples=kept["sample_id"].tolist(),
        controls=hwe_samples(qc, phenotype_kind(pipeline)),
        chunk_size=pipeline["chunk_size"],
    )
    return counts, skipped_variants(source)


def client_features(
    source: GenotypeSource,
    qc: pd.DataFrame,
    *,
    frequencies: pd.DataFrame,
    rare: pd.DataFrame,
    weights: str | Path,
    pipeline: Mapping[str, Any],
    phenotypes: str | Path | None = None,
) -> tuple[pd.DataFrame, sp.csr_matrix]:
    """One client's feature set: PRS, rare dosages, covariates and train/test split.

    Parameters
    ----------
    source : GenotypeSource
    qc : DataFrame
        The client's sample-QC table (``sample_id, client, phenotype, excluded``).
    frequencies : DataFrame
        ``variant_key, alt_freq`` (global): missing dosages → 2·p.
    rare : DataFrame
        The rare-variant table (``rare_variants.tsv``): the dosage columns, in order.
    weights : path
        The usable scoring rows (PGS Catalog format).
    pipeline : mapping
        The ``pipeline`` section.
    phenotypes : path, optional
        The phenotype table holding the covariates (needed with ``pipeline.covariates``).

    Returns
    -------
    samples : DataFrame
        ``sample_id, prs, phenotype, split`` (``phenotype`` int8 0/1, float64 for a
        quantitative trait) then one float64 column per covariate.
    dosages : scipy.sparse.csr_matrix of float32, shape (n_samples, n_rare)
    """
    kept = _kept(qc)
    ids = kept["sample_id"].tolist()
    scores, _ = score(
        source,
        weights,
        frequencies=frequencies,
        min_overlap=pipeline["min_overlap"],
        samples=ids,
        chunk_size=pipeline["chunk_size"],
    )
    if scores["sample_id"].tolist() != ids:
        raise ValueError("scores are not in the requested sample order")
    dosages = rare_dosages(source, rare, samples=ids, chunk_size=pipeline["chunk_size"])
    kind = phenotype_kind(pipeline)
    split = assign_splits(
        kept,
        test_fraction=pipeline["test_fraction"],
        random_seed=pipeline["random_seed"],
        kind=kind,
    )
    dtype = np.int8 if kind.kind == "binary" else np.float64
    samples = pd.DataFrame(
        {
            "sample_id": pd.Series(ids, dtype=str),
            "prs": scores["SUM"].to_numpy(dtype=np.float64),
            "phenotype": kept["phenotype"].to_numpy(dtype=dtype),
            "split": split.to_numpy(dtype=str),
        }
    )
    columns = list(pipeline.get("covariates") or [])
    if columns:
        samples = _with_covariates(samples, phenotypes, pipeline, columns)
    return samples, sp.csr_matrix(dosages, dtype=np.float32)


def _with_covariates(
    samples: pd.DataFrame, phenotypes: str | Path | None, pipeline: Mapping[str, Any], columns: list
) -> pd.DataFrame:
    """``samples`` plus the covariate columns (float64), imputed per the configured rule."""
    if phenotypes is None:
        raise ValueError("pipeline.covariates is set but no phenotype table was given")
    table, _ = load_covariates(
        phenotypes,
        columns=columns,
        id_column=pipeline["phenotype"]["id_column"],
        on_missing="impute_mean",  # validation already excluded samples under "exclude"
    )
    table = table.set_index("sample_id").reindex(samples["sample_id"]).reset_index()
    if pipeline["covariate_missing"] == "impute_mean":
        table, imputed = impute_covariates(table, columns)
        for column, ids in imputed.items():
            log.info("covariate %s imputed with the client mean for %s", column, ids)
    elif table[columns].isna().any().any():
        raise ValueError("a covariate is missing although validation excluded such samples")
    out = samples.copy()
    for column in columns:
        out[column] = table[column].to_numpy(dtype=np.float64)
    return out


def client_summary(
    client: str, samples: pd.DataFrame, dosages: sp.spmatrix, kind: str | Outcome = "binary"
) -> dict[str, Any]:
    """One row of ``clients.tsv``: sizes, cases, splits and rare-variant carriers.

    ``n_cases`` is None (an empty cell) for a quantitative phenotype (``kind``).
    """
    dosages = sp.csr_matrix(dosages)
    if dosages.shape[0] != len(samples):
        raise ValueError(
            f"client {client}: {dosages.shape[0]} dosage rows but {len(samples)} samples"
        )
    return {
        "client": client,
        "n_samples": len(samples),
        "n_cases": _n_cases(samples["phenotype"].to_numpy(), kind),
        "n_train": int((samples["split"] == "train").sum()),
        "n_test": int((samples["split"] == "test").sum()),
        "n_carriers": int((dosages.getnnz(axis=1) > 0).sum()),
        "n_rare_carried": int((dosages.getnnz(axis=0) > 0).sum()),
        # with thousands of rare columns nearly every sample carries one: the burden tells more
        "rare_alleles_per_sample": float(dosages.sum() / max(dosages.shape[0], 1)),
    }


def _n_cases(y: np.ndarray, kind: str | Outcome) -> int | None:
    """The outcome's case count of ``y`` (None where it counts none)."""
    n_cases = outcome(kind).counts(y).get("n_cases")
    return None if n_cases is None else int(n_cases)
