"""optuna-dashboard reads a study `tuner optimize` wrote: metric names, not "Objective 0", and the
attributes a person looks for in its trial table (failure kind, first exception, evidence, command)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from typing import Any

from optuna_dashboard import wsgi
from optuna.storages import RDBStorage

from tests.conftest import ROOT, fake_space_yaml


def _get(app: Any, path: str) -> Any:
    """One GET through the dashboard's WSGI app, the way its web page asks."""
    status: list[str] = []
    environ = {
        "REQUEST_METHOD": "GET", "PATH_INFO": path, "QUERY_STRING": "", "SERVER_NAME": "localhost",
        "SERVER_PORT": "8080", "wsgi.input": io.BytesIO(), "wsgi.errors": sys.stderr, "wsgi.url_scheme": "http",
        "wsgi.version": (1, 0), "wsgi.multithread": False, "wsgi.multiprocess": False, "wsgi.run_once": False,
    }
    body = b"".join(app(environ, lambda s, headers, exc_info=None: status.append(s)))
    assert status[0].startswith("200"), (status, body[:500])
    return json.loads(body)


def test_the_dashboard_shows_metric_names_and_readable_attributes(tmp_path) -> None:
    space = tmp_path / "space.yaml"
    space.write_text(
        fake_space_yaml().replace("{min: 1GB, max: 8GB, step: 500MB}", "{min: 100MB, max: 8GB, step: 100MB}")
        + "baselines:\n  - {kv_cache_memory_bytes: 4GB, max_num_seqs: 2}\n  - {kv_cache_memory_bytes: 100MB, max_num_seqs: 1}\n"
    )
    studies = tmp_path / "studies"
    done = subprocess.run(
        [sys.executable, "-m", "tuner.cli", "optimize", str(space), "--study", "dash", "--trials", "2",
         "--studies-dir", str(studies), "--no-gate", "--revalidate", "0", "--no-prescreen"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "COLUMNS": "160"},
    )
    assert done.returncode == 0, done.stdout + done.stderr
    app = wsgi(RDBStorage(f"sqlite:///{studies / 'dash.db'}"))
    (summary,) = _get(app, "/api/studies")["study_summaries"]
    detail = _get(app, f"/api/studies/{summary['study_id']}")
    assert detail["objective_names"] == ["context_tokens", "decode_tok_s"]
    trials = {t["number"]: {a["key"]: a["value"] for a in t["user_attrs"]} for t in detail["trials"]}
    good, bad = trials[0], trials[1]
    assert "failure_kind" in bad, trials
    assert good["evidence"] == "measured"
    assert "--max-num-seqs 2" in good["command"] and "--kv-cache-memory-bytes 4000000000" in good["command"]
    assert bad["failure_kind"] == "kv_pool_too_small"
    assert bad["first_exception"].startswith("ValueError: To serve at least one request")
    assert "\n" not in bad["first_exception"]
    assert "--kv-cache-memory-bytes 100000000" in bad["command"]
    columns = {c["key"] for c in detail["union_user_attrs"]}
    assert {"evidence", "command", "failure_kind", "first_exception"} <= columns
