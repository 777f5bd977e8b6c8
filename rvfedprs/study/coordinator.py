"""The coordinator's program for a consortium study, the same on every engine.

:func:`run_study` chains the sites' steps (:mod:`rvfedprs.study.task`) and writes only aggregates
under the study's ``out`` folder::

    study.json            sites, who failed and why, variant and sample counts
    variants.tsv          the global variant table (summed counts, QC, frequencies, class; with
                          study.count_aggregation: secure the sums come from a secure sum and
                          hwe_p is empty: each site reports only which variants fail HWE)
    rare_variants.tsv     the rare-dosage columns every site builds
    exclusions.tsv        every excluded variant with its reason (incl. suppressed counts and the
                          site that suppressed them), and per site the number of samples
                          excluded per step and reason (no IDs: each site keeps its own list)
    score_match.tsv       the scoring file matched to the variant set (pgsc_calc vocabulary)
    score_match_candidates.tsv   the same, one row per scoring-file row × variant (not_best)
    score_weights.txt     the usable scoring rows the sites score with
    clients.tsv           per site: samples, cases (empty for a quantitative trait), train/test
                          sizes, carriers
    outcome.json          the phenotype's kind and column (write_outcome)
    train/{strategy}/     metrics.json (design §11 keys), checkpoints, provenance.json

Every exchange follows the federation's one rule for lost sites
(:func:`~rvfedprs.federation.rounds.require_replies`): it goes on while at least ``min_replies``
sites answer, otherwise the study stops naming the sites that did not and why. A site that fails
a preparation step (missing or malformed files: the error names the site and the file) is named
in ``study.json`` (``left_out``) and left out of the rest of the study. A site lost in a training
round or in a federated evaluation is named in that round's record (``failed``,
``evaluation_failed``) and in ``study.json`` (per run: ``failures``, ``evaluation_failures``);
the pooled metrics are then over the sites that answered (``evaluated_sites``). Each round's
checkpoint is written before its evaluation. Each site's training-sample count, its aggregation
weight, is fixed by its features summary: a training reply reporting another count is refused
and the site named in that round's record, as a lost one.

Each finished stage and run is recorded in ``study_state.json`` (only aggregates the
coordinator holds anyway, :mod:`rvfedprs.study.state`): a study whose coordinator died resumes
(``rvfedprs study --resume``) from the last finished stage and each run's latest checkpoint.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.cohort import exclusions
from rvfedprs.evaluation.metrics import cluster_ari
from rvfedprs.evaluation.selection import selected_parameters, selection_record
from rvfedprs.exceptions import InputDataError
from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint
from rvfedprs.federation.metering import traffic_of
from rvfedprs.federation.plan import Privacy, RunPlan, enabled_secagg
from rvfedprs.federation.rounds import (
    FITTED_WARM_START,
    FederationError,
    declare_samples,
    require_replies,
    required_replies,
)
from rvfedprs.federation.secagg.protocol import SecAggParams
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.federation.task import Request, Task, Transport
from rvfedprs.genomic.data import write_outcome
from rvfedprs.outcomes import outcome
from rvfedprs.plan import run
from rvfedprs.prepare.coordinator import (
    combine_counts,
    combine_secure_counts,
    match_scores,
    write_weights,
)
from rvfedprs.prepare.site import phenotype_kind
from rvfedprs.provenance import jsonable
from rvfedprs.run import finish_run
from rvfedprs.strategies import strategy_class
from rvfedprs.strategies.base import Strategy
from rvfedprs.study.counts import check_secure_counts, sum_counts
from rvfedprs.study.site import COUNT_COLUMNS, VARIANT_COLUMNS
from rvfedprs.study.state import StudyState, digest
from rvfedprs.study.tuning import (
    TRIALS_DIR,
    choose_trial,
    copy_chosen,
    study_configurations,
    trial_config,
    trial_score,
)

__all__ = ["run_study", "federated_evaluation", "RoundEvaluation", "counts_table"]

log = logging.getLogger(__name__)


def _checked(step: str, replies: Mapping, failures: Mapping, total: int, min_replies: int) -> None:
    """:func:`~rvfedprs.federation.rounds.require_replies` for a step answered by ``replies``."""
    count = f"{step}: only {len(replies)} of {total} sites answered"
    require_replies(step, count, len(replies), min_replies, failures)


def counts_table(reply: Mapping[str, Any]) -> pd.DataFrame:
    """A site's released counts as the table :func:`combine_counts` takes."""
    table = pd.DataFrame({c: reply["variants"][c] for c in VARIANT_COLUMNS})
    table["pos"] = table["pos"].astype(np.int64)
    for column in COUNT_COLUMNS:
        table[column] = np.asarray(reply["counts"][column])
    return table


def _suppressed(replies: Mapping[str, Mapping[str, Any]], keys: pd.Series) -> pd.Series:
    """Variant key → reason, for the variants some site refused to release."""
    reasons: dict[str, list[str]] = {}
    for site in sorted(replies):
        mask = np.asarray(replies[site]["suppressed"], dtype=bool)
        for key in keys[mask]:
            reasons.setdefault(key, []).append(site)
    return pd.Series(
        {k: f"count below min_cell_count at site(s) {', '.join(v)}" for k, v in reasons.items()},
        dtype=object,
    )


def _secure_counts(
    transport: Transport,
    settings: Mapping[str, Any],
    counted: Mapping[str, Mapping[str, Any]],
    pipeline: Mapping[str, Any],
    *,
    params: SecAggParams,
    seed: int,
) -> tuple[
    list[str], dict[str, str], dict[str, str], tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]
]:
    """The global tables from a secure sum of the sites' held counts.

    Returns
    -------
    included : list of str
        The sites whose counts are in the sum.
    dropped : dict of str to str
        Site → why its counts are in no sum (it is left out of the study).
    faults : dict of str to str
        Site → a fault after its vector arrived (e.g. no reply in the unmask step): its counts
        are in the sum.
    tables : (variants, rare, excluded)
        :func:`~rvfedprs.prepare.coordinator.combine_secure_counts`.
    """
    sizes = {c: int(r["n_variants"]) for c, r in counted.items()}
    if len(set(sizes.values())) != 1:
        raise FederationError(f"sites count different numbers of variants: {sizes}")
    totals, outcome = sum_counts(
        transport,
        settings,
        sorted(counted),
        next(iter(sizes.values())),
        params,
        random_seed=derive_seed(seed, "study-counts"),
    )
    included = sorted(outcome.sums["all"].included)
    first = counted[included[0]]
    summed = pd.DataFrame({c: first["variants"][c] for c in VARIANT_COLUMNS})
    summed["pos"] = summed["pos"].astype(np.int64)
    for column, values in totals.items():
        summed[column] = values
    tables = combine_secure_counts(
        summed,
        pipeline,
        n_samples=sum(int(counted[c]["n_samples"]) for c in included),
        hwe_failing={c: np.asarray(counted[c]["hwe_failing"], dtype=bool) for c in included},
        # a site dropped from the sum is out of the study: the variants it skipped are not named
        skipped=[pd.DataFrame(counted[c]["skipped"]) for c in included],
    )
    return included, dict(outcome.dropped), dict(outcome.faults), tables


def federated_evaluation(
    transport: Transport,
    strategy: Strategy,
    settings: Mapping[str, Any],
    *,
    bins: int,
    min_replies: int,
    step: str = "evaluation",
    parameters_for=None,
) -> dict[str, Any]:
    """Every site evaluates its own model; the pooled metrics from the summaries that came back.

    Parameters
    ----------
    transport : Transport
    strategy : Strategy
    settings : mapping
        The run settings.
    bins : int
        Histogram bins of the sites' score summaries.
    min_replies : int
        Fewest sites that must answer (:func:`~rvfedprs.federation.rounds.require_replies`).
    step : str
        Names the exchange in the log and the error ("round 3 evaluation").
    parameters_for : callable, optional
        Each site's model (default: the strategy's), e.g. the round chosen on validation.

    Returns
    -------
    dict
        The outcome's pooled test metrics (:meth:`~rvfedprs.outcomes.Outcome.
        pooled_test_metrics`: AUCs from histograms, or R²s from sums) over the sites that
        answered, ``evaluated_sites`` (those sites), ``evaluation_failed`` (site → why, only
        when a site was lost), ``clusters`` and ``ari`` (NaN unless the strategy forms clusters
        and the sites know their true cluster).

    Raises
    ------
    FederationError
        When fewer than ``min_replies`` sites answered (naming the others and why).
    """
    sites = transport.client_ids
    parameters_for = parameters_for or strategy.parameters_for
    requests = {
        c: Request(
            "evaluate",
            {"parameters": parameters_for(c), "settings": dict(settings), "bins": bins},
        )
        for c in sites
    }
    summaries, failures = transport.query(requests, settings)
    count = f"{step}: only {len(summaries)} of {len(sites)} sites answered"
    require_replies(step, count, len(summaries), min_replies, failures)
    answered = sorted(summaries)
    metrics = outcome((settings.get("outcome") or {}).get("kind")).pooled_test_metrics(summaries)
    metrics["evaluated_sites"] = answered
    if failures:
        metrics["evaluation_failed"] = dict(sorted(failures.items()))
    found = strategy.clusters()
    metrics["clusters"] = {c: found.get(c, 0) for c in sites}
    truth = {c: summaries[c].get("true_cluster") for c in answered}
    scored = strategy.forms_clusters and all(v is not None for v in truth.values())
    clusters = {c: metrics["clusters"][c] for c in answered}
    metrics["ari"] = cluster_ari(clusters, truth) if scored else float("nan")
    return metrics


class RoundEvaluation:
    """The ``evaluate_round`` of a study's run: a federated evaluation after every round.

    Its history keys: ``auc`` (pooled over the sites that answered) and, when a site was lost,
    ``evaluation_failed`` (site → why) and ``evaluated_sites``. The sites evaluate the network
    of :attr:`settings`: the engine replaces the run settings it was given by those after the
    warm start (:meth:`prepare`), whose network can differ (a top-k ``model.rare_input`` reads
    the variants the floor chose), so the run's final evaluation takes them from here too.

    Parameters
    ----------
    transport : Transport
    settings : mapping
        The run settings before the warm start.
    bins, min_replies : int
        As :func:`federated_evaluation`.
    """

    def __init__(
        self, transport: Transport, settings: Mapping[str, Any], *, bins: int, min_replies: int
    ) -> None:
        self.transport, self.settings = transport, dict(settings)
        self.bins, self.min_replies = bins, min_replies

    def prepare(self, settings: Mapping[str, Any]) -> None:
        """Evaluate the network of the run settings after the warm start."""
        self.settings = dict(settings)

    def evaluate(self, strategy: Strategy, step: str, parameters_for=None) -> dict[str, Any]:
        """:func:`federated_evaluation` of the models (default: the strategy's), as set."""
        return federated_evaluation(self.transport, strategy, self.settings, bins=self.bins,
                                    min_replies=self.min_replies, step=step,
                                    parameters_for=parameters_for)  # fmt: skip

    def __call__(self, strategy: Strategy, server_round: int) -> dict[str, Any]:
        """Round ``server_round``'s entry: its pooled metric (AUC, R²; and any lost sites)."""
        metrics = self.evaluate(strategy, f"round {server_round} evaluation")
        name = metrics["metric"]
        log.info("%s round %d: pooled %s %.4f", strategy.name, server_round, name, metrics[name])
        entry = {name: metrics[name]}
        if "evaluation_failed" in metrics:
            entry["evaluation_failed"] = metrics["evaluation_failed"]
            entry["evaluated_sites"] = metrics["evaluated_sites"]
        return entry


class _Sites:
    """The sites still in a study, those left out and why; a step asked of all of them.

    Every exchange follows :func:`~rvfedprs.federation.rounds.require_replies`; a site that
    does not answer a step is left out of the rest of the study (named with the step).
    """

    def __init__(
        self,
        transport: Transport,
        base: Mapping[str, Any],
        *,
        total: int,
        min_replies: int,
        left_out: Mapping[str, str],
    ) -> None:
        self.transport = transport
        self.base = dict(base)
        self.total = total
        self.min_replies = min_replies
        self.left_out = dict(left_out)

    @property
    def ids(self) -> list[str]:
        """The sites still in the study."""
        return self.transport.client_ids

    def ask(self, step: str, payload: Mapping[str, Any]) -> dict[str, Any]:
        """Every site's reply to ``step``; those that did not answer are left out."""
        replies, failed = self.transport.query(
            {c: Request(step, dict(payload)) for c in self.ids}, self.base
        )
        _checked(step, replies, failed, self.total, self.min_replies)
        self.left_out.update({c: f"{step}: {why}" for c, why in failed.items()})
        self.transport = self.transport.subset(sorted(replies))
        return replies

    def keep(self, sites: list[str], dropped: Mapping[str, str], step: str) -> None:
        """Keep only ``sites``; ``dropped`` (site → why) are left out at ``step``."""
        self.left_out.update({c: f"{step}: {why}" for c, why in dropped.items()})
        self.transport = self.transport.subset(sites)

    def record(self) -> dict[str, Any]:
        """Who is in and who is out, for the study's state."""
        return {"sites": self.ids, "left_out": dict(self.left_out)}

    def restore(self, recorded: Mapping[str, Any]) -> None:
        """Back to the sites of a recorded stage (those that answered the setup this time)."""
        self.left_out.update(recorded["left_out"])
        self.transport = self.transport.subset([c for c in recorded["sites"] if c in self.ids])


def _open_state(out: Path, job: Mapping[str, Any]) -> StudyState:
    """The study's state: the saved one on ``job["resume"]``, else a fresh (empty) one."""
    study = job["study"]
    fingerprint = study.get("fingerprint") or {}
    saved = StudyState.read(out)
    if job.get("resume") and saved is not None:
        saved.check(fingerprint, int(job["seed"]))
        log.info("resuming the study in %s (%s)", out, saved.describe())
        return saved
    if saved is not None and (saved.stages or saved.runs):
        log.warning(
            "%s holds a resumable study state (%s): starting over (rvfedprs study --resume "
            "continues it)",
            out,
            saved.describe(),
        )
    state = StudyState(out, int(job["seed"]), fingerprint)
    state.restart()
    return state


def _still_held(state: StudyState, sites: _Sites) -> None:
    """Forget the recorded stages whose outputs a site no longer holds: they run again.

    The sites are asked (``check``) whether they still hold what ``features`` and ``counts``
    left with them for the recorded requests; the features need the counts' sample QC only when
    they are built again. A site that cannot tell holds nothing.

    Raises
    ------
    InputDataError
        When a site's input files changed since those stages ran, naming the site and files.
    """
    wanted = {s: state.stages[s]["request"] for s in ("counts", "features") if s in state.stages}
    if not wanted:
        return
    replies, _ = sites.transport.query({c: Request("check", wanted) for c in sites.ids}, sites.base)
    changed = {c: r["changed_inputs"] for c, r in replies.items() if r.get("changed_inputs")}
    if changed:
        raise InputDataError(
            "the inputs of site(s) "
            + "; ".join(f"{c}: {', '.join(files)}" for c, files in sorted(changed.items()))
            + " changed since the study state was saved; a resumed study runs on the data it "
            "started on: restore them, or start the study again without --resume"
        )
    for stage in ("features", "counts"):
        if stage not in state.stages:
            continue
        missing = [
            c for c in state.stages[stage]["sites"]
            if c in sites.ids and not replies.get(c, {}).get(stage)
        ]  # fmt: skip
        if not missing:
            return
        log.warning(
            "site(s) %s no longer hold what the %s stage left with them: it runs again",
            ", ".join(missing),
            stage,
        )
        state.forget(stage)


def _count(
    sites: _Sites, job: Mapping[str, Any], request: Mapping[str, Any]
) -> dict[str, pd.DataFrame]:
    """The counts stage: the global variant table, rare columns and exclusions."""
    config, pipeline = job["config"], job["config"]["pipeline"]
    secure = bool(request["secure"])
    params = SecAggParams.from_config(config["secagg"]) if secure else None
    if secure:
        check_secure_counts(len(sites.ids), params)
    counted = sites.ask("counts", request)
    first = next(iter(counted.values()))
    keys = pd.Series(first["variants"]["variant_key"], dtype=object)
    if secure:
        included, dropped, faults, (variants, rare, excluded) = _secure_counts(
            sites.transport,
            sites.base,
            counted,
            pipeline,
            params=params,
            seed=int(job["seed"]),
        )
        # a site at fault after its vector arrived (silent or malformed in the unmask step): its
        # counts are in the sum, but it did not answer a step, so it is out of the study
        lost = {**dropped, **{c: f"{why} (its counts are in the sum)" for c, why in faults.items()}}
        kept = [c for c in included if c not in faults]
        sites.keep(kept, lost, "secure sum of counts")
        _checked("secure sum of counts", dict.fromkeys(kept), lost, sites.total,
                 sites.min_replies)  # fmt: skip
        counted = {c: counted[c] for c in included}  # whose counts the tables hold
    else:
        tables = {site: counts_table(reply) for site, reply in counted.items()}
        skipped = [pd.DataFrame(r["skipped"]) for r in counted.values()]
        variants, rare, excluded = combine_counts(tables, pipeline, skipped=skipped)
    suppressed = _suppressed(counted, keys)
    if len(suppressed):
        hit = variants["variant_key"].isin(suppressed.index)
        variants.loc[hit, "qc_pass"] = False
        variants.loc[hit, "class"] = "excluded"
        variants.loc[hit, "reason"] = variants.loc[hit, "variant_key"].map(suppressed)
        rare = rare[~rare["variant_key"].isin(suppressed.index)]
        excluded = pd.concat(
            [excluded, exclusions("variant", suppressed.index, suppressed.values, "site_counts")],
            ignore_index=True,
        )
    sample_counts = pd.DataFrame(
        [row for reply in counted.values() for row in reply["exclusions"]],
        columns=["site", "step", "reason", "n_samples"],
    )
    log.info(
        "counts from %d sites: %d variants, %d rare, %d excluded (%d suppressed)",
        len(counted),
        len(variants),
        len(rare),
        int((variants["class"] == "excluded").sum()),
        len(suppressed),
    )
    return {"variants": variants, "rare": rare, "excluded": excluded, "samples": sample_counts}


def _clear_checkpoints(folder: Path) -> None:
    """Remove a run's checkpoints left by an earlier study (a fresh run starts from round 0)."""
    old = sorted((folder / "checkpoints").glob("round_*.pt"))
    if old:
        log.info("removing %d checkpoints of an earlier study from %s", len(old), folder)
        for path in old:
            path.unlink()


def run_study(
    task: Task,
    transport: Transport,
    job: Mapping[str, Any],
    *,
    on_round: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Prepare → train → evaluate at the sites; write the coordinator's aggregates.

    Each finished stage (counts, features) and run is recorded in ``out/study_state.json``
    (:class:`~rvfedprs.study.state.StudyState`). With ``job["resume"]`` the recorded stages are
    not run again (unless a site no longer holds what the stage left with it: then the stage
    runs again, logged), finished runs are not run again, and a started run continues from its
    latest checkpoint; the result equals an uninterrupted study's.

    Parameters
    ----------
    task : Task
        The study task.
    transport : Transport
        Any engine's.
    job : mapping
        ``config`` (validated), ``seed``, ``rounds``, ``resume``, ``runs`` (one strategy and
        ``out`` each), ``study`` (``out``, ``scoring_file``, ``min_cell_count``, ``bins``,
        ``fingerprint``: :func:`~rvfedprs.study.state.config_fingerprint`), ``min_replies``,
        ``task_settings`` (simulation: the sites). The counts stage adds ``rare_variants``
        (the federated rare-variant table) to the job its runs are built from: the burden map
        of a burden input is of this variant set.

    Returns
    -------
    dict
        The study's summary (also written to ``out/study.json``).

    Raises
    ------
    ConfigError
        On ``resume``, when the configuration changed since the state was saved.
    """
    config, study = job["config"], job["study"]
    pipeline = config["pipeline"]
    out = Path(study["out"])
    out.mkdir(parents=True, exist_ok=True)
    base = {"task": task.name, **dict(job.get("task_settings") or {})}
    state = _open_state(out, job)

    reports, failures = transport.open(base)
    failures = dict(failures)
    for site in study.get("sites", []):  # listed in the sheet, served by no connected node
        if site not in reports and site not in failures:
            failures[site] = "no node serving this site was connected at the start of the study"
            log.warning("site %s is listed but %s; it is left out", site, failures[site])
    total = int(job.get("expected_clients") or len(reports) + len(failures))
    min_replies = required_replies(job, total)
    _checked("setup", reports, failures, total, min_replies)
    sites = _Sites(
        transport.subset(sorted(reports)),
        base,
        total=total,
        min_replies=min_replies,
        left_out={str(k): v for k, v in failures.items()},
    )
    _still_held(state, sites)

    # 1. counts → global variant table, rare columns, exclusions
    secure = study.get("count_aggregation", "plain") == "secure"
    counts = {"pipeline": pipeline, "min_cell_count": study["min_cell_count"], "secure": secure}
    counts["request"] = digest(counts)
    if "counts" in state.stages:
        sites.restore(state.stages["counts"])
        tables = state.tables("counts")
        log.info("counts: as recorded in %s (%d sites)", state.path, len(sites.ids))
    else:
        tables = _count(sites, job, counts)
        state.record("counts", {**sites.record(), "request": counts["request"]}, tables)
    variants, rare = tables["variants"], tables["rare"]
    # the runs' burden features (model.rare_input, fedglm.features) are of this variant set:
    # the coordinator has no train.data, and every site builds these rare columns
    job = {**job, "rare_variants": rare}
    variants.to_csv(out / "variants.tsv", sep="\t", index=False)
    rare.to_csv(out / "rare_variants.tsv", sep="\t", index=False)
    tables["excluded"].assign(site="").to_csv(out / "exclusions.tsv", sep="\t", index=False)
    tables["samples"].to_csv(out / "excluded_samples.tsv", sep="\t", index=False)

    # 2. the scoring file against the global variant set
    match, scorefile, candidates = match_scores(
        variants, study["scoring_file"], pipeline, return_candidates=True
    )
    match.to_csv(out / "score_match.tsv", sep="\t", index=False)
    candidates.to_csv(out / "score_match_candidates.tsv", sep="\t", index=False)
    weights = write_weights(out / "score_weights.txt", match, scorefile)
    used = set(match.loc[match["used"], "variant_key"])
    frequencies = variants.loc[variants["variant_key"].isin(used), ["variant_key", "alt_freq"]]

    # 3. features at every site
    features = {
        "pipeline": pipeline,
        "rare": rare.to_dict(orient="list"),
        "weights": weights.read_text(),
        "frequencies": frequencies.to_dict(orient="list"),
    }
    features["request"] = digest(features)
    if "features" in state.stages:
        sites.restore(state.stages["features"])
        summaries = state.stages["features"]["summaries"]
        log.info("features: as recorded in %s (%d sites)", state.path, len(sites.ids))
    else:
        summaries = sites.ask("features", features)
        log.info("features built at %d sites", len(summaries))
        record = {**sites.record(), "request": features["request"], "summaries": summaries}
        state.record("features", record)
    pd.DataFrame([summaries[c] for c in sorted(summaries)]).to_csv(
        out / "clients.tsv", sep="\t", index=False
    )
    write_outcome(out, phenotype_kind(pipeline), pipeline["phenotype"]["column"])

    # 4. train and evaluate every strategy
    summary: dict[str, Any] = {
        "sites": sites.ids,
        "left_out": sites.left_out,
        "n_variants": int(len(variants)),
        "n_rare": int(len(rare)),
        "n_score_variants": int(match["used"].sum()),
        "runs": {},
    }
    for index, spec in enumerate(job["runs"]):
        name = spec["strategy"]
        if strategy_class(name).pooled:  # the run builds its own strategy
            summary["runs"][name] = "not run: it pools every site's data"
            log.warning("strategy %s pools every site's data: not run in a study", name)
            continue
        recorded = state.runs.get(name, {})
        if "summary" in recorded:
            summary["runs"][name] = recorded["summary"]
            log.info("run %s: finished before, as recorded in %s", name, state.path)
            continue
        progress = None if on_round is None else lambda _, e, i=index: on_round(i, e)
        configurations = study_configurations(name, config)
        if configurations == [{}]:  # as configured: the run is the strategy's
            summary["runs"][name] = _recorded_run(
                task, sites, job, spec, name, state, summaries, progress
            )
        else:
            summary["runs"][name] = _tuned_run(
                task, sites, job, spec, configurations, state, summaries, progress
            )
        state.finish_run(name, summary["runs"][name])
    # a site lost at a run's moments exchange is out of the study from there on
    summary["sites"], summary["left_out"] = sites.ids, dict(sites.left_out)
    if traffic_of(transport) is not None:  # the whole study's exchanges, per step
        summary["traffic"] = traffic_of(transport).table()
    (out / "study.json").write_text(json.dumps(jsonable(summary), indent=2) + "\n")
    return summary


def _moments(
    task: Task, sites: _Sites, job: Mapping[str, Any], summaries: Mapping[str, Mapping[str, Any]]
) -> dict[str, dict[str, Any]]:
    """Every site's moments report; a site whose training split changed is left out.

    The report's ``n`` (its training samples) must be the ``n_train`` its features summary
    declared (recorded in the study's state, so a resume checks it too); its ``n-fit``, the
    samples it trains on less its validation rows (the split of ``task.setup_payload``), is
    then the only aggregation weight accepted
    (:func:`~rvfedprs.federation.rounds.declare_samples`).
    """
    moments = sites.ask("moments", task.setup_payload(job))
    changed = {
        c: f"{int(r['n'])} training samples, but its features summary declared "
        f"{int(summaries[c]['n_train'])}"
        for c, r in moments.items()
        if int(r["n"]) != int(summaries[c]["n_train"])
    }
    if changed:
        kept = sorted(set(moments) - set(changed))
        sites.keep(kept, changed, "moments")
        _checked("moments", dict.fromkeys(kept), changed, sites.total, sites.min_replies)
    return {c: moments[c] for c in sites.ids}


def _recorded_run(
    task: Task,
    sites: _Sites,
    job: Mapping[str, Any],
    spec: Mapping[str, Any],
    name: str,
    state: StudyState,
    summaries: Mapping[str, Mapping[str, Any]],
    on_round: Callable[[int, dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """One run, recorded in the study's state as ``name``.

    Started (its checkpoints cleared) unless the state says it started before; then it goes on
    from its latest checkpoint.
    """
    resumed = bool(state.runs.get(name, {}).get("started"))
    if not resumed:
        _clear_checkpoints(Path(spec["out"]))
        state.start_run(name)
    strategy = task.build_strategy(spec, job)
    return _train(task, sites, job, spec, strategy, summaries, resume=resumed, on_round=on_round)


def _tuned_run(
    task: Task,
    sites: _Sites,
    job: Mapping[str, Any],
    spec: Mapping[str, Any],
    configurations: list[dict[str, Any]],
    state: StudyState,
    summaries: Mapping[str, Mapping[str, Any]],
    on_round: Callable[[int, dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """A strategy's B trials; the best on validation is the strategy's.

    Each trial is recorded in the state, so a resume skips finished ones and continues a
    started one; the chosen trial is copied to the strategy's folder. Returns its summary,
    with ``tuning``.
    """
    name, out = spec["strategy"], Path(job["study"]["out"])
    folder = out / TRIALS_DIR / name
    trials: list[dict[str, Any]] = []
    for index, configuration in enumerate(configurations):
        trial = f"{name}/trial_{index + 1}"
        trial_spec = {**spec, "out": str(folder / f"trial_{index + 1}")}
        trial_job = {**job, "config": trial_config(job["config"], configuration)}
        if trials:  # the floor, fitted once: the last trial's, on the same sites and model
            trial_job["warm_start"] = _warm_start(trials[-1], trial_job["config"])
        recorded = state.runs.get(trial, {})
        if "summary" in recorded:
            result = recorded["summary"]
            log.info("trial %s: finished before, as recorded in %s", trial, state.path)
        else:
            log.info("trial %s: %s", trial, configuration)
            result = _recorded_run(
                task, sites, trial_job, trial_spec, trial, state, summaries, on_round
            )
            state.finish_run(trial, result)
        trials.append({"configuration": configuration, "summary": result,
                       "out": Path(trial_spec["out"]), "config": trial_job["config"]})  # fmt: skip
    chosen = choose_trial(name, trials, folder / "tuning.tsv")
    tuning = {
        "budget": len(configurations),
        "chosen_trial": chosen + 1,
        "configuration": configurations[chosen],
        "validation_scores": [trial_score(t["summary"]) for t in trials],
        "table": str(folder / "tuning.tsv"),
    }
    copy_chosen(trials[chosen]["out"], Path(spec["out"]), tuning)
    return {**trials[chosen]["summary"], "tuning": tuning}


def _warm_start(trial: Mapping[str, Any], config: Mapping[str, Any]) -> dict[str, Any] | None:
    """The warm start (the floor) a trial's checkpoints recorded, when ``config`` fits the same.

    None when the trial recorded none, or trained another model (the floor's width and
    top-k screen are the model section's); :func:`~rvfedprs.federation.rounds.warm_start`
    takes it only on the same sites.
    """
    path = latest_checkpoint(trial["out"])
    if path is None or trial["config"]["model"] != config["model"]:
        return None
    return load_checkpoint(path).get("warm_start")


def _train(
    task: Task,
    sites: _Sites,
    job: Mapping[str, Any],
    spec: Mapping[str, Any],
    strategy: Strategy,
    summaries: Mapping[str, Mapping[str, Any]],
    *,
    resume: bool,
    on_round: Callable[[int, dict[str, Any]], None] | None,
) -> dict[str, Any]:
    """One run of a study: train (on ``resume`` from the latest checkpoint), evaluate.

    Each site's training-sample count is the one its features summary declared (``summaries``,
    recorded in the study's state, so a resume keeps it): a reply reporting another is refused
    and named (:func:`~rvfedprs.federation.rounds.declare_samples`). Writes the run's
    ``metrics.json``; returns its entry of ``study.json``.
    """
    config, study = job["config"], job["study"]
    traffic = traffic_of(sites.transport)
    start = None if traffic is None else traffic.mark()
    moments = _moments(task, sites, job, summaries)
    settings = declare_samples(task, {**task.run_settings(job, moments), **sites.base}, moments)
    evaluation = RoundEvaluation(
        sites.transport, settings, bins=study["bins"], min_replies=sites.min_replies
    )
    plan = RunPlan(
        task=task.name,
        data=None,  # the sites hold it
        strategy=strategy,
        rounds=int(job["rounds"]),
        seed=int(job["seed"]),
        privacy=Privacy(secagg=enabled_secagg(config)),
        config=config,
        out=Path(spec["out"]),
        resume=resume,
        keep_checkpoints=config["train"]["keep_checkpoints"],
        evaluate_round=evaluation,
        min_replies=job.get("min_replies"),
    )
    if job.get("warm_start"):  # a tuned study's floor, fitted by an earlier trial
        settings = {**settings, FITTED_WARM_START: job["warm_start"]}
    result = run(plan, transport=sites.transport, settings=settings, on_round=on_round)
    # the models of the round (or the floor) chosen on the sites' validation samples
    chosen = selected_parameters(result.selected)
    metrics = evaluation.evaluate(strategy, "final evaluation", parameters_for=chosen)
    record = {"strategy": spec["strategy"], "seed": int(job["seed"]), **metrics,
              "history": result.history}  # fmt: skip
    if result.selected is not None:
        fraction = config["train"]["validation_fraction"]
        record["selection"] = selection_record(result.selected, fraction)
    record.update(task.summary([result]))
    if traffic is not None:  # the run's exchanges: moments, rounds, evaluations
        record["traffic"] = traffic.table(start)
    finish_run(
        spec["out"],
        record,
        config=config,
        strategy=strategy,
        command="rvfedprs study",
        inputs=[study["scoring_file"]],
        variants=job.get("rare_variants"),
    )
    lost = {e["round"]: e["evaluation_failed"] for e in result.history if "evaluation_failed" in e}
    if "evaluation_failed" in metrics:
        lost["final"] = metrics["evaluation_failed"]
    out = {
        record["metric"]: record[record["metric"]],
        "evaluated_sites": metrics["evaluated_sites"],
        "failures": {e["round"]: e["failed"] for e in result.history if "failed" in e},
        "evaluation_failures": lost,
    }
    if result.selected is not None:  # what a tuned study compares (rvfedprs.study.tuning)
        selection = record["selection"]
        unvalidated = {s for e in result.history for s in e.get("validation_failed", {})}
        out["validation"] = {
            "metric": selection["metric"],
            "score": selection[f"validation_{selection['metric']}"],
            "selected_round": selection["selected_round"],
            "sites": [s for s in sites.ids if s not in unvalidated],
        }
    return out
