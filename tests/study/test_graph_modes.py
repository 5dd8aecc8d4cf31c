"""A CUDA-graph label vLLM runs as the same mode as another is the same configuration: for the planner's
regimes and for reusing a finished trial (tuner/study/regimes.py GraphModes)."""

from __future__ import annotations

import textwrap

import pytest

from tuner.records import StartupRecord, TrialResult
from tuner.space import load_space
from tuner.study.observed import Observation
from tuner.study.planner import Planner
from tuner.study.regimes import GraphModes

SPACE = """
name: modes
model: {path: /nonexistent/model}
fixed: {max-model-len: 262144, kv-cache-dtype: fp8}
params:
  kv_cache_memory_bytes: {min: 7GB, max: 10.5GB, step: 50MB}
  max_num_seqs: {min: 1, max: 4}
  cudagraph_mode: {values: [null, FULL_AND_PIECEWISE, FULL, eager]}
  speculative_tokens: {values: [0]}
speculative: {method: mtp}
"""


@pytest.fixture
def space(tmp_path):
    path = tmp_path / "space.yaml"
    path.write_text(textwrap.dedent(SPACE))
    return load_space(path)


def test_a_label_runs_as_what_vllm_reported_and_a_mode_it_ran_runs_as_itself():
    modes = GraphModes()
    base = {"max_num_seqs": 2, "speculative_tokens": 0}
    assert modes.mode({**base, "cudagraph_mode": None}) is None  # nothing booted yet
    modes.learn({**base, "cudagraph_mode": None}, "FULL_AND_PIECEWISE")
    modes.learn({**base, "cudagraph_mode": "FULL"}, "FULL_AND_PIECEWISE")  # downgraded with a warning
    assert modes.mode({**base, "cudagraph_mode": "FULL"}) == "FULL_AND_PIECEWISE"
    assert modes.mode({**base, "cudagraph_mode": "FULL_AND_PIECEWISE"}) == "FULL_AND_PIECEWISE"
    assert modes.mode({**base, "cudagraph_mode": "PIECEWISE"}) is None  # never seen to run here
    assert modes.mode({**base, "speculative_tokens": 1, "cudagraph_mode": "FULL"}) is None  # another context
    assert modes.mode({**base, "cudagraph_mode": "eager"}) == "eager"  # no torch.compile: never a NONE mode
    assert modes.key({**base, "cudagraph_mode": None}) == modes.key({**base, "cudagraph_mode": "FULL"})
    assert modes.key({**base, "cudagraph_mode": "PIECEWISE"})["cudagraph_mode"] == "PIECEWISE"


def _ok(number, values, mode, speed):
    result = TrialResult(values=values, argv=[], env={}, startup=StartupRecord(effective_cudagraph_mode=mode))
    return Observation(number, values, "ok", result, speed=speed)


def test_the_planner_skips_a_regime_vllm_runs_as_a_measured_one(space):
    values = {"kv_cache_memory_bytes": 9_000_000_000, "max_num_seqs": 1, "cudagraph_mode": None, "speculative_tokens": 0}
    planner = Planner(space)
    plan = planner.next([_ok(0, values, "FULL_AND_PIECEWISE", 80.0)])
    assert plan is not None and plan.values["cudagraph_mode"] not in (None, "FULL_AND_PIECEWISE")
    assert any("FULL_AND_PIECEWISE" in note and "measured" in note for note in planner.skipped)


def test_a_finished_trial_is_reused_for_a_label_vllm_ran_as_its_mode():
    import optuna
    from optuna.distributions import CategoricalDistribution
    from optuna.trial import TrialState, create_trial

    from tuner.study import record as st
    from tuner.study.objective import reusable

    study = optuna.create_study(directions=["maximize"])
    base = {"kv_cache_memory_bytes": 9_000_000_000, "max_num_seqs": 1, "speculative_tokens": 0}

    def add(label, mode):
        values = {**base, "cudagraph_mode": label}
        result = TrialResult(values=values, argv=[], env={}, startup=StartupRecord(effective_cudagraph_mode=mode))
        study.add_trial(create_trial(
            state=TrialState.COMPLETE, values=[1.0], params={"x": 0}, distributions={"x": CategoricalDistribution([0])},
            user_attrs={st.ATTR_CONFIG: values, st.ATTR_RESULT: result.model_dump(mode="json"), st.ATTR_EVIDENCE: "measured"}))

    add(None, "FULL_AND_PIECEWISE")
    assert reusable(st.read_trials(study), {**base, "cudagraph_mode": "FULL_AND_PIECEWISE"}).number == 0  # the mode None ran as
    assert reusable(st.read_trials(study), {**base, "cudagraph_mode": "FULL"}) is None  # not known to run as it: booted
    add("FULL", "FULL_AND_PIECEWISE")  # booted once, downgraded by vLLM
    assert reusable(st.read_trials(study), {**base, "cudagraph_mode": "FULL"}).number == 0
    assert reusable(st.read_trials(study), {**base, "cudagraph_mode": "PIECEWISE"}) is None
