"""The privacy audit of one trained run (``rvfedprs mia``; design §10, paper Table V).

:func:`audit_run` does everything the ``mia`` configuration section asks for a trained
federation and writes it beside the run's other outputs:

- ``mia.json`` — per-client rows of every attack for every target client (by default every
  client), the rows pooled over clients and per true cluster (:func:`~.audit.pool_audits`), the
  clients' true clusters and the settings;
- ``mia_scores.npz`` — the scores behind them (keys ``<client>__<attack or mask>``), so that the
  report can pool them over seeds;
- ``channels.json`` — with a :class:`RoundView`, what the server infers of each client's carried
  rare variants from one round's updates and Bloom filters, as it would see them without and
  with secure aggregation (:func:`channel_rows`); of a burden or top-k ``model.rare_input``,
  the features of the specialist's first layer (regions, chosen variants) the client carries.

The engine-specific parts come from the caller: the target's ``parameters_for``, a
``train_shadow`` that reruns the target's training on other data, and the round view.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from rvfedprs.bloom import BloomSpec
from rvfedprs.evaluation import Truth, carrier_masks
from rvfedprs.evaluation.attacks.audit import (
    SHADOW_ATTACKS,
    audit_federation,
    pool_audits,
    resolve_attacks,
    resolve_targets,
)
from rvfedprs.evaluation.attacks.channels import SeenUpdate, audit_channels, carried_mask
from rvfedprs.evaluation.attacks.shadows import (
    TrainShadow,
    reference_population,
    train_reference_models,
    train_shadow_federations,
)
from rvfedprs.evaluation.metrics import cluster_label
from rvfedprs.exceptions import InputDataError
from rvfedprs.model import projection_from_config, rare_feature_names
from rvfedprs.training import ClientData, LocalTrainingConfig

__all__ = ["RoundView", "AuditResult", "channel_rows", "audit_run"]


@dataclass(frozen=True)
class RoundView:
    """What the server handles in one round of a trained federation.

    Attributes
    ----------
    sent, received : dict of str to ndarray, shape (h, P)
        Per client, ``rare.input.weight`` as the server sent it and as the client returned it.
    n_samples : dict of str to int
        Aggregation weights n_k.
    filters : dict of str to ndarray, optional
        The Bloom filter bits each client sent (FedCE).
    spec : BloomSpec, optional
        The federation's filter spec; ``key`` set when the clients hash with a secret.
    groups : list of tuple of str, optional
        The clients a secure aggregation sums together for the first specialist layer; default
        the clients that were sent the same weights (a FedCE cluster; everyone for FedAvg).
    """

    sent: dict[str, np.ndarray]
    received: dict[str, np.ndarray]
    n_samples: dict[str, int]
    filters: dict[str, np.ndarray] | None = None
    spec: BloomSpec | None = None
    groups: list[tuple[str, ...]] | None = None

    def secure_groups(self) -> list[tuple[str, ...]]:
        """:attr:`groups`, or the clients grouped by the weights they were sent."""
        if self.groups is not None:
            return list(self.groups)
        out: list[list[str]] = []
        for client in sorted(self.sent):
            for group in out:
                if np.array_equal(self.sent[group[0]], self.sent[client]):
                    group.append(client)
                    break
            else:
                out.append([client])
        return [tuple(g) for g in out]


def _secure_sum(view: RoundView, group: tuple[str, ...]) -> SeenUpdate:
    sent = view.sent[group[0]]
    differ = [c for c in group if not np.array_equal(view.sent[c], sent)]
    if differ:
        raise InputDataError(
            f"clients {differ} were sent other weights than {group[0]!r}: a secure sum over "
            f"{list(group)} is not one model's update"
        )
    total = sum(view.n_samples[c] * np.asarray(view.received[c], np.float64) for c in group)
    return SeenUpdate(tuple(group), sent, total)


def channel_rows(
    view: RoundView, carried: Mapping[str, np.ndarray], variant_keys: Sequence[str]
) -> list[dict[str, Any]]:
    """:func:`~.channels.audit_channels` rows without and with secure aggregation.

    Without it the server sees every client's own update; with it only the n_k-weighted sum over
    each group (the Bloom filters travel in the clear either way).

    Returns
    -------
    list of dict
        Rows with ``secure_aggregation`` (bool) added.
    """
    rows = []
    for secure in (False, True):
        if secure:
            updates = [_secure_sum(view, g) for g in view.secure_groups()]
        else:
            updates = [SeenUpdate((c,), view.sent[c], view.received[c]) for c in sorted(view.sent)]
        found = audit_channels(
            carried,
            updates=updates,
            filters=view.filters,
            spec=view.spec,
            variant_keys=variant_keys if view.filters is not None else None,
        )
        rows += [{"secure_aggregation": secure, **r} for r in found]
    return rows


@dataclass(frozen=True)
class AuditResult:
    """The audit of one run, ready to be written.

    Attributes
    ----------
    mia : dict
        ``mia.json``: the run's fields, ``clusters``, ``settings``, ``rows`` (per target client,
        attack and subset) and ``pooled`` (over clients, and per cluster).
    scores : dict of str to ndarray
        ``mia_scores.npz``: ``<client>__<attack or mask>`` arrays.
    channels : dict or None
        ``channels.json``: the run's fields and ``rows`` of :func:`channel_rows`.
    """

    mia: dict[str, Any]
    scores: dict[str, np.ndarray]
    channels: dict[str, Any] | None


def audit_run(
    parameters_for: Callable[[str], Mapping[str, np.ndarray]],
    train: Mapping[str, ClientData],
    test: Mapping[str, ClientData],
    variant_keys: Sequence[str],
    model_config: Mapping[str, Any],
    settings: Mapping[str, Any],
    *,
    record: Mapping[str, Any],
    random_seed: int,
    truth: Truth | None = None,
    training: LocalTrainingConfig | None = None,
    train_shadow: TrainShadow | None = None,
    round_view: RoundView | None = None,
    on_shadow: Callable[[int], None] | None = None,
) -> AuditResult:
    """Audit a trained federation's models (and, with ``round_view``, its channels).

    Parameters
    ----------
    parameters_for : callable
        Client id → the parameters that client ends with.
    train, test : mapping of client id to ClientData
        Members and non-members of each client.
    variant_keys : sequence of str, shape (P,)
    model_config : mapping
        The target's network, its rare projection included (a burden map, the chosen top-k
        variants: the run's checkpoint records it); the offline references' too.
    settings : mapping
        The validated ``mia`` section: ``attacks``, ``targets``, ``n_reference``,
        ``reference_epochs`` (resolved: an int), ``n_shadow``, ``rmia_gamma``, ``fpr_levels``.
    record : mapping
        Identifies the run in every JSON (``strategy``, ``seed``, optionally ``experiment``,
        ``label``).
    random_seed : int
        Seeds the audit sets, reference and shadow models.
    truth : Truth, optional
        Carrier subsets (with a causal table) and the clients' true clusters.
    training : LocalTrainingConfig, optional
        The target's client optimiser: required by ``lira_offline`` (its reference models train
        centrally for ``reference_epochs`` epochs).
    train_shadow : callable, optional
        Required by ``lira_online`` and ``rmia``: reruns the target's training on other data
        (:data:`~.shadows.TrainShadow`).
    round_view : RoundView, optional
        One round as the server saw it; writes ``channels.json``.
    on_shadow : callable, optional
        Progress: called with each shadow federation's index once trained.

    Returns
    -------
    AuditResult

    Raises
    ------
    InputDataError
        For unknown attacks or targets, or an attack without what it needs.
    """
    attacks = resolve_attacks(settings["attacks"])
    targets = resolve_targets(settings["targets"], list(train))
    seeds = np.random.SeedSequence(int(random_seed)).generate_state(3)
    references = None
    if "lira_offline" in attacks:
        if training is None or settings.get("reference_epochs") is None:
            raise InputDataError(
                "lira_offline needs the target's training settings and reference epochs"
            )
        pool = {**{"tr:" + k: v for k, v in train.items()},
                **{"te:" + k: v for k, v in test.items()}}  # fmt: skip
        references = {
            t: train_reference_models(
                reference_population(pool, exclude=[f"tr:{t}", f"te:{t}"]),
                n_models=settings["n_reference"],
                model_config=model_config,
                training=replace(training, epochs=int(settings["reference_epochs"])),
                random_seed=int(seeds[0]) + i,
            )
            for i, t in enumerate(targets)
        }
    shadows = None
    if set(attacks) & set(SHADOW_ATTACKS):
        if train_shadow is None:
            needing = sorted(set(attacks) & set(SHADOW_ATTACKS))
            raise InputDataError(f"attacks {needing} need a shadow-federation trainer")
        shadows = train_shadow_federations(
            train, test, train_shadow, model_config, n_shadow=settings["n_shadow"],
            random_seed=int(seeds[1]), on_trained=on_shadow,
        )  # fmt: skip
    carriers = {}
    clusters = None
    if truth is not None:
        clusters = {c: cluster_label(k) for c, k in truth.client_clusters().items() if c in train}
        if truth.causal is not None:
            carriers = {
                "train_carriers": carrier_masks(train, variant_keys, truth),
                "test_carriers": carrier_masks(test, variant_keys, truth),
            }
    rows, scores = audit_federation(
        parameters_for, train, test, targets, model_config,
        attacks=attacks, references=references, shadows=shadows,
        fpr_levels=settings["fpr_levels"], rmia_gamma=settings["rmia_gamma"],
        random_seed=int(seeds[2] >> 1), **carriers,
    )  # fmt: skip
    pooled = pool_audits([scores], clusters=clusters, fpr_levels=settings["fpr_levels"])
    base = dict(record)
    mia = {**base, "clusters": clusters, "settings": dict(settings), "rows": rows,
           "pooled": pooled}  # fmt: skip
    flat = {f"{c}__{k}": v for c, s in scores.items() for k, v in s.items()}
    channels = None
    if round_view is not None:
        projection = projection_from_config(len(variant_keys), model_config)
        carried = {c: carried_mask(train[c], projection) for c in round_view.sent}
        features = rare_feature_names(model_config, variant_keys)
        channels = {**base, "rows": channel_rows(round_view, carried, features)}
    return AuditResult(mia=mia, scores=flat, channels=channels)
