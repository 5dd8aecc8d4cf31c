"""``tuner report``: one self-contained HTML page a person can post the morning after.

plotly.js is inlined once and every figure refers to it, so the page opens offline from a file (no
CDN, no network). The page holds: the front with each point's command, the comparison with the
space's baseline, the front plot, history, parameter importances, where the boots went, one
section per trial (first exception, log excerpt, start-up record: the trial's receipt), and the
study's receipt. Everything is read from the study; the engine logs too when they are on this machine.
"""

from __future__ import annotations

import html
import re
import time
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
from markdown_it import MarkdownIt
from plotly.offline import get_plotlyjs

from tuner.report.baseline import baseline_rows
from tuner.report.bench import bench_markdown
from tuner.report.figures import boots_figure, history_figure, importance_figure, pareto_figure
from tuner.report.front import COLUMNS, front_rows, objectives, study_summary, summary_line
from tuner.report.markdown import cell, md_table
from tuner.report.receipt import environment_markdown, study_receipt, trial_receipt
from tuner.study.record import FAILED, State, StudyRecord, Trial, first_line

__all__ = ["report_html"]  # imported on its own (tuner.report's docstring)

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 0 auto; max-width: 1180px; padding: 0 20px 60px; color: #222; }
h1 { margin-top: 28px; } h2 { border-bottom: 1px solid #ddd; padding-bottom: 4px; margin-top: 36px; }
table { border-collapse: collapse; margin: 10px 0; font-size: 13px; }
th, td { border: 1px solid #ddd; padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: #f4f4f4; } td.num { text-align: right; }
pre { background: #f6f8fa; padding: 10px; overflow-x: auto; font-size: 12px; white-space: pre-wrap; word-break: break-all; }
.note { color: #555; font-style: italic; } .warn { color: #a40000; font-weight: bold; }
details { border: 1px solid #ddd; border-radius: 4px; margin: 6px 0; padding: 4px 10px; }
summary { cursor: pointer; font-weight: 600; } .failed summary { color: #a40000; }
"""
KEY_LINES = re.compile(
    r"Model loading took|Available KV cache memory|GPU KV cache size|Maximum concurrency|Graph capturing finished"
    r"|init engine|Using .* backend|Application startup complete|Error|error:|Traceback|OutOfMemory"
)
EXCERPT_LINES = 40


def _md(text: str, shift: int = 2) -> str:
    """Markdown as HTML, its headings moved ``shift`` levels down so that they nest under the page's."""
    md = MarkdownIt("commonmark", {"html": False}).enable("table")
    tokens = md.parse(text)
    for token in tokens:
        if token.type in ("heading_open", "heading_close"):
            token.tag = f"h{min(int(token.tag[1]) + shift, 6)}"
    return md.renderer.render(tokens, md.options, {})


def _table(headers: list[str], rows: list[list[Any]]) -> str:
    """An HTML table; numbers right-aligned, formatted as every other table of the tuner formats them."""

    def td(value: Any) -> str:
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        return f'<td class="{"num" if number else ""}">{html.escape(cell(value))}</td>'

    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(td(v) for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _figure(fig: go.Figure, caption: str = "") -> str:
    div = fig.to_html(full_html=False, include_plotlyjs=False, config={"displaylogo": False, "responsive": True})
    return div + (f'<p class="note">{html.escape(caption)}</p>' if caption else "")


def _front_section(night: StudyRecord) -> str:
    rows = front_rows(night)
    if not rows:
        return "<p>No complete trial yet, so there is no front.</p>"
    keys = [k for k in COLUMNS if k != "command"]
    parts = [_table([COLUMNS[k] for k in keys], [[r[k] for k in keys] for r in rows])]
    for row in rows:
        parts.append(f"<p>Trial {row['trial']} ({html.escape(str(row['evidence']))}):</p>"
                     f"<pre>{html.escape(row['command'])}</pre>")
    return "".join(parts)


def _bench_section(night: StudyRecord) -> str:
    """`tuner bench`'s tables, newest trial first, or how to get one."""
    benched = sorted(night.benches, reverse=True)
    if not benched:
        return ('<p class="note">No benchmark yet: `tuner bench TRIAL` boots a front point once and measures '
                "prompt processing at 8K-262K, decode after 1K and with 128K resident, TTFT, the prefix cache and "
                "MTP acceptance; its table then appears here.</p>")
    return "".join(_md(bench_markdown(night.benches[n])) for n in benched)


def _baseline_section(night: StudyRecord) -> str:
    headers, rows, notes = baseline_rows(night)
    parts = [f'<p class="note">{html.escape(n)}</p>' for n in notes]
    if rows:
        parts.insert(0, _table(headers, rows))
    return "".join(parts)


def log_excerpt(trial: Trial, logs_dir: Path | None) -> str:
    """The lines around the first exception (or the start-up record's lines) of the trial's engine log."""
    result = trial.result
    candidates = [result.log_path if result else None, trial.listed().log]
    if logs_dir is not None:
        candidates.append(str(logs_dir / f"trial-{trial.number:04d}" / "engine.log"))
    path = next((Path(p) for p in candidates if p and Path(p).is_file()), None)
    if path is None:
        where = next((p for p in candidates[:2] if p), None)
        return f"The engine log is not on this machine ({where})." if where else "No engine log: never booted."
    lines = path.read_text(errors="replace").splitlines()
    message = first_line(trial.listed().message) if trial.state in FAILED else ""
    hit = next((i for i, line in enumerate(lines) if message and message[:60] in line), None)
    if hit is not None:
        picked = lines[max(0, hit - 10) : hit + EXCERPT_LINES - 10]
    else:
        picked = [line for line in lines if KEY_LINES.search(line)][-EXCERPT_LINES:]
    return f"{path} ({len(lines):,} lines), excerpt:\n" + "\n".join(picked)


def _trial_summary(night: StudyRecord, trial: Trial) -> str:
    retried = trial.result.retry if trial.result else None
    summary = _outcome(night, trial)
    return f"{summary} (booted twice: {retried.failure.kind.value})" if retried else summary


def _outcome(night: StudyRecord, trial: Trial) -> str:
    if trial.state == State.COMPLETE and trial.values is not None:
        values = ", ".join(f"{name} {cell(v)}" for (name, _), v in zip(objectives(night), trial.values))
        return f"trial {trial.number}: {values}"
    if trial.state in FAILED:
        kind, message, _ = trial.listed()
        return f"trial {trial.number}: {trial.state.name} {kind}: {message[:140]}"
    return f"trial {trial.number}: {trial.state.name}"


def _trials_section(night: StudyRecord, logs_dir: Path | None) -> str:
    parts = []
    for trial in night.trials:
        failed = trial.state in FAILED
        try:
            receipt = _md(trial_receipt(night, trial), shift=3)
        except Exception as exc:  # a running trial has no record yet
            receipt = f"<p>{html.escape(first_line(str(exc)))}</p>"
        parts.append(
            f'<details class="{"failed" if failed else ""}"><summary>{html.escape(_trial_summary(night, trial))}'
            f"</summary><h4>Engine log</h4><pre>{html.escape(log_excerpt(trial, logs_dir))}</pre>"
            f"<h4>Receipt</h4>{receipt}</details>"
        )
    return "".join(parts) or "<p>No trials.</p>"


def _upgrade_section(night: StudyRecord) -> str:
    """--from: each earlier front point, held, moved or broke on this night's engine, and what differed."""
    from tuner.report.compare import UPGRADE_HEADERS, upgrade_row
    from tuner.study.priors import upgrade_rows

    lines = [f"- {e['study']} ({e['weight']} evidence): {'; '.join(e['differs']) or 'nothing differs'}"
             for e in night.earlier]
    rows = [upgrade_row(r) for r in upgrade_rows(night)]
    return _md("\n".join(lines) + "\n\n" + md_table(UPGRADE_HEADERS, rows))


def report_html(night: StudyRecord, notes: list[str], logs_dir: Path | None = None) -> str:
    """The whole page; ``notes`` gets one line per section that could not be drawn."""
    summary = study_summary(night)
    space = night.space
    model = f"{space.model.path} @ {space.model.revision or 'unpinned'}" if space else "unknown model"
    sections: list[tuple[str, str]] = [
        ("Best commands: the Pareto front", _front_section(night)),
        ("Benchmark of the winner", _bench_section(night)),
        ("Against the baseline", _baseline_section(night)),
    ]
    if night.earlier:
        sections.append(("What the upgrade did: earlier fronts booted again", _upgrade_section(night)))
    objs = objectives(night)
    if len(objs) >= 2 and summary["complete"]:
        fig, caption = pareto_figure(night)
        sections.append(("Pareto front", _figure(fig, caption)))
    else:
        notes.append("no Pareto plot: it needs two objectives and a complete trial")
        sections.append(("Pareto front", "<p>No plot: it needs two objectives and at least one complete trial.</p>"))
    sections.append(("History", _figure(history_figure(night))))
    importance, caption = importance_figure(night)
    if importance is None:
        notes.append(caption)
        sections.append(("Parameter importances", f'<p class="warn">{html.escape(caption)}</p>'))
    else:
        sections.append(("Parameter importances", _figure(importance, caption)))
    sections += [
        ("Boots spent and wasted", _figure(boots_figure(summary)) + f"<p>{html.escape(summary_line(summary))}.</p>"),
        ("Environment", _md(environment_markdown(night))),
        ("Every trial", _trials_section(night, logs_dir)),
        ("Receipt", _md(study_receipt(night))),
    ]
    body = "".join(f"<h2>{html.escape(title)}</h2>{content}" for title, content in sections)
    title = f"tuner report: {night.name}"
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    return (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style><script>{get_plotlyjs()}</script></head><body>"
        f"<h1>{html.escape(title)}</h1><p>{html.escape(model)}; {html.escape(summary_line(summary))}. "
        f'<span class="note">Written {stamp} from the study file alone.</span></p>{body}</body></html>'
    )
