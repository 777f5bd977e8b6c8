"""Human-readable reports of pipeline outputs (figures and an HTML page)."""

from rvfedprs.reporting.data_report import write_data_report

__all__ = ["write_data_report"]
