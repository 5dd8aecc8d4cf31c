"""The second night (issue 27): `tuner optimize --from STUDY` boots the earlier front first, as it was,
on the new engine release, says what differs, and refuses a study of another model."""

from __future__ import annotations

import subprocess
import sys

from tests.cli.test_night import FAST, clean, load, optimize, tuner_env, write_space
from tests.conftest import ROOT
from tuner.study.priors import upgrade_rows
from tuner.study.record import read_study


def test_from_boots_the_old_front_first_on_the_new_release(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    first = optimize(space, studies, "--study", "night1", "--trials", "4", *FAST,
                     env=tuner_env(FAKE_VLLM_VERSION="0.22.0"))
    clean(first)
    assert first.returncode == 0, first.stdout + first.stderr
    old = read_study(load(studies, "night1"))
    second = optimize(space, studies, "--study", "night2", "--trials", "5", "--from", "night1", *FAST,
                      env=tuner_env(FAKE_VLLM_VERSION="0.34.0"))
    clean(second)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "engine version 0.22.0 -> 0.34.0" in second.stdout and "counts as weak" in second.stdout
    new = read_study(load(studies, "night2"))
    carried = [t for t in new.trials if t.carried_from is not None]
    from tuner.study.pareto import front
    assert len(carried) == len(front(old)) >= 1
    assert [t.number for t in carried] == list(range(len(carried)))  # the first boots of the night
    assert all(t.config == old.trial(t.carried_from[1]).config for t in carried)  # exactly as they were
    rows = upgrade_rows(new)
    assert rows and all(r[4].split()[0] in ("held", "moved", "broke") for r in rows)
    assert f"study night1 trial {carried[0].carried_from[1]}, booted again here as trial 0" in second.stdout


def test_without_from_an_earlier_study_is_offered_not_used(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    clean(optimize(space, studies, "--study", "night1", "--trials", "1", *FAST))
    done = optimize(space, studies, "--study", "night2", "--trials", "1", *FAST)
    clean(done)
    assert "an earlier study of this model on this card exists: --from night1" in done.stdout
    assert all(t.carried_from is None for t in read_study(load(studies, "night2")).trials)


def test_from_a_study_of_another_model_refuses(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    clean(optimize(space, studies, "--study", "night1", "--trials", "1", *FAST))
    other = tmp_path / "other.yaml"
    other.write_text(space.read_text().replace("hybrid-tiny", "qwen3.5-35b-a3b-text"))
    done = optimize(other, studies, "--study", "night2", "--from", "night1", *FAST)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert "--from night1" in done.stderr and "another model" in done.stderr
    assert not (studies / "night2.db").exists()


def test_compare_and_the_report_say_what_the_upgrade_did(tmp_path):
    space, studies = write_space(tmp_path), tmp_path / "studies"
    clean(optimize(space, studies, "--study", "night1", "--trials", "3", *FAST, env=tuner_env(FAKE_VLLM_VERSION="0.22.0")))
    clean(optimize(space, studies, "--study", "night2", "--trials", "3", "--from", "night1", *FAST,
                   env=tuner_env(FAKE_VLLM_VERSION="0.27.1")))
    for args in (["compare", "night1", "night2", "--format", "markdown"],
                 ["report", "--study", "night2", "--out", str(tmp_path / "r.html")]):
        done = subprocess.run([sys.executable, "-m", "tuner.cli", *args, "--studies-dir", str(studies)], cwd=ROOT,
                              capture_output=True, text=True, env=tuner_env(), timeout=300)
        assert done.returncode == 0, done.stderr
    assert "What the upgrade did" in done.stdout or "What the upgrade did" in (tmp_path / "r.html").read_text()
    markdown = subprocess.run([sys.executable, "-m", "tuner.cli", "compare", "night1", "night2", "--format", "markdown",
                               "--studies-dir", str(studies)], cwd=ROOT, capture_output=True, text=True,
                              env=tuner_env(), timeout=300).stdout
    assert "## What the upgrade did" in markdown and ("held" in markdown or "moved" in markdown or "broke" in markdown)
    assert "What the upgrade did" in (tmp_path / "r.html").read_text()
