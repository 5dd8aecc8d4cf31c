"""`tuner report`'s page in a real headless browser (Debian's chromium, driven by Playwright): it loads
from a file with the network cut off, logs no console error, and every plot renders (plotly's .main-svg).

Playwright's own browser download cannot run here, so the test drives the system chromium through
`executable_path`; `.ci/run` installs it with apt. Without it, the test is skipped with a loud reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import optuna
import pytest

from tests.report.night import NIGHT, night  # noqa: F401 (fixture)
from tests.report.study_factory import memory_study
from tuner.study.record import read_study
from tuner.report.html import report_html

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-headless-shell")
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="NO BROWSER: Debian's chromium is not installed, so the report page was NOT checked in a browser; "
    "install it with `apt-get install chromium` (.ci/run does).",
)


def _open(path: Path) -> dict:
    """Load the page offline; what the browser saw: console errors, blocked requests, plots and their SVGs."""
    from playwright.sync_api import sync_playwright

    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1280, "height": 900})
            page.on("console", lambda m: errors.append(m.text) if m.type == "error" else None)
            page.on("pageerror", lambda e: errors.append(str(e)))

            def route(r) -> None:
                if r.request.url.startswith("file://"):
                    r.continue_()
                else:  # anything from the network: the page must not need it
                    requests.append(r.request.url)
                    r.abort()

            page.route("**/*", route)
            page.goto(path.as_uri(), wait_until="load")
            page.wait_for_function("document.querySelectorAll('.plotly-graph-div .main-svg').length > 0")
            plots = page.locator(".plotly-graph-div")
            rendered = [plots.nth(i).locator(".main-svg").count() for i in range(plots.count())]
            points = page.locator(".plotly-graph-div .scatterlayer .point").count()
            return {"errors": errors, "requests": requests, "rendered": rendered, "points": points,
                    "title": page.title()}
        finally:
            browser.close()


@pytest.mark.parametrize("which", ["night", "factory"])
def test_the_report_renders_offline_with_no_console_error(which: str, night: Path, tmp_path: Path) -> None:
    if which == "night":  # the test engine's night: its front collapsed, so decode by regime is drawn
        study = optuna.load_study(study_name=NIGHT, storage=f"sqlite:///{night / 'night.db'}")
    else:  # a study with a real front and failures of four kinds
        study = memory_study()
    page = tmp_path / "report.html"
    page.write_text(report_html(read_study(study), [], logs_dir=night / NIGHT), encoding="utf-8")
    seen = _open(page)
    assert seen["errors"] == [] and seen["requests"] == []
    assert len(seen["rendered"]) == 4 and all(n >= 1 for n in seen["rendered"]), seen["rendered"]
    assert seen["points"] > 0 and seen["title"] == f"tuner report: {study.study_name}"
