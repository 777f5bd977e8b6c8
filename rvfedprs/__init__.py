"""rvfedprs: federated polygenic risk scores that keep rare-variant signals alive.

The names a researcher needs, importable from here (each imported on first use, so that
``import rvfedprs`` stays light):

- :func:`open_genotypes` — VCF/BCF, PLINK1, PLINK2 or BGEN files read in chunks;
- :func:`simulate_cohort`, :func:`simulate_phenotype` — a federated cohort, or a phenotype on
  any genotype matrix;
- :func:`federation_from_arrays` — a federation from dosages, a phenotype of either kind
  (binary or quantitative), site labels (and a PRS, covariates) held in memory;
- :func:`load_config` — a validated configuration (schema defaults < preset < file < overrides);
- :func:`train` — the run a configuration describes (on its ``train.data`` folder, or on a
  federation from arrays: ``data=``), written to a folder (``metrics.json``, checkpoints,
  provenance);
- :func:`evaluate_checkpoint` — a saved run's metrics recomputed from one of its checkpoints;
- :func:`load_federation` — a prepared federation folder as a :class:`Federation` of
  per-site :class:`ClientData` splits;
- :func:`associate` — the federated rare-variant association a configuration describes.

The names a researcher extends, each with its one registration:

- :class:`Strategy` (and :class:`GlobalModelStrategy`, the one-global-model base) with
  :func:`register_strategy` — the name is then valid in every configuration;
- :class:`Task` with :func:`register_task` — what the engines run;
- the outcome kinds :class:`Binary` and :class:`Quantitative` (base :class:`Outcome`) with
  :func:`register_outcome`;
- :func:`register_distance` — a client distance or similarity method (a decorator);
- :func:`register_genotype_format` — a genotype file format read by its own reader.

Module docstrings cite the design decisions as "design §N": docs/ARCHITECTURE.md, section 10.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name → the module that defines it (``"module:attribute"`` where the names differ).
_HOME = {
    "open_genotypes": "rvfedprs.genotypes",
    "simulate_cohort": "rvfedprs.simulate",
    "simulate_phenotype": "rvfedprs.simulate",
    "federation_from_arrays": "rvfedprs.arrays",
    "load_config": "rvfedprs.config",
    "train": "rvfedprs.run",
    "evaluate_checkpoint": "rvfedprs.run",
    "load_federation": "rvfedprs.genomic.data",
    "associate": "rvfedprs.association.runner",
    # what a researcher extends
    "Federation": "rvfedprs.genomic.data",
    "ClientData": "rvfedprs.training.data",
    "Strategy": "rvfedprs.strategies",
    "GlobalModelStrategy": "rvfedprs.strategies",
    "register_strategy": "rvfedprs.strategies",
    "Task": "rvfedprs.federation.task",
    "register_task": "rvfedprs.tasks",
    "Outcome": "rvfedprs.outcomes",
    "Binary": "rvfedprs.outcomes",
    "Quantitative": "rvfedprs.outcomes",
    "register_outcome": "rvfedprs.outcomes",
    "register_distance": "rvfedprs.similarity:register",
    "register_genotype_format": "rvfedprs.genotypes.formats",
}

__all__ = ["__version__", *_HOME]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'rvfedprs' has no attribute {name!r}")
    module, _, attribute = _HOME[name].partition(":")
    return getattr(importlib.import_module(module), attribute or name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
