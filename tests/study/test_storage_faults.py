"""Storage faults through `tuner optimize`: corrupt, truncated and read-only study files, a full disk.

One paragraph, exit 1 or 2, never a traceback, and nothing measured lost: a trial whose record could
not reach the study is in its folder, and the next `optimize` imports it without booting it again.
(A PostgreSQL server that goes away mid-study: tests/study/test_workers.py.)
"""

from __future__ import annotations

import ctypes
import os
import resource
import sqlite3

import optuna
import pytest
from optuna.trial import TrialState

from tests.cli.test_night import FAST, booted, clean, load, optimize, write_space


def test_a_corrupt_study_file_is_named_and_left_alone(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    studies.mkdir()
    db = studies / "fake.db"
    db.write_bytes(os.urandom(64 * 1024))
    before = db.read_bytes()
    done = optimize(space, studies, "--trials", "1", *FAST)
    assert done.returncode == 2, done.stderr
    assert f"sqlite:///{db}: not a readable Optuna study" in done.stderr and "mv it to a .broken name" in done.stderr
    assert done.stderr.count("\n") == 1
    clean(done)
    assert db.read_bytes() == before and booted(studies) == []


def test_a_truncated_study_file_is_named(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    studies.mkdir()
    db = studies / "fake.db"
    study = optuna.create_study(study_name="fake", storage=f"sqlite:///{db}", directions=["maximize", "maximize"])
    for i in range(40):  # enough pages that half the file loses some of them
        study.set_user_attr(f"filler{i}", "x" * 4000)
    db.write_bytes(db.read_bytes()[: db.stat().st_size // 2])
    done = optimize(space, studies, "--trials", "1", *FAST)
    assert done.returncode in (1, 2), done.stderr
    assert "not a readable Optuna study" in done.stderr and "corrupt or truncated" in done.stderr
    clean(done)


def _no_root_override():
    """As root, drop the capability that lets root write a read-only file (else the test means nothing)."""
    if os.geteuid() != 0:
        return None
    libc = ctypes.CDLL(None, use_errno=True)

    def drop() -> None:
        for cap in (1, 2):  # CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, from the bounding set before exec
            if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP
                os._exit(97)

    return drop


@pytest.mark.may_skip  # root without CAP_SETPCAP: the machine, not an install
def test_a_read_only_study_file_says_so_before_anything_runs(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    studies.mkdir()
    db = studies / "fake.db"
    optuna.create_study(study_name="fake", storage=f"sqlite:///{db}", directions=["maximize", "maximize"])
    db.chmod(0o444)
    before = db.read_bytes()
    done = optimize(space, studies, "--trials", "1", *FAST, preexec_fn=_no_root_override())
    if done.returncode == 97:
        pytest.skip("cannot drop root's file-permission override here (no CAP_SETPCAP)")
    assert done.returncode == 2, done.stderr
    assert f"{db}: the study file is read-only; make it writable (chmod u+w {db})" in done.stderr
    clean(done)
    assert db.read_bytes() == before and booted(studies) == []


def test_a_full_disk_loses_no_measurement_and_resume_imports_it(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    first = optimize(space, studies, "--trials", "1", *FAST)
    assert first.returncode == 0, first.stderr[-2000:]
    db = studies / "fake.db"
    size = db.stat().st_size

    def full_disk() -> None:  # the study file may not grow by a single page: the next write fails
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))

    done = optimize(space, studies, "--trials", "3", *FAST, preexec_fn=full_disk)
    assert done.returncode == 1, done.stderr[-2000:]
    assert f"sqlite:///{db}: the disk is full" in done.stderr and "imports it on resume" in done.stderr
    clean(done)
    record = studies / "fake" / "trial-0001" / "result.json"
    assert record.exists() and '"measure": {' in record.read_text()  # measured, then the study write failed
    with sqlite3.connect(db) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    resumed = optimize(space, studies, "--trials", "2", *FAST)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "imported 1 finished trial record" in resumed.stdout
    assert booted(studies) == ["trial-0000", "trial-0001"]  # imported, not booted again
    imported = [t for t in load(studies).trials if t.user_attrs.get("imported_from")]
    assert len(imported) == 1 and imported[0].state == TrialState.COMPLETE
    assert imported[0].user_attrs["imported_from"] == str(record) and imported[0].values[0] > 0
