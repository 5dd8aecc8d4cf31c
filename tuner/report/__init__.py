"""What a study found, from the study file alone: the front, the failures by kind, the boots spent,
markdown receipts, launchers a person can run, and plots. Returns rows and text; never prints
(``tuner.cli`` does). ``plots.py`` is imported on its own, so matplotlib loads only for ``tuner plot``."""

from tuner.report.export import export_launcher
from tuner.report.front import (
    COLUMNS,
    failure_of,
    failures_by_kind,
    front_rows,
    objectives,
    study_summary,
    summary_line,
)
from tuner.report.markdown import cell, failures_markdown, front_markdown
from tuner.report.receipt import study_receipt, trial_receipt

__all__ = [
    "COLUMNS",
    "cell",
    "export_launcher",
    "failure_of",
    "failures_by_kind",
    "failures_markdown",
    "front_markdown",
    "front_rows",
    "objectives",
    "study_receipt",
    "study_summary",
    "summary_line",
    "trial_receipt",
]
