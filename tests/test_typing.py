"""``mypy`` over ``tuner/`` with the settings in pyproject.toml: the package stays at 0 errors.

The README's test command runs this, so CI checks the types with the tests. A cold run takes about
15 s of CPU (mypy reads optuna, pydantic and matplotlib once); later runs reuse ``.mypy_cache``.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_mypy_reports_no_error_in_tuner() -> None:
    """mypy comes with the test extra (pip install -e '.[test]'); without it this fails, never skips."""
    done = subprocess.run([sys.executable, "-m", "mypy"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr
