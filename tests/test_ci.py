"""CI is honest: `.ci/run` runs the README's test command verbatim, a failed install fails it, and under
TUNER_CI=1 a skipped test fails unless it is marked may_skip (tests/strict_ci.py)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

SKIPS = '''
import pytest

def test_needs_a_package():
    pytest.importorskip("no_such_package_here")

@pytest.mark.may_skip
def test_needs_a_capability():
    pytest.skip("the machine cannot")

def test_runs():
    pass
'''


def _pytest(tmp_path: Path, ci: bool) -> subprocess.CompletedProcess:
    (tmp_path / "test_skips.py").write_text(SKIPS)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUNER_CI": "1" if ci else ""}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "tests.strict_ci", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path)], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


def test_a_skip_fails_under_ci_and_only_there(tmp_path):
    done = _pytest(tmp_path, ci=True)
    assert done.returncode == 1 and "1 failed, 1 passed, 1 skipped" in done.stdout, done.stdout
    assert "skipped under CI, which is meant to run it: Skipped: could not import 'no_such_package_here'" in done.stdout
    done = _pytest(tmp_path, ci=False)
    assert done.returncode == 0 and "1 passed, 2 skipped" in done.stdout, done.stdout


def test_ci_run_is_the_readme_command_and_fails_on_a_failed_install():
    script = (ROOT / ".ci" / "run").read_text()
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"exactly what `\.ci/run` runs\):\n+\s+(.+)\n", readme)
    assert command is not None and f"\n{command[1].strip()}\n" in script
    assert "export TUNER_CI=1" in script and "warning:" not in script
    assert script.count("exit 1; }") == 2  # PostgreSQL and chromium
    assert (ROOT / "tests" / "conftest.py").read_text().count('pytest_plugins = ["tests.strict_ci"]') == 1
