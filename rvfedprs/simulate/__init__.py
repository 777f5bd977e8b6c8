"""Cohort and phenotype simulation (design §2).

msprime coalescent or Balding–Nichols genotypes, a liability-threshold phenotype with an
α-model architecture (shared and private rare variants, a cross-group effect correlation matrix
with per-group signs and nulls, rare causal variants concentrated in genes, founder enrichment,
imperfect PGS portability, an architecture partition apart from ancestry), and a
clumping + thresholding PGS from a discovery GWAS, written in the CINECA layout. Named
scenarios of the scenario map are in ``scenarios.yaml``.

The names below are imported on first use, so that ``rvfedprs`` commands start fast.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "simulate_cohort",
    "simulate_scenario",
    "scenario_names",
    "scenario_info",
    "simulate_phenotype",
    "run_simulation",
    "draw_architecture",
    "SimulatedCohort",
    "Architecture",
    "CausalArchitecture",
    "PhenotypeResult",
    "genetic_value",
]

_HOME = {
    "simulate_cohort": "cohort",
    "run_simulation": "cohort",
    "draw_architecture": "architecture",
    "SimulatedCohort": "cohort",
    "Architecture": "architecture",
    "simulate_scenario": "scenarios",
    "scenario_names": "scenarios",
    "scenario_info": "scenarios",
    "simulate_phenotype": "phenotype",
    "CausalArchitecture": "phenotype",
    "PhenotypeResult": "phenotype",
    "genetic_value": "phenotype",
}


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'rvfedprs.simulate' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rvfedprs.simulate.{_HOME[name]}"), name)


def __dir__() -> list[str]:
    return sorted(__all__)
