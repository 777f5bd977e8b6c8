"""One site of a consortium study: its own files in, summaries out.

A :class:`StudySite` reads only its own inputs (:class:`~rvfedprs.study.samplesheet.SiteInputs`)
and writes only into its own folder::

    FOLDER/logs/cohort.tsv, sample_qc.tsv, exclusions.tsv   individual level: stays here
    FOLDER/genotypes/converted/*.pgen                     a VCF/BGEN converted once (plink2)
    FOLDER/prepared/                                      the per-client layout training reads:
        rare_variants.tsv, clients.tsv, outcome.json, clients/<site>/{samples.parquet,
        rare_dosages.npz}
    FOLDER/prepared/weights.txt.gz                        the scoring rows the coordinator sent
    FOLDER/logs/counts.request, prepared/features.request the digest of the request each step
                                                          answered (a resumed study asks, ``holds``)

What it answers the coordinator (:mod:`rvfedprs.study.task`): summary counts per variant (the
counts a site refuses to release below ``min_cell_count`` are zeroed and flagged), the number of
samples it excluded per reason, the sizes of its feature set, and evaluation summaries (exact
per-site metrics and score histograms, :mod:`rvfedprs.evaluation.summaries`). No sample ID, no
individual value leaves the site.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import scipy.sparse as sp

from rvfedprs.cohort import EXCLUSION_COLUMNS, read_tsv
from rvfedprs.evaluation.metrics import causal_carrier_mask
from rvfedprs.exceptions import InputDataError
from rvfedprs.genomic.data import (
    covariate_columns,
    standardise_covariates,
    standardise_trait,
    write_outcome,
)
from rvfedprs.genomic.task import GenomicSite, GenomicTask
from rvfedprs.genotypes.chunk import GenotypeSource
from rvfedprs.genotypes.convert import CONVERTIBLE_FORMATS, to_pgen
from rvfedprs.genotypes.formats import genotype_files, genotype_format
from rvfedprs.genotypes.readers import open_with_options
from rvfedprs.genotypes.sitecounts import SITE_COUNT_COLUMNS
from rvfedprs.model import model_from_config, set_parameters
from rvfedprs.prepare.site import (
    client_features,
    client_summary,
    count_alleles,
    phenotype_kind,
    sample_qc,
    validate_cohort,
)
from rvfedprs.study.samplesheet import SiteInputs
from rvfedprs.training import ClientData, evaluate

__all__ = ["StudySite", "VARIANT_COLUMNS", "COUNT_COLUMNS", "suppress_small_counts"]

log = logging.getLogger(__name__)

#: Text columns and count columns of the table a site releases.
VARIANT_COLUMNS = ("variant_key", "chrom", "pos", "id", "ref", "alt")
COUNT_COLUMNS = tuple(c for c in SITE_COUNT_COLUMNS if c not in VARIANT_COLUMNS)


def suppress_small_counts(counts: pd.DataFrame, min_cell_count: int) -> np.ndarray:
    """Which variants hold a count in (0, ``min_cell_count``): the site will not release them.

    The counts checked are the ALT and the other allele's counts over the site's samples and the
    three genotype counts over its controls (each could single out a carrier).

    Returns
    -------
    array of bool, shape (n_variants,)
    """
    if min_cell_count <= 0:
        return np.zeros(len(counts), dtype=bool)
    alt = counts["alt_count"].to_numpy(np.float64)
    other = counts["allele_number"].to_numpy(np.float64) - alt
    cells = [alt, other] + [
        counts[c].to_numpy(np.float64) for c in ("n_hom_ref", "n_het", "n_hom_alt")
    ]
    small = np.zeros(len(counts), dtype=bool)
    for cell in cells:
        small |= (cell > 0) & (cell < min_cell_count)
    return small


def _aggregate_exclusions(site: str, excluded: pd.DataFrame) -> list[dict[str, Any]]:
    """Counts of excluded samples per (step, reason kind), no IDs."""
    samples = excluded[excluded["kind"] == "sample"]
    if samples.empty:
        return []
    kind = samples["reason"].astype(str).str.split(r"[\s(:]", n=1, regex=True).str[0]
    grouped = samples.assign(kind_of=kind).groupby(["step", "kind_of"]).size()
    return [
        {"site": site, "step": step, "reason": reason, "n_samples": int(n)}
        for (step, reason), n in grouped.items()
    ]


class StudySite:
    """A site's side of a study, over its own inputs and its own folder.

    Parameters
    ----------
    inputs : SiteInputs
    folder : str or Path
        Where the site writes (created when missing).
    bloom_key : bytes, optional
        The clients' shared HMAC secret (keyed Bloom filters).
    """

    def __init__(self, inputs: SiteInputs, folder: str | Path, *, bloom_key: bytes | None = None):
        self.inputs = inputs
        self.folder = Path(folder)
        self.bloom_key = bloom_key
        self._genomic: GenomicSite | None = None
        self._prepared: tuple[pd.DataFrame, sp.csr_matrix] | None = None

    @property
    def site(self) -> str:
        """The site's id."""
        return self.inputs.site

    # --- inputs ----------------------------------------------------------------------------
    def _reader_options(self, pipeline: Mapping[str, Any]) -> dict[str, Any]:
        options = dict(pipeline)
        if self.inputs.vcf_genotype_field:
            options["vcf_genotype_field"] = self.inputs.vcf_genotype_field
        return options

    def genotype_paths(self, pipeline: Mapping[str, Any]) -> list[str]:
        """The site's genotype files; a VCF or BGEN converted once to ``.pgen`` when asked."""
        paths = [str(p) for p in self.inputs.genotypes]
        for path in paths:
            if not any(Path(f).exists() for f in (path, f"{path}.bed", f"{path}.pgen")):
                raise InputDataError(f"site {self.site}: genotype file not found: {path}")
        if not pipeline.get("convert_to_pgen", True):
            return paths
        options = self._reader_options(pipeline)
        out = []
        for i, path in enumerate(paths):
            if genotype_format(path) not in CONVERTIBLE_FORMATS:
                out.append(path)
                continue
            prefix = self.folder / "genotypes" / "converted" / str(i)
            pgen = Path(f"{prefix}.pgen")
            if not pgen.is_file() or pgen.stat().st_mtime < Path(path).stat().st_mtime:
                prefix.parent.mkdir(parents=True, exist_ok=True)
                to_pgen(
                    path,
                    prefix,
                    field=options["vcf_genotype_field"],
                    bgen_ref_allele=options["bgen_ref_allele"],
                    half_call=options.get("vcf_half_call", "haploid"),
                )
            out.append(str(pgen))
        return out

    def source(self, pipeline: Mapping[str, Any]) -> GenotypeSource:
        """The site's genotypes, read with the pipeline's reader options."""
        return open_with_options(self.genotype_paths(pipeline), self._reader_options(pipeline))

    def _sheet(self, source: GenotypeSource) -> tuple[pd.DataFrame, str]:
        if self.inputs.samples is None:
            sheet = pd.DataFrame({"sample_id": list(source.samples)})
            name = f"the genotypes of site {self.site}"
        else:
            sheet = read_tsv(self.inputs.samples, required=("sample_id",), what="samples sheet")
            name = f"samples sheet {self.inputs.samples}"
        return sheet.assign(client=self.site), name

    # --- what the site still holds (a resumed study) -------------------------------------
    def _request_file(self, step: str) -> Path:
        return self.folder / ("logs" if step == "counts" else "prepared") / f"{step}.request"

    def _step_outputs(self, step: str) -> list[Path]:
        if step == "counts":
            return [self.folder / "logs" / "sample_qc.tsv"]
        client = self.folder / "prepared" / "clients" / self.site
        return [
            self.folder / "prepared" / "clients.tsv",
            self.folder / "prepared" / "outcome.json",
            client / "samples.parquet",
            client / "rare_dosages.npz",
        ]

    def _answered(self, step: str, request: str | None) -> None:
        """Remember that ``step`` answered the request of digest ``request`` (outputs written)."""
        if request:  # with the inputs' sizes and times, so that a resume sees them change
            state = json.dumps(self.input_state(), sort_keys=True)
            self._request_file(step).write_text(f"{request}\n{state}\n")

    def holds(self, step: str, request: str) -> bool:
        """Whether the site still holds what ``step`` (``counts``, ``features``) left with it.

        That is: the step's outputs, written when it answered the request of digest ``request``.

        Raises
        ------
        ValueError
            For another step.
        """
        if step not in ("counts", "features"):
            raise ValueError(f"a site holds the outputs of counts and features, not {step!r}")
        marker = self._request_file(step)
        if not marker.is_file() or marker.read_text().split("\n", 1)[0].strip() != request:
            return False
        return all(path.is_file() for path in self._step_outputs(step))

    def input_state(self) -> dict[str, list[int]]:
        """Each input file of the site → ``[size, modification time in ns]``.

        Genotypes with their companions, phenotypes, samples and truth; absent: ``[-1, -1]``.
        """
        paths = [f for g in self.inputs.genotypes for f in genotype_files(g)]
        paths += [p for p in (self.inputs.phenotypes, self.inputs.samples, self.inputs.truth) if p]
        state = {}
        for name in dict.fromkeys(str(Path(p).resolve()) for p in paths):
            path = Path(name)
            state[name] = (
                [path.stat().st_size, path.stat().st_mtime_ns] if path.is_file() else [-1, -1]
            )
        return state

    def changed_inputs(self, step: str) -> list[str]:
        """The input files changed (or gone, or new) since ``step`` answered; [] if it did not."""
        marker = self._request_file(step)
        lines = marker.read_text().split("\n", 1) if marker.is_file() else []
        if len(lines) < 2 or not lines[1].strip():
            return []
        recorded, current = json.loads(lines[1]), self.input_state()
        changed = []
        for name in sorted(set(recorded) | set(current)):
            before, now = recorded.get(name), current.get(name)
            if before != now:
                what = (
                    "gone" if now in (None, [-1, -1]) else "new" if before is None else "modified"
                )
                changed.append(f"{name} ({what})")
        return changed

    # --- step: counts ----------------------------------------------------------------------
    def counts(
        self, pipeline: Mapping[str, Any], *, min_cell_count: int = 0, request: str | None = None
    ) -> dict[str, Any]:
        """Validate, run sample QC and count; returns what the site releases.

        Writes ``logs/cohort.tsv``, ``logs/sample_qc.tsv`` and ``logs/exclusions.tsv`` (with IDs,
        for the site's own records); ``request`` (the digest of the coordinator's request) is
        kept in ``logs/counts.request`` (:meth:`holds`).

        Returns
        -------
        dict
            ``variants`` (text columns as lists), ``counts`` (count columns as arrays, zero where
            suppressed), ``suppressed`` (bool array), ``skipped`` (records the reader skipped),
            ``exclusions`` (samples excluded per step and reason, counts only),
            ``n_samples``.
        """
        self._request_file("counts").unlink(missing_ok=True)
        if not Path(self.inputs.phenotypes).is_file():
            raise InputDataError(
                f"site {self.site}: phenotype table not found: {self.inputs.phenotypes}"
            )
        paths = self.genotype_paths(pipeline)
        source = open_with_options(paths, self._reader_options(pipeline))
        sheet, sheet_name = self._sheet(source)
        cohort, excluded = validate_cohort(
            source, paths, sheet, self.inputs.phenotypes, pipeline, samples_name=sheet_name
        )
        if cohort.empty:
            reasons = excluded.loc[excluded["kind"] == "client", "reason"].tolist()
            raise InputDataError(f"site {self.site} keeps no sample after validation: {reasons}")
        qc, qc_excluded = sample_qc(source, cohort, pipeline)
        excluded = pd.concat([excluded, qc_excluded], ignore_index=True)
        counts, skipped = count_alleles(source, qc, pipeline)
        logs = self.folder / "logs"
        logs.mkdir(parents=True, exist_ok=True)
        cohort.to_csv(logs / "cohort.tsv", sep="\t", index=False)
        qc.to_csv(logs / "sample_qc.tsv", sep="\t", index=False)
        excluded[list(EXCLUSION_COLUMNS)].to_csv(logs / "exclusions.tsv", sep="\t", index=False)
        self._answered("counts", request)
        suppressed = suppress_small_counts(counts, min_cell_count)
        if suppressed.any():
            log.info(
                "site %s: %d variants hold a count below min_cell_count=%d and are not released",
                self.site,
                int(suppressed.sum()),
                min_cell_count,
            )
        released = counts.copy()
        released.loc[suppressed, [c for c in COUNT_COLUMNS if c != "n_samples"]] = 0
        return {
            "variants": {c: released[c].astype(str).tolist() for c in VARIANT_COLUMNS},
            "counts": {c: released[c].to_numpy() for c in COUNT_COLUMNS},
            "suppressed": suppressed,
            "skipped": skipped.astype(str).to_dict(orient="list"),
            "exclusions": _aggregate_exclusions(self.site, excluded),
            "n_samples": int((~qc["excluded"].astype(bool)).sum()),
        }

    # --- step: features --------------------------------------------------------------------
    def features(
        self,
        pipeline: Mapping[str, Any],
        *,
        rare: pd.DataFrame,
        weights: str,
        frequencies: pd.DataFrame,
        request: str | None = None,
    ) -> dict[str, Any]:
        """Build the site's feature set into ``prepared/``; returns its summary (counts only).

        Parameters
        ----------
        pipeline : mapping
        rare : DataFrame
            The global rare-variant table (the dosage columns).
        weights : str
            The usable scoring rows, as PGS Catalog text.
        frequencies : DataFrame
            ``variant_key, alt_freq`` of the scored variants (missing dosages → 2·p).
        request : str, optional
            The digest of the coordinator's request, kept in ``prepared/features.request``
            (:meth:`holds`).
        """
        self._request_file("features").unlink(missing_ok=True)
        qc_path = self.folder / "logs" / "sample_qc.tsv"
        if not qc_path.is_file():
            raise InputDataError(f"site {self.site}: no sample QC ({qc_path}); counts come first")
        qc = pd.read_csv(qc_path, sep="\t", dtype={"sample_id": str, "client": str})
        prepared = self.folder / "prepared"
        (prepared / "clients" / self.site).mkdir(parents=True, exist_ok=True)
        weights_path = prepared / "weights.txt"
        weights_path.write_text(weights)
        samples, dosages = client_features(
            self.source(pipeline),
            qc,
            frequencies=frequencies,
            rare=rare,
            weights=weights_path,
            pipeline=pipeline,
            phenotypes=self.inputs.phenotypes,
        )
        folder = prepared / "clients" / self.site
        samples.to_parquet(folder / "samples.parquet", index=False)
        sp.save_npz(folder / "rare_dosages.npz", dosages)
        rare.to_csv(prepared / "rare_variants.tsv", sep="\t", index=False)
        kind = phenotype_kind(pipeline)
        summary = client_summary(self.site, samples, dosages, kind)
        pd.DataFrame([summary]).to_csv(prepared / "clients.tsv", sep="\t", index=False)
        write_outcome(prepared, kind, pipeline["phenotype"]["column"])
        self._answered("features", request)
        self._genomic = None
        self._prepared = None
        return summary

    # --- training and evaluation -----------------------------------------------------------
    def genomic(self) -> GenomicSite:
        """The site's training data (from ``prepared/``), as the genomic task trains it."""
        if self._genomic is None:
            prepared = self.folder / "prepared"
            if not (prepared / "clients.tsv").is_file():
                raise InputDataError(
                    f"site {self.site}: no prepared features in {prepared}; features come first"
                )
            self._genomic = GenomicTask().open_site(
                {"data-dir": str(prepared), "client-id": self.site}, {}
            )
            if self.bloom_key is not None:
                self._genomic = replace(self._genomic, bloom_key=self.bloom_key)
        return self._genomic

    def _prepared_tables(self) -> tuple[pd.DataFrame, sp.csr_matrix]:
        if self._prepared is None:
            folder = self.folder / "prepared" / "clients" / self.site
            self._prepared = (
                pd.read_parquet(folder / "samples.parquet"),
                sp.load_npz(folder / "rare_dosages.npz").tocsr().astype(np.float32),
            )
        return self._prepared

    def test_data(self, settings: Mapping[str, Any]) -> ClientData:
        """The test split, standardised with the run's federated moments."""
        samples, dosages = self._prepared_tables()
        rows = np.flatnonzero((samples["split"].astype(str) == "test").to_numpy())
        prs = (samples["prs"].to_numpy(np.float64)[rows] - float(settings["prs_mean"])) / float(
            settings["prs_sd"]
        )
        names = list(covariate_columns(samples))
        covariates = None
        if names:
            covariates = standardise_covariates(
                samples[names].to_numpy(np.float64)[rows],
                settings["covariate_mean"],
                settings["covariate_sd"],
            )
        kind = self.genomic().train.outcome
        y = samples["phenotype"].to_numpy(np.float64)[rows]
        if kind.standardises:  # a quantitative trait: the run's federated training mean and sd
            y = standardise_trait(y, settings["outcome"]["mean"], settings["outcome"]["sd"])
        return ClientData(
            self.site,
            samples["sample_id"].astype(str).to_numpy()[rows],
            prs.astype(np.float32),
            dosages[rows],
            y,
            covariates,
            kind,
        )

    def _truth(self, data: ClientData, variant_keys: Sequence[str]) -> tuple[Any, Any]:
        """(carrier mask, the site's true cluster) from the site's own truth, or (None, None).

        Raises
        ------
        InputDataError
            When the site's sheet names a truth table that is not there.
        """
        if self.inputs.truth is None or self.inputs.samples is None:
            return None, None
        sheet = read_tsv(self.inputs.samples, required=("sample_id",), what="samples sheet")
        if "cluster" not in sheet.columns:
            return None, None
        group = "architecture" if "architecture" in sheet.columns else "cluster"
        group_of = dict(zip(sheet["sample_id"], sheet[group], strict=True))
        cluster_of = dict(zip(sheet["sample_id"], sheet["cluster"], strict=True))
        if not Path(self.inputs.truth).is_file():
            raise InputDataError(f"site {self.site}: truth table not found: {self.inputs.truth}")
        truth = pd.read_csv(self.inputs.truth, sep="\t", dtype={"variant_key": str})
        groups = [group_of.get(s, "") for s in data.sample_ids]
        mask = causal_carrier_mask(data.rare, variant_keys, groups, truth)
        labels = pd.Series([cluster_of.get(s, "") for s in data.sample_ids])
        return mask, str(labels.mode().iloc[0]) if len(labels) else None

    def evaluate(
        self, parameters: Mapping[str, np.ndarray], settings: Mapping[str, Any], *, bins: int
    ) -> dict[str, Any]:
        """Evaluation summary of ``parameters`` (the site's own model) on its test split."""
        data = self.test_data(settings)
        model = model_from_config(data.n_rare, settings["model"], initialise=False)
        set_parameters(model, parameters)
        p = evaluate(model, data)
        carriers, cluster = self._truth(data, self.genomic().variant_keys)
        out = data.outcome.test_summary(data.y, p, carriers=carriers, prs=data.prs,
                                        covariates=data.covariates, bins=bins)  # fmt: skip
        out["true_cluster"] = cluster
        return out
