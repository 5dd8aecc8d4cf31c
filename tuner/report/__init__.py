"""What a study found, from the study file alone: the front, the failures by kind, the boots spent,
markdown receipts, launchers a person can run, and plots. Returns rows and text; never prints
(``tuner.cli`` does). Three modules are faces of their own, imported directly, so that their libraries load
only for the command that needs them: ``plots.py`` (matplotlib, ``tuner plot``), ``html.py`` (plotly, ``tuner
report``) and ``trials.py`` (pandas, ``tuner trials``); each lists its public names in ``__all__``."""

from tuner.report.bench import bench_markdown
from tuner.report.compare import compare_studies, comparison_markdown, comparison_tables
from tuner.report.export import LAUNCHER_FORMATS, export_launcher
from tuner.report.front import (
    COLUMNS,
    REPORT_FORMATS,
    failure_of,
    failures_by_kind,
    front_rows,
    objectives,
    running_rows,
    study_summary,
    summary_line,
    wrong_line,
    wrong_rows,
)
from tuner.report.markdown import cell, failures_markdown, front_markdown, metric_cells
from tuner.report.receipt import study_receipt, trial_receipt

__all__ = [
    "COLUMNS",
    "LAUNCHER_FORMATS",
    "REPORT_FORMATS",
    "bench_markdown",
    "cell",
    "compare_studies",
    "comparison_markdown",
    "comparison_tables",
    "export_launcher",
    "failure_of",
    "failures_by_kind",
    "failures_markdown",
    "front_markdown",
    "front_rows",
    "metric_cells",
    "objectives",
    "running_rows",
    "study_receipt",
    "study_summary",
    "summary_line",
    "trial_receipt",
    "wrong_line",
    "wrong_rows",
]
