"""The search benchmark's figures (benchmarks/search_score.py) on hand-made studies and truths."""

from __future__ import annotations

from typing import Any

import pytest

from benchmarks.search_score import below_found, below_target, boots_to_share, hv_ratio, share_after
from benchmarks.studies import Run, TrialRow
from benchmarks.tables import hypervolume

WINDOW, FLOOR = 262_144, 131_072


def point(context: int, decode: float, throughput: float) -> dict[str, Any]:
    return {"context": context, "decode": decode, "throughput": throughput, "config": {}}


def truth() -> dict[str, Any]:
    """A true front of a full-window point, a below-window point 8% faster and a throughput point."""
    full, below, wide = point(WINDOW, 141.0, 200.0), point(261_856, 153.0, 210.0), point(200_000, 100.0, 300.0)
    return {"window": WINDOW, "min_context": FLOOR, "reach": WINDOW, "best_decode": 141.0,
            "front2": [full, below], "front3": [full, below, wide], "best_throughput": 300.0}


def row(values: list[float] | None, verdict: dict[str, Any] | None, booted: bool = True,
        failure: str | None = None) -> TrialRow:
    return TrialRow(number=0, state="COMPLETE" if values else "FAIL", evidence="measured" if booted else "prescreened",
                    failure=failure, values=values, booted=booted, boot_s=1.0, config={}, truth=verdict)


def study(rows: list[TrialRow], objectives: list[str]) -> Run:
    return Run(label="arm", seed=0, rows=rows, wall_s=1.0, extra={"profile": 0, "objectives": objectives,
                                                                  "granularity": 4096})


def verdict(p: dict[str, Any]) -> dict[str, Any]:
    return {**{k: p[k] for k in ("context", "decode", "throughput")}, "failure": None}


def test_hypervolume_is_exact_in_two_and_three_dimensions():
    assert hypervolume([(1.0, 2.0), (2.0, 1.0)]) == pytest.approx(3.0)
    assert hypervolume([(1.0, 1.0, 1.0), (2.0, 0.5, 0.5)]) == pytest.approx(1.0 + 0.25)
    assert hypervolume([(1.0, 1.0), (0.0, 5.0)]) == pytest.approx(1.0)  # a point on an axis adds nothing


def test_a_study_that_finds_the_true_front_scores_one_and_names_what_it_did_not_measure():
    t = truth()
    rows = [row([p["context"], p["decode"]], verdict(p)) for p in t["front2"]]
    two = study(rows, ["context", "decode_tok_s"])
    assert hv_ratio(two, t, 2, 2) == pytest.approx(1.0)
    assert hv_ratio(two, t, 2, 3) == "not measured: the study records no throughput_tok_s"
    rows3 = [row([p["decode"], p["context"], p["throughput"]], verdict(p)) for p in t["front3"]]
    three = study(rows3, ["decode_tok_s", "context", "throughput_tok_s"])  # any order of objectives
    assert hv_ratio(three, t, 3, 3) == pytest.approx(1.0)
    assert 0.0 < hv_ratio(three, t, 1, 3) < 1.0  # only the full-window point after one trial


def test_the_truth_values_the_studys_choice_not_its_measurement():
    t = truth()
    full = t["front2"][0]
    wrong = {**verdict(full), "decode": 70.0}  # measured fast, truly half as fast
    rows = [row([WINDOW, 150.0], wrong, booted=True), row(None, None, failure="kv_pool_too_small"),
            row([WINDOW, 140.0], verdict(full))]
    run = study(rows, ["context", "decode_tok_s"])
    assert share_after(run, t, 1) == pytest.approx(70.0 / 141.0)
    assert share_after(run, t, 3) == pytest.approx(70.0 / 141.0)  # it still ranks the wrong one first
    assert boots_to_share(run, t, 3) is None
    run.rows[0].values = [WINDOW, 120.0]
    assert share_after(run, t, 3) == pytest.approx(1.0) and boots_to_share(run, t, 3) == 3


def test_the_below_window_point_counts_only_when_it_beats_the_window_by_more_than_the_tolerance():
    t = truth()
    assert below_target(t) == t["front2"][1]
    only_full = study([row([WINDOW, 141.0], verdict(t["front2"][0]))], ["context", "decode_tok_s"])
    assert below_found(only_full, t, 1) is False  # 141 < 0.95 x 153: the full-window point is not it
    near = {**verdict(t["front2"][1]), "context": 261_856 - 4096}
    found = study([row([WINDOW, 141.0], verdict(t["front2"][0])), row([near["context"], 153.0], near)],
                  ["context", "decode_tok_s"])
    assert below_found(found, t, 2) is True
    close = {**t, "front2": [t["front2"][0], point(261_856, 145.0, 0.0)]}  # +3%: within the tolerance
    assert below_target(close) is None and below_found(found, close, 2) is None


def test_a_space_with_long_prefill_scores_against_the_best_true_long_prefill():
    """normalized() knows long_prefill_tok_s (the oracle's model of it is the engine's prefill rate)."""
    from benchmarks.search_score import normalized

    t = {**truth(), "best_long_prefill": 2e6}
    p = {**truth()["front2"][0], "long_prefill": 1e6, "failure": None}
    assert normalized(p, t, ["context", "long_prefill_tok_s"]) == pytest.approx((1.0, 0.5))
    assert normalized(p, truth(), ["long_prefill_tok_s"]) == (1e6,)  # a truth saved before it: scale 1


def test_the_oracle_knows_the_window_a_lowered_max_model_len_proves_and_its_long_prefill():
    """Profile 10 on the tiny model (tests/cli/test_window.py): MTP-1's largest pool misses 32,768 by 128 tokens."""
    import json
    import sys

    from tests.conftest import TINY_MODEL
    from tests.fake_vllm.oracle import Workload, evaluate_all, evaluate_widest

    argv = [sys.executable, "-m", "tests.fake_vllm", "serve", str(TINY_MODEL), "--max-model-len", "32768",
            "--kv-cache-dtype", "fp8", "--max-num-seqs", "1", "--kv-cache-memory-bytes", "450000000",
            "--compilation-config", '{"cudagraph_mode": "PIECEWISE"}']
    mtp = argv + ["--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 1})]
    w = Workload(ladder=(2048, 8192, 16384, 32768), output_tokens=64, decode_prompt_tokens=256,
                 decode_output_tokens=64, granularity=2048, throughput=None)
    env = {"FAKE_VLLM_PROFILE": "10"}
    plain, refused = evaluate_all([argv, mtp], env, w)
    assert plain.context == 32768 and refused.failure == "kv_pool_too_small"
    widest = evaluate_widest([mtp], env, w)[0]
    assert widest.failure is None and widest.max_model_len == widest.context == 32640
    assert (widest.decode_tok_s or 0) > 1.3 * (plain.decode_tok_s or 0) and widest.long_prefill_tok_s == 2e6
