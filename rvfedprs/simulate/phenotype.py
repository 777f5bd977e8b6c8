"""Liability-threshold phenotypes from genotypes and a causal architecture.

liability = genetic value + Gaussian noise; within each group (a client, by default) the
``round(prevalence * n_group)`` individuals with the highest liability are cases. Thresholding per
group (rather than one global threshold) is a deliberate choice: every federated site then has the
same case fraction (≈1 case per 10 controls at prevalence 1/11), as in ascertained case-control
cohorts, whatever its mean genetic liability.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from rvfedprs.exceptions import ConfigError, InputDataError
from rvfedprs.provenance import draw_seed

__all__ = [
    "CausalArchitecture",
    "PhenotypeResult",
    "genetic_value",
    "polygenic_modifier",
    "threshold_by_group",
    "simulate_phenotype",
]


@dataclass(frozen=True)
class CausalArchitecture:
    """Causal variants (columns of a genotype matrix) and their per-allele effects.

    Parameters
    ----------
    indices : array of int, shape (n_causal,)
        Column indices into the genotype matrix.
    effects : array of float, shape (n_causal,) or (n_causal, n_groups)
        Liability effect per copy of the counted (ALT) allele; one column per group when the
        effect differs between groups of individuals (ancestry clusters for portability,
        architecture groups for effect heterogeneity), 0 where a variant has no effect.

    Examples
    --------
    α-model effects of three variants, correlated 0.5 between two groups:

    >>> import numpy as np
    >>> from rvfedprs.simulate import CausalArchitecture
    >>> arch = CausalArchitecture.alpha_model(
    ...     [0, 4, 9], frequencies=[0.002, 0.004, 0.01], h2=0.02, alpha=-0.3, n_groups=2,
    ...     correlation=0.5, random_seed=1)
    >>> arch.effects.shape
    (3, 2)
    """

    indices: np.ndarray
    effects: np.ndarray

    def __post_init__(self) -> None:
        indices = np.asarray(self.indices, dtype=np.int64).ravel()
        effects = np.asarray(self.effects, dtype=np.float64)
        if effects.ndim not in (1, 2) or effects.shape[0] != len(indices):
            raise InputDataError(
                f"architecture: {len(indices)} indices but effects of shape {effects.shape}"
            )
        object.__setattr__(self, "indices", indices)
        object.__setattr__(self, "effects", effects)

    @property
    def n_groups(self) -> int:
        """Effect columns (1 for a 1-D effect vector)."""
        return 1 if self.effects.ndim == 1 else int(self.effects.shape[1])

    @classmethod
    def alpha_model(
        cls,
        indices: Sequence[int],
        *,
        frequencies: Sequence[float],
        h2: float,
        alpha: float = -0.3,
        n_groups: int = 1,
        correlation: float | Sequence[Sequence[float]] = 1.0,
        risk_fraction: float = 0.5,
        random_seed: int | None = None,
    ) -> CausalArchitecture:
        """Draw α-model effects whose expected h² is ``h2`` (:mod:`rvfedprs.simulate.effects`).

        ``beta_jm = sqrt(rho) b_j + sqrt(1 - rho) e_jm`` with ``b_j, e_jm`` of variance
        ``sigma2 [2p(1-p)]^alpha`` and ``sigma2 = h2 / sum_j [2p_j(1-p_j)]^(1+alpha)``: in a
        population with frequencies ``frequencies`` the expected variance explained is ``h2``
        in every group.

        Parameters
        ----------
        indices : sequence of int, shape (n_causal,)
        frequencies : sequence of float, shape (n_causal,)
            ALT frequencies (in (0, 1)).
        h2 : float
            Expected variance explained.
        alpha : float
        n_groups : int
            Effect columns; 1 gives a 1-D effect vector.
        correlation : float or array_like, shape (n_groups, n_groups)
            Cross-group effect correlation ρ, or a correlation matrix
            (:func:`rvfedprs.simulate.effects.correlated_effects`).
        risk_fraction : float
            Probability that a base effect is positive (0.5: symmetric).
        random_seed : int, optional
        """
        from rvfedprs.simulate.effects import alpha_sigma2, alpha_variance, correlated_effects

        freq = np.asarray(frequencies, dtype=np.float64)
        if len(freq) != len(indices):
            raise InputDataError(f"{len(indices)} indices but {len(freq)} frequencies")
        causal = np.ones((len(freq), 1), dtype=bool)
        sigma2 = alpha_sigma2(h2, freq, freq[:, None], causal, alpha)
        sd = np.sqrt(sigma2 * alpha_variance(freq, alpha))
        rng = np.random.default_rng(draw_seed(random_seed))
        effects, _ = correlated_effects(rng, sd, n_groups, correlation, risk_fraction=risk_fraction)
        return cls(indices, effects[:, 0] if n_groups == 1 else effects)


@dataclass(frozen=True)
class PhenotypeResult:
    """A simulated phenotype.

    Attributes
    ----------
    liability : ndarray, shape (n_samples,)
    phenotype : ndarray of int8, shape (n_samples,)
        1 = case, 0 = control.
    genetic_value : ndarray, shape (n_samples,)
        The genetic part of the liability (as scaled into it, uncentred).
    thresholds : dict
        Group label -> the lowest case liability in that group.
    random_seed : int
        The seed used for the noise.
    """

    liability: np.ndarray
    phenotype: np.ndarray
    genetic_value: np.ndarray
    thresholds: dict[Any, float] = field(default_factory=dict)
    random_seed: int = 0


Architecture = CausalArchitecture | Mapping[str, Any] | Callable[[np.ndarray], np.ndarray]


def genetic_value(
    genotypes: np.ndarray, architecture: CausalArchitecture, groups: np.ndarray | None = None
) -> np.ndarray:
    """Sum of effect × allele count over the causal variants, with each sample's group's effects.

    Parameters
    ----------
    genotypes : ndarray, shape (n_samples, n_variants)
        ALT-allele counts in [0, 2]; -1 or NaN = missing, replaced by the column mean.
    architecture : CausalArchitecture
    groups : ndarray of int, shape (n_samples,), optional
        Effect column of each sample (needed when the architecture has several).

    Returns
    -------
    ndarray of float64, shape (n_samples,)
    """
    g = np.asarray(genotypes)
    if g.ndim != 2:
        raise InputDataError(f"genotypes must be 2-D (n_samples, n_variants), got shape {g.shape}")
    idx = architecture.indices
    if len(idx) and (idx.min() < 0 or idx.max() >= g.shape[1]):
        bad = idx[(idx < 0) | (idx >= g.shape[1])][0]
        raise InputDataError(f"architecture index {bad} out of range for {g.shape[1]} variants")
    effects = architecture.effects.reshape(len(idx), architecture.n_groups)  # (n_causal, groups)
    if groups is None:
        if effects.shape[1] != 1:
            raise InputDataError(
                f"the architecture has {architecture.n_groups} effect columns: give each "
                "sample's group"
            )
        groups = np.zeros(g.shape[0], dtype=np.int64)
    groups = np.asarray(groups, dtype=np.int64)
    if groups.shape != (g.shape[0],):
        raise InputDataError(f"groups has shape {groups.shape}, expected ({g.shape[0]},)")
    if len(groups) and (groups.min() < 0 or groups.max() >= effects.shape[1]):
        raise InputDataError(
            f"group {groups[(groups < 0) | (groups >= effects.shape[1])][0]} out of range "
            f"for {effects.shape[1]} effect columns"
        )
    value = np.zeros((g.shape[0], effects.shape[1]))
    # blocks of variants, at most ~256 MiB of floats: no float copy of all of them
    step = max(16, min(256, (256 << 20) // (8 * max(1, g.shape[0]))))
    for lo in range(0, len(idx), step):
        x = g[:, idx[lo : lo + step]].astype(np.float64)
        missing = (x < 0) | np.isnan(x)
        if missing.any():
            x[missing] = np.nan
            means = np.nanmean(x, axis=0)
            x = np.where(missing, np.nan_to_num(means)[None, :], x)
        value += x @ effects[lo : lo + step]
    return value[np.arange(g.shape[0]), groups]


def polygenic_modifier(
    common_value: np.ndarray, interaction: float, reference: np.ndarray | None = None
) -> np.ndarray:
    """How much of a rare variant's effect acts in each person: ``max(0, 1 + gamma * z) / c``.

    ``z`` is the person's common genetic value standardised over ``reference`` (the target
    cohort): with ``gamma`` > 0 a rare allele weighs more on a high polygenic background, a
    carrier × PRS interaction on the liability scale (penetrance of monogenic variants rises
    with the PRS beyond the additive model's rise; Fahed et al. 2020). The floor at 0 keeps a
    risk allele from turning protective on a low background; ``c`` makes the mean square over
    ``reference`` 1, so that the rare part keeps its expected variance. ``gamma`` = 0: 1 for
    everyone.

    Parameters
    ----------
    common_value : ndarray, shape (n_samples,)
    interaction : float
        ``gamma`` (>= 0).
    reference : ndarray of bool, shape (n_samples,), optional
        The samples whose mean and SD standardise ``z`` (all when absent).

    Returns
    -------
    ndarray, shape (n_samples,)
    """
    value = np.asarray(common_value, dtype=np.float64)
    if interaction == 0:
        return np.ones_like(value)
    base = value if reference is None else value[np.asarray(reference, dtype=bool)]
    sd = base.std()
    z = (value - base.mean()) / sd if sd > 0 else np.zeros_like(value)
    scale = np.maximum(0.0, 1.0 + interaction * z)
    ref = scale if reference is None else scale[np.asarray(reference, dtype=bool)]
    return scale / np.sqrt(np.mean(ref**2))


def threshold_by_group(
    liability: np.ndarray,
    prevalence: float | Mapping[Any, float],
    groups: np.ndarray | None = None,
) -> tuple[np.ndarray, dict[Any, float]]:
    """Make the top ``round(prevalence * n)`` liabilities of each group cases.

    Parameters
    ----------
    liability : ndarray, shape (n_samples,)
    prevalence : float or mapping
        Case fraction in (0, 1), or one per group label.
    groups : ndarray, shape (n_samples,), optional
        Group labels; one group when absent.

    Returns
    -------
    phenotype : ndarray of int8, shape (n_samples,)
    thresholds : dict
        Group -> lowest case liability (inf when a group gets no case).
    """
    liability = np.asarray(liability, dtype=np.float64)
    groups = np.zeros(len(liability), dtype=int) if groups is None else np.asarray(groups)
    phenotype = np.zeros(len(liability), dtype=np.int8)
    thresholds: dict[Any, float] = {}
    for group in dict.fromkeys(groups.tolist()):
        k = prevalence[group] if isinstance(prevalence, Mapping) else prevalence
        if not 0 < k < 1:
            raise ConfigError(f"prevalence must be in (0, 1), got {k!r}")
        members = np.flatnonzero(groups == group)
        n_cases = int(round(k * len(members)))
        order = members[np.argsort(-liability[members], kind="stable")]
        phenotype[order[:n_cases]] = 1
        thresholds[group] = float(liability[order[n_cases - 1]]) if n_cases else float("inf")
    return phenotype, thresholds


def _as_function(
    architecture: Architecture, effect_groups: np.ndarray | None
) -> Callable[[np.ndarray], np.ndarray]:
    if isinstance(architecture, Mapping):
        missing = {"indices", "effects"} - set(architecture)
        if missing:
            raise InputDataError(f"architecture mapping lacks keys {sorted(missing)}")
        architecture = CausalArchitecture(architecture["indices"], architecture["effects"])
    if isinstance(architecture, CausalArchitecture):
        arch = architecture
        return lambda g: genetic_value(g, arch, effect_groups)
    if callable(architecture):
        return architecture
    raise InputDataError(
        "architecture must be a CausalArchitecture, a mapping with 'indices' and 'effects', "
        f"or a callable; got {type(architecture).__name__}"
    )


def simulate_phenotype(
    genotypes: np.ndarray,
    architecture: Architecture,
    *,
    prevalence: float | Mapping[Any, float],
    random_seed: int | None = None,
    heritability: float | None = None,
    groups: np.ndarray | None = None,
    effect_groups: np.ndarray | None = None,
) -> PhenotypeResult:
    """Simulate a binary liability-threshold phenotype from genotypes.

    Parameters
    ----------
    genotypes : ndarray, shape (n_samples, n_variants)
        ALT-allele counts (0, 1, 2; -1 missing).
    architecture : CausalArchitecture, mapping or callable
        Causal variant indices and effects, ``{"indices": ..., "effects": ...}``, or a function
        ``genotypes -> genetic value`` of shape (n_samples,) for non-additive models.
    prevalence : float or mapping
        Case fraction within each group (one value, or one per label of ``groups``).
    random_seed : int, optional
        Seed for the environmental noise; drawn (and returned) when absent.
    heritability : float, optional
        When given, the genetic value is centred and scaled to variance ``heritability`` and the
        noise has variance ``1 - heritability``; otherwise the genetic value is used as given and
        the noise is standard normal.
    groups : ndarray, shape (n_samples,), optional
        Labels (e.g. clients) within which the prevalence is applied.
    effect_groups : ndarray of int, shape (n_samples,), optional
        Effect column of each sample, for an architecture with group-specific effects.

    Returns
    -------
    PhenotypeResult
    """
    seed = draw_seed(random_seed)
    g = np.asarray(genotypes)
    value = np.asarray(_as_function(architecture, effect_groups)(g), dtype=np.float64).ravel()
    if value.shape != (g.shape[0],):
        raise InputDataError(
            f"the genetic value has shape {value.shape}, expected ({g.shape[0]},) = (n_samples,)"
        )
    rng = np.random.default_rng(seed)
    if heritability is None:
        noise_sd = 1.0
    else:
        if not 0 <= heritability < 1:
            raise ConfigError(f"heritability must be in [0, 1), got {heritability!r}")
        sd = value.std()
        value = (value - value.mean()) * (np.sqrt(heritability) / sd if sd > 0 else 0.0)
        noise_sd = float(np.sqrt(1 - heritability))
    liability = value + rng.normal(0.0, noise_sd, size=value.shape)
    phenotype, thresholds = threshold_by_group(liability, prevalence, groups)
    return PhenotypeResult(liability, phenotype, value, thresholds, seed)
