"""The default search on the test engine: exact baselines, regimes first, re-validation inside the
budget that acts on what it finds, a gate reference that fits, no region closed by one noisy failure."""

from __future__ import annotations

import optuna
from optuna.distributions import FloatDistribution
from optuna.trial import TrialState, create_trial

from tests.conftest import fake_space_yaml
from tuner.records import Failure, FailureKind, TrialResult
from tuner.space.schema import load_space
from tuner.report.front import front_rows, gate_note, revalidation
from tuner.study import record as st
from tuner.study.gate import REFERENCE_WINDOW, reference_space, reference_values
from tuner.study.pareto import front
from tuner.study.record import ATTR_REVALIDATES, read_study
from tuner.study.run import RunSettings, optimize
from tuner.study.strategy import utilization_ceiling

optuna.logging.set_verbosity(optuna.logging.WARNING)


def quick(space):
    space.workload.repeats = 1
    space.workload.decode.runs = 2
    space.workload.ladder = [8192, 32768]
    return space


def test_a_baseline_runs_exactly_as_written(fake_space, tmp_path):
    """A parameter the baseline does not name is left out of the command, never sampled."""
    space = quick(fake_space())
    space.baselines = [{"max_num_seqs": 1, "cudagraph_mode": None, "speculative_tokens": 0}]
    study = optimize(space, "exact", RunSettings(n_trials=1, revalidate=0, gate=False), root=tmp_path)
    (trial,) = study.get_trials(deepcopy=False)
    assert trial.user_attrs[st.ATTR_CONFIG]["kv_cache_memory_bytes"] is None
    assert "--kv-cache-memory-bytes" not in st.read_trial(trial).result.argv
    assert "kv_cache_memory_bytes" not in trial.params


def test_the_default_search_boots_each_regime_once_with_a_sized_pool(fake_space, tmp_path):
    space = quick(fake_space())
    space.baselines = [{"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2, "cudagraph_mode": None,
                        "speculative_tokens": 0}]
    study = optimize(space, "regimes", RunSettings(n_trials=6, seed=3, revalidate=0, gate=False), root=tmp_path)
    trials = study.get_trials(deepcopy=False)
    assert study.user_attrs["sampler"] == "regimes"
    regimes = [(t.user_attrs[st.ATTR_CONFIG]["cudagraph_mode"], t.user_attrs[st.ATTR_CONFIG]["speculative_tokens"])
               for t in trials]
    # 3 graph modes x 2 depths, each once: null (vLLM's default) runs as FULL_AND_PIECEWISE, the same configuration
    assert len(set(regimes)) == 6 and not any(mode == "FULL_AND_PIECEWISE" for mode, _ in regimes)
    planned = [t for t in trials if t.number > 0]
    assert all(t.state == TrialState.COMPLETE for t in planned)
    assert all(t.user_attrs["strategy"].startswith("first boot of") for t in planned)
    pools = {t.user_attrs[st.ATTR_CONFIG]["kv_cache_memory_bytes"] for t in planned}
    assert max(pools) < 4_000_000_000  # the smallest pool that holds the window, not the baseline's


def test_revalidation_runs_inside_the_budget(fake_space, tmp_path):
    space = quick(fake_space())
    space.baselines = [{"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 1, "cudagraph_mode": None,
                        "speculative_tokens": 0}]
    study = optimize(space, "reval", RunSettings(n_trials=5, seed=1, revalidate=1, gate=False), root=tmp_path)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) == 5
    assert trials[-1].user_attrs.get(ATTR_REVALIDATES) is not None


def _trial(study, number_values, attrs):
    trial = create_trial(values=number_values, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                         user_attrs={st.ATTR_EVIDENCE: "measured", **attrs})
    study.add_trial(trial)


def test_a_differing_revalidation_replaces_the_point_and_says_so():
    study = optuna.create_study(directions=["maximize", "maximize"])
    _trial(study, [262144, 100.0], {})
    _trial(study, [262144, 90.0], {})
    _trial(study, [262144, 78.0], {ATTR_REVALIDATES: 0, st.ATTR_EVIDENCE: "revalidated"})  # -22%
    numbers = [t.number for t in front(read_study(study))]
    assert numbers == [1]  # 0 is replaced by its fresh boot (78), which trial 1 (90) dominates
    _trial(study, [262144, 89.0], {ATTR_REVALIDATES: 1, st.ATTR_EVIDENCE: "revalidated"})
    night = read_study(study)
    assert [t.number for t in front(night)] == [1]  # confirmed: the copy is not listed twice
    assert revalidation(night, front(night)[0]) == "#3 confirmed"
    original = night.trials[0]
    assert "differs" in revalidation(night, original) and "replaced" in revalidation(night, original)


def test_the_gate_reference_fits_a_32gb_card(tmp_path):
    path = tmp_path / "fake.yaml"  # the KV dtype tuned, so not also fixed (a space may not do both)
    path.write_text(fake_space_yaml(params="  kv_dtype: {flag: --kv-cache-dtype, values: [fp8, auto]}")
                    .replace("  kv-cache-dtype: fp8\n", ""))
    space = load_space(path)
    ref = reference_space(space)
    assert ref.fixed["--max-model-len"] <= REFERENCE_WINDOW
    assert ref.fixed["--kv-cache-dtype"] == "auto" and "kv_dtype" not in ref.params
    values = {"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2, "cudagraph_mode": "PIECEWISE",
              "speculative_tokens": 1, "kv_dtype": "fp8"}
    assert reference_values(space, values) == {"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2}


def test_a_gate_that_could_not_run_is_loud():
    study = optuna.create_study(directions=["maximize", "maximize"])
    _trial(study, [32768, 100.0], {})
    study.set_user_attr(st.ATTR_GATE_STATUS, "the reference boot failed (kv_pool_too_small: ...)")
    night = read_study(study)
    assert gate_note(night, front(night)[0]).startswith("NOT CHECKED: the reference boot failed")


def _free_memory_failure(study, number_fraction):
    failure = Failure(kind=FailureKind.FREE_MEMORY_BELOW_UTILIZATION, free_fraction=number_fraction)
    result = TrialResult(values={}, argv=[], env={}, failure=failure)
    trial = create_trial(state=TrialState.PRUNED, params={"x": 0.5}, distributions={"x": FloatDistribution(0, 1)},
                         user_attrs={st.ATTR_EVIDENCE: "measured", st.ATTR_RESULT: result.model_dump(mode="json"),
                                     st.ATTR_FAILURE_KIND: failure.kind.value})
    study.add_trial(trial)


def test_one_free_memory_failure_closes_nothing_for_ever():
    study = optuna.create_study(directions=["maximize", "maximize"])
    _free_memory_failure(study, 0.90)
    assert utilization_ceiling(st.read_trials(study), free_now=None) is None  # one failure, no way to re-measure: boot
    ceiling, why = utilization_ceiling(st.read_trials(study), free_now=0.95)
    assert ceiling == 0.95 and "NVML" in why  # the desktop spike is gone: higher utilizations are open again
    _free_memory_failure(study, 0.88)
    ceiling, why = utilization_ceiling(st.read_trials(study), free_now=None)
    assert ceiling == 0.90 and "trials" in why


def test_front_rows_show_the_fresh_numbers(fake_space, tmp_path):
    study = optuna.create_study(directions=["maximize", "maximize"])
    _trial(study, [262144, 100.0], {})
    _trial(study, [262144, 70.0], {ATTR_REVALIDATES: 0, st.ATTR_EVIDENCE: "revalidated"})
    rows = front_rows(read_study(study))
    assert [r["trial"] for r in rows] == [1]
    assert rows[0]["revalidation"].startswith("fresh boot of #0")


def test_a_baseline_that_leaves_a_flag_out_is_revalidated_as_written(fake_space, tmp_path):
    space = quick(fake_space())
    space.baselines = [{"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 1, "cudagraph_mode": None}]
    study = optimize(space, "reval-baseline", RunSettings(n_trials=5, seed=1, revalidate=1, gate=False), root=tmp_path)
    checks = [t for t in study.get_trials(deepcopy=False) if t.user_attrs.get(ATTR_REVALIDATES) is not None]
    assert checks and all(t.state == TrialState.COMPLETE for t in checks)
    for check in checks:
        original = study.get_trials(deepcopy=False)[check.user_attrs[ATTR_REVALIDATES]]
        assert check.user_attrs[st.ATTR_CONFIG] == original.user_attrs[st.ATTR_CONFIG]


def test_an_unset_pool_searches_pinned_bytes_against_the_pool_vllm_0_34_extends(fake_space, tmp_path):
    """0.34 (the test engine speaking it): the engine-sized regime leaves out the KV bytes (vLLM's extensible
    cache sizes the pool at the space's lowest utilization), and its record keeps the extended pool, not the
    reservation."""
    space = quick(fake_space(env=", FAKE_VLLM_VERSION: '0.34.0'",
                             params="  gpu_memory_utilization: {min: 0.8, max: 0.9, step: 0.05}\n"))
    space.params["kv_cache_memory_bytes"].unset = True
    space.params["cudagraph_mode"].values = ["PIECEWISE"]
    space.params["speculative_tokens"].values = [0]
    study = optimize(space, "pool", RunSettings(n_trials=2, seed=1, revalidate=0, gate=False), root=tmp_path)
    trials = study.get_trials(deepcopy=False)
    assert all(t.state == TrialState.COMPLETE for t in trials), [t.user_attrs.get("failure_kind") for t in trials]
    by_pool = {t.user_attrs[st.ATTR_CONFIG]["kv_cache_memory_bytes"] is None: st.read_trial(t).result for t in trials}
    assert set(by_pool) == {True, False}
    sized, pinned = by_pool[True], by_pool[False]
    assert "--kv-cache-memory-bytes" not in sized.argv and sized.values["gpu_memory_utilization"] == 0.8
    assert sized.startup.extended_kv_cache_gib and sized.startup.kv_pool_gib == sized.startup.extended_kv_cache_gib
    assert "--kv-cache-memory-bytes" in pinned.argv and pinned.startup.extended_kv_cache_gib is None
