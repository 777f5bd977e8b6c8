"""Run a consortium study from its configuration, on the engine the configuration names.

:func:`run_study_config` is the coordinator's entry point (``rvfedprs study``, the Snakemake rule
``study``): it reads the site sheet, builds the job (the task ``study``, the strategies of
``train.compare``) and runs :func:`~rvfedprs.study.coordinator.run_study`

- ``inprocess``: every site in this process, each reading only its own files and folder;
- ``flower-sim``: Flower's simulation engine, node ``partition-id`` i is the i-th site;
- ``flower-deploy``: a SuperLink and one SuperNode per site started here on loopback, each given
  only its own site configuration (``site-config``); or, with ``flower.superlink`` set (or a
  running SuperLink given), the job is submitted to a SuperLink whose SuperNodes the sites
  started themselves (``rvfedprs site``): the coordinator then needs only the site ids (the
  sheet's ``site`` column, or the sites of ``flower.node_keys``) and writes nothing for the
  sites.

When the coordinator dies, ``resume`` continues the study from what ``study_state.json``
records (:mod:`rvfedprs.study.state`; refused, naming the settings, when the configuration
changed since), on any engine; on a Flower engine whose run goes on on the SuperLink,
``attach`` waits for that run and collects its summary instead of submitting a new one. On
``flower-deploy`` the coordinator's program runs in the ServerApp, which Flower never restarts:
``resume`` waits until the SuperLink has marked the recorded run ended, then submits a new run
that continues (:func:`~rvfedprs.federation.flower.submit.launch`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import yaml

from rvfedprs.bloom import read_bloom_key
from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.inprocess import InProcessTransport
from rvfedprs.federation.rounds import run_job
from rvfedprs.federation.task import Transport
from rvfedprs.provenance import draw_seed
from rvfedprs.strategies import strategy_class
from rvfedprs.study.samplesheet import SiteInputs, read_samplesheet, read_site_ids
from rvfedprs.study.site import StudySite
from rvfedprs.study.state import StudyState, config_fingerprint
from rvfedprs.study.task import StudyTask, site_locator
from rvfedprs.study.tuning import study_configurations

__all__ = ["run_study_config", "write_site_config", "study_job", "study_min_replies"]

log = logging.getLogger(__name__)


def write_site_config(
    inputs: SiteInputs, folder: str | Path, path: str | Path, *, bloom_key_file: str | None = None
) -> Path:
    """A site's own configuration file (what its SuperNode reads, ``rvfedprs site``)."""
    section = {
        "id": inputs.site,
        "genotypes": list(inputs.genotypes),
        "format": inputs.format,
        "phenotypes": inputs.phenotypes,
        "samples": inputs.samples,
        "vcf_genotype_field": inputs.vcf_genotype_field,
        "truth": inputs.truth,
        "folder": str(Path(folder).resolve()),
        "bloom_key_file": bloom_key_file,
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump({"site": section}, sort_keys=False))
    return path


def study_min_replies(config: Mapping[str, Any], n_sites: int) -> int:
    """The fewest sites every exchange of a study needs (default: every site).

    ``study.min_replies`` or ``flower.min_replies``: a study honours whichever is given, on
    every engine (the one rule of :func:`~rvfedprs.federation.rounds.require_replies`).

    Raises
    ------
    ConfigError
        When both are given and disagree, or the value is more than the sites there are.
    """
    given = {
        "study.min_replies": (config.get("study") or {}).get("min_replies"),
        "flower.min_replies": (config.get("flower") or {}).get("min_replies"),
    }
    given = {k: int(v) for k, v in given.items() if v is not None}
    if len(set(given.values())) > 1:
        raise ConfigError(
            "study.min_replies and flower.min_replies disagree "
            f"({given['study.min_replies']} and {given['flower.min_replies']}); "
            "give one (a study honours either)"
        )
    for key, value in given.items():
        if not 1 <= value <= n_sites:
            raise ConfigError(f"{key} must be in [1, {n_sites}] (the number of sites), got {value}")
    return next(iter(given.values()), n_sites)


def study_job(
    config: Mapping[str, Any], *, out: Path, scoring_file: str | Path, seed: int, n_sites: int
) -> dict[str, Any]:
    """The job of a study: one run per strategy of ``train.compare``."""
    study = config["study"]
    return {
        "task": StudyTask.name,
        "config": dict(config),
        "seed": int(seed),
        "rounds": int(config["train"]["rounds"]),
        "resume": False,
        "expected_clients": n_sites,
        "min_replies": study_min_replies(config, n_sites),
        "runs": [
            {"strategy": name, "out": str(out / "train" / name)}
            for name in config["train"]["compare"]
        ],
        "study": {
            "out": str(out),
            "scoring_file": str(Path(scoring_file).resolve()),
            "min_cell_count": int(study["min_cell_count"]),
            "count_aggregation": study["count_aggregation"],
            "bins": int(study["histogram_bins"]),
        },
    }


def _study_seed(out: Path, given: int | None, fingerprint: Mapping[str, str], resume: bool) -> int:
    """The study's seed: on ``resume``, the saved study's (checked against its configuration).

    Raises
    ------
    ConfigError
        When the configuration changed since the saved state (:meth:`StudyState.check`).
    """
    saved = StudyState.read(out)
    if resume and saved is None:
        log.warning(
            "nothing to resume in %s (no study state): the study starts from the start", out
        )
    if not resume or saved is None:
        return draw_seed(given)
    saved.check(fingerprint, given)
    return saved.seed


def _summary(status: Mapping[str, Any]) -> dict[str, Any]:
    """The study's summary in a Flower run's final status (what ``study.json`` holds)."""
    return {k: v for k, v in status.items() if k not in ("status", "time", "run_id")}


def _attach(engine: str, out: Path, run_id: str, config: Mapping[str, Any]) -> dict[str, Any]:
    """The summary of the Flower run ``run_id`` of the study in ``out`` (waited for).

    Raises
    ------
    ConfigError
        On the in-process engine (its study dies with its coordinator: resume it instead).
    """
    if engine == "inprocess":
        raise ConfigError(
            "--attach waits for a Flower run: an in-process study ends with its coordinator "
            "(continue it with --resume)"
        )
    from rvfedprs.federation.flower.submit import attach

    timeout = float((config.get("flower") or {}).get("timeout") or 3600.0)
    status = attach(out / "flower", run_id or None, timeout=timeout)
    return _summary(status)


def run_study_config(
    config: Mapping[str, Any],
    *,
    scoring_file: str | Path,
    samplesheet: str | Path | None = None,
    out: str | Path | None = None,
    superlink=None,
    wrap: Callable[[Transport], Transport] | None = None,
    resume: bool = False,
    attach: str | None = None,
) -> dict[str, Any]:
    """Run the study of a validated configuration; returns its summary.

    Parameters
    ----------
    config : mapping
        Validated configuration: ``study`` (engine, folders, ``min_cell_count``), ``pipeline``
        (QC, phenotype coding...), ``train`` (``compare``, rounds, seed), ``flower``.
    scoring_file : str or Path
        The coordinator's PGS Catalog scoring file.
    samplesheet : str or Path, optional
        The site sheet (default ``study.samplesheet``). When the sites start their own nodes
        (``flower-deploy`` with ``flower.superlink`` or ``superlink``) only its ``site`` column
        is read, and without a sheet the sites are those of ``flower.node_keys``.
    out : str or Path, optional
        The coordinator's folder (default ``study.out``).
    superlink : LocalSuperLink, optional
        A running SuperLink to submit to (Flower engines).
    wrap : callable, optional
        In-process engine: wraps its transport (e.g.
        :class:`~rvfedprs.federation.metering.MeteredTransport` to measure the traffic).
    resume : bool
        Continue the study saved in ``out`` (its ``study_state.json``): finished stages and
        runs are not run again, a started run goes on from its latest checkpoint. Nothing saved:
        the study starts from the beginning (logged).
    attach : str, optional
        Flower engines: wait for this run (``""``: the latest submitted from ``out``), submitted
        by a coordinator that died, and return its summary; nothing new is submitted.

    Raises
    ------
    ConfigError
        No site sheet, an engine that is not one of the federation's, ``flower.node_keys``
        naming other sites than the sheet, ``attach`` on the in-process engine, or ``resume``
        under a configuration changed since the state was saved (the settings are named).
    """
    config = dict(config)
    study = config["study"]
    engine = study["engine"]
    for name in config["train"]["compare"]:  # a tuned study's grids, before anything runs
        study_configurations(name, config)
    if attach is not None:
        return _attach(engine, Path(out or study["out"]).resolve(), attach, config)
    node_keys = (config.get("flower") or {}).get("node_keys")
    sites_run_nodes = engine == "flower-deploy" and bool(
        superlink is not None or (config.get("flower") or {}).get("superlink")
    )
    sheet = samplesheet or study["samplesheet"]
    if sheet is None and not (sites_run_nodes and node_keys):
        raise ConfigError("study.samplesheet is not set (give the site sheet)")
    if sites_run_nodes:
        sites = read_site_ids(sheet) if sheet is not None else sorted(node_keys)
        if node_keys and set(node_keys) != set(sites):
            raise ConfigError(
                f"flower.node_keys lists sites {sorted(node_keys)}, the site sheet {sites}: "
                "every site needs its node's key"
            )
    else:
        sites = read_samplesheet(sheet)
    out = Path(out or study["out"]).resolve()
    folders = {s: Path(study["sites_dir"]).resolve() / s for s in sites}
    known = sites if sites_run_nodes else {s: i.as_dict() for s, i in sites.items()}
    fingerprint = config_fingerprint(
        config,
        sites=known,
        scoring_file=scoring_file,
        min_replies=study_min_replies(config, len(sites)),
    )
    seed = _study_seed(out, config["train"]["seed"], fingerprint, resume)
    config["train"] = {**config["train"], "seed": seed}
    job = study_job(config, out=out, scoring_file=scoring_file, seed=seed, n_sites=len(sites))
    job["resume"] = bool(resume)
    job["study"]["fingerprint"] = fingerprint
    job["study"]["sites"] = sorted(sites)  # a listed site no node serves is named, not dropped
    key_file = config["fedce"]["bloom_key_file"]
    task = StudyTask()
    if engine == "inprocess":
        key = read_bloom_key(key_file)
        transport = InProcessTransport(
            task, {s: StudySite(sites[s], folders[s], bloom_key=key) for s in sites}
        )
        return run_job(task, transport if wrap is None else wrap(transport), job)
    from rvfedprs.federation.flower.engine import FlowerRun, submit_job

    nodes, locators = {}, []
    if not sites_run_nodes:  # the nodes (or simulated sites) this call starts: their configs
        for s, inputs in sites.items():
            path = write_site_config(
                inputs, folders[s], folders[s] / "site.yaml", bloom_key_file=key_file
            )
            nodes[f"supernode-{s}"] = {"site-config": str(path.resolve())}
        locators = [site_locator(sites[s], folders[s], key_file) for s in sorted(sites)]
    # the ServerApp's study builds each run's strategy after its counts stage (a GLM's burden
    # map is of the federated variant set); here only the strategies that pool are left out
    runs = [
        FlowerRun(spec, None) for spec in job["runs"] if not strategy_class(spec["strategy"]).pooled
    ]
    job["runs"] = [run.spec for run in runs]
    status = submit_job(
        engine,
        task=task.name,
        config=config,
        runs=runs,
        rounds=job["rounds"],
        random_seed=seed,
        out=out,
        n_sites=len(sites),
        nodes=nodes,
        task_settings={"sites": locators} if engine == "flower-sim" else {},
        flower=config.get("flower"),
        superlink=superlink,
        resume=bool(resume),
        min_replies=job["min_replies"],
        extra={"study": job["study"]},
    )
    return _summary(status)
