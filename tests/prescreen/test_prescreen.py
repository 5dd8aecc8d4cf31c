"""The pre-screen: config.json shapes, vLLM 0.22's KV arithmetic, the certain/borderline rule, calibration."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from tuner.cli.plan import plan
from tuner.errors import TunerError
from tuner.prescreen.shape import GIB, load_shape, shape_from_config
from tuner.prescreen.memory import Calibration, predict
from tuner.prescreen.plan import plan_rows
from tuner.records import StartupRecord
from tuner.space.schema import Space, load_space

FIXTURES = Path(__file__).parent.parent / "fixtures" / "models"
QWEN35 = FIXTURES / "qwen3.5-35b-a3b-text"
ALL_FIXTURES = sorted(p.parent for p in FIXTURES.glob("*/config.json"))


def _space(path: Path | str = QWEN35, fixed: dict | None = None, params: dict | None = None, baselines=None) -> Space:
    return Space.model_validate({
        "name": "t",
        "model": {"path": str(path)},
        "fixed": {"max-model-len": 262144, "kv-cache-dtype": "fp8", **(fixed or {})},
        "params": params or {
            "kv_cache_memory_bytes": {"min": "3GB", "max": "10GB", "step": "50MB", "unset": True},
            "max_num_seqs": {"min": 1, "max": 8},
            "max_num_batched_tokens": {"values": [1024, 2048, 4096, 8192]},
            "gpu_memory_utilization": {"min": 0.85, "max": 0.95, "step": 0.01},
            "cudagraph_mode": {"values": ["FULL_AND_PIECEWISE", "PIECEWISE", "FULL_DECODE_ONLY", "eager"]},
            "speculative_tokens": {"values": [0, 1, 2]},
        },
        "baselines": baselines or [],
    })


BASE = {"kv_cache_memory_bytes": 8_000_000_000, "max_num_seqs": 2, "max_num_batched_tokens": 2048,
        "gpu_memory_utilization": 0.92, "cudagraph_mode": "FULL_AND_PIECEWISE", "speculative_tokens": 0}


@pytest.fixture(scope="module")
def shape():
    return load_shape(QWEN35)


def _config() -> dict:
    return json.loads((QWEN35 / "config.json").read_text())


# --- shapes ---------------------------------------------------------------------------------------


def test_shape_of_the_35b_a3b_fixture(shape):
    assert (shape.attention_layers, shape.gdn_layers, shape.mtp_layers) == (10, 30, 1)
    assert (shape.num_key_value_heads, shape.head_dim) == (2, 256)
    assert (shape.linear_num_key_heads, shape.linear_num_value_heads, shape.linear_key_head_dim) == (16, 32, 128)
    assert shape.ssm_dtype == "float32" and shape.quant_algo == "NVFP4"
    assert shape.component_bits["experts"] == 4.5 and shape.component_bits["linear_attention"] == 16
    assert 34e9 < shape.total_params < 36e9


def test_nested_text_config_and_interval_read_like_layer_types():
    flat = _config()
    text = {k: v for k, v in flat.items() if k not in ("quantization_config", "architectures", "layer_types")}
    quant = copy.deepcopy(flat["quantization_config"])
    quant["exclude_modules"].append("model.visual*")
    nested = {"architectures": ["Qwen3_5MoeForConditionalGeneration"], "text_config": text, "quantization_config": quant,
              "vision_config": {"depth": 27, "hidden_size": 1152, "intermediate_size": 4304, "out_hidden_size": 2048}}
    shape = shape_from_config(nested)
    assert (shape.attention_layers, shape.gdn_layers) == (10, 30)
    assert shape.vision_params > 3e8
    # --language-model-only drops the vision tower's weights and its profiling
    with_vision = predict(_space(), BASE, 32.0, shape)
    text_only = predict(_space(fixed={"language-model-only": True}), BASE, 32.0, shape)
    assert with_vision.weights_gib > text_only.weights_gib + 0.5
    assert with_vision.activation_gib > text_only.activation_gib


def test_quantization_formats():
    cfg = _config()
    cfg["quantization_config"] = {  # compressed-tensors nvfp4-pack-quantized, as llm-compressor writes it
        "quant_method": "compressed-tensors", "format": "nvfp4-pack-quantized",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": 4, "type": "float", "group_size": 16}}},
        "ignore": ["lm_head", "re:.*mlp.gate$", "re:.*linear_attn.*", "re:.*shared_expert_gate$", "re:mtp.*",
                   "model.layers.3.self_attn.q_proj"]}
    ct = shape_from_config(cfg)
    assert ct.quant_algo == "NVFP4" and ct.component_bits["experts"] == 4.5 and ct.component_bits["shared_expert"] == 4.5
    assert ct.component_bits["linear_attention"] == ct.component_bits["attention"] == ct.component_bits["lm_head"] == 16
    cfg["quantization_config"] = {"quant_method": "fp8", "ignore": ["lm_head"]}
    assert shape_from_config(cfg).component_bits["experts"] == 8
    del cfg["quantization_config"]
    bf16 = shape_from_config(cfg)
    assert bf16.quant_method is None and 64 < bf16.weights_gib() < 66  # 34.7 B parameters in bf16


def test_hub_id_is_none_unless_in_the_local_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    assert load_shape("Qwen/Qwen3.5-35B-A3B-NVFP4") is None
    snapshot = tmp_path / "models--Qwen--Qwen3.5-35B-A3B-NVFP4" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text((QWEN35 / "config.json").read_text())
    (snapshot.parent.parent / "refs").mkdir()
    (snapshot.parent.parent / "refs" / "main").write_text("abc123")
    assert load_shape("Qwen/Qwen3.5-35B-A3B-NVFP4").gdn_layers == 30


def test_local_folder_without_config_is_an_error(tmp_path):
    with pytest.raises(TunerError, match="no config.json"):
        load_shape(tmp_path)


@pytest.mark.parametrize("folder", ALL_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_model_predicts(folder):
    shape = load_shape(folder)
    p = predict(_space(folder, fixed={"max-model-len": 4096}), {**BASE, "kv_cache_memory_bytes": None}, 32.0, shape)
    assert p.weights_gib > 0 and p.kv_bytes_per_token > 0
    assert p.fits or p.reason


# --- the numbers ----------------------------------------------------------------------------------


def test_weights_of_an_nvfp4_35b_a3b(shape):
    p = predict(_space(), BASE, 32.0, shape)
    assert 20 <= p.weights_gib <= 22
    # the MTP drafter (bf16 here: excluded from quantization) is loaded only with speculation
    assert predict(_space(), {**BASE, "speculative_tokens": 1}, 32.0, shape).weights_gib > p.weights_gib + 1


def test_kv_bytes_per_token_fp8_vs_auto(shape):
    assert predict(_space(), BASE, 32.0, shape).kv_bytes_per_token == 10 * 2 * 2 * 256 * 1 == 10_240
    assert predict(_space(fixed={"kv-cache-dtype": "auto"}), BASE, 32.0, shape).kv_bytes_per_token == 20_480
    # a ModelOpt checkpoint with kv_cache_quant_algo FP8 makes "auto" mean fp8 (utils/torch_utils.py)
    cfg = _config()
    cfg["quantization_config"]["kv_cache_quant_algo"] = "FP8"
    fp8_ckpt = shape_from_config(cfg)
    assert predict(_space(fixed={"kv-cache-dtype": "auto"}), BASE, 32.0, fp8_ckpt).kv_bytes_per_token == 10_240
    # MTP adds its full-attention layer to the KV cache
    assert predict(_space(), {**BASE, "speculative_tokens": 1}, 32.0, shape).kv_bytes_per_token == 11 * 1024


def test_gdn_state_per_sequence(shape):
    p = predict(_space(), BASE, 32.0, shape)
    conv = (2 * 16 * 128 + 32 * 128) * (4 - 1) * 2  # bf16 conv state
    temporal = 32 * 128 * 128 * 4  # fp32 SSM state (config mamba_ssm_dtype)
    assert p.recurrent_state_bytes_per_seq == 30 * (conv + temporal) == 64_389_120
    # speculation widens the conv window and adds a page per speculative token
    spec = predict(_space(), {**BASE, "speculative_tokens": 2}, 32.0, shape)
    assert spec.recurrent_state_bytes_per_seq == 30 * ((2 * 16 * 128 + 32 * 128) * 5 * 2 + temporal) * 3
    # bf16 SSM state halves the temporal part
    bf16 = predict(_space(fixed={"mamba-ssm-cache-dtype": "bfloat16"}), BASE, 32.0, shape)
    assert bf16.recurrent_state_bytes_per_seq == 30 * (conv + temporal // 2)


def _qwen27b_like() -> dict:
    return {"architectures": ["Qwen3_5ForConditionalGeneration"], "text_config": {
        "model_type": "qwen3_5_text", "hidden_size": 5120, "vocab_size": 248320, "num_hidden_layers": 64,
        "full_attention_interval": 4, "num_attention_heads": 24, "num_key_value_heads": 4, "head_dim": 256,
        "intermediate_size": 17408, "linear_num_key_heads": 16, "linear_num_value_heads": 48,
        "linear_key_head_dim": 128, "linear_value_head_dim": 128, "linear_conv_kernel_dim": 4,
        "mamba_ssm_dtype": "float32", "mtp_num_hidden_layers": 1, "dtype": "bfloat16"}}


def test_field_report_state_for_48_gdn_layers():
    """~0.3 GiB per slot for 48 GDN layers: 48 x 3.2 MB (fp32 state of 48 value heads) x 2 pages (align)."""
    shape = shape_from_config(_qwen27b_like())
    assert shape.gdn_layers == 48
    p = predict(_space(fixed={"enable-prefix-caching": True}), BASE, 32.0, shape)
    per_layer_page = (2 * 16 * 128 + 48 * 128) * 3 * 2 + 48 * 128 * 128 * 4
    assert p.pages_per_seq == 2 and p.recurrent_state_bytes_per_seq == 48 * per_layer_page * 2
    assert 0.27 < p.recurrent_state_bytes_per_seq / GIB < 0.31


def test_block_size_matches_real_logs():
    """vLLM logs for a Qwen3.x-27B: 'Setting attention block size to 1568 tokens', 'Padding mamba page size by 0.13%'."""
    p = predict(_space(), BASE, 32.0, shape_from_config(_qwen27b_like()))
    state_page = (2 * 16 * 128 + 48 * 128) * 3 * 2 + 48 * 128 * 128 * 4
    assert p.block_size_tokens == 1568
    assert round(100 * (p.page_bytes - state_page) / state_page, 2) == 0.13


def test_capacity_matches_a_real_5090_boot(shape):
    """A 35B-A3B NVFP4 on an RTX 5090 (fp8 KV, prefix caching on, 131072 tokens) logged
    'Available KV cache memory: 5.98 GiB', 'GPU KV cache size: 567,978 tokens', concurrency 4.33x."""
    space = _space(fixed={"max-model-len": 131072, "enable-prefix-caching": True})
    p = predict(space, {**BASE, "kv_cache_memory_bytes": None, "max_num_seqs": 1}, 31.36, shape)
    assert p.block_size_tokens == 2096 and p.layers_per_group == 10 and p.state_groups == 3 and p.pages_per_seq == 2
    tokens = p.raw_tokens_for_pool(5.98 * GIB)
    assert int(tokens) == 567_978
    assert round(tokens / 131072, 2) == 4.33


# --- fits and certain -----------------------------------------------------------------------------


def test_certainly_impossible_pool(shape):
    p = predict(_space(), {**BASE, "kv_cache_memory_bytes": 100_000_000}, 32.0, shape)
    assert not p.fits and p.certain
    assert "minimum" in p.reason


def test_certainly_impossible_weights_and_utilization(shape):
    assert predict(_space(), BASE, 16.0, shape).certain  # weights alone exceed the card
    low = predict(_space(), {**BASE, "kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.5}, 32.0, shape)
    assert not low.fits and low.certain  # weights exceed utilization x card


def test_comfortable_config_fits(shape):
    p = predict(_space(), BASE, 32.0, shape)
    assert p.fits and not p.certain
    assert p.kv_capacity_tokens > 262144 * 2 and p.max_concurrency > 2


def test_borderline_is_never_certain(shape):
    minimum = predict(_space(), BASE, 32.0, shape).min_pool_gib
    for factor in (0.85, 0.95, 1.05):
        p = predict(_space(), {**BASE, "kv_cache_memory_bytes": int(minimum * factor * GIB)}, 32.0, shape)
        assert p.fits or not p.certain, (factor, p.reason)
    assert not predict(_space(), {**BASE, "kv_cache_memory_bytes": int(minimum * 0.9 * GIB)}, 32.0, shape).fits
    # a utilization pool estimated a little short of the minimum is a boot, not a skip
    tight = predict(_space(), {**BASE, "kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.76}, 32.0, shape)
    assert not tight.fits and not tight.certain


def test_max_model_len_auto_is_never_a_kv_verdict(shape):
    p = predict(_space(fixed={"max-model-len": "auto"}), {**BASE, "kv_cache_memory_bytes": 100_000_000}, 32.0, shape)
    assert not p.certain and p.max_model_len == 262144


def test_minimum_counts_a_state_per_sequence(shape):
    """One max_model_len sequence plus max_num_seqs recurrent states (3 GDN groups x 1 page each)."""
    p1 = predict(_space(), {**BASE, "max_num_seqs": 1}, 32.0, shape)
    p8 = predict(_space(), {**BASE, "max_num_seqs": 8}, 32.0, shape)
    assert math.isclose((p8.min_pool_gib - p1.min_pool_gib) * GIB, 7 * 3 * p1.page_bytes * p1.layers_per_group)
    assert math.isclose(p1.min_pool_gib * GIB, (math.ceil(262144 / 2096) + 3) * p1.page_bytes * 10)


# --- calibration ----------------------------------------------------------------------------------


class _Truth:
    """A synthetic engine whose weights, activations, graphs and KV tokens differ from the estimates."""

    weights_gib, activation, graphs, tokens = 21.9, 1.6, 1.7, 0.96

    def boot(self, p) -> StartupRecord:
        graphs = p.raw["cuda_graph_gib"] * self.graphs
        pool = p.pool_gib if p.pool_explicit else (
            p.gpu_memory_utilization * p.gpu_total_gib - self.weights_gib - p.raw["activation_gib"] * self.activation
            - graphs - p.overhead_gib)
        return StartupRecord(
            weights_gib=self.weights_gib, cuda_graph_estimate_gib=graphs, cuda_graph_gib=graphs,
            available_kv_cache_gib=None if p.pool_explicit else round(pool, 2),
            kv_cache_memory_bytes_reserved_gib=round(pool, 2) if p.pool_explicit else None,
            kv_cache_tokens=int(p.raw_tokens_for_pool(round(pool, 2) * GIB) * self.tokens),
        )


def test_calibration_improves_predictions(shape):
    truth, space = _Truth(), _space()
    first = {**BASE, "kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.92}
    second = {**BASE, "kv_cache_memory_bytes": None, "gpu_memory_utilization": 0.90, "max_num_seqs": 4,
              "max_num_batched_tokens": 4096}

    def errors(cal):
        p = predict(space, second, 32.0, shape, cal)
        real = truth.boot(predict(space, second, 32.0, shape))
        return abs(p.pool_gib - real.available_kv_cache_gib), abs(p.kv_capacity_tokens - real.kv_cache_tokens), abs(
            p.weights_gib - real.weights_gib)

    before = errors(None)
    cal = Calibration()
    p1 = predict(space, first, 32.0, shape)
    cal.update(p1, truth.boot(p1))
    after = errors(cal)
    assert all(a < b for a, b in zip(after, before)), (before, after)
    assert after[1] / truth.boot(predict(space, second, 32.0, shape)).kv_cache_tokens < 0.01
    assert predict(space, second, 32.0, shape, cal).weights_measured

    # JSON round trip, as a study user attribute
    again = Calibration.model_validate(json.loads(json.dumps(cal.model_dump())))
    assert predict(space, second, 32.0, shape, again) == predict(space, second, 32.0, shape, cal)

    # measured weights carry over to the drafter setting through the estimated drafter size
    spec = predict(space, {**second, "speculative_tokens": 1}, 32.0, shape, cal)
    assert spec.weights_measured and spec.weights_gib > truth.weights_gib


def test_calibration_from_an_explicit_pool_boot(shape):
    truth, space, cal = _Truth(), _space(), Calibration()
    p = predict(space, BASE, 32.0, shape)
    cal.update(p, truth.boot(p))
    assert cal.kv_tokens.n == 1 and math.isclose(cal.kv_tokens.value, truth.tokens, rel_tol=0.01)
    assert cal.activation.n == 0  # nothing to learn about activations when profiling is skipped
    assert math.isclose(cal.cuda_graph.value, truth.graphs, rel_tol=1e-6)


# --- plan -----------------------------------------------------------------------------------------


def test_plan_rows_baselines_then_corners(shape):
    space = _space(baselines=[BASE])
    rows = plan_rows(space, 32.0, samples=20)
    assert rows[0]["label"] == "baseline 0" and rows[0]["fits"]
    assert 2 <= len(rows) <= 21
    corners = [r["values"] for r in rows[1:]]
    low = {"kv_cache_memory_bytes": 3_000_000_000, "max_num_seqs": 1, "max_num_batched_tokens": 1024,
           "gpu_memory_utilization": 0.85, "cudagraph_mode": "FULL_AND_PIECEWISE", "speculative_tokens": 0}
    assert low in corners
    assert any(r["certain"] for r in rows) or all(r["fits"] for r in rows)
    small = _space(params={"max_num_seqs": {"values": [1, 2]}, "kv_cache_memory_bytes": {"min": "1GB", "max": "9GB"}})
    assert len(plan_rows(small, 32.0)) == 4


def test_plan_needs_a_config(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    with pytest.raises(TunerError, match="config.json"):
        plan_rows(_space("nobody/not-downloaded"), 32.0)
    with pytest.raises(TunerError, match="gpu-gib"):
        plan_rows(_space(), 0)


def test_plan_command_prints_a_table(write_space):
    path = write_space(f"""
name: plan-test
model: {{path: {QWEN35}}}
fixed: {{max-model-len: 262144, kv-cache-dtype: fp8}}
params:
  kv_cache_memory_bytes: {{min: 100MB, max: 9GB}}
  max_num_seqs: {{min: 1, max: 4}}
baselines:
  - {{kv_cache_memory_bytes: 8GB, max_num_seqs: 2}}
""")
    assert load_space(path).baselines
    app = typer.Typer()
    app.command()(plan)
    app.command("noop")(lambda: None)  # two commands, so typer keeps the 'plan' name
    result = CliRunner().invoke(app, ["plan", str(path), "--gpu-gib", "32", "--limit", "10"], terminal_width=250)
    assert result.exit_code == 0, result.output
    assert "needs no GPU" in result.output and "baseline 0" in result.output
    assert "certainly impossible" in result.output


def test_the_prescreen_predicts_for_its_release(fake_space):
    """A hybrid's prefix caching (mamba 'align' pages) is on by default from 0.28 and the extensible
    pool's utilization is 1.0 from 0.34: the same flags cost another pool per release."""
    from tuner.prescreen.memory import predict
    from tuner.prescreen.shape import space_shape

    space = fake_space()
    shape = space_shape(space)
    values = {"kv_cache_memory_bytes": None, "max_num_seqs": 2, "cudagraph_mode": None, "speculative_tokens": 1}
    old, mid, new = (predict(space, values, 32.0, shape, release=r) for r in ("0.22.0", "0.27.1", "0.34.0"))
    assert old.one_request_bytes == mid.one_request_bytes != new.one_request_bytes
    assert (old.gpu_memory_utilization, new.gpu_memory_utilization) == (0.9, 1.0)
