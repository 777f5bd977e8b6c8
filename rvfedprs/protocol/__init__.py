"""The benchmark protocol of SPEC §12: equal-budget tuning on validation, references, analysis.

- :mod:`~rvfedprs.protocol.grids` — every method's documented grid; the same number of
  configurations for all;
- :mod:`~rvfedprs.protocol.tuning` — train / validation / test splits, early stopping,
  recorded and resumable trials, the choice on validation AUC;
- :mod:`~rvfedprs.protocol.references` — the L2 logistic regression, the PRS-only floor and
  the oracle ceiling (the simulator's genetic values);
- :mod:`~rvfedprs.protocol.outcomes` — test-split AUCs, pooled and per true cluster, with
  DeLong intervals;
- :mod:`~rvfedprs.protocol.analysis` — within-cohort paired differences over cohorts and the
  forest plot.

Nothing here that chooses reads the test split or the truth: :func:`three_way_split` takes the
test split out of the federation that tuning sees.
"""

from rvfedprs.protocol.grids import LOGISTIC, TUNED_AS, configurations
from rvfedprs.protocol.tuning import ProtocolData, Trial, Tuned, run_trial, three_way_split, tune

__all__ = [
    "LOGISTIC",
    "TUNED_AS",
    "ProtocolData",
    "Trial",
    "Tuned",
    "configurations",
    "run_trial",
    "three_way_split",
    "tune",
]
