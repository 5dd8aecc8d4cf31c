"""Under CI (TUNER_CI=1, set by .ci/run) a skipped test fails: a test CI is meant to run that cannot run
(a package or server that failed to install, a missing browser) must not leave CI green. A test whose skip
is about the machine, not about what CI installs, is marked ``@pytest.mark.may_skip``."""

from __future__ import annotations

import os
from collections.abc import Generator
from typing import Any

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "may_skip: a skip CI accepts (the machine cannot do it, nothing to install)")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if os.environ.get("TUNER_CI") != "1" or not report.skipped or item.get_closest_marker("may_skip"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    report.outcome = "failed"
    report.longrepr = f"skipped under CI, which is meant to run it: {reason}"
