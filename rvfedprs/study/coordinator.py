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
    clients.tsv           per site: samples, cases, train/test sizes, carriers
    train/{strategy}/     metrics.json (design §11 keys), checkpoints, provenance.json

Every exchange follows the federation's one rule for lost sites
(:func:`~rvfedprs.federation.rounds.require_replies`): it goes on while at least ``min_replies``
sites answer, otherwise the study stops naming the sites that did not and why. A site that fails
a preparation step (missing or malformed files: the error names the site and the file) is named
in ``study.json`` (``left_out``) and left out of the rest of the study. A site lost in a training
round or in a federated evaluation is named in that round's record (``failed``,
``evaluation_failed``) and in ``study.json`` (per run: ``failures``, ``evaluation_failures``);
the pooled metrics are then over the sites that answered (``evaluated_sites``). Each round's
checkpoint is written before its evaluation.
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
from rvfedprs.evaluation.summaries import pooled_metrics
from rvfedprs.federation.rounds import (
    FederationError,
    RunSpec,
    require_replies,
    required_replies,
    serve,
)
from rvfedprs.federation.secagg.protocol import SecAggParams
from rvfedprs.federation.seeds import derive_seed
from rvfedprs.federation.task import Request, Task, Transport
from rvfedprs.prepare.coordinator import (
    combine_counts,
    combine_secure_counts,
    match_scores,
    write_weights,
)
from rvfedprs.provenance import jsonable, write_provenance
from rvfedprs.strategies.base import Strategy
from rvfedprs.study.counts import check_secure_counts, sum_counts
from rvfedprs.study.site import COUNT_COLUMNS, VARIANT_COLUMNS

__all__ = ["run_study", "federated_evaluation", "round_evaluation", "counts_table"]

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
    skipped: list[pd.DataFrame],
    *,
    params: SecAggParams,
    seed: int,
) -> tuple[list[str], dict[str, str], tuple[pd.DataFrame, pd.DataFrame, pd.DataFrame]]:
    """The global tables from a secure sum of the sites' held counts.

    Returns
    -------
    included : list of str
        The sites whose counts are in the sum.
    dropped : dict of str to str
        Site → why its counts are in no sum (it is left out of the study).
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
        skipped=skipped,
    )
    return included, dict(outcome.dropped), tables


def federated_evaluation(
    transport: Transport,
    strategy: Strategy,
    settings: Mapping[str, Any],
    *,
    bins: int,
    min_replies: int,
    step: str = "evaluation",
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

    Returns
    -------
    dict
        :func:`~rvfedprs.evaluation.summaries.pooled_metrics` keys over the sites that
        answered, ``evaluated_sites`` (those sites), ``evaluation_failed`` (site → why, only
        when a site was lost), ``clusters`` and ``ari`` (NaN unless the strategy forms clusters
        and the sites know their true cluster).

    Raises
    ------
    FederationError
        When fewer than ``min_replies`` sites answered (naming the others and why).
    """
    sites = transport.client_ids
    requests = {
        c: Request(
            "evaluate",
            {"parameters": strategy.parameters_for(c), "settings": dict(settings), "bins": bins},
        )
        for c in sites
    }
    summaries, failures = transport.query(requests, settings)
    count = f"{step}: only {len(summaries)} of {len(sites)} sites answered"
    require_replies(step, count, len(summaries), min_replies, failures)
    answered = sorted(summaries)
    metrics = pooled_metrics(summaries)
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


def round_evaluation(
    transport: Transport, settings: Mapping[str, Any], *, bins: int, min_replies: int
) -> Callable[[Strategy, int], dict[str, Any]]:
    """The ``evaluate_round`` of a study's run: a federated evaluation after every round.

    Its history keys: ``auc`` (pooled over the sites that answered) and, when a site was lost,
    ``evaluation_failed`` (site → why) and ``evaluated_sites``.
    """

    def evaluate_round(strategy: Strategy, server_round: int) -> dict[str, Any]:
        metrics = federated_evaluation(
            transport,
            strategy,
            settings,
            bins=bins,
            min_replies=min_replies,
            step=f"round {server_round} evaluation",
        )
        log.info("%s round %d: pooled AUC %.4f", strategy.name, server_round, metrics["auc"])
        entry = {"auc": metrics["auc"]}
        if "evaluation_failed" in metrics:
            entry["evaluation_failed"] = metrics["evaluation_failed"]
            entry["evaluated_sites"] = metrics["evaluated_sites"]
        return entry

    return evaluate_round


def run_study(
    task: Task,
    transport: Transport,
    job: Mapping[str, Any],
    *,
    on_round: Callable[[int, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Prepare → train → evaluate at the sites; write the coordinator's aggregates.

    Parameters
    ----------
    task : Task
        The study task.
    transport : Transport
        Any engine's.
    job : mapping
        ``config`` (validated), ``seed``, ``rounds``, ``runs`` (one strategy and ``out`` each),
        ``study`` (``out``, ``scoring_file``, ``min_cell_count``, ``bins``), ``min_replies``,
        ``task_settings`` (simulation: the sites).

    Returns
    -------
    dict
        The study's summary (also written to ``out/study.json``).
    """
    config, study = job["config"], job["study"]
    pipeline = config["pipeline"]
    out = Path(study["out"])
    out.mkdir(parents=True, exist_ok=True)
    base = {"task": task.name, **dict(job.get("task_settings") or {})}

    reports, failures = transport.open(base)
    total = int(job.get("expected_clients") or len(reports) + len(failures))
    min_replies = required_replies(job, total)
    _checked("setup", reports, failures, total, min_replies)
    left_out = {str(k): v for k, v in failures.items()}
    transport = transport.subset(sorted(reports))

    def ask(step: str, payloads: Mapping[str, dict]) -> dict[str, Any]:
        nonlocal transport
        replies, failed = transport.query(
            {c: Request(step, dict(payloads[c])) for c in transport.client_ids}, base
        )
        _checked(step, replies, failed, total, min_replies)
        left_out.update({c: f"{step}: {why}" for c, why in failed.items()})
        transport = transport.subset(sorted(replies))
        return replies

    every = lambda payload: {c: payload for c in transport.client_ids}  # noqa: E731

    # 1. counts → global variant table, rare columns, exclusions
    secure = study.get("count_aggregation", "plain") == "secure"
    params = SecAggParams.from_config(config["secagg"]) if secure else None
    if secure:
        check_secure_counts(len(transport.client_ids), params)
    counted = ask(
        "counts",
        every(
            {
                "pipeline": pipeline,
                "min_cell_count": study["min_cell_count"],
                "secure": secure,
            }
        ),
    )
    skipped = [pd.DataFrame(r["skipped"]) for r in counted.values()]
    first = next(iter(counted.values()))
    keys = pd.Series(first["variants"]["variant_key"], dtype=object)
    if secure:
        included, dropped, (variants, rare, excluded) = _secure_counts(
            transport, base, counted, pipeline, skipped, params=params, seed=int(job["seed"])
        )
        left_out.update({c: f"secure sum of counts: {why}" for c, why in dropped.items()})
        _checked("secure sum of counts", dict.fromkeys(included), dropped, total, min_replies)
        counted = {c: counted[c] for c in included}
        transport = transport.subset(included)
    else:
        tables = {site: counts_table(reply) for site, reply in counted.items()}
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
    variants.to_csv(out / "variants.tsv", sep="\t", index=False)
    rare.to_csv(out / "rare_variants.tsv", sep="\t", index=False)
    excluded.assign(site="").to_csv(out / "exclusions.tsv", sep="\t", index=False)
    sample_counts.to_csv(out / "excluded_samples.tsv", sep="\t", index=False)

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
    summaries = ask(
        "features",
        every(
            {
                "pipeline": pipeline,
                "rare": rare.to_dict(orient="list"),
                "weights": weights.read_text(),
                "frequencies": frequencies.to_dict(orient="list"),
            }
        ),
    )
    log.info("features built at %d sites", len(summaries))
    pd.DataFrame([summaries[c] for c in sorted(summaries)]).to_csv(
        out / "clients.tsv", sep="\t", index=False
    )

    # 4. train and evaluate every strategy
    summary: dict[str, Any] = {
        "sites": transport.client_ids,
        "left_out": left_out,
        "n_variants": int(len(variants)),
        "n_rare": int(len(rare)),
        "n_score_variants": int(match["used"].sum()),
        "runs": {},
    }
    for index, spec in enumerate(job["runs"]):
        name = spec["strategy"]
        strategy = task.build_strategy(spec, job)
        if strategy.pooled:
            summary["runs"][name] = "not run: it pools every site's data"
            log.warning("strategy %s pools every site's data: not run in a study", name)
            continue
        moments = ask("moments", every({}))
        settings = {**task.run_settings(job, moments), **base}

        run = RunSpec(
            strategy,
            out=Path(spec["out"]),
            evaluate_round=round_evaluation(
                transport, settings, bins=study["bins"], min_replies=min_replies
            ),
            keep_checkpoints=config["train"]["keep_checkpoints"],
        )
        result = serve(
            task,
            transport,
            [run],
            job,
            settings,
            on_round=None if on_round is None else lambda _, e, i=index: on_round(i, e),
        )[0]
        metrics = federated_evaluation(
            transport,
            strategy,
            settings,
            bins=study["bins"],
            min_replies=min_replies,
            step="final evaluation",
        )
        record = {"strategy": name, "seed": int(job["seed"]), **metrics, "history": result.history}
        record.update(task.summary([result]))
        folder = Path(spec["out"])
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "metrics.json").write_text(json.dumps(jsonable(record), indent=2) + "\n")
        write_provenance(
            folder,
            command="rvfedprs study",
            parameters=config,
            seed=int(job["seed"]),
            inputs=[study["scoring_file"]],
        )
        lost = {
            e["round"]: e["evaluation_failed"] for e in result.history if "evaluation_failed" in e
        }
        if "evaluation_failed" in metrics:
            lost["final"] = metrics["evaluation_failed"]
        summary["runs"][name] = {
            "auc": record["auc"],
            "evaluated_sites": metrics["evaluated_sites"],
            "failures": {e["round"]: e["failed"] for e in result.history if "failed" in e},
            "evaluation_failures": lost,
        }
    (out / "study.json").write_text(json.dumps(jsonable(summary), indent=2) + "\n")
    return summary
