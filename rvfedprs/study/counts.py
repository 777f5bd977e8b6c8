"""The study's counts summed securely: the coordinator learns the consortium's totals only.

With ``study.count_aggregation: secure`` (the default) a site answers the ``counts`` step
without its counts: it holds them (:func:`hold_counts`) and the coordinator runs a secure sum
over every site (:func:`sum_counts`, SecAgg as in training: :mod:`rvfedprs.federation.secagg`).
What a site still releases per variant is whether its own controls fail the Hardy–Weinberg test
(:func:`hwe_failing`; the test runs within each site, never on the pooled counts) and whether it
suppressed the variant (``study.min_cell_count``). The sum is exact: counts are integers, and
ALT dosage sums are carried in fixed point with 2^-14 resolution, plink2's dosage precision
(sites read VCF and BGEN through a .pgen conversion), so the summed table equals the sum of
the plain per-site tables.

``count_aggregation: plain`` releases each site's table (the coordinator then also reports each
site's HWE p-value); with fewer than ``secagg.min_clients`` sites a secure sum is refused, since
the total minus its own counts would tell a site the others'.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from rvfedprs.exceptions import ConfigError
from rvfedprs.federation.secagg.protocol import SecAggParams
from rvfedprs.federation.secagg.server import SumOutcome, secure_sum
from rvfedprs.federation.secagg.site import hold
from rvfedprs.federation.task import Transport
from rvfedprs.genotypes.sitecounts import site_hwe_p
from rvfedprs.strategies.secure import SumGroup

__all__ = [
    "COUNT_AGGREGATIONS",
    "DOSAGE_SCALE",
    "HELD",
    "SUMMED_COLUMNS",
    "check_secure_counts",
    "hold_counts",
    "hwe_failing",
    "sum_counts",
]

#: How the sites' counts reach the coordinator (``study.count_aggregation``).
COUNT_AGGREGATIONS = ("secure", "plain")
#: The name a site holds its counts under.
HELD = "study-counts"
#: Fixed point of the ALT dosage sums: plink2 stores dosages in multiples of 1/16384.
DOSAGE_SCALE = 1 << 14
#: The count columns summed over the sites.
SUMMED_COLUMNS = ("alt_count", "allele_number", "n_hom_ref", "n_het", "n_hom_alt")
#: Sums of counts run modulo 2^62 (a site's entries must stay below 2^62 / n_sites).
_MODULUS_BITS = 62


def check_secure_counts(n_sites: int, params: SecAggParams) -> None:
    """Refuse a secure sum of fewer than ``secagg.min_clients`` sites.

    Raises
    ------
    ConfigError
        Naming the number of sites and the minimum.
    """
    if n_sites < params.min_clients:
        raise ConfigError(
            f"study.count_aggregation: secure needs at least secagg.min_clients="
            f"{params.min_clients} sites, got {n_sites} (with fewer, the total minus its own "
            "counts tells a site the others'); set study.count_aggregation: plain to release "
            "each site's counts"
        )


def hwe_failing(counts: Mapping[str, Any], hwe_p_min: float) -> np.ndarray:
    """Which variants fail HWE in the site's own controls (p < ``hwe_p_min``; 0 disables).

    Parameters
    ----------
    counts : mapping
        The site's genotype counts among its controls (``n_hom_ref``, ``n_het``, ``n_hom_alt``).
    hwe_p_min : float

    Returns
    -------
    array of bool, shape (n_variants,)
    """
    table = pd.DataFrame({c: np.asarray(counts[c]) for c in ("n_hom_ref", "n_het", "n_hom_alt")})
    return site_hwe_p(table) < float(hwe_p_min)


def hold_counts(state: dict, counts: Mapping[str, Any]) -> int:
    """Hold the site's released counts for :func:`sum_counts`; returns the number of variants.

    ``alt_count`` is held as round(2^14 · alt_count), the others as they are (int64).
    """
    encoded = {
        column: np.asarray(counts[column], dtype=np.float64) * (DOSAGE_SCALE if i == 0 else 1)
        for i, column in enumerate(SUMMED_COLUMNS)
    }
    hold(state, HELD, {c: np.rint(v).astype(np.int64) for c, v in encoded.items()})
    return len(encoded["alt_count"])


def sum_counts(
    transport: Transport,
    settings: Mapping[str, Any],
    sites: Sequence[str],
    n_variants: int,
    params: SecAggParams,
    *,
    random_seed: int,
) -> tuple[dict[str, np.ndarray], SumOutcome]:
    """Σ over ``sites`` of their held counts, by a secure sum.

    Returns
    -------
    totals : dict of str to array
        :data:`SUMMED_COLUMNS` summed (``alt_count`` float64, the others int64) over the sites
        whose vectors arrived (``outcome.sums["all"].included``).
    outcome : SumOutcome
        Who is in the sum, who dropped out and why.
    """
    check_secure_counts(len(sites), params)
    outcome = secure_sum(
        transport,
        settings,
        {"all": SumGroup(tuple(sites), SUMMED_COLUMNS)},
        held=HELD,
        shapes={c: (int(n_variants),) for c in SUMMED_COLUMNS},
        params=dataclasses.replace(params, modulus_bits=_MODULUS_BITS),
        random_seed=random_seed,
        label="study counts",
    )
    total = outcome.sums["all"].total
    totals = {c: np.asarray(total[c], dtype=np.int64) for c in SUMMED_COLUMNS}
    totals["alt_count"] = totals["alt_count"] / DOSAGE_SCALE
    return totals, outcome
