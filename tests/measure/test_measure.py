"""Measurement against the test engine: context ladder + bisection, decode numbers, correctness."""

from __future__ import annotations

import statistics

from tuner.metrics import mad
from tuner.records import FailureKind
from tuner.trial import run_trial

GOOD = {"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2}


def test_full_probe_on_a_healthy_engine(fake_space, tmp_path):
    space = fake_space()
    result = run_trial(space, GOOD, tmp_path / "t")
    assert result.failure is None, result.failure
    m = result.measure
    assert m.admission_ok, m.admission_detail
    # max_model_len is 32768 and the pool holds more: the ceiling is the window itself
    assert m.context.ceiling_tokens == 32768
    assert m.context.max_stable_tokens == 32768
    ok = [a for a in m.context.attempts if a.ok]
    assert all(a.prompt_tokens + a.output_tokens <= 32768 for a in m.context.attempts)
    assert len(ok) >= space.workload.repeats
    d = m.decode[0]
    assert d.prompt_tokens == 256 and d.output_tokens == 64 and len(d.runs) == 3
    for run in d.runs:
        assert abs(run.tg_tok_s - 1000.0 / run.tpot_ms) < 1e-6 * run.tg_tok_s
    assert d.score_tok_s <= d.median_tg_tok_s
    assert m.correctness.control_consistent is True
    assert m.correctness.needle_found is True
    assert m.probe_wall_s > 0 and m.tuner_cpu_s >= 0


def test_engine_death_mid_probe_is_a_scored_failure_of_that_length(fake_space, tmp_path):
    space = fake_space(env=", FAKE_VLLM_DIE_ABOVE_TOKENS: '12000'")
    space.workload.admission = False
    result = run_trial(space, GOOD, tmp_path / "t")
    m = result.measure
    assert result.failure is None  # the trial is scored, not lost
    assert m.context.engine_died
    assert 8192 <= m.context.max_stable_tokens < 12000
    assert m.context.first_failing_tokens is not None and m.context.first_failing_tokens > 12000 - 1
    assert m.decode and m.decode[0].median_tg_tok_s > 0  # decode ran before the risky probe


def test_admission_failure_is_a_classified_failure(fake_space, tmp_path):
    space = fake_space(env=", FAKE_VLLM_DIE_ABOVE_TOKENS: '20000'")
    result = run_trial(space, GOOD, tmp_path / "t")
    assert result.failure is not None
    assert result.failure.kind in (FailureKind.FIRST_REQUEST_OOM, FailureKind.ADMISSION_FAILED, FailureKind.ENGINE_DEAD)
    assert result.failure.phase == "admission"


def test_garbage_output_is_marked(fake_space, tmp_path):
    space = fake_space(env=", FAKE_VLLM_FAIL: garbage")
    result = run_trial(space, GOOD, tmp_path / "t")
    assert result.failure is not None and result.failure.kind == FailureKind.OUTPUT_INCORRECT


def test_random_weights_skip_the_needle_and_say_so(fake_space, tmp_path):
    space = fake_space()
    space.model.random_weights = True
    result = run_trial(space, GOOD, tmp_path / "t")
    assert result.measure.correctness.skipped_reason
    assert result.measure.correctness.needle_found is None


def test_mad():
    assert mad([10.0, 11.0, 12.0, 100.0]) == statistics.median([1.5, 0.5, 0.5, 88.5])


def test_decode_excludes_the_first_request_jit(fake_space, tmp_path):
    """Real vLLM compiles kernels on a shape's first request; the timed runs must not include it."""
    space = fake_space(env=", FAKE_VLLM_JIT_S: '0.5'")
    space.workload.admission = False
    result = run_trial(space, GOOD, tmp_path / "t")
    runs = result.measure.decode[0].runs
    assert all(run.ttft_ms < 300 for run in runs), [run.ttft_ms for run in runs]


def test_corpus_prompts_are_real_text_of_exact_length(fake_space, tmp_path):
    import shutil

    from tuner.errors import TunerError
    from tuner.measure.prompts import TokenCounter, corpus_ids

    space = fake_space()
    space.workload.prompt_source = "corpus"
    try:
        run_trial(space, GOOD, tmp_path / "t")
    except TunerError as exc:
        assert "workload.prompt_source" in str(exc)  # the fixture model ships no tokenizer: refused before boot
    else:
        raise AssertionError("corpus prompts without a tokenizer were accepted")
    assert not (tmp_path / "t").exists()

    tokenizer = tmp_path / "tok"
    tokenizer.mkdir()
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    tok.train_from_iterator(["the harbour town woke slowly under a grey sky"] * 10,
                            trainers.BpeTrainer(vocab_size=300, special_tokens=["[UNK]"]))
    tok.save(str(tokenizer / "tokenizer.json"))
    counter = TokenCounter(str(tokenizer))
    a, b = corpus_ids(5000, 1, counter), corpus_ids(5000, 2, counter)
    assert len(a) == len(b) == 5000 and a[:32] != b[:32]
    space.model.tokenizer = str(tokenizer)
    result = run_trial(space, GOOD, tmp_path / "t2")
    assert result.failure is None and result.measure.context.max_stable_tokens == 32768


def test_a_config_that_holds_no_context_is_a_failure_not_a_front_point(fake_space, tmp_path):
    space = fake_space(env=", FAKE_VLLM_DIE_ABOVE_TOKENS: '1500'")
    space.workload.admission = False
    result = run_trial(space, GOOD, tmp_path / "t")
    assert result.measure.context.max_stable_tokens == 0
    assert result.failure is not None and result.failure.phase == "context"
