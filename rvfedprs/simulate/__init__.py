"""Cohort and phenotype simulation (SPEC §2).

msprime coalescent or Balding–Nichols genotypes, liability-threshold phenotypes and a discovery
GWAS for the PGS, written in the CINECA layout.
"""

from rvfedprs.simulate.cohort import SimulatedCohort, run_simulation, simulate_cohort
from rvfedprs.simulate.phenotype import (
    CausalArchitecture,
    PhenotypeResult,
    genetic_value,
    simulate_phenotype,
)

__all__ = [
    "simulate_cohort",
    "simulate_phenotype",
    "run_simulation",
    "SimulatedCohort",
    "CausalArchitecture",
    "PhenotypeResult",
    "genetic_value",
]
