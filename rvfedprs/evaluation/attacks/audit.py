"""Membership-inference audit of the models clients end with (design §10, paper Table V).

Members are a client's training split, non-members its test split (same ancestry mix),
subsampled to balanced sets (:func:`balanced_audit_set`); carriers of their cluster's causal rare
variants are balanced separately so that the carrier subset is balanced too. Every client is
audited (:func:`audit_federation`) with the attacks of :data:`ATTACKS`:

- ``loss`` — LOSS threshold (needs nothing but the target);
- ``lira_offline`` — offline LiRA against OUT reference models trained centrally on the other
  clients' samples (``lira`` is accepted as its older name);
- ``lira_online`` — online LiRA against shadow federations (IN and OUT);
- ``rmia`` — RMIA against the same shadow federations, population = the other clients' test
  splits.

:func:`pool_audits` pools the scores over clients (and seeds), overall and per cluster, so that
low-FPR rates become resolvable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from rvfedprs.evaluation.attacks.mia import (
    FPR_LEVELS,
    example_losses,
    lira_offline_scores,
    lira_online_scores,
    logit_confidence,
    loss_attack_scores,
    pooled_attack_metrics,
    rmia_scores,
)
from rvfedprs.evaluation.attacks.outputs import example_confidence, example_logits, stack_clients
from rvfedprs.evaluation.attacks.shadows import ShadowSet, ShadowView
from rvfedprs.exceptions import InputDataError
from rvfedprs.training import ClientData

__all__ = [
    "ATTACKS",
    "ATTACK_ALIASES",
    "SHADOW_ATTACKS",
    "resolve_attacks",
    "resolve_targets",
    "AuditSet",
    "balanced_audit_set",
    "audit_model",
    "audit_federation",
    "score_rows",
    "pool_audits",
]

#: Attack names, in report order.
ATTACKS: tuple[str, ...] = ("loss", "lira_offline", "lira_online", "rmia")
#: Older names still accepted in configurations.
ATTACK_ALIASES: dict[str, str] = {"lira": "lira_offline"}
#: Attacks that need shadow federations (:func:`~.shadows.train_shadow_federations`).
SHADOW_ATTACKS: tuple[str, ...] = ("lira_online", "rmia")
_SUBSETS = ("general", "carriers")


def resolve_attacks(names: Sequence[str]) -> list[str]:
    """Canonical attack names (aliases resolved, order kept, duplicates dropped).

    Raises
    ------
    InputDataError
        For an unknown name.
    """
    unknown = sorted(set(names) - set(ATTACKS) - set(ATTACK_ALIASES))
    if unknown:
        choices = list(ATTACKS) + list(ATTACK_ALIASES)
        raise InputDataError(f"MIA attacks {unknown} unknown; choose from {choices}")
    out: list[str] = []
    for name in names:
        name = ATTACK_ALIASES.get(name, name)
        if name not in out:
            out.append(name)
    return out


def resolve_targets(setting: str | int | Sequence[str], client_ids: Sequence[str]) -> list[str]:
    """The audited clients of the ``mia.targets`` setting.

    ``"all"`` = every client, an int N = the first N clients in sorted order, a list = those.

    Raises
    ------
    InputDataError
        For ids that are not clients.
    """
    clients = sorted(client_ids)
    if setting == "all":
        return clients
    if isinstance(setting, int):
        return clients[:setting]
    unknown = sorted(set(setting) - set(clients))
    if unknown:
        raise InputDataError(f"MIA targets {unknown} are not clients; choose from {clients}")
    return list(setting)


@dataclass(frozen=True)
class AuditSet:
    """A balanced set of members and non-members of one target client.

    Attributes
    ----------
    data : ClientData
        Members first, then non-members.
    is_member : array of bool, shape (n,)
    is_carrier : array of bool, shape (n,)
        The balanced carrier subset: carriers of a causal rare variant of their cluster (all
        False without truth).
    general : array of bool, shape (n,)
        The balanced general-population subset (rows added only to balance the carriers are
        False).
    rows : array of int, shape (n,)
        Each example's row among the client's candidates (training split, then test split).
    """

    data: ClientData
    is_member: np.ndarray
    is_carrier: np.ndarray
    general: np.ndarray
    rows: np.ndarray


def _balanced(n_a: int, n_b: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    n = min(n_a, n_b)
    return np.sort(rng.choice(n_a, n, replace=False)), np.sort(rng.choice(n_b, n, replace=False))


def balanced_audit_set(
    members: ClientData,
    nonmembers: ClientData,
    *,
    member_carriers: np.ndarray | None = None,
    nonmember_carriers: np.ndarray | None = None,
    random_seed: int = 0,
) -> AuditSet:
    """Balanced members/non-members; carriers are balanced separately so both subsets are.

    The general population is an equal-size random subsample of members and non-members; the
    carrier subset adds (without duplicates) enough carriers that members and non-members
    carriers are equally many. Metrics on the carrier subset use only carriers.

    Raises
    ------
    InputDataError
        When either side is empty.
    """
    if members.n_samples == 0 or nonmembers.n_samples == 0:
        raise InputDataError(
            f"client {members.client_id}: membership audit needs members and non-members, got "
            f"{members.n_samples} and {nonmembers.n_samples}"
        )
    rng = np.random.default_rng(random_seed)
    mc = np.zeros(members.n_samples, bool) if member_carriers is None else member_carriers
    nc = np.zeros(nonmembers.n_samples, bool) if nonmember_carriers is None else nonmember_carriers
    mi, ni = _balanced(members.n_samples, nonmembers.n_samples, rng)
    mci, nci = _balanced(int(mc.sum()), int(nc.sum()), rng)
    m_rows = np.union1d(mi, np.flatnonzero(mc)[mci])
    n_rows = np.union1d(ni, np.flatnonzero(nc)[nci])
    general = np.concatenate([np.isin(m_rows, mi), np.isin(n_rows, ni)])
    carrier = np.concatenate(
        [np.isin(m_rows, np.flatnonzero(mc)[mci]), np.isin(n_rows, np.flatnonzero(nc)[nci])]
    )
    data = stack_clients([members.subset(m_rows), nonmembers.subset(n_rows)], members.client_id)
    is_member = np.concatenate([np.ones(m_rows.size, bool), np.zeros(n_rows.size, bool)])
    rows = np.concatenate([m_rows, members.n_samples + n_rows]).astype(np.int64)
    return AuditSet(data, is_member, carrier, general, rows)


def _attack_scores(
    attack: str,
    target: np.ndarray,
    data: ClientData,
    model_config: Mapping[str, Any],
    parameters: Mapping[str, np.ndarray],
    reference_parameters: Sequence[Mapping[str, np.ndarray]],
    shadow: ShadowView | None,
    rmia_gamma: float,
) -> np.ndarray:
    if attack == "loss":
        return loss_attack_scores(example_losses(target, data.y))
    phi = logit_confidence(target, data.y)
    if attack == "lira_offline":
        if len(reference_parameters) < 2:
            raise InputDataError(
                f"LiRA needs at least 2 reference models, got {len(reference_parameters)} "
                f"(mia.n_reference)"
            )
        ref = np.stack([example_confidence(p, data, model_config) for p in reference_parameters])
        return lira_offline_scores(phi, ref)
    if shadow is None:
        raise InputDataError(f"attack {attack!r} needs shadow federations (mia.n_shadow)")
    if attack == "lira_online":
        return lira_online_scores(phi, shadow.confidence, shadow.is_in)
    population_target = example_confidence(parameters, shadow.population, model_config)
    return rmia_scores(
        phi,
        shadow.confidence,
        population_target,
        shadow.population_confidence,
        gamma=rmia_gamma,
    )


def audit_model(
    parameters: Mapping[str, np.ndarray],
    audit: AuditSet,
    model_config: Mapping[str, Any],
    *,
    attacks: Sequence[str] = ("loss", "lira_offline"),
    reference_parameters: Sequence[Mapping[str, np.ndarray]] = (),
    shadow: ShadowView | None = None,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    rmia_gamma: float = 1.0,
    random_seed: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Run the attacks on one model and one audit set.

    Parameters
    ----------
    parameters : mapping
        The target model.
    audit : AuditSet
    model_config : mapping
    attacks : sequence of str
        Names of :data:`ATTACKS` (or their aliases).
    reference_parameters : sequence of mappings
        ``lira_offline``'s OUT models (:func:`~.shadows.train_reference_models`).
    shadow : ShadowView, optional
        ``lira_online``'s and ``rmia``'s shadow models (:meth:`~.shadows.ShadowSet.view` with
        ``audit.rows``).
    fpr_levels : sequence of float
    rmia_gamma : float
    random_seed : int

    Returns
    -------
    rows : list of dict
        One per (attack, subset ∈ {general, carriers}) with :func:`~.mia.attack_metrics` keys
        (NaN metrics when a subset lacks members or non-members).
    scores : dict of str to ndarray
        ``<attack>`` → scores over ``audit.data``, plus ``is_member``, ``is_carrier``,
        ``general`` (for pooling and ROC plots).

    Raises
    ------
    InputDataError
        For an unknown attack, or an attack without the models it needs.
    """
    attacks = resolve_attacks(attacks)
    data = audit.data
    logits = example_logits(parameters, data, model_config)
    scores = {
        attack: _attack_scores(
            attack,
            logits,
            data,
            model_config,
            parameters,
            reference_parameters,
            shadow,
            rmia_gamma,
        )
        for attack in attacks
    }
    scores = {
        **scores,
        "is_member": audit.is_member,
        "is_carrier": audit.is_carrier,
        "general": audit.general,
    }
    return score_rows(scores, fpr_levels=fpr_levels, random_seed=random_seed), scores


def score_rows(
    scores: Mapping[str, np.ndarray],
    *,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    random_seed: int = 0,
) -> list[dict[str, Any]]:
    """One audit's metrics per (attack, subset) from its scores.

    Parameters
    ----------
    scores : mapping
        :func:`audit_model`'s scores: ``<attack>`` arrays and the ``is_member``,
        ``is_carrier``, ``general`` masks, all of shape (n,).
    fpr_levels : sequence of float
    random_seed : int

    Returns
    -------
    list of dict
        ``attack``, ``subset`` (``general``, ``carriers``) and :func:`~.mia.attack_metrics`'
        keys (NaN metrics with the counts when a subset lacks members or non-members).
    """
    member = np.asarray(scores["is_member"], dtype=bool)
    rows = []
    for attack in [a for a in ATTACKS if a in scores]:
        s = np.asarray(scores[attack])
        for subset, key in zip(_SUBSETS, ("general", "is_carrier"), strict=True):
            mask = np.asarray(scores[key], dtype=bool)
            metrics = _metrics_or_nan([(s[mask], member[mask])], fpr_levels, random_seed)
            rows.append({"attack": attack, "subset": subset, **metrics})
    return rows


def _metrics_or_nan(
    parts: Sequence[tuple[np.ndarray, np.ndarray]], fpr_levels: Sequence[float], random_seed: int
) -> dict[str, Any]:
    """Pooled metrics, or NaN metrics with the counts when members or non-members are absent."""
    members = np.concatenate([np.asarray(m, bool) for _, m in parts])
    if members.any() and not members.all():
        out = pooled_attack_metrics(parts, fpr_levels=fpr_levels, random_seed=random_seed)
        out.pop("n_parts")
        return out
    nan = float("nan")
    out: dict[str, Any] = {"advantage": nan, "accuracy_advantage": nan, "auc": nan}
    out |= {f"tpr_at_{level:g}": nan for level in fpr_levels}
    out |= {"min_resolvable_fpr": nan, "n_members": int(members.sum())}
    out["n_nonmembers"] = int((~members).sum())
    return out


def audit_federation(
    parameters_for: Callable[[str], Mapping[str, np.ndarray]],
    train: Mapping[str, ClientData],
    test: Mapping[str, ClientData],
    targets: Sequence[str],
    model_config: Mapping[str, Any],
    *,
    attacks: Sequence[str] = ("loss", "lira_offline"),
    references: Mapping[str, Sequence[Mapping[str, np.ndarray]]] | None = None,
    shadows: ShadowSet | None = None,
    train_carriers: Mapping[str, np.ndarray] | None = None,
    test_carriers: Mapping[str, np.ndarray] | None = None,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    rmia_gamma: float = 1.0,
    random_seed: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, dict[str, np.ndarray]]]:
    """Audit the model each target client ends with.

    Members are the target's train split, non-members its test split.

    Parameters
    ----------
    parameters_for : callable
        Client id → the parameters that client uses (``strategy.parameters_for``).
    train, test : mapping of client id to ClientData
    targets : sequence of str
        Audited clients (every client, for the design's audit).
    model_config : mapping
    attacks : sequence of str
        Names of :data:`ATTACKS` (or aliases).
    references : mapping of client id to list of parameters, optional
        ``lira_offline``'s OUT models per target (:func:`~.shadows.train_reference_models`
        on :func:`~.shadows.reference_population` excluding the target).
    shadows : ShadowSet, optional
        Shadow federations, for ``lira_online`` and ``rmia``.
    train_carriers, test_carriers : mapping of client id to bool array, optional
        Causal-carrier masks of each split.
    fpr_levels : sequence of float
    rmia_gamma : float
    random_seed : int

    Returns
    -------
    rows : list of dict
        :func:`audit_model` rows with ``client`` added.
    scores : dict
        Per target, :func:`audit_model`'s scores.
    """
    unknown = sorted(set(targets) - set(train))
    if unknown:
        raise InputDataError(f"MIA targets {unknown} are not clients; choose from {sorted(train)}")
    rows, scores = [], {}
    for i, client in enumerate(targets):
        audit = balanced_audit_set(
            train[client],
            test[client],
            member_carriers=None if train_carriers is None else train_carriers[client],
            nonmember_carriers=None if test_carriers is None else test_carriers[client],
            random_seed=random_seed + i,
        )
        found, s = audit_model(
            parameters_for(client),
            audit,
            model_config,
            attacks=attacks,
            reference_parameters=() if references is None else references.get(client, ()),
            shadow=None if shadows is None else shadows.view(client, audit.rows),
            fpr_levels=fpr_levels,
            rmia_gamma=rmia_gamma,
            random_seed=random_seed + i,
        )
        rows += [{"client": client, **r} for r in found]
        scores[client] = s
    return rows, scores


def pool_audits(
    audits: Sequence[Mapping[str, Mapping[str, np.ndarray]]],
    *,
    clusters: Mapping[str, object] | None = None,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    random_seed: int = 0,
) -> list[dict[str, Any]]:
    """Attack metrics with scores pooled over clients and runs, overall and per cluster.

    Parameters
    ----------
    audits : sequence of mappings
        One per run (e.g. per seed): client id → :func:`audit_model`'s scores.
    clusters : mapping of client id to cluster, optional
        Adds one row per cluster (the clients' true clusters) for each attack and subset.
    fpr_levels : sequence of float
    random_seed : int

    Returns
    -------
    list of dict
        ``attack``, ``subset`` (general / carriers), ``cluster`` (``"all"`` or a label),
        ``n_clients``, ``n_runs`` and :func:`~.mia.pooled_attack_metrics`' keys.
    """
    groups: dict[str, list[str]] = {"all": sorted({c for audit in audits for c in audit})}
    if clusters is not None:
        for client in groups["all"]:
            if client in clusters:
                groups.setdefault(str(clusters[client]), []).append(client)
    attacks = [a for a in ATTACKS if any(a in s for audit in audits for s in audit.values())]
    rows = []
    for attack in attacks:
        for subset, key in zip(_SUBSETS, ("general", "is_carrier"), strict=True):
            for cluster, clients in groups.items():
                parts = [
                    (audit[c][attack][audit[c][key]], audit[c]["is_member"][audit[c][key]])
                    for audit in audits
                    for c in clients
                    if c in audit and attack in audit[c]
                ]
                if not parts:
                    continue
                rows.append(
                    {
                        "attack": attack,
                        "subset": subset,
                        "cluster": cluster,
                        "n_clients": len(clients),
                        "n_runs": len(audits),
                        **_metrics_or_nan(parts, fpr_levels, random_seed),
                    }
                )
    return rows
