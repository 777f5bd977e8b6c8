"""The consortium study as a federated task: prepare, train and evaluate where the data are.

Site steps (:class:`StudyTask.steps`), each answered by :class:`~rvfedprs.study.site.StudySite`
on the site's own files:

======== ===================================================== ================================
step     the site computes                                     it sends
======== ===================================================== ================================
setup    which site it is                                      its id
counts   validation, sample QC, allele and genotype counts     summary counts per variant (or,
         (held for a secure sum by default)                    secure: only its HWE failures),
                                                               the variants it suppresses,
                                                               excluded sample counts per reason
secagg.* the secure sum of its counts (four exchanges)         keys, encrypted shares, masked
                                                               counts, shares to unmask the sum
features its PRS, rare dosages, covariates, train/test split   sizes (samples, cases, splits)
check    (a resumed study) whether it still holds what counts  for each, true or false
         and features left with it
moments  the training PRS and covariate moments; the samples  (n, Σx, Σx²), cases, width, the
         it trains on, less its validation rows                count it trains on
fit      a round of local training (genomic task)              its update, Bloom filter, n, loss
validate its model on its validation rows (genomic task)       counts, score histograms, Σ loss
evaluate its model on its test split                           exact per-site metrics, score
                                                               histograms, its true cluster
======== ===================================================== ================================

The coordinator's program (:func:`rvfedprs.study.coordinator.run_study`) chains the steps; the
same program runs on every engine (:func:`rvfedprs.federation.rounds.run_job`).

A site is named in a deployment by its node configuration, ``site-config='/path/site.yaml'`` (a
``site`` section: its id, inputs and folder, see ``rvfedprs/schemas/site.schema.json``); in
simulation by its ``partition-id`` into the job's sorted sites.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from rvfedprs.bloom import read_bloom_key
from rvfedprs.exceptions import ConfigError
from rvfedprs.genomic.task import GenomicTask
from rvfedprs.strategies.base import FitInstruction, FitResult
from rvfedprs.study.counts import hold_counts, hwe_failing
from rvfedprs.study.samplesheet import SiteInputs
from rvfedprs.study.site import StudySite

__all__ = ["StudyTask", "site_locator", "load_site_config"]


def load_site_config(path: str | Path) -> tuple[SiteInputs, Path, str | None]:
    """A site's own configuration file: (its inputs, its folder, its Bloom key file).

    Raises
    ------
    ConfigError
        When the file or its ``site`` section is missing or invalid (the key is named).
    """
    from rvfedprs.config import load_config

    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"site configuration not found: {path}")
    section = load_config(path)["site"]
    for key in ("id", "genotypes", "format", "phenotypes", "folder"):
        if not section.get(key):
            raise ConfigError(f"{path}: site.{key} is required")
    base = path.parent

    def resolve(value: str | None) -> str | None:
        if value is None:
            return None
        return str(Path(value) if Path(value).is_absolute() else base / value)

    inputs = SiteInputs(
        site=section["id"],
        genotypes=tuple(resolve(g) for g in section["genotypes"]),
        format=section["format"],
        phenotypes=resolve(section["phenotypes"]),
        samples=resolve(section.get("samples")),
        vcf_genotype_field=section.get("vcf_genotype_field"),
        truth=resolve(section.get("truth")),
    )
    return inputs, Path(resolve(section["folder"])), resolve(section.get("bloom_key_file"))


def site_locator(inputs: SiteInputs, folder: str | Path, key_file: str | None = None) -> dict:
    """What a node needs to open its site (simulation: one entry of the job's ``sites``)."""
    return {
        "client-id": inputs.site,
        "inputs": inputs.as_dict(),
        "folder": str(Path(folder).resolve()),
        "bloom-key-file": key_file or "",
    }


class StudyTask(GenomicTask):
    """Prepare → train → evaluate, every step at the sites (see the module docstring).

    The genomic task with the study's own site steps before training: the server side (run
    settings, the floor, strategies, checkpoints, the validation choice) is the genomic task's;
    a site trains, validates and evaluates on the genomic site its features stage prepared.
    """

    name = "study"
    planner = ""  # a study is its coordinator's program (:meth:`coordinator`), not a run plan
    steps = {
        "setup": "setup_report",
        "counts": "step_counts",
        "features": "step_features",
        "check": "step_check",
        "moments": "step_moments",
        "validate": "step_validate",
        "evaluate": "step_evaluate",
    }

    # --- site side -------------------------------------------------------------------------
    def locate(
        self, node_config: Mapping[str, Any], run_config: Mapping[str, Any], settings: Mapping
    ) -> dict[str, Any]:
        """Deployment: ``site-config`` in the node config; simulation: ``partition-id``."""
        if "site-config" in node_config:
            inputs, folder, key_file = load_site_config(str(node_config["site-config"]))
            return site_locator(inputs, folder, key_file)
        sites = list(settings.get("sites") or [])
        if "partition-id" not in node_config or not sites:
            raise ConfigError(
                f"cannot tell which site this node is: node config {dict(node_config)} has "
                "neither site-config nor partition-id"
            )
        index = int(node_config["partition-id"])
        if not 0 <= index < len(sites):
            raise ConfigError(f"partition-id {index} out of range: {len(sites)} sites")
        return dict(sorted(sites, key=lambda s: s["client-id"])[index])

    def open_site(self, locator: Mapping[str, Any], settings: Mapping[str, Any]) -> StudySite:
        """The site over its inputs and folder (nothing is read until a step asks)."""
        key = read_bloom_key(locator.get("bloom-key-file") or None, setting="bloom-key-file")
        return StudySite(
            SiteInputs.from_dict(locator["inputs"]), Path(locator["folder"]), bloom_key=key
        )

    def setup_report(self, site: StudySite, payload: Mapping[str, Any], state: dict) -> dict:
        """The site's id (its data are read by the later steps)."""
        return {"site": site.site}

    def step_counts(self, site: StudySite, payload: Mapping[str, Any], state: dict) -> dict:
        """Validation, sample QC and the released counts (:meth:`StudySite.counts`).

        With ``secure`` in the payload the counts are held for a secure sum
        (:mod:`rvfedprs.study.counts`) and the reply carries, per variant, only whether the
        site's controls fail HWE and whether it suppressed the variant.
        """
        reply = site.counts(
            payload["pipeline"],
            min_cell_count=int(payload["min_cell_count"]),
            request=payload.get("request"),
        )
        if not payload.get("secure"):
            return reply
        counts = reply.pop("counts")
        reply["n_variants"] = hold_counts(state, counts)
        reply["hwe_failing"] = hwe_failing(counts, payload["pipeline"]["qc"]["hwe_p_min"])
        return reply

    def step_features(self, site: StudySite, payload: Mapping[str, Any], state: dict) -> dict:
        """The site's feature set (:meth:`StudySite.features`)."""
        return site.features(
            payload["pipeline"],
            rare=pd.DataFrame(payload["rare"]),
            weights=str(payload["weights"]),
            frequencies=pd.DataFrame(payload["frequencies"]),
            request=payload.get("request"),
        )

    def step_check(self, site: StudySite, payload: Mapping[str, Any], state: dict) -> dict:
        """Step → whether the site holds its outputs for the request digest given (a resume).

        ``changed_inputs`` lists the site's input files changed since those steps answered.
        """
        held: dict[str, Any] = {
            step: site.holds(step, str(request)) for step, request in payload.items()
        }
        changed = sorted({f for step in payload for f in site.changed_inputs(step)})
        return {**held, "changed_inputs": changed}

    def step_moments(self, site: StudySite, payload: Mapping[str, Any], state: dict) -> dict:
        """The genomic setup report of the prepared data (moments, counts it trains on)."""
        return super().setup_report(site.genomic(), payload, state)

    def step_validate(self, site: StudySite, payload: Mapping[str, Any], state: dict) -> dict:
        """The genomic validation summary on the prepared data."""
        return super().step_validate(site.genomic(), payload, state)

    def step_evaluate(self, site: StudySite, payload: Mapping[str, Any], state: dict) -> dict:
        """Evaluation summary of the model sent (:meth:`StudySite.evaluate`)."""
        return site.evaluate(payload["parameters"], payload["settings"], bins=int(payload["bins"]))

    def fit(
        self,
        instruction: FitInstruction,
        site: StudySite,
        settings: Mapping[str, Any],
        state: dict[str, Any],
        *,
        random_seed: int,
    ) -> FitResult:
        """A round of the genomic task's local training on the site's prepared data."""
        return super().fit(instruction, site.genomic(), settings, state, random_seed=random_seed)

    # --- server side -----------------------------------------------------------------------
    def coordinator(self, job: Mapping[str, Any]) -> Callable[..., dict[str, Any]] | None:
        """The study's program (:func:`rvfedprs.study.coordinator.run_study`)."""
        from rvfedprs.study.coordinator import run_study

        def program(transport, job, *, on_round=None):
            return run_study(self, transport, job, on_round=on_round)

        return program
