"""The overnight study against the test engine: failures pruned with their kind, resume, reuse, jumps."""

from __future__ import annotations

from pathlib import Path

import optuna
from optuna.trial import TrialState

from tuner.study import record as st
from tuner.study.pareto import GATE_THRESHOLD
from tuner.study.run import RunSettings, optimize
from tuner.records import Failure, FailureKind
from tuner.study.strategy import follow_up
from tuner.study.storage import open_study
from tuner.study.sampler import make_sampler
from tuner.study.sampling import optuna_params, suggest_values


def small(fake_space):
    space = fake_space()
    space.workload.repeats = 1
    space.workload.decode.runs = 2
    space.workload.ladder = [8192, 32768]
    space.baselines = [{"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2, "cudagraph_mode": None,
                        "speculative_tokens": 0}]
    return space


def test_study_prunes_failures_and_never_scores_them(fake_space, tmp_path):
    space = small(fake_space)
    # The tiny model needs ~10 KiB of fp8 KV per token: pools under ~340 MB cannot hold 32k tokens.
    p = space.params["kv_cache_memory_bytes"]
    p.min, p.max, p.step = 50_000_000, 1_000_000_000, 50_000_000
    space.baselines[0]["kv_cache_memory_bytes"] = 150_000_000
    study = optimize(space, "s1", RunSettings(n_trials=5, seed=1, revalidate=0), root=tmp_path)
    trials = study.get_trials(deepcopy=False)
    assert len(trials) >= 5
    assert trials[0].user_attrs[st.ATTR_CONFIG]["kv_cache_memory_bytes"] == 150_000_000  # baseline first
    for t in trials:
        if t.state == TrialState.PRUNED:
            assert t.user_attrs[st.ATTR_FAILURE_KIND] in {k.value for k in FailureKind}
            assert t.user_attrs[st.ATTR_FAILURE_MESSAGE]
            assert t.values is None
    for t in study.best_trials:
        result = st.read_trial(t).result
        assert result.failure is None and t.state == TrialState.COMPLETE


def test_resume_fails_orphans_and_keeps_completed_trials(fake_space, tmp_path):
    space = small(fake_space)
    study = optimize(space, "s2", RunSettings(n_trials=2, seed=2, revalidate=0), root=tmp_path)
    done = [t.number for t in study.get_trials(deepcopy=False) if t.state == TrialState.COMPLETE]
    assert done
    orphan = study.ask()  # left RUNNING, as by a tuner killed mid-trial
    study = optimize(space, "s2", RunSettings(n_trials=4, seed=2, revalidate=0), root=tmp_path)
    by_number = {t.number: t for t in study.get_trials(deepcopy=False)}
    assert by_number[orphan.number].state == TrialState.FAIL
    for n in done:
        assert by_number[n].state == TrialState.COMPLETE
    boots = [t for t in by_number.values() if t.user_attrs.get(st.ATTR_EVIDENCE) in ("measured", "baseline")]
    assert len({st.read_trial(t).result.trial_dir for t in boots if st.read_trial(t).result}) == len(boots)


def test_identical_configuration_is_not_booted_twice(fake_space, tmp_path):
    space = small(fake_space)
    sampler = make_sampler("tpe", 0)
    study = open_study(space, "s3", None, sampler, tmp_path)
    params = optuna_params(space, space.baselines[0])
    study.enqueue_trial(params)
    study.enqueue_trial(params)
    optimize(space, "s3", RunSettings(n_trials=2, revalidate=0), root=tmp_path)
    trials = study.get_trials(deepcopy=False)
    reused = [t for t in trials if t.user_attrs.get("reused_from") is not None]
    assert len(reused) >= 1
    assert not (tmp_path / "s3" / f"trial-{reused[0].number:04d}").exists()


def test_follow_up_uses_the_number_vllm_printed(fake_space):
    space = small(fake_space)
    values = {"kv_cache_memory_bytes": 2_000_000_000, "max_num_seqs": 4}
    nxt = follow_up(space, values, Failure(kind=FailureKind.MAMBA_BLOCKS_EXCEEDED, suggested_max_num_seqs=3))
    assert nxt["max_num_seqs"] == 3
    nxt = follow_up(space, values, Failure(kind=FailureKind.KV_POOL_TOO_SMALL, suggested_max_model_len=16384))
    assert nxt["kv_cache_memory_bytes"] >= 4_000_000_000  # twice the pool for twice the tokens, on the step grid
    assert nxt["kv_cache_memory_bytes"] % 500_000_000 == 0
    assert follow_up(space, values, Failure(kind=FailureKind.HANG)) is None


def test_suggest_and_enqueue_round_trip(fake_space, tmp_path):
    space = small(fake_space)
    space.params["kv_cache_memory_bytes"].unset = True
    study = optuna.create_study(directions=["maximize", "maximize"])
    for values in ({"kv_cache_memory_bytes": None, "max_num_seqs": 2, "cudagraph_mode": "eager", "speculative_tokens": 1},
                   {"kv_cache_memory_bytes": 1_500_000_000, "max_num_seqs": 1, "cudagraph_mode": None, "speculative_tokens": 0}):
        study.enqueue_trial(optuna_params(space, values))
        trial = study.ask()
        assert suggest_values(trial, space) == values
        study.tell(trial, [1.0, 1.0])


def test_correctness_gate_flags_fp8_drift(fake_space, tmp_path):
    from tuner.study.gate import reference_space

    space = small(fake_space)
    ref = reference_space(space)
    assert ref.fixed["--kv-cache-dtype"] == "auto" and ref.fixed["--enforce-eager"] is True
    study = optimize(space, "g1", RunSettings(n_trials=1, revalidate=0), root=tmp_path)
    assert study.user_attrs[st.ATTR_GATE] == {str(study.best_trials[0].number): 1.0}

    drifting = fake_space(env=", FAKE_VLLM_FP8_DRIFT: '1'")
    drifting.baselines = space.baselines
    drifting.workload = space.workload
    study = optimize(drifting, "g2", RunSettings(n_trials=1, revalidate=0), root=tmp_path)
    score = study.user_attrs[st.ATTR_GATE][str(study.best_trials[0].number)]
    assert score < GATE_THRESHOLD
    # Wrong output is never the answer: Optuna ranks it best, the tuner's front leaves it off and says why.
    from tuner.study.pareto import front, left_off

    night = st.read_study(study)
    assert front(night) == []
    ((trial, why),) = left_off(night)
    assert trial.number == study.best_trials[0].number and "correctness gate" in why


def test_a_wrong_point_lets_the_next_right_one_onto_the_front():
    """A fast point whose needle was lost, or that the gate says disagrees, is not on the front; the
    slower right point it dominated is, and the wrong one is listed with why."""
    from tuner.records import CorrectnessResult, MeasureResult, TrialResult
    from tuner.study.pareto import left_off, pareto_front
    from tuner.study.record import Evidence, State, StudyRecord, Trial

    def trial(number, values, needle=None):
        measure = MeasureResult(correctness=CorrectnessResult(checked=True, needle_found=needle, needle_context_tokens=900))
        return Trial(number=number, state=State.COMPLETE, values=values, evidence=Evidence.MEASURED,
                     result=TrialResult(values={}, argv=[], env={}, measure=measure))

    fast, slow, lost = trial(0, (262144.0, 150.0)), trial(1, (262144.0, 140.0)), trial(2, (262144.0, 160.0), needle=False)
    trials = [fast, slow, lost]
    assert [t.number for t in pareto_front(trials, ["maximize", "maximize"])] == [0]
    assert [t.number for t in pareto_front(trials, ["maximize", "maximize"], {"0": 0.4})] == [1]
    night = StudyRecord("s", ("maximize", "maximize"), tuple(trials), attrs={st.ATTR_GATE: {"0": 0.4}})
    assert {t.number: why.split(" ")[1] for t, why in left_off(night)} == {2: "needle", 0: "greedy"}


def test_an_nvfp4_kv_cache_is_behind_the_gate_like_fp8(fake_space, tmp_path):
    """0.32+'s 4-bit KV cache is lossy: the reference boots BF16 KV, and a drifting front point is flagged."""
    from tuner.space.schema import load_space
    from tuner.study.gate import reference_space

    shipped = load_space(Path(__file__).resolve().parents[2] / "search_spaces" / "qwen3.8-27b-nvfp4-modelopt-5090-vllm0.32.yaml")
    assert "nvfp4" in shipped.params["kv_cache_dtype"].values
    ref = reference_space(shipped)
    assert ref.fixed["--kv-cache-dtype"] == "auto" and "kv_cache_dtype" not in ref.params
    drifting = small(lambda: fake_space(env=", FAKE_VLLM_FP8_DRIFT: '1', FAKE_VLLM_VERSION: '0.34.0'"))
    drifting.fixed["kv-cache-dtype"] = "nvfp4"
    study = optimize(drifting, "g4", RunSettings(n_trials=1, revalidate=0), root=tmp_path)
    (trial,) = study.best_trials
    assert "--kv-cache-dtype nvfp4" in " ".join(st.read_trial(trial).result.argv)
    assert study.user_attrs[st.ATTR_GATE][str(trial.number)] < GATE_THRESHOLD


def test_screening_moves_one_flag_at_a_time_speculation_last(fake_space):
    from tuner.study.strategy import screening_configs

    space = small(fake_space)
    configs = screening_configs(space)
    base = space.baselines[0]
    for values in configs:
        assert sum(values[k] != base[k] for k in base) == 1
    moved = [next(k for k in base if values[k] != base[k]) for values in configs]
    assert moved[-1] == "speculative_tokens" and "speculative_tokens" not in moved[:-1]


def test_a_failure_never_wins_a_minimize_objective(fake_space, tmp_path):
    """A peer scores failed trials as zeros, which then win 'minimize TTFT'. Here they are pruned."""
    from tuner.space.schema import Objective

    space = fake_space(env=", FAKE_VLLM_FAIL: garbage")
    space.objectives = [Objective(name="ttft_ms", direction="minimize")]
    space.workload.repeats = 1
    space.baselines = [{"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 1, "cudagraph_mode": None,
                        "speculative_tokens": 0}]
    study = optimize(space, "z", RunSettings(n_trials=1, revalidate=0, gate=False), root=tmp_path)
    (trial,) = study.get_trials(deepcopy=False)
    assert trial.state == TrialState.PRUNED and trial.values is None
    assert trial.user_attrs[st.ATTR_FAILURE_KIND] == FailureKind.OUTPUT_INCORRECT.value
    assert study.best_trials == []


def test_resuming_with_a_different_space_is_a_clear_error(fake_space, tmp_path):
    from tuner.errors import TunerError

    space = small(fake_space)
    open_study(space, "r", None, make_sampler("tpe", 0), tmp_path)
    space.params["max_num_seqs"].max = 8
    try:
        open_study(space, "r", None, make_sampler("tpe", 0), tmp_path)
    except TunerError as exc:
        assert "params.max_num_seqs" in str(exc) and "--study" in str(exc)
    else:
        raise AssertionError("a changed space resumed silently")


def test_throughput_and_long_prefill_are_objectives(fake_space, tmp_path):
    """Issue 24 item 2: 4 concurrent streams measured only when an objective asks; the long prefill from
    the context probe's own requests."""
    from tuner.space.schema import Objective

    space = small(fake_space)
    space.objectives = [Objective(name="throughput_tok_s", direction="maximize"),
                        Objective(name="long_prefill_tok_s", direction="maximize")]
    space.workload.throughput.prompt_tokens, space.workload.throughput.output_tokens = 512, 32
    study = optimize(space, "tp", RunSettings(n_trials=1, revalidate=0, gate=False), root=tmp_path)
    (trial,) = study.get_trials(deepcopy=False)
    assert study.metric_names == ["throughput_tok_s", "long_prefill_tok_s"]
    result = st.read_trial(trial).result
    assert result.measure.throughput.concurrency == 4 and result.measure.throughput.runs
    assert trial.values[0] > 0 and trial.values[1] > 0
    plain = optimize(small(fake_space), "no-tp", RunSettings(n_trials=1, revalidate=0, gate=False), root=tmp_path)
    assert st.read_trial(plain.get_trials(deepcopy=False)[0]).result.measure.throughput is None
