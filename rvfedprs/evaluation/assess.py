"""How good a polygenic score is: the ``rvfedprs assess`` API, from its three modules.

- :mod:`.assess_inputs`: reading and checking the score, phenotype, covariate and samples
  tables (:class:`AssessData`, :func:`load_assess_data`);
- :mod:`.assess_statistics`: AUC, odds ratios and incremental R² per site and pooled, exact or
  from the sites' sums and histograms (:func:`score_metrics`, :func:`assess_scores`);
- :mod:`.assess_report`: the readable table, the figures and ``assess.tsv`` / ``.md`` /
  ``.html`` (:func:`write_assessment`), and the whole run (:func:`run_assessment`).

Every public name is importable from here.
"""

from __future__ import annotations

from rvfedprs.evaluation.assess_inputs import ID_COLUMNS, AssessData, load_assess_data
from rvfedprs.evaluation.assess_report import (
    HOW_TO_READ,
    ReportSection,
    png_base64,
    readable_table,
    run_assessment,
    write_assessment,
)
from rvfedprs.evaluation.assess_statistics import (
    POOLED,
    assess_scores,
    histogram_delong_se,
    score_metrics,
)

__all__ = [
    "ID_COLUMNS",
    "POOLED",
    "HOW_TO_READ",
    "AssessData",
    "load_assess_data",
    "score_metrics",
    "assess_scores",
    "histogram_delong_se",
    "readable_table",
    "ReportSection",
    "png_base64",
    "write_assessment",
    "run_assessment",
]
