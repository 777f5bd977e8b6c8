"""The two nucleotides of a simulated SNP: transitions, transversions, strand-ambiguous pairs.

Every base has one transition partner (A<->G, C<->T), one complement (A<->T, C<->G: the pair is
strand-ambiguous, its alleles read the same on both strands) and one other transversion (A<->C,
G<->T). Real arrays hold few ambiguous SNPs (5.7% of the UK Biobank array variants of the CINECA
excerpt, against 1/3 for two bases drawn at random), so both genotype models draw pairs from the
same substitution probabilities: msprime as its mutation matrix, Balding–Nichols per locus.
"""

from __future__ import annotations

import numpy as np

from rvfedprs.exceptions import ConfigError

__all__ = [
    "BASES",
    "substitution_matrix",
    "draw_allele_pairs",
    "is_strand_ambiguous",
    "is_transition",
]

#: The nucleotides, in the order of the rows and columns of :func:`substitution_matrix`.
BASES = ("A", "C", "G", "T")
_TRANSITION = {"A": "G", "C": "T", "G": "A", "T": "C"}
_COMPLEMENT = {"A": "T", "C": "G", "G": "C", "T": "A"}


def substitution_matrix(transition_fraction: float, strand_ambiguous_fraction: float) -> np.ndarray:
    """Probability that a mutation turns base ``i`` into base ``j`` (rows and columns: BASES).

    Parameters
    ----------
    transition_fraction : float
        Probability of the transition partner.
    strand_ambiguous_fraction : float
        Probability of the complement (an A/T or C/G pair); the rest goes to the other
        transversion.

    Returns
    -------
    ndarray, shape (4, 4)
        Rows sum to 1, zero diagonal. With a uniform ancestral base the pair fractions equal
        the two arguments.
    """
    t, a = float(transition_fraction), float(strand_ambiguous_fraction)
    if min(t, a) < 0 or t + a > 1 + 1e-12:
        raise ConfigError(
            "'simulate.alleles': transition_fraction + strand_ambiguous_fraction must be in "
            f"[0, 1], got {t} + {a}"
        )
    other = max(0.0, 1.0 - t - a)
    matrix = np.zeros((4, 4))
    for i, base in enumerate(BASES):
        transition, complement = _TRANSITION[base], _COMPLEMENT[base]
        (transversion,) = set(BASES) - {base, transition, complement}
        matrix[i, BASES.index(transition)] = t
        matrix[i, BASES.index(complement)] = a
        matrix[i, BASES.index(transversion)] = other
    return matrix


def draw_allele_pairs(
    rng: np.random.Generator,
    n: int,
    *,
    transition_fraction: float,
    strand_ambiguous_fraction: float,
) -> tuple[np.ndarray, np.ndarray]:
    """Draw ``n`` (REF, ALT) pairs: REF uniform, ALT by :func:`substitution_matrix`.

    Returns
    -------
    ref, alt : ndarray of str, shape (n,)
    """
    matrix = substitution_matrix(transition_fraction, strand_ambiguous_fraction)
    bases = np.array(BASES)
    ref = rng.integers(0, 4, size=n)
    cumulative = np.cumsum(matrix, axis=1)[ref]
    alt = (rng.random(n)[:, None] >= cumulative).sum(axis=1).clip(max=3)
    return bases[ref], bases[alt]


def is_strand_ambiguous(ref: np.ndarray, alt: np.ndarray) -> np.ndarray:
    """True for A/T and C/G pairs."""
    pair = np.char.add(np.asarray(ref, dtype=str), np.asarray(alt, dtype=str))
    return np.isin(pair, ["AT", "TA", "CG", "GC"])


def is_transition(ref: np.ndarray, alt: np.ndarray) -> np.ndarray:
    """True for A/G and C/T pairs."""
    pair = np.char.add(np.asarray(ref, dtype=str), np.asarray(alt, dtype=str))
    return np.isin(pair, ["AG", "GA", "CT", "TC"])
