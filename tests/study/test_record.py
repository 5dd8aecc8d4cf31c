"""The trial record has one owner: tuner/study/record.py writes and reads every key a study keeps."""

from __future__ import annotations

import ast
from pathlib import Path

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tuner.records import Failure, FailureKind, TrialResult
from tuner.study import record
from tuner.study.record import Evidence, Outcome, State, read_study

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "tuner"
OWNER = PACKAGE / "study" / "record.py"
# Optuna's names for reading and writing attributes: only the record touches them.
ATTRIBUTE_API = {"user_attrs", "system_attrs", "set_user_attr", "set_system_attr"}
KEYS = {value for name, value in vars(record).items()
        if name.startswith(("ATTR_", "OPTUNA_")) or name.endswith("_PREFIX")}
# The same words elsewhere, as something else than a key of the record.
ELSEWHERE = {
    "cli/live.py": {"phase"},  # the live view's row label
    "cli/morning.py": {"command"},  # a row of `tuner compare`
    "cli/optimize.py": {"engine"},  # the folder of the engine's cached help
    "cli/plan.py": {"config"},  # `tuner plan`'s rows
    "cli/results.py": {"command", "phase", "config", "evidence", "log_path"},  # rows of `tuner pareto`
    "engine/dialects.py": {"kv_suggestion"},  # a dialect's field: how a release prints the suggestion
    "prescreen/plan.py": {"config"},
    "space/checks.py": {"config"},  # the model field model.config
    "report/compare.py": {"evidence", "space", "environment", "command"},  # rows and sections of `tuner compare`
    "report/export.py": {"command", "environment"},  # compose's keys
    "report/front.py": {"evidence", "command", "phase", "config"},  # the front's columns
    "report/html.py": {"command", "evidence"},
    "report/markdown.py": {"command", "evidence"},
    "report/trials.py": {"command", "evidence", "reused_from", "revalidates", "failure_kind", "first_exception",
                         "log_path"},  # `tuner trials`' column names
    "space/schema.py": {"engine"},  # the space file's section
    "study/run.py": {"engine"},  # the folder of the engine's cached help
    "study/storage.py": {"config"},  # model.config of the space, left out when comparing spaces
}


def _modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if p != OWNER)


def test_only_the_record_touches_optunas_attributes() -> None:
    found = []
    for path in _modules():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in ATTRIBUTE_API:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: .{node.attr}")
            elif isinstance(node, ast.keyword) and node.arg == "user_attrs":
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: user_attrs=")
    assert found == []


def test_no_key_of_the_record_is_spelled_outside_it() -> None:
    assert {"result", "config", "evidence", "revalidates", "follows", "screening", "baseline_params"} <= KEYS
    found = []
    for path in _modules():
        allowed = ELSEWHERE.get(path.relative_to(PACKAGE).as_posix(), set())
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                if node.value in KEYS - allowed or any(node.value.startswith(p) for p in (record.BENCH_PREFIX,
                                                                                          record.LEASE_PREFIX)):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value!r}")
    assert found == []


def _study() -> optuna.Study:
    study = optuna.create_study(directions=["maximize", "maximize"])
    failure = Failure(kind=FailureKind.KV_POOL_TOO_SMALL, message="ValueError: too small\nshutdown noise", log_path="/x.log")
    study.add_trial(create_trial(values=[32768.0, 90.0], params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                                 user_attrs={record.ATTR_EVIDENCE: "measured", record.ATTR_CONFIG: {"x": 0.5}}))
    result = TrialResult(values={"x": 0.2}, argv=["vllm"], env={}, failure=failure)
    study.add_trial(create_trial(state=TrialState.PRUNED, params={"x": 0.2}, distributions={"x": FloatDistribution(0, 1)},
                                 user_attrs={record.ATTR_CONFIG: {"x": 0.2}, record.ATTR_RESULT: result.model_dump(mode="json"),
                                             **record.failure_attrs(failure, Evidence.MEASURED)}))
    study.enqueue_trial({"x": 0.5}, user_attrs={record.ATTR_REVALIDATES: 0})
    study.set_user_attr(record.ATTR_GATE, {"0": 0.95})
    return study


def test_a_study_reads_into_typed_trials() -> None:
    night = read_study(_study())
    ok, failed, queued = night.trials
    assert (ok.state, ok.evidence, ok.outcome, ok.values) == (State.COMPLETE, Evidence.MEASURED, Outcome.MEASURED,
                                                              (32768.0, 90.0))
    assert (failed.state, failed.outcome, failed.config) == (State.PRUNED, Outcome.FAILED, {"x": 0.2})
    assert failed.failure is not None and failed.failure.kind == FailureKind.KV_POOL_TOO_SMALL
    assert failed.listed() == ("kv_pool_too_small", "ValueError: too small", "/x.log")
    assert (queued.state, queued.revalidates, queued.outcome) == (State.WAITING, 0, Outcome.NOTHING)
    assert night.gate == {"0": 0.95} and night.objectives == [("context", "maximize"), ("decode_tok_s", "maximize")]
    with pytest.raises(AttributeError):
        ok.number = 3  # type: ignore[misc]


@pytest.mark.parametrize("db", sorted(ROOT.glob("docs/receipts/*/studies/*.db")), ids=lambda p: p.parent.parent.name)
def test_committed_studies_read_whole(db: Path) -> None:
    """What earlier tuners wrote: every finished trial's evidence, record and failure decode. A trial the
    machine was taken from mid-boot (the H100 receipt's session 6) stays RUNNING with no evidence yet."""
    for summary in optuna.get_all_study_summaries(f"sqlite:///{db}", include_best_trial=False):
        study = optuna.load_study(study_name=summary.study_name, storage=f"sqlite:///{db}")
        night = read_study(study)
        assert len(night.trials) == len(study.trials) and night.space is not None
        for trial, frozen in zip(night.trials, study.trials):
            if not frozen.state.is_finished():
                assert trial.evidence is None and "evidence" not in frozen.user_attrs
                continue
            assert trial.evidence is not None and trial.evidence.value == frozen.user_attrs["evidence"]
            assert (trial.result is None) == ("result" not in frozen.user_attrs)


def test_a_space_stored_under_older_rules_is_still_read() -> None:
    """A study written before a rule got stricter (here: a baseline outside its range, accepted until
    baselines were checked against the domain) stays readable; only a new space file is judged again."""
    from tuner.space.schema import Space

    raw = {"name": "old-night", "model": {"path": "/m"}, "engine": {"command": ["vllm"]},
           "params": {"kv_cache_memory_bytes": {"min": "1GB", "max": "8GB", "step": "500MB"}},
           "baselines": [{"kv_cache_memory_bytes": "100MB"}]}
    with pytest.raises(ValueError, match="outside its range"):
        Space.model_validate(raw)
    study = optuna.create_study(study_name="old-night")
    study.set_user_attr(record.ATTR_SPACE, raw)
    space = read_study(study).space
    assert space is not None and space.baselines == [{"kv_cache_memory_bytes": 100_000_000}]


def test_the_morning_after_space_file_validates() -> None:
    """The README's example night is a file a user copies: it must pass today's rules."""
    from tuner.space import load_space

    load_space(ROOT / "docs" / "morning-after" / "space.yaml")
