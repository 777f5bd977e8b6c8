"""Membership-inference attacks on the models clients end with (SPEC §10, paper Table V).

Two attacks, both black-box on the model's output for a labelled example:

- **LOSS threshold** (Yeom et al., CSF 2018): members have lower loss; the score is ``−loss``.
- **LiRA, offline** (Carlini et al., S&P 2022): ``n`` reference models are trained on random
  halves of a population *disjoint* from the target's members and non-members, so every
  reference model is OUT for every audited example. For each example the logit-scaled
  confidence ``φ = log(p_y / (1 − p_y))`` (``= (2y − 1)·logit`` for a binary model, exact, no
  clipping) is fitted by a Gaussian over the OUT models; the score is the one-sided test
  statistic ``−log Pr[Z > φ_target]`` under ``N(μ_out, σ_out²)`` (higher = more likely a member).
  With fewer than :data:`MIN_PER_EXAMPLE_REFERENCES` reference models a *global* σ (pooled over
  examples) is used, as Carlini et al. do for small numbers of shadow models.

Audit sets are balanced: members are the target client's training split, non-members its test
split (same ancestry mix), subsampled to equal size. Metrics (:func:`attack_metrics`): attacker
advantage ``max |TPR − FPR|`` over thresholds, ``accuracy − 0.5`` of a threshold chosen on one
half of the audit set and applied to the other (two-fold, so a chance-level attack stays at ≈ 0
rather than the optimistic best-threshold value, which on a balanced set is just advantage/2),
ROC AUC, and TPR at 1% and 0.1% FPR — for everyone and for the carriers of the causal rare
variants of their cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import scipy.sparse as sp
import torch
from scipy.stats import norm
from sklearn.metrics import roc_auc_score, roc_curve

from rvfedprs.exceptions import InputDataError
from rvfedprs.model import get_parameters, model_from_config, set_parameters
from rvfedprs.training import ClientData, LocalTrainingConfig, local_update

__all__ = [
    "ATTACKS",
    "FPR_LEVELS",
    "MIN_PER_EXAMPLE_REFERENCES",
    "AuditSet",
    "example_logits",
    "logit_confidence",
    "example_losses",
    "loss_attack_scores",
    "lira_offline_scores",
    "tpr_at_fpr",
    "attack_metrics",
    "balanced_audit_set",
    "reference_population",
    "train_reference_models",
    "audit_model",
    "audit_federation",
]

#: Attack names accepted by :func:`audit_model` (and by the ``mia.attacks`` schema enum).
ATTACKS: tuple[str, ...] = ("loss", "lira")
#: FPR levels at which TPR is reported (paper-style low-FPR regime).
FPR_LEVELS: tuple[float, ...] = (0.01, 0.001)
#: Below this many reference models LiRA uses one global σ instead of per-example σ.
MIN_PER_EXAMPLE_REFERENCES = 16
_MIN_STD = 1e-3


def example_logits(
    parameters: Mapping[str, np.ndarray],
    data: ClientData,
    model_config: Mapping[str, Any],
    *,
    batch_size: int = 4096,
) -> np.ndarray:
    """Logits of the model ``parameters`` on every example of ``data`` (eval mode).

    Returns
    -------
    ndarray of float64, shape (n_samples,)
    """
    model = model_from_config(data.n_rare, model_config)
    set_parameters(model, parameters)
    model.eval()
    out = np.empty(data.n_samples, dtype=np.float64)
    with torch.no_grad():
        for start in range(0, data.n_samples, batch_size):
            rows = np.arange(start, min(start + batch_size, data.n_samples))
            prs, rare, _ = data.batch(rows)
            out[rows] = model(prs, rare).double().numpy()
    return out


def logit_confidence(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Logit-scaled confidence in the true label, ``log(p_y / (1 − p_y)) = (2y − 1)·logit``.

    Parameters
    ----------
    logits, y : arrays, shape (n,)
    """
    z = np.asarray(logits, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if z.shape != y.shape:
        raise ValueError(f"{z.size} logits but {y.size} labels")
    return (2.0 * y - 1.0) * z


def example_losses(logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-example binary cross-entropy, ``softplus(−φ)``, shape (n,) (unweighted)."""
    phi = logit_confidence(logits, y)
    return np.logaddexp(0.0, -phi)


def loss_attack_scores(losses: np.ndarray) -> np.ndarray:
    """LOSS attack (Yeom et al.): score ``−loss``; higher = more likely a member."""
    return -np.asarray(losses, dtype=np.float64)


def lira_offline_scores(
    target_confidence: np.ndarray,
    reference_confidence: np.ndarray,
    *,
    global_variance: bool | None = None,
) -> np.ndarray:
    """Offline LiRA scores from OUT reference models.

    Parameters
    ----------
    target_confidence : array, shape (n,)
        φ of each example under the target model (:func:`logit_confidence`).
    reference_confidence : array, shape (n_reference, n)
        φ of each example under each OUT reference model.
    global_variance : bool, optional
        Use one σ pooled over examples; default: when ``n_reference`` <
        :data:`MIN_PER_EXAMPLE_REFERENCES`.

    Returns
    -------
    ndarray, shape (n,)
        ``−log Pr[Z > φ]`` for ``Z ~ N(μ_out, σ_out²)``; higher = more likely a member.
    """
    target = np.asarray(target_confidence, dtype=np.float64)
    ref = np.atleast_2d(np.asarray(reference_confidence, dtype=np.float64))
    if ref.shape[1] != target.size:
        raise ValueError(
            f"reference confidences cover {ref.shape[1]} examples, target {target.size}"
        )
    if ref.shape[0] < 2:
        raise ValueError(f"LiRA needs at least 2 reference models, got {ref.shape[0]}")
    mu = ref.mean(axis=0)
    if global_variance is None:
        global_variance = ref.shape[0] < MIN_PER_EXAMPLE_REFERENCES
    if global_variance:
        sd = np.full_like(mu, max(float(np.sqrt(ref.var(axis=0, ddof=1).mean())), _MIN_STD))
    else:
        sd = np.maximum(ref.std(axis=0, ddof=1), _MIN_STD)
    return -norm.logsf(target, loc=mu, scale=sd)


def tpr_at_fpr(scores: np.ndarray, is_member: np.ndarray, level: float) -> float:
    """Highest TPR among thresholds ``score ≥ t`` whose FPR is at most ``level``.

    With ``n`` non-members an FPR of ``level`` allows ``floor(level·n)`` false positives; when
    that is 0 the value is the TPR at zero false positives.
    """
    y, s = _checked(scores, is_member)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    ok = fpr <= level + 1e-12
    return float(tpr[ok].max()) if ok.any() else 0.0


def _checked(scores: np.ndarray, is_member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(is_member).astype(bool).ravel().astype(int)
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"{s.size} scores but {y.size} membership labels")
    if y.sum() == 0 or y.sum() == y.size:
        raise ValueError("attack metrics need both members and non-members")
    return y, s


def _threshold_accuracy(train_s, train_y, test_s, test_y) -> float:
    """Fit the best ``score ≥ t`` threshold on (train_s, train_y); accuracy on the test half."""
    candidates = np.concatenate([np.unique(train_s), [np.inf]])
    predicted = train_s[None, :] >= candidates[:, None]
    accuracy = (predicted == train_y[None, :].astype(bool)).mean(axis=1)
    t = candidates[int(np.argmax(accuracy))]
    return float(((test_s >= t) == test_y.astype(bool)).mean())


def attack_metrics(
    scores: np.ndarray,
    is_member: np.ndarray,
    *,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    random_seed: int = 0,
) -> dict[str, float]:
    """Attacker advantage, held-out accuracy − 0.5, AUC and TPR at low FPR.

    Parameters
    ----------
    scores : array, shape (n,)
        Attack scores, higher = member.
    is_member : array of bool, shape (n,)
    fpr_levels : sequence of float
    random_seed : int
        Seeds the two-fold split of the accuracy estimate.

    Returns
    -------
    dict
        ``advantage`` (max |TPR − FPR|), ``accuracy_advantage`` (two-fold held-out threshold
        accuracy − 0.5), ``auc``, ``tpr_at_<level>`` per level (e.g. ``tpr_at_0.01``),
        ``n_members``, ``n_nonmembers``.
    """
    y, s = _checked(scores, is_member)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    rng = np.random.default_rng(random_seed)
    fold = np.zeros(y.size, dtype=bool)
    for label in (0, 1):  # stratified halves
        idx = rng.permutation(np.flatnonzero(y == label))
        fold[idx[: idx.size // 2]] = True
    accuracy = 0.5 * (
        _threshold_accuracy(s[fold], y[fold], s[~fold], y[~fold])
        + _threshold_accuracy(s[~fold], y[~fold], s[fold], y[fold])
    )
    out = {
        "advantage": float(np.max(np.abs(tpr - fpr))),
        "accuracy_advantage": accuracy - 0.5,
        "auc": float(roc_auc_score(y, s)),
    }
    for level in fpr_levels:
        out[f"tpr_at_{level:g}"] = tpr_at_fpr(s, y, level)
    out["n_members"] = int(y.sum())
    out["n_nonmembers"] = int(y.size - y.sum())
    return out


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
    """

    data: ClientData
    is_member: np.ndarray
    is_carrier: np.ndarray
    general: np.ndarray


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
    a, b = members.subset(m_rows), nonmembers.subset(n_rows)
    data = ClientData(
        members.client_id,
        np.concatenate([a.sample_ids, b.sample_ids]),
        np.concatenate([a.prs, b.prs]),
        sp.vstack([a.rare, b.rare], format="csr"),
        np.concatenate([a.y, b.y]),
    )
    is_member = np.concatenate([np.ones(m_rows.size, bool), np.zeros(n_rows.size, bool)])
    return AuditSet(data, is_member, carrier, general)


def reference_population(
    datasets: Mapping[str, ClientData], exclude: Sequence[str], *, client_id: str = "reference"
) -> ClientData:
    """Every sample of the clients not in ``exclude`` (train and test alike), pooled.

    Used as the attacker's population for LiRA's OUT models: disjoint from the target client's
    members and non-members.
    """
    parts = [datasets[c] for c in sorted(datasets) if c not in set(exclude)]
    if not parts:
        raise InputDataError(
            f"no reference population: every client is excluded ({sorted(exclude)})"
        )
    return ClientData(
        client_id,
        np.concatenate([d.sample_ids for d in parts]),
        np.concatenate([d.prs for d in parts]),
        sp.vstack([d.rare for d in parts], format="csr"),
        np.concatenate([d.y for d in parts]),
    )


def train_reference_models(
    population: ClientData,
    *,
    n_models: int,
    model_config: Mapping[str, Any],
    training: LocalTrainingConfig,
    initial: Mapping[str, np.ndarray] | None = None,
    random_seed: int,
) -> list[dict[str, np.ndarray]]:
    """Train ``n_models`` OUT models, each on a random half of ``population``.

    Parameters
    ----------
    population : ClientData
        Disjoint from the audited examples.
    n_models : int
        At least 2.
    model_config : mapping
    training : LocalTrainingConfig
        ``epochs`` sets the budget (match the target's rounds × local epochs).
    initial : mapping, optional
        Starting parameters (default: a fresh model seeded per reference model).
    random_seed : int

    Returns
    -------
    list of dict of str to ndarray
    """
    if n_models < 2:
        raise ValueError(f"n_models must be >= 2, got {n_models}")
    seeds = np.random.SeedSequence([int(random_seed), 7]).generate_state(2 * n_models)
    out = []
    for i in range(n_models):
        rng = np.random.default_rng(int(seeds[2 * i]))
        half = np.sort(rng.permutation(population.n_samples)[: population.n_samples // 2])
        model = model_from_config(
            population.n_rare, model_config, random_seed=int(seeds[2 * i + 1] >> 1)
        )
        if initial is not None:
            set_parameters(model, initial)
        local_update(model, population.subset(half), training, random_seed=int(seeds[2 * i]))
        out.append(get_parameters(model))
    return out


def audit_model(
    parameters: Mapping[str, np.ndarray],
    audit: AuditSet,
    model_config: Mapping[str, Any],
    *,
    attacks: Sequence[str] = ATTACKS,
    reference_parameters: Sequence[Mapping[str, np.ndarray]] = (),
    fpr_levels: Sequence[float] = FPR_LEVELS,
    random_seed: int = 0,
) -> tuple[list[dict[str, Any]], dict[str, np.ndarray]]:
    """Run the attacks on one model and one audit set.

    Returns
    -------
    rows : list of dict
        One per (attack, subset ∈ {general, carriers}) with :func:`attack_metrics` keys
        (NaN metrics when a subset lacks members or non-members).
    scores : dict of str to ndarray
        ``<attack>`` → scores over ``audit.data``, plus ``is_member``, ``is_carrier``,
        ``general`` (for ROC plots).

    Raises
    ------
    InputDataError
        For an unknown attack, or LiRA without at least 2 reference models.
    """
    unknown = sorted(set(attacks) - set(ATTACKS))
    if unknown:
        raise InputDataError(f"MIA attacks {unknown} unknown; choose from {list(ATTACKS)}")
    data = audit.data
    logits = example_logits(parameters, data, model_config)
    general = audit.general
    scores: dict[str, np.ndarray] = {}
    if "loss" in attacks:
        scores["loss"] = loss_attack_scores(example_losses(logits, data.y))
    if "lira" in attacks:
        if len(reference_parameters) < 2:
            raise InputDataError(
                f"LiRA needs at least 2 reference models, got {len(reference_parameters)} "
                f"(mia.n_reference)"
            )
        ref = np.stack(
            [
                logit_confidence(example_logits(p, data, model_config), data.y)
                for p in reference_parameters
            ]
        )
        scores["lira"] = lira_offline_scores(logit_confidence(logits, data.y), ref)
    rows = []
    for attack, s in scores.items():
        for subset, mask in (("general", general), ("carriers", audit.is_carrier)):
            m = audit.is_member[mask]
            if m.any() and not m.all():
                metrics = attack_metrics(s[mask], m, fpr_levels=fpr_levels, random_seed=random_seed)
            else:
                metrics = {"advantage": float("nan"), "accuracy_advantage": float("nan")}
                metrics |= {"auc": float("nan"), "n_members": int(m.sum())}
                metrics |= {f"tpr_at_{lv:g}": float("nan") for lv in fpr_levels}
                metrics["n_nonmembers"] = int((~m).sum())
            rows.append({"attack": attack, "subset": subset, **metrics})
    scores = {
        **scores,
        "is_member": audit.is_member,
        "is_carrier": audit.is_carrier,
        "general": general,
    }
    return rows, scores


def audit_federation(
    parameters_for: Callable[[str], Mapping[str, np.ndarray]],
    train: Mapping[str, ClientData],
    test: Mapping[str, ClientData],
    targets: Sequence[str],
    model_config: Mapping[str, Any],
    *,
    attacks: Sequence[str] = ATTACKS,
    references: Mapping[str, Sequence[Mapping[str, np.ndarray]]] | None = None,
    train_carriers: Mapping[str, np.ndarray] | None = None,
    test_carriers: Mapping[str, np.ndarray] | None = None,
    fpr_levels: Sequence[float] = FPR_LEVELS,
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
        Audited clients.
    model_config : mapping
    attacks : sequence of {"loss", "lira"}
    references : mapping of client id to list of parameters, optional
        LiRA's OUT models per target (:func:`train_reference_models` on
        :func:`reference_population` excluding the target).
    train_carriers, test_carriers : mapping of client id to bool array, optional
        Causal-carrier masks of each split.
    fpr_levels : sequence of float
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
            fpr_levels=fpr_levels,
            random_seed=random_seed + i,
        )
        rows += [{"client": client, **r} for r in found]
        scores[client] = s
    return rows, scores
