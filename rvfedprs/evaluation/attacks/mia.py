"""Membership-inference scores and the metrics that judge them (design §10, paper Table V).

Every attack here is a pure function from model outputs to one score per example (higher =
more likely a member). The model output is the logit-scaled confidence in the true label,
``φ = log(p_y / (1 − p_y)) = (2y − 1)·logit`` (exact for a binary model, no clipping).

- **LOSS** (Yeom et al., CSF 2018): score ``−loss``.
- **LiRA** (Carlini et al., "Membership Inference Attacks From First Principles", S&P 2022).
  *Online*: shadow models of which about half were trained with the example (IN) and half
  without (OUT); φ is fitted by one Gaussian per side and the score is the log likelihood ratio
  ``log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²)``. *Offline*: OUT models only; the score is
  the one-sided test ``−log Pr[Z > φ]`` under ``N(μ_out, σ_out²)``. With fewer than
  :data:`MIN_PER_EXAMPLE_REFERENCES` models one σ per side, pooled over examples, replaces the
  per-example σ, as Carlini et al. do with few shadow models.
- **RMIA** (Zarifzadeh et al., "Low-Cost High-Power Membership Inference Attacks", ICML 2024):
  the likelihood ratio ``LR(x, z) = [Pr(x|θ)/Pr(x)] / [Pr(z|θ)/Pr(z)]`` of the example against
  population samples ``z`` known to be non-members; the score is the share of ``z`` with
  ``LR(x, z) ≥ γ``. ``Pr(·|θ)`` is the target's probability of the true label, ``Pr(·)`` its mean
  over reference models (IN and OUT); with OUT models only, the paper's offline approximation
  ``Pr(x) = ½[(1 + a)·Pr_OUT(x) + (1 − a)]``.

Metrics (:func:`attack_metrics`): the attacker advantage ``max_t (TPR − FPR)`` (≥ 0: an attack
worse than chance has no advantage; it is *not* ``max |TPR − FPR|``), the accuracy − 0.5 of a
threshold chosen on held-out data (two-fold), ROC AUC, and TPR at low FPR — reported only where
the non-members resolve that FPR (at least :data:`RESOLUTION_FACTOR` / FPR of them), NaN ("not
resolvable") otherwise. Low-FPR rates need thousands of non-members: :func:`pooled_attack_metrics`
pools scores across clients and seeds (a single threshold for all, as Carlini et al. do across
target models).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import numpy as np
from scipy.special import logsumexp
from scipy.stats import norm
from sklearn.metrics import roc_auc_score, roc_curve

__all__ = [
    "FPR_LEVELS",
    "MIN_PER_EXAMPLE_REFERENCES",
    "RESOLUTION_FACTOR",
    "logit_confidence",
    "example_losses",
    "loss_attack_scores",
    "lira_offline_scores",
    "lira_online_scores",
    "rmia_scores",
    "advantage",
    "tpr_at_fpr",
    "is_resolvable",
    "attack_metrics",
    "pooled_attack_metrics",
    "decision_metrics",
]

#: FPR levels at which TPR is reported (the low-FPR regime of Carlini et al.).
FPR_LEVELS: tuple[float, ...] = (0.01, 0.001)
#: Below this many reference models LiRA uses one σ per side pooled over examples.
MIN_PER_EXAMPLE_REFERENCES = 16
#: An FPR ``level`` is resolvable with at least ``RESOLUTION_FACTOR / level`` non-members
#: (10 expected false positives at that level).
RESOLUTION_FACTOR = 10
_MIN_STD = 1e-3


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


def _reference_matrix(target: np.ndarray, reference: np.ndarray, what: str) -> np.ndarray:
    ref = np.atleast_2d(np.asarray(reference, dtype=np.float64))
    if ref.shape[1] != target.size:
        raise ValueError(f"{what} confidences cover {ref.shape[1]} examples, target {target.size}")
    return ref


def _pooled_sd(values: np.ndarray, mask: np.ndarray) -> float:
    """σ pooled over examples: Σ squared deviations from each example's mean / Σ (n_i − 1)."""
    count = mask.sum(axis=0)
    mean = np.where(mask, values, 0.0).sum(axis=0) / np.maximum(count, 1)
    squares = np.where(mask, (values - mean) ** 2, 0.0).sum()
    dof = float(np.maximum(count - 1, 0).sum())
    if dof <= 0:
        raise ValueError("a pooled σ needs at least one example with 2 models on that side")
    return max(float(np.sqrt(squares / dof)), _MIN_STD)


def _side(values: np.ndarray, mask: np.ndarray, pooled: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per-example mean and σ over the models in ``mask`` (one σ for all when ``pooled``)."""
    count = mask.sum(axis=0)
    mean = np.where(mask, values, 0.0).sum(axis=0) / count
    if pooled:
        return mean, np.full_like(mean, _pooled_sd(values, mask))
    var = np.where(mask, (values - mean) ** 2, 0.0).sum(axis=0) / np.maximum(count - 1, 1)
    return mean, np.maximum(np.sqrt(var), _MIN_STD)


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
    ref = _reference_matrix(target, reference_confidence, "reference")
    if ref.shape[0] < 2:
        raise ValueError(f"LiRA needs at least 2 reference models, got {ref.shape[0]}")
    if global_variance is None:
        global_variance = ref.shape[0] < MIN_PER_EXAMPLE_REFERENCES
    mu, sd = _side(ref, np.ones(ref.shape, dtype=bool), global_variance)
    return -norm.logsf(target, loc=mu, scale=sd)


def lira_online_scores(
    target_confidence: np.ndarray,
    shadow_confidence: np.ndarray,
    is_in: np.ndarray,
    *,
    global_variance: bool | None = None,
) -> np.ndarray:
    """Online LiRA: log likelihood ratio of φ under the IN and the OUT Gaussians.

    Parameters
    ----------
    target_confidence : array, shape (n,)
        φ of each example under the target model.
    shadow_confidence : array, shape (n_shadow, n)
        φ of each example under each shadow model.
    is_in : array of bool, shape (n_shadow, n)
        Whether the shadow model was trained with the example.
    global_variance : bool, optional
        One σ per side pooled over examples; default: when ``n_shadow`` <
        :data:`MIN_PER_EXAMPLE_REFERENCES`.

    Returns
    -------
    ndarray, shape (n,)
        ``log N(φ; μ_in, σ_in²) − log N(φ; μ_out, σ_out²)``; higher = more likely a member.

    Raises
    ------
    ValueError
        When an example has no IN or no OUT shadow model.
    """
    target = np.asarray(target_confidence, dtype=np.float64)
    shadow = _reference_matrix(target, shadow_confidence, "shadow")
    inside = np.asarray(is_in, dtype=bool)
    if inside.shape != shadow.shape:
        raise ValueError(f"is_in has shape {inside.shape}, shadow confidences {shadow.shape}")
    n_in, n_out = inside.sum(axis=0), (~inside).sum(axis=0)
    if (n_in == 0).any() or (n_out == 0).any():
        bad = int(((n_in == 0) | (n_out == 0)).sum())
        raise ValueError(f"{bad} examples lack an IN or an OUT shadow model (online LiRA)")
    if global_variance is None:
        global_variance = shadow.shape[0] < MIN_PER_EXAMPLE_REFERENCES
    mu_in, sd_in = _side(shadow, inside, global_variance)
    mu_out, sd_out = _side(shadow, ~inside, global_variance)
    return norm.logpdf(target, mu_in, sd_in) - norm.logpdf(target, mu_out, sd_out)


def _log_probability(confidence: np.ndarray) -> np.ndarray:
    """Log p_y from φ: ``−softplus(−φ)``."""
    return -np.logaddexp(0.0, -np.asarray(confidence, dtype=np.float64))


def _log_marginal(reference: np.ndarray, offline_a: float | None) -> np.ndarray:
    """Log Pr(x): the mean of p_y over reference models, or RMIA's offline approximation."""
    log_p = _log_probability(reference)
    log_mean = logsumexp(log_p, axis=0) - np.log(log_p.shape[0])
    if offline_a is None:
        return log_mean
    return np.log(0.5 * ((1.0 + offline_a) * np.exp(log_mean) + (1.0 - offline_a)))


def rmia_scores(
    target_confidence: np.ndarray,
    reference_confidence: np.ndarray,
    population_target: np.ndarray,
    population_reference: np.ndarray,
    *,
    gamma: float = 1.0,
    offline_a: float | None = None,
) -> np.ndarray:
    """RMIA scores (Zarifzadeh et al. 2024): the share of population samples ``x`` dominates.

    Parameters
    ----------
    target_confidence : array, shape (n,)
        φ of each audited example under the target model.
    reference_confidence : array, shape (n_reference, n)
        φ of each audited example under each reference model (IN and OUT alike, online).
    population_target : array, shape (m,)
        φ of each population sample ``z`` (non-members of the target) under the target model.
    population_reference : array, shape (n_reference, m)
        φ of each population sample under each reference model.
    gamma : float
        The likelihood-ratio threshold γ ≥ 1 of the pairwise test.
    offline_a : float, optional
        With OUT reference models only: ``a`` of ``Pr(x) = ½[(1 + a)·Pr_OUT(x) + (1 − a)]``.

    Returns
    -------
    ndarray, shape (n,)
        ``(1/m)·#{z : LR(x, z) ≥ γ}`` in [0, 1]; higher = more likely a member.
    """
    target = np.asarray(target_confidence, dtype=np.float64)
    ref = _reference_matrix(target, reference_confidence, "reference")
    z_target = np.asarray(population_target, dtype=np.float64)
    z_ref = _reference_matrix(z_target, population_reference, "population reference")
    if ref.shape[0] != z_ref.shape[0]:
        raise ValueError(
            f"{ref.shape[0]} reference models for the examples, {z_ref.shape[0]} for the population"
        )
    if z_target.size == 0:
        raise ValueError("RMIA needs population samples z (non-members of the target)")
    if gamma < 1:
        raise ValueError(f"RMIA's gamma must be >= 1, got {gamma}")
    if offline_a is not None and not 0 <= offline_a <= 1:
        raise ValueError(f"RMIA's offline a must be in [0, 1], got {offline_a}")
    log_ratio_x = _log_probability(target) - _log_marginal(ref, offline_a)
    log_ratio_z = np.sort(_log_probability(z_target) - _log_marginal(z_ref, offline_a))
    # LR(x, z) ≥ γ  ⇔  log ratio_z ≤ log ratio_x − log γ
    below = np.searchsorted(log_ratio_z, log_ratio_x - np.log(gamma), side="right")
    return below / z_target.size


def _checked(scores: np.ndarray, is_member: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    y = np.asarray(is_member).astype(bool).ravel().astype(int)
    s = np.asarray(scores, dtype=np.float64).ravel()
    if y.shape != s.shape:
        raise ValueError(f"{s.size} scores but {y.size} membership labels")
    if y.sum() == 0 or y.sum() == y.size:
        raise ValueError("attack metrics need both members and non-members")
    if not np.all(np.isfinite(s)):
        raise ValueError(f"{int((~np.isfinite(s)).sum())} attack scores are NaN or infinite")
    return y, s


def advantage(scores: np.ndarray, is_member: np.ndarray) -> float:
    """Attacker advantage ``max_t (TPR(t) − FPR(t))`` over thresholds ``score ≥ t``; ≥ 0.

    The threshold that flags nobody gives TPR = FPR = 0, so an attack whose scores are
    anti-correlated with membership has advantage 0, not ``max |TPR − FPR|``.
    """
    y, s = _checked(scores, is_member)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    return float(max(0.0, np.max(tpr - fpr)))


def tpr_at_fpr(scores: np.ndarray, is_member: np.ndarray, level: float) -> float:
    """Highest TPR among thresholds ``score ≥ t`` whose FPR is at most ``level``.

    With ``n`` non-members an FPR of ``level`` allows ``floor(level·n)`` false positives; when
    that is 0 the value is the TPR at zero false positives. Whether ``n`` resolves ``level`` is
    :func:`is_resolvable`'s question, not this function's.
    """
    y, s = _checked(scores, is_member)
    fpr, tpr, _ = roc_curve(y, s, drop_intermediate=False)
    ok = fpr <= level + 1e-12
    return float(tpr[ok].max()) if ok.any() else 0.0


def is_resolvable(n_nonmembers: int, level: float) -> bool:
    """Whether ``n_nonmembers`` resolve an FPR of ``level``: ``n ≥ RESOLUTION_FACTOR / level``."""
    return n_nonmembers * level >= RESOLUTION_FACTOR * (1 - 1e-9)


def _threshold_accuracy(train_s, train_y, test_s, test_y) -> float:
    """Fit the best ``score ≥ t`` threshold on (train_s, train_y); accuracy on the test half.

    Candidates are the distinct training scores and +inf (flag nobody); ties go to the lowest
    threshold. O(n log n): accuracy(t) = (#members ≥ t + #non-members < t) / n.
    """
    member = np.asarray(train_y).astype(bool)
    candidates = np.concatenate([np.unique(train_s), [np.inf]])
    members_below = np.searchsorted(np.sort(train_s[member]), candidates, side="left")
    others_below = np.searchsorted(np.sort(train_s[~member]), candidates, side="left")
    correct = (member.sum() - members_below) + others_below
    t = candidates[int(np.argmax(correct))]
    return float(((test_s >= t) == np.asarray(test_y).astype(bool)).mean())


def attack_metrics(
    scores: np.ndarray,
    is_member: np.ndarray,
    *,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    random_seed: int = 0,
) -> dict[str, float]:
    """Attacker advantage, held-out accuracy − 0.5, AUC and (resolvable) TPR at low FPR.

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
        ``advantage`` (:func:`advantage`), ``accuracy_advantage`` (accuracy − 0.5 of the best
        threshold of one stratified half applied to the other, averaged over both ways; ≈ 0 for
        a chance-level attack), ``auc``, ``tpr_at_<level>`` per level (e.g. ``tpr_at_0.01``;
        NaN when not resolvable), ``min_resolvable_fpr`` (``RESOLUTION_FACTOR / n_nonmembers``),
        ``n_members``, ``n_nonmembers``.
    """
    y, s = _checked(scores, is_member)
    rng = np.random.default_rng(random_seed)
    fold = np.zeros(y.size, dtype=bool)
    for label in (0, 1):  # stratified halves
        idx = rng.permutation(np.flatnonzero(y == label))
        fold[idx[: idx.size // 2]] = True
    accuracy = 0.5 * (
        _threshold_accuracy(s[fold], y[fold], s[~fold], y[~fold])
        + _threshold_accuracy(s[~fold], y[~fold], s[fold], y[fold])
    )
    n_nonmembers = int(y.size - y.sum())
    out = {
        "advantage": advantage(s, y),
        "accuracy_advantage": accuracy - 0.5,
        "auc": float(roc_auc_score(y, s)),
    }
    for level in fpr_levels:
        resolved = is_resolvable(n_nonmembers, level)
        out[f"tpr_at_{level:g}"] = tpr_at_fpr(s, y, level) if resolved else float("nan")
    out["min_resolvable_fpr"] = RESOLUTION_FACTOR / n_nonmembers
    out["n_members"] = int(y.sum())
    out["n_nonmembers"] = n_nonmembers
    return out


def pooled_attack_metrics(
    parts: Iterable[tuple[np.ndarray, np.ndarray]],
    *,
    fpr_levels: Sequence[float] = FPR_LEVELS,
    random_seed: int = 0,
) -> dict[str, float]:
    """:func:`attack_metrics` on the scores of several audits pooled (clients, seeds).

    Parameters
    ----------
    parts : iterable of (scores, is_member)
        One pair per audit (a client's model, a seed's run), arrays of shape (n_i,). Parts
        without members or non-members are pooled too (they add to one side only).

    Returns
    -------
    dict
        :func:`attack_metrics`' keys and ``n_parts``.
    """
    scores, members = [], []
    for s, m in parts:
        s, m = np.asarray(s, dtype=np.float64).ravel(), np.asarray(m, dtype=bool).ravel()
        if s.shape != m.shape:
            raise ValueError(f"{s.size} scores but {m.size} membership labels in one part")
        scores.append(s)
        members.append(m)
    if not scores:
        raise ValueError("no audits to pool")
    out = attack_metrics(
        np.concatenate(scores),
        np.concatenate(members),
        fpr_levels=fpr_levels,
        random_seed=random_seed,
    )
    out["n_parts"] = len(scores)
    return out


def decision_metrics(
    decision: np.ndarray, truth: np.ndarray, *, scores: np.ndarray | None = None
) -> dict[str, float]:
    """A yes/no inference rule against the truth, and the ranking behind it if there is one.

    Used for every channel audit (carried variants read off an update or a Bloom filter, a
    Homer-style test on allele counts), so that they report the same quantities.

    Parameters
    ----------
    decision : array of bool, shape (n,)
        What the attacker concludes (e.g. "carried", "in the pool").
    truth : array of bool, shape (n,)
    scores : array, shape (n,), optional
        The score the rule thresholds (default: the decision itself).

    Returns
    -------
    dict
        ``tpr``, ``fpr`` of the rule, ``rule_advantage`` = tpr − fpr (may be negative),
        ``advantage`` (:func:`advantage` of the scores, ≥ 0) and ``auc`` — NaN where the truth
        has one class only — and ``n_positive``, ``n_negative``, ``n_flagged``.
    """
    d = np.asarray(decision, dtype=bool).ravel()
    t = np.asarray(truth, dtype=bool).ravel()
    s = d.astype(np.float64) if scores is None else np.asarray(scores, dtype=np.float64).ravel()
    if not d.shape == t.shape == s.shape:
        raise ValueError(f"{d.size} decisions, {t.size} truths and {s.size} scores")
    n_pos, n_neg = int(t.sum()), int((~t).sum())
    nan = float("nan")
    tpr = float(d[t].mean()) if n_pos else nan
    fpr = float(d[~t].mean()) if n_neg else nan
    both = n_pos > 0 and n_neg > 0
    return {
        "tpr": tpr,
        "fpr": fpr,
        "rule_advantage": tpr - fpr,
        "advantage": advantage(s, t) if both else nan,
        "auc": float(roc_auc_score(t, s)) if both else nan,
        "n_positive": n_pos,
        "n_negative": n_neg,
        "n_flagged": int(d.sum()),
    }
