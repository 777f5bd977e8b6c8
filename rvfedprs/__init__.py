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
- :func:`evaluate_checkpoint` — a saved run's metrics recomputed from one of its checkpoints.

Module docstrings cite the design decisions as "design §N": docs/ARCHITECTURE.md, section 10.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

#: Public name → the module that defines it.
_HOME = {
    "open_genotypes": "rvfedprs.genotypes",
    "simulate_cohort": "rvfedprs.simulate",
    "simulate_phenotype": "rvfedprs.simulate",
    "federation_from_arrays": "rvfedprs.arrays",
    "load_config": "rvfedprs.config",
    "train": "rvfedprs.run",
    "evaluate_checkpoint": "rvfedprs.run",
}

__all__ = ["__version__", *_HOME]


def __getattr__(name: str) -> Any:
    if name not in _HOME:
        raise AttributeError(f"module 'rvfedprs' has no attribute {name!r}")
    return getattr(importlib.import_module(_HOME[name]), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
