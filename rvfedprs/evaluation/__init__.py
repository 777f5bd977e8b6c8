"""Evaluation of a federation's models (design §10): every client on its held-out test split.

Each client is scored with the model it would use — ``parameters_for(client)``: its cluster's
personalised model for FedCE, the global model for FedAvg — then the metrics of paper §III are
computed: pooled AUC/AUPRC (Table II), AUC on carriers of their cluster's causal rare variants
(Table III), per-client AUC mean and sd with each client's DeLong standard error (Table IV), the
ARI of the recovered clusters, and the references of the "share of the learnable signal": the
AUC of the PRS alone (the floor) and of the true genetic value (the oracle ceiling, from the
simulator's ``truth/genetic_values.tsv``) on the same test samples, pooled, on carriers and per
true cluster (with calibration).

Sub-packages: :mod:`.attacks` (membership inference, channel audits), :mod:`.report` (tables
and figures).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.evaluation.metrics import (
    auprc,
    calibration,
    causal_carrier_mask,
    client_auc_summary,
    cluster_ari,
    cluster_label,
    roc_auc,
    true_client_clusters,
)
from rvfedprs.evaluation.paired import auc_standard_error
from rvfedprs.exceptions import InputDataError
from rvfedprs.model import TwoPathwayModel, model_from_config, set_parameters
from rvfedprs.training import ClientData, evaluate

__all__ = [
    "Truth",
    "load_truth",
    "carrier_masks",
    "predict_clients",
    "federation_metrics",
    "federation_prs_metrics",
    "binary_metrics",
    "OUTCOME_METRICS",
    "cluster_metrics",
    "evaluate_models",
    "cluster_recovery",
]


@dataclass(frozen=True)
class Truth:
    """The simulator's ground truth.

    Attributes
    ----------
    causal : DataFrame or None
        ``truth/causal_variants.tsv`` (``variant_key``, ``kind``, ``cluster``, ...).
    samples : DataFrame
        ``samples.tsv`` (``sample_id``, ``population``, ``cluster``, ``client``).
    genetic : Series or None
        Each sample's true genetic value (index ``sample_id``), from
        ``truth/genetic_values.tsv`` (``genetic_value``, or ``genetic_common`` +
        ``genetic_rare``): the oracle's score.
    """

    causal: pd.DataFrame | None
    samples: pd.DataFrame
    genetic: pd.Series | None = None

    def client_clusters(self) -> dict[str, str]:
        """Each client's true cluster."""
        return true_client_clusters(self.samples)

    def sample_clusters(self, sample_ids: Sequence[str]) -> np.ndarray:
        """The true cluster (as a string) of each sample, shape (n,).

        Raises
        ------
        InputDataError
            When samples are absent from the samples sheet (named, up to 5).
        """
        cluster_of = dict(zip(self.samples["sample_id"], self.samples["cluster"], strict=True))
        _require(sample_ids, cluster_of, "the samples sheet")
        return np.asarray([cluster_label(cluster_of[s]) for s in sample_ids], dtype=object)

    def genetic_values(self, sample_ids: Sequence[str]) -> np.ndarray:
        """The true genetic value of each sample, shape (n,).

        Raises
        ------
        InputDataError
            Without genetic values, or for samples absent from them (named, up to 5).
        """
        if self.genetic is None:
            raise InputDataError("the oracle needs the truth's genetic_values.tsv")
        _require(sample_ids, self.genetic.index, "the genetic values")
        return self.genetic.loc[list(sample_ids)].to_numpy(dtype=np.float64)


def _require(sample_ids: Sequence[str], known, where: str) -> None:
    absent = [s for s in sample_ids if s not in known]
    if absent:
        raise InputDataError(
            f"{len(absent)} samples are absent from {where}: {', '.join(map(str, absent[:5]))}"
        )


def _read_genetic(path: Path) -> pd.Series:
    table = pd.read_csv(path, sep="\t", dtype={"sample_id": str})
    if "sample_id" not in table:
        raise InputDataError(f"{path} lacks column sample_id")
    if "genetic_value" in table:
        values = table["genetic_value"]
    elif {"genetic_common", "genetic_rare"} <= set(table.columns):
        values = table["genetic_common"] + table["genetic_rare"]
    else:
        raise InputDataError(
            f"{path} needs column genetic_value, or genetic_common and genetic_rare"
        )
    if not np.all(np.isfinite(values.to_numpy(dtype=np.float64))):
        raise InputDataError(f"{path} holds missing or infinite genetic values")
    return pd.Series(values.to_numpy(dtype=np.float64), index=table["sample_id"])


def load_truth(
    causal_path: str | Path | None,
    samples_path: str | Path,
    genetic_path: str | Path | None = None,
) -> Truth:
    """Read ``samples.tsv``, and optionally ``truth/causal_variants.tsv`` and genetic values.

    ``genetic_path`` defaults to ``genetic_values.tsv`` beside the causal table when that file
    exists (the simulator writes both into ``truth/``).

    Raises
    ------
    InputDataError
        When a file is missing or lacks a required column.
    """
    samples_path = Path(samples_path)
    if not samples_path.is_file():
        raise InputDataError(f"samples sheet not found: {samples_path}")
    samples = pd.read_csv(samples_path, sep="\t", dtype={"sample_id": str, "client": str})
    missing = {"sample_id", "cluster", "client"} - set(samples.columns)
    if missing:
        raise InputDataError(f"{samples_path} lacks columns {sorted(missing)}")
    causal = None
    if causal_path is not None:
        causal_path = Path(causal_path)
        if not causal_path.is_file():
            raise InputDataError(f"causal variant table not found: {causal_path}")
        causal = pd.read_csv(causal_path, sep="\t", dtype={"variant_key": str})
        missing = {"variant_key", "kind", "cluster"} - set(causal.columns)
        if missing:
            raise InputDataError(f"{causal_path} lacks columns {sorted(missing)}")
        sibling = causal_path.parent / "genetic_values.tsv"
        if genetic_path is None and sibling.is_file():
            genetic_path = sibling
    genetic = None
    if genetic_path is not None:
        genetic_path = Path(genetic_path)
        if not genetic_path.is_file():
            raise InputDataError(f"genetic values not found: {genetic_path}")
        genetic = _read_genetic(genetic_path)
    return Truth(causal=causal, samples=samples, genetic=genetic)


def carrier_masks(
    test: Mapping[str, ClientData], variant_keys: Sequence[str], truth: Truth
) -> dict[str, np.ndarray]:
    """Per client, which test samples carry a causal rare variant of their own group.

    The group is the sample's ``architecture`` (the partition the rare effects follow, when the
    samples sheet has that column) or else its ancestry ``cluster``.

    Raises
    ------
    InputDataError
        When test samples are absent from the samples sheet (named, up to 5).
    """
    if truth.causal is None:
        raise InputDataError("carrier masks need the causal variant table (evaluate.truth)")
    column = "architecture" if "architecture" in truth.samples.columns else "cluster"
    cluster_of = dict(zip(truth.samples["sample_id"], truth.samples[column], strict=True))
    out = {}
    for client, data in test.items():
        absent = [s for s in data.sample_ids if s not in cluster_of]
        if absent:
            raise InputDataError(
                f"{len(absent)} test samples of client {client!r} are absent from the samples "
                f"sheet: {', '.join(absent[:5])}"
            )
        clusters = [cluster_of[s] for s in data.sample_ids]
        out[client] = causal_carrier_mask(data.rare, variant_keys, clusters, truth.causal)
    return out


def predict_clients(
    parameters_for: Callable[[str], Mapping[str, np.ndarray]],
    test: Mapping[str, ClientData],
    model: TwoPathwayModel,
) -> dict[str, np.ndarray]:
    """Case probabilities of every client's test samples under that client's own model.

    Parameters
    ----------
    parameters_for : callable
        Client id → parameters (e.g. ``strategy.parameters_for``).
    test : dict of str to ClientData
    model : TwoPathwayModel
        A model of the right architecture; its weights are overwritten.
    """
    out = {}
    for client in sorted(test):
        set_parameters(model, parameters_for(client))
        out[client] = evaluate(model, test[client])
    return out


def _reference_aucs(
    y: np.ndarray, prs: np.ndarray, genetic: np.ndarray | None, prefix: str = ""
) -> dict[str, float]:
    """AUC of the PRS alone (the floor) and of the true genetic value (the oracle)."""
    out = {f"{prefix}prs_only_auc": roc_auc(y, prs)}
    if genetic is not None:
        out[f"{prefix}oracle_auc"] = roc_auc(y, genetic)
    return out


def federation_metrics(
    predictions: Mapping[str, np.ndarray],
    test: Mapping[str, ClientData],
    **extra: Any,
) -> dict[str, Any]:
    """The test metrics of the test data's outcome: :data:`OUTCOME_METRICS` of its kind.

    A binary phenotype's are :func:`binary_metrics`', a quantitative one's
    :func:`~rvfedprs.evaluation.quantitative.quantitative_metrics`' (the same keyword
    arguments: ``carriers``, ``genetic``, ``sample_clusters``).
    """
    kind = test[sorted(predictions)[0]].outcome.kind
    return OUTCOME_METRICS[kind][0](predictions, test, **extra)


def federation_prs_metrics(
    predictions: Mapping[str, np.ndarray], test: Mapping[str, ClientData], **extra: Any
) -> dict[str, Any]:
    """What PRS papers report of every client's model, per client and pooled, by outcome."""
    kind = test[sorted(predictions)[0]].outcome.kind
    return OUTCOME_METRICS[kind][1](predictions, test, **extra)


def binary_metrics(
    predictions: Mapping[str, np.ndarray],
    test: Mapping[str, ClientData],
    *,
    carriers: Mapping[str, np.ndarray] | None = None,
    genetic: Mapping[str, np.ndarray] | None = None,
    sample_clusters: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Pooled AUC/AUPRC, carrier AUC, per-client AUCs, reference AUCs and per-cluster metrics.

    Parameters
    ----------
    predictions : mapping of client id to array, shape (n_test of the client,)
        Case probabilities.
    test : mapping of client id to ClientData
    carriers : mapping of client id to bool array, optional
        Carriers of their cluster's causal rare variants among the test samples.
    genetic : mapping of client id to array, optional
        The true genetic value of each test sample (the oracle's score).
    sample_clusters : mapping of client id to array of str, optional
        The true cluster of each test sample.

    Returns
    -------
    dict
        ``metric`` ("auc"), ``auc``, ``auc_se`` (DeLong), ``auprc``, ``carrier_auc`` (NaN
        without ``carriers``), ``carrier_auc_se`` (DeLong), ``n_carriers``,
        ``client_auc`` {client: auc}, ``client_auc_mean``, ``client_auc_std`` (population sd),
        ``client_auc_se`` {client: DeLong standard error}, ``prs_only_auc`` (the standardised
        PRS as the score), with ``genetic`` ``oracle_auc``, with ``carriers``
        ``carrier_prs_only_auc`` (and ``carrier_oracle_auc``), and with ``sample_clusters``
        ``cluster_metrics`` {cluster: {``n``, ``n_cases``, ``auc``, ``prs_only_auc``,
        ``oracle_auc``, ``carrier_*``, ``n_carriers``, ``calibration_slope``,
        ``calibration_intercept``, ``ece``}}.
    """
    clients = sorted(predictions)
    y = np.concatenate([test[c].y for c in clients])
    p = np.concatenate([predictions[c] for c in clients])
    prs = np.concatenate([test[c].prs for c in clients])
    g = None if genetic is None else np.concatenate([genetic[c] for c in clients])
    client_auc = {c: roc_auc(test[c].y, predictions[c]) for c in clients}
    mean, std = client_auc_summary(client_auc)
    out: dict[str, Any] = {
        "metric": "auc",
        "auc": roc_auc(y, p),
        "auc_se": _auc_se(y, p),
        "auprc": auprc(y, p),
        "carrier_auc": float("nan"),
        "carrier_auc_se": float("nan"),
        "n_carriers": None,
        "client_auc": client_auc,
        "client_auc_mean": mean,
        "client_auc_std": std,
        "client_auc_se": {c: _auc_se(test[c].y, predictions[c]) for c in clients},
        **_reference_aucs(y, prs, g),
    }
    mask = None
    if carriers is not None:
        mask = np.concatenate([carriers[c] for c in clients])
        out["n_carriers"] = int(mask.sum())
        out["carrier_auc"] = roc_auc(y[mask], p[mask])
        out["carrier_auc_se"] = _auc_se(y[mask], p[mask])  # few carriers: a wide interval
        out |= _reference_aucs(y[mask], prs[mask], None if g is None else g[mask], "carrier_")
    if sample_clusters is not None:
        labels = np.concatenate([np.asarray(sample_clusters[c], dtype=object) for c in clients])
        out["cluster_metrics"] = cluster_metrics(labels, y, p, prs=prs, genetic=g, carriers=mask)
    return out


def _auc_se(y: np.ndarray, p: np.ndarray) -> float:
    return auc_standard_error(y, p) if 0 < np.sum(y) < len(y) else float("nan")


def cluster_metrics(
    labels: np.ndarray,
    y: np.ndarray,
    p: np.ndarray,
    *,
    prs: np.ndarray | None = None,
    genetic: np.ndarray | None = None,
    carriers: np.ndarray | None = None,
) -> dict[str, dict[str, Any]]:
    """Per true cluster: AUC, reference AUCs, carrier AUCs and calibration.

    Parameters
    ----------
    labels : array, shape (n,)
        Each sample's true cluster (compared as strings).
    y, p : arrays, shape (n,)
        Phenotypes and predicted case probabilities.
    prs, genetic : arrays, shape (n,), optional
        Scores of the PRS-only floor and the oracle.
    carriers : array of bool, shape (n,), optional

    Returns
    -------
    dict
        cluster → ``n``, ``n_cases``, ``auc``, ``calibration_slope``,
        ``calibration_intercept``, ``ece`` (:func:`~.metrics.calibration`), with ``prs``
        ``prs_only_auc``, with ``genetic`` ``oracle_auc``, with ``carriers`` ``n_carriers``,
        ``carrier_auc`` and the carrier reference AUCs.
    """
    labels = np.asarray([cluster_label(v) for v in labels], dtype=object)
    out = {}
    for k in sorted(set(labels)):
        rows = labels == k
        cal = calibration(y[rows], p[rows])
        entry: dict[str, Any] = {
            "n": int(rows.sum()),
            "n_cases": int(np.sum(y[rows])),
            "auc": roc_auc(y[rows], p[rows]),
            "calibration_slope": cal["slope"],
            "calibration_intercept": cal["intercept"],
            "ece": cal["ece"],
        }
        if prs is not None:
            entry |= _reference_aucs(y[rows], prs[rows], None if genetic is None else genetic[rows])
        if carriers is not None:
            c = rows & carriers
            entry["n_carriers"] = int(c.sum())
            entry["carrier_auc"] = roc_auc(y[c], p[c])
            if prs is not None:
                g = None if genetic is None else genetic[c]
                entry |= _reference_aucs(y[c], prs[c], g, "carrier_")
        out[k] = entry
    return out


def evaluate_models(
    parameters_for: Callable[[str], Mapping[str, np.ndarray]],
    clusters: Mapping[str, object],
    test: Mapping[str, ClientData],
    variant_keys: Sequence[str],
    model_config: Mapping[str, Any],
    *,
    truth: Truth | None = None,
    score_clusters: bool = True,
) -> dict[str, Any]:
    """Every metric of design §10–11 for a trained federation.

    Parameters
    ----------
    parameters_for : callable
        Client id → the parameters that client evaluates with.
    clusters : mapping
        Client id → cluster label (reported, and scored by ARI against ``truth``).
    test : dict of str to ClientData
        Held-out test splits.
    variant_keys : sequence of str, shape (n_rare,)
    model_config : mapping
        ``common_hidden``, ``rare_hidden``, ``dropout``.
    truth : Truth, optional
        Enables ``carrier_auc`` (with a causal table), ``oracle_auc`` (with genetic values),
        ``cluster_metrics`` and ``ari``.
    score_clusters : bool
        False for a strategy that forms no clusters (``Strategy.forms_clusters``): its one
        cluster is reported but ``ari`` is NaN (not applicable) rather than a meaningless 0.

    Returns
    -------
    dict
        :func:`federation_metrics` keys plus ``clusters`` and ``ari`` (NaN without truth).
    """
    model = model_from_config(len(variant_keys), model_config, random_seed=0)
    predictions = predict_clients(parameters_for, test, model)
    extra: dict[str, Any] = {}
    if truth is not None:
        extra["sample_clusters"] = {c: truth.sample_clusters(d.sample_ids) for c, d in test.items()}
        if truth.causal is not None:
            extra["carriers"] = carrier_masks(test, variant_keys, truth)
        if truth.genetic is not None:
            extra["genetic"] = {c: truth.genetic_values(d.sample_ids) for c, d in test.items()}
    out = federation_metrics(predictions, test, **extra)
    out["clusters"] = {c: _plain(clusters[c]) for c in sorted(clusters)}
    scored = truth is not None and score_clusters
    out["ari"] = cluster_recovery(clusters, truth) if scored else float("nan")
    return out


def _plain(value: object) -> object:
    return value.item() if isinstance(value, np.generic) else value


def cluster_recovery(predicted: Mapping[str, object], truth: Truth) -> float:
    """ARI of predicted client clusters against the true ones."""
    return cluster_ari(predicted, truth.client_clusters())


def _outcome_metrics() -> dict[str, tuple[Callable[..., dict], Callable[..., dict]]]:
    from rvfedprs.evaluation.prs_metrics import federation_prs_metrics as binary_prs
    from rvfedprs.evaluation.quantitative import quantitative_metrics, quantitative_prs_metrics

    return {
        "binary": (binary_metrics, binary_prs),
        "quantitative": (quantitative_metrics, quantitative_prs_metrics),
    }


#: Outcome kind → (its test metrics, its PRS-paper metrics) over a federation's test splits.
OUTCOME_METRICS = _outcome_metrics()
