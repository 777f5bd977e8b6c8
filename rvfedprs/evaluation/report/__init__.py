"""The paper's tables and figures from run folders (design §10): :func:`build_report`.

- :mod:`.runs` — reading run folders (metrics, MIA rows and scores, channel audits, ...);
- :mod:`.tables` — Tables II–V and the headline: mean ± CI over seeds, Markdown and CSV;
- :mod:`.plots` — ROC curves, per-client AUC, Jaccard heat map, MIA ROC, privacy–utility;
- :mod:`.build` — reads the run folders and writes everything.
"""

from rvfedprs.evaluation.report.build import build_report
from rvfedprs.evaluation.report.runs import load_runs
from rvfedprs.evaluation.report.tables import format_ci, mean_ci

__all__ = ["build_report", "load_runs", "format_ci", "mean_ci"]
