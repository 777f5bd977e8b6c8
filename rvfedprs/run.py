"""Train from a validated configuration and write what the run leaves behind.

``rvfedprs train`` and ``rvfedprs evaluate`` (and the Snakemake rules that call them).
:func:`train` asks the task for its run plan (:meth:`~rvfedprs.federation.task.Task.plan`: the
per-client inputs, the strategy with its client distance matrix where it needs one, the privacy
settings), runs it with :func:`rvfedprs.plan.run` on the chosen engine, evaluates every client
on its test split and writes ``metrics.json``, the checkpoints and ``provenance.json``;
:func:`evaluate_checkpoint` recomputes the metrics of a saved run. This module names no task
module (``tests/test_layers_run.py``): the task is found by name in :mod:`rvfedprs.tasks`.
"""

from __future__ import annotations

import logging
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation.selection import selected_parameters, selection_record
from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.federation import ENGINES
from rvfedprs.federation.result import RunResult
from rvfedprs.federation.rounds import RoundCallback
from rvfedprs.plan import run
from rvfedprs.provenance import jsonable, write_metrics, write_provenance
from rvfedprs.strategies.base import Strategy
from rvfedprs.strategies.penalty_path import PenaltyPath
from rvfedprs.tasks import get_task

log = logging.getLogger(__name__)

__all__ = [
    "train",
    "evaluate_checkpoint",
    "check_engine",
    "TRAIN_TASK",
    "dp_epsilon",
    "load_truth_from_config",
    "client_clusters",
    "jsonable",
    "write_metrics",
    "finish_run",
    "metric_warnings",
    "write_predictions",
    "input_files",
]


#: The task ``rvfedprs train`` trains: its planner reads the configuration's ``train`` section.
TRAIN_TASK = "genomic"


def check_engine(engine: str) -> None:
    """Fail clearly on an engine name that is not one of :data:`ENGINES`."""
    if engine not in ENGINES:
        raise ConfigError(f"engine {engine!r} unknown; choose from {list(ENGINES)}")


def dp_epsilon(client_state: Mapping[str, Mapping[str, Any]] | None) -> dict[str, Any]:
    """``{"epsilon": max over clients, "epsilon_clients": {...}}`` of trained DP states, or {}."""
    states = {c: s["dp"] for c, s in (client_state or {}).items() if "dp" in s}
    if not states:
        return {}
    eps = {c: dp.epsilon() for c, dp in states.items() if dp.rounds > 0}
    return {"epsilon": max(eps.values()) if eps else 0.0, "epsilon_clients": eps}


def load_truth_from_config(config: Mapping[str, Any]):
    """The simulator's truth named in the ``evaluate`` section, or None."""
    from rvfedprs.evaluation import load_truth

    section = config["evaluate"]
    if section["samples"] is None:
        return None
    return load_truth(section["truth"], section["samples"])


def client_clusters(strategy: Strategy, client_ids) -> dict[str, Any]:
    """Each real client's cluster (a pooled strategy puts everyone in cluster 0)."""
    found = strategy.clusters()
    return {c: found.get(c, 0) for c in client_ids}


class _LoggedRounds:
    """``evaluate_round`` that also logs one line per round: progress where no bar is drawn.

    A Snakemake rule's stderr is its log file, not a terminal; there a progress bar writes
    nothing readable, so every round logs its number, the time it took and what it scored.
    """

    def __init__(self, evaluate_round: RoundCallback, name: str, rounds: int) -> None:
        self.evaluate_round, self.name, self.rounds = evaluate_round, name, rounds
        self._since = time.monotonic()

    def __getattr__(self, attribute: str) -> Any:  # ``start``, when the wrapped one has it
        if attribute == "evaluate_round":  # not set yet (a copy being made)
            raise AttributeError(attribute)
        return getattr(self.evaluate_round, attribute)

    def __call__(self, strategy: Strategy, server_round: int) -> dict[str, float]:
        scores = self.evaluate_round(strategy, server_round)
        now = time.monotonic()
        shown = " ".join(f"{k}={v:.4f}" for k, v in scores.items() if isinstance(v, float))
        log.info(
            "%s round %d/%d (%.1f s) %s",
            self.name, server_round, self.rounds, now - self._since, shown,
        )  # fmt: skip
        self._since = now
        return scores


class _RunModel:
    """The ``model`` config of a run's networks, as the run built them.

    The plan's, except for a top-k input (``model.rare_input: top_k``, ``burden+top_k``):
    its variants are chosen by the run's warm start (:mod:`rvfedprs.genomic.task`), so the
    config is the one the run's checkpoints record (every round's holds it, each engine's).
    """

    def __init__(self, planned: Mapping[str, Any], out: Path) -> None:
        from rvfedprs.model import top_k_pending

        self.pending = top_k_pending(planned)
        self.out = out
        self._config = None if self.pending else dict(planned)

    def at_round(self, server_round: int) -> dict[str, Any]:
        """The config, read from round ``server_round``'s checkpoint when the plan lacks it."""
        if self._config is None:
            from rvfedprs.federation.checkpoints import checkpoint_path, load_checkpoint

            record = load_checkpoint(checkpoint_path(self.out, server_round))
            self._config = dict(record["model_config"])
        return self._config

    def of(self, result: RunResult) -> dict[str, Any]:
        """The config of a finished run (its last checkpoint's, when the plan lacks it)."""
        if self._config is None:
            from rvfedprs.federation.checkpoints import load_checkpoint

            self._config = dict(load_checkpoint(result.checkpoints[-1])["model_config"])
        return self._config


def metric_warnings(name: str, metrics: Mapping[str, Any]) -> list[str]:
    """Below-chance and below-floor warnings of a run's test metrics, each also logged.

    The AUC's (:func:`~rvfedprs.evaluation.checks.auc_warnings`), or for a quantitative
    phenotype (``metric`` ``r2``) the R²'s (:func:`~rvfedprs.evaluation.checks.r2_warnings`).
    """
    from rvfedprs.evaluation.checks import auc_warnings, r2_warnings

    if metrics.get("metric", "auc") == "r2":
        found = r2_warnings(name, metrics)
    else:
        found = auc_warnings(
            name,
            metrics["auc"],
            se=metrics.get("auc_se"),
            floor_auc=metrics.get("prs_only_auc"),
            client_auc=metrics.get("client_auc"),
            client_se=metrics.get("client_auc_se"),
        )
    for message in found:
        log.warning(message)
    return found


def finish_run(
    out: str | Path,
    record: dict[str, Any],
    *,
    config: Mapping[str, Any],
    strategy: Strategy,
    command: str,
    inputs: list,
    variants: Any = None,
    extra: Mapping[str, Any] | None = None,
) -> Path:
    """Write what a finished run leaves: ``metrics.json``, burden exclusions, provenance.

    Every training run ends here, ``rvfedprs train`` (any engine) and each run of a consortium
    study: ``record`` gets its below-chance and below-floor ``warnings``
    (:func:`metric_warnings`) and is written by :func:`write_metrics`; the burden exclusions
    table of a burden run (``variants``: a study's federated rare-variant table) and
    ``provenance.json`` (``command``, the configuration, its seed, ``inputs``' checksums,
    ``extra``) go beside it.

    Returns
    -------
    Path
        The ``metrics.json`` written.
    """
    out = Path(out)
    record["warnings"] = metric_warnings(record["strategy"], record)
    penalty = getattr(strategy, "path", None)
    if isinstance(penalty, PenaltyPath):  # a GLM: its converged fits and the λ served
        served = record.get("selection", {}).get("selected_round", float("inf"))  # else the last
        record["penalty_path"] = {"fits": penalty.summary(),
                                  "chosen_l2": penalty.served_at(served)}  # fmt: skip
    path = write_metrics(out, record)
    written = {"metrics": str(path), **dict(extra or {})}
    exclusions = write_burden_exclusions(config, strategy, out, variants)
    if exclusions is not None:
        written["burden_exclusions"] = str(exclusions)
    write_provenance(out, command=command, parameters=config, seed=int(record["seed"]),
                     inputs=inputs, extra=written)  # fmt: skip
    return path


def write_burden_exclusions(
    config: Mapping[str, Any], strategy: Strategy, out: str | Path, variants: Any = None
) -> Path | None:
    """The run's burden exclusions table (:func:`~rvfedprs.burden.write_exclusions`), if any.

    A run reads a burden map when its GLM's features are burdens (the strategy holds the map)
    or its network's ``model.rare_input`` is; otherwise nothing is written and None returned.
    ``variants``: the rare-variant table the map is of (a study's federated one; default
    ``train.data``'s).
    """
    from rvfedprs.burden import write_exclusions
    from rvfedprs.model import BURDEN_INPUTS

    burden = getattr(strategy, "burden", None)
    if burden is None and config["model"].get("rare_input", "dosages") in BURDEN_INPUTS:
        from rvfedprs.strategies import burden_of

        burden = burden_of(config, variants)
    return None if burden is None else write_exclusions(burden, out)


def input_files(federation: Any) -> list[Path]:
    """The per-client input files a run read (their checksums go into provenance).

    None for a federation built in memory (it read no file).
    """
    if federation.data_dir is None:
        return []
    inputs = [federation.data_dir / "rare_variants.tsv", federation.data_dir / "clients.tsv"]
    for client in federation.client_ids:
        folder = federation.data_dir / "clients" / client
        inputs += [folder / "samples.parquet", folder / "rare_dosages.npz"]
    return inputs


def _evaluate(
    strategy: Strategy,
    federation: Any,
    config: Mapping[str, Any],
    truth,
    parameters_for=None,
):
    """The metrics of design §11 plus what PRS papers report (``prs_metrics``).

    ``parameters_for`` (default: the strategy's) serves each client's model, e.g. the round
    chosen on validation (:class:`~rvfedprs.evaluation.selection.BestRound`).
    """
    from rvfedprs.evaluation import evaluate_models, federation_prs_metrics, predict_clients
    from rvfedprs.model import model_from_config

    parameters_for = parameters_for or strategy.parameters_for
    model_config = federation.model_config(config["model"])
    metrics = evaluate_models(
        parameters_for,
        client_clusters(strategy, federation.client_ids),
        federation.test,
        federation.variant_keys,
        model_config,
        truth=truth,
        score_clusters=strategy.forms_clusters,
    )
    model = model_from_config(federation.n_rare, model_config, initialise=False)
    predictions = predict_clients(parameters_for, federation.test, model)
    metrics["prs_metrics"] = federation_prs_metrics(
        predictions, federation.test, prevalence=config["evaluate"].get("prevalence")
    )
    return metrics


def train(
    config: Mapping[str, Any],
    out: str | Path,
    *,
    resume: bool = False,
    evaluate_round: RoundCallback | None = None,
    superlink=None,
    data: Any = None,
) -> RunResult:
    """Train ``train.strategy`` on ``train.data`` with ``train.engine``; write the results.

    Parameters
    ----------
    config : mapping
        A validated configuration (:func:`rvfedprs.config.load_config`). ``train.seed`` None
        draws a seed, recorded everywhere.
    out : str or Path
        ``metrics.json`` (design §11 keys, ``ari``, ε when DP is on), ``checkpoints/``,
        ``provenance.json`` (and ``flower/`` on a Flower engine).
    resume : bool
        Continue from the latest checkpoint in ``out``.
    evaluate_round : callable, optional
        ``f(strategy, round)`` merged into every round's history entry; by default the pooled
        test AUC of the clients' models.
    superlink : LocalSuperLink, optional
        A running SuperLink to submit to (Flower engines).
    data : Federation, optional
        A federation held in memory (:func:`rvfedprs.arrays.federation_from_arrays`) to train
        instead of ``train.data``'s folder; in-process only (a SuperNode reads a folder).

    Returns
    -------
    RunResult
        With ``metrics``: the record written to ``metrics.json``.

    Raises
    ------
    ConfigError, InputDataError
        For an unknown strategy or engine, or unusable inputs (named).
    """
    from dataclasses import replace

    from rvfedprs.config import validate_config
    from rvfedprs.evaluation import evaluate_models

    config = validate_config(dict(config))
    check_engine(config["train"]["engine"])
    if data is not None and getattr(data, "data_dir", None) is None:
        if config["train"]["engine"] != "inprocess":
            raise ConfigError(
                f"a federation built in memory trains in-process, not on train.engine "
                f"{config['train']['engine']!r} (each SuperNode reads its site's folder: run "
                "the pipeline, or `rvfedprs prepare run`, to write them)"
            )
    out = Path(out)
    # the data, the strategy, privacy settings
    plan = get_task(TRAIN_TASK).plan(config, out, **({} if data is None else {"data": data}))
    config, federation, strategy, seed = plan.config, plan.data, plan.strategy, plan.seed
    section, name = config["train"], config["train"]["strategy"]
    truth = load_truth_from_config(config)
    model_config = plan.model
    run_model = _RunModel(model_config, out)

    if evaluate_round is None:

        def evaluate_round(s: Strategy, server_round: int) -> dict[str, float]:
            m = evaluate_models(s.parameters_for, {}, federation.test, federation.variant_keys,
                                run_model.at_round(server_round))  # fmt: skip
            return {m["metric"]: m[m["metric"]]}

    # A bar on a terminal; elsewhere (a rule's log file) one logged line per round.
    bar = section["progress"] and sys.stderr.isatty()
    if not bar:
        evaluate_round = _LoggedRounds(evaluate_round, name, plan.rounds)
    plan = replace(
        plan, data=federation, evaluate_round=evaluate_round, resume=resume, superlink=superlink,
        progress=bar and plan.engine == "inprocess",
    )  # fmt: skip
    client_state: dict[str, dict[str, Any]] = {}
    result = run(plan, client_state=client_state)
    # the models of the round (or the floor) chosen on the sites' validation samples
    chosen = selected_parameters(result.selected)
    # the run's networks (e.g. with the rare projection of model.rare_input)
    evaluated = {**config, "model": run_model.of(result)}
    metrics = _evaluate(strategy, federation, evaluated, truth, parameters_for=chosen)
    record = {"strategy": name, "seed": seed, **metrics, "history": result.history}
    record["traffic"] = result.metrics.get("traffic", {})  # per step; per round in the history
    if result.selected is not None:  # the final checkpoint holds it too (`rvfedprs evaluate`)
        record["selection"] = selection_record(result.selected, section["validation_fraction"])
    record.update(dp_epsilon(result.client_state))
    finish_run(
        out,
        record,
        config=config,
        strategy=strategy,
        command="rvfedprs train",
        inputs=input_files(federation),
        extra={"checkpoints": [str(p) for p in result.checkpoints]},
    )
    result.metrics = record
    return result


def evaluate_checkpoint(
    checkpoint: str | Path,
    out: str | Path,
    *,
    data: str | Path | None = None,
    evaluate: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Recompute the metrics of a saved run from one of its checkpoints; write them.

    Parameters
    ----------
    checkpoint : str or Path
        A ``round_XXX.pt`` written by :func:`train`, or a run's folder (its latest checkpoint:
        a GLM that converged stops before ``train.rounds``).
    out : str or Path
        ``metrics.json`` and ``provenance.json``.
    data : str or Path, optional
        Per-client inputs (default: the run's ``train.data``).
    evaluate : mapping, optional
        An ``evaluate`` section replacing the run's (truth files).

    Returns
    -------
    dict
        The record written (``metrics.json``; ``predictions.parquet`` beside it).

    Raises
    ------
    InputDataError
        For a file that is not a checkpoint of a training run, or inputs of another width.
    """
    from rvfedprs.config import validate_config
    from rvfedprs.federation.checkpoints import latest_checkpoint, load_checkpoint
    from rvfedprs.strategies import strategy_from_config

    if Path(checkpoint).is_dir():
        found = latest_checkpoint(checkpoint)
        if found is None:
            raise InputDataError(f"{checkpoint} holds no checkpoints/round_XXX.pt")
        checkpoint = found
    record = load_checkpoint(checkpoint)
    if "config" not in record:
        raise InputDataError(
            f"{checkpoint} holds no configuration; was it written by rvfedprs train?"
        )
    config = validate_config(record["config"])
    if evaluate is not None:
        config["evaluate"] = dict(evaluate)
    data = Path(data) if data is not None else Path(config["train"]["data"])
    federation = get_task(TRAIN_TASK).load_data(data)
    if federation.n_rare != int(record["n_rare"]):
        raise InputDataError(
            f"{data} has {federation.n_rare} rare variants but the checkpoint's model expects "
            f"{record['n_rare']}"
        )
    name = record["strategy_name"]
    strategy = strategy_from_config(name, config)
    strategy.load_state_dict(record["strategy_state"])
    config["model"] = dict(record["model_config"])
    chosen = selected_parameters(record.get("selected"))
    metrics = _evaluate(
        strategy, federation, config, load_truth_from_config(config), parameters_for=chosen
    )
    result = {
        "strategy": name,
        "seed": int(record["seed"]),
        "round": int(record["round"]) if chosen is None else int(record["selected"]["round"]),
        **metrics,
        "history": record.get("history", []),
    }
    if chosen is not None:
        picked = int(record["selected"]["round"])
        result["selection"] = {"selected_round": picked, "chose_floor": picked == 0}
    result["warnings"] = metric_warnings(name, result)
    path = write_metrics(out, result)
    predictions = write_predictions(out, strategy, federation, config, parameters_for=chosen)
    write_provenance(
        out,
        command="rvfedprs evaluate",
        parameters=config,
        seed=int(record["seed"]),
        inputs=[checkpoint],
        extra={"metrics": str(path), "predictions": str(predictions)},
    )
    return result


def _labels(data: Any) -> np.ndarray:
    """A test split's phenotype as written: 0/1 as int8, a standardised trait as it is."""
    return data.y if data.outcome.standardises else data.y.astype("int8")


def write_predictions(
    out: str | Path,
    strategy: Strategy,
    federation: Any,
    config: Mapping[str, Any],
    *,
    parameters_for=None,
) -> Path:
    """Write ``out/predictions.parquet``: each test sample's probability under its model.

    Columns ``client, sample_id, y, p``: what intervals and per-cluster metrics downstream
    need (``pipelines/compare_strategies.py``); for a quantitative phenotype ``y`` and ``p``
    are the standardised trait and its prediction. ``parameters_for`` (default: the strategy's)
    serves the models, e.g. those chosen on validation.
    """
    from rvfedprs.evaluation import predict_clients
    from rvfedprs.model import model_from_config

    model_config = federation.model_config(config["model"])
    model = model_from_config(federation.n_rare, model_config, initialise=False)
    scores = predict_clients(parameters_for or strategy.parameters_for, federation.test, model)
    frame = pd.concat(
        [
            pd.DataFrame({"client": c, "sample_id": federation.test[c].sample_ids,
                          "y": _labels(federation.test[c]), "p": scores[c]})
            for c in sorted(scores)
        ],
        ignore_index=True,
    )  # fmt: skip
    path = Path(out) / "predictions.parquet"
    frame.to_parquet(path, index=False)
    return path
