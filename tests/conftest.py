"""Suite-wide settings: one compute thread per pytest worker.

CI runs ``pytest -n 2`` on two cores. Left alone, torch and the BLAS in every worker (and in the
Flower, Snakemake and simulator processes the tests start, which inherit the environment) each
start one thread per core, so the two workers oversubscribe the machine; a training round then
takes several times longer (BENCHMARKS.md, "Paper scale"). Set before torch or numpy is imported.
"""

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_variable, "1")
