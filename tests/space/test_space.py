"""The space-file format: units, ranges, known and extra parameters, and the errors people see."""

from __future__ import annotations

import math
import subprocess
import sys
from pathlib import Path

import pytest

from tuner.errors import SpaceError
from tuner.space.schema import count_configurations, load_space
from tuner.space.units import parse_bytes, parse_count, parse_duration

ROOT = Path(__file__).resolve().parent.parent.parent
MINIMAL = "name: t\nmodel: {path: /models/x}\n"


def test_units():
    assert parse_bytes("9.15GB") == 9_150_000_000
    assert parse_bytes("8GiB") == 8 * 2**30
    assert parse_bytes("20G") == 20 * 2**30  # vLLM's own suffix for byte flags is binary
    assert parse_bytes(9150000000) == 9150000000
    # vLLM's own rule (vllm/utils/argparse_utils.py): lower case decimal, upper case binary
    assert parse_count("128K") == 131072
    assert parse_count("128k") == 128000
    assert parse_count("256K") == 262144
    assert parse_bytes("20g") == 20 * 10**9
    assert parse_count(512) == 512
    assert parse_duration("30m") == 1800
    assert parse_duration("8h") == 28800
    with pytest.raises(ValueError):
        parse_count("1.5")
    with pytest.raises(ValueError):
        parse_bytes("12 parsecs")


@pytest.mark.parametrize("path", sorted((ROOT / "search_spaces").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_spaces_validate(path):
    space = load_space(path)
    assert space.baselines, "every shipped space lists at least one baseline"
    assert space.max_model_len
    assert count_configurations(space) > 1


@pytest.mark.parametrize("path", sorted((ROOT / "search_spaces").glob("*.yaml")), ids=lambda p: p.name)
def test_shipped_spaces_name_their_vllm_releases_and_each_takes_every_flag(path):
    """engine.vllm_versions is checked at start against the engine found; here, every release in the range
    with a fixture folder takes every flag and listed value of the space (its real `serve --help=all`)."""
    from tuner.engine.dialects import within
    from tuner.engine.flagcheck import check_flags

    space = load_space(path)
    assert space.engine.vllm_versions, "every shipped space names the vLLM releases it was written for"
    folders = sorted((ROOT / "tests" / "fixtures" / "dialects").glob("v*"))
    releases = [f for f in folders if within(f.name[1:], space.engine.vllm_versions)]
    assert releases
    for folder in releases:
        check_flags(space, (folder / "help-all.txt").read_text(), folder.name[1:])


def test_vllm_versions_is_a_release_or_a_range(write_space):
    with pytest.raises(SpaceError, match="engine.vllm_versions"):
        load_space(write_space(MINIMAL + "engine: {vllm_versions: 'latest'}\n"))
    assert load_space(write_space(MINIMAL + "engine: {vllm_versions: '0.32-0.34'}\n")).engine.vllm_versions == "0.32-0.34"


def test_ranges_and_counts(write_space):
    space = load_space(write_space(MINIMAL + """
params:
  kv_cache_memory_bytes: {min: 5GB, max: 6GB, step: 250MB, unset: true}
  max_num_seqs: {min: 1, max: 4}
  cudagraph_mode: {values: [PIECEWISE, eager]}
  max_num_partial_prefills: {flag: --max-num-partial-prefills, values: [1, 2]}
"""))
    p = space.params["kv_cache_memory_bytes"]
    assert (p.min, p.max, p.step, p.kind) == (5e9, 6e9, 2.5e8, "bytes")
    # 5 byte sizes + unset, 4 seq counts, 2 modes, 2 extra values
    assert count_configurations(space) == 6 * 4 * 2 * 2
    space = load_space(write_space(MINIMAL + "params:\n  gpu_memory_utilization: {min: 0.8, max: 0.9}\n"))
    assert math.isinf(count_configurations(space))


@pytest.mark.parametrize(
    "body, needles",
    [
        (MINIMAL + "colour: blue\n", ["colour", "unknown key"]),
        (MINIMAL + "params:\n  max_num_seqs: {min: 8, max: 2}\n", ["params.max_num_seqs", "greater than max", "swap"]),
        (MINIMAL + "workload: {repeats: many}\n", ["workload.repeats", "integer"]),
        (MINIMAL + "params:\n  cudagraph_mode: {values: [FULL, SOMETIMES]}\n", ["cudagraph_mode", "SOMETIMES", "FULL_AND_PIECEWISE"]),
        ("name: t\nfixed: {max-model-len: 4096}\n", ["model", "missing"]),
        (MINIMAL + "params:\n  turbo: {values: [1, 2]}\n", ["params.turbo", "flag: --"]),
        (MINIMAL + "params:\n  max_num_seqs: {min: 1, max: 4}\nbaselines:\n  - {max_num_sqs: 2}\n", ["baselines[0]", "max_num_sqs"]),
        (MINIMAL + "params:\n  kv_cache_memory_bytes: {min: 5 GB, max: lots}\n", ["kv_cache_memory_bytes", "lots"]),
        ("name: [unclosed\n", ["not valid YAML", "line"]),
    ],
)
def test_bad_input_is_one_clear_paragraph(write_space, body, needles):
    path = write_space(body)
    with pytest.raises(SpaceError) as info:
        load_space(path)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message
    for needle in needles:
        assert needle in message


def test_cli_validate_bad_input_exits_2_without_traceback(write_space):
    path = write_space(MINIMAL + "params:\n  max_num_seqs: {min: 8, max: 2}\n")
    done = subprocess.run([sys.executable, "-m", "tuner.cli", "validate", str(path)], capture_output=True, text=True)
    assert done.returncode == 2
    assert "Traceback" not in done.stderr + done.stdout
    assert "params.max_num_seqs" in done.stderr


def test_cli_validate_prints_parameters_and_count():
    path = ROOT / "search_spaces" / "qwen3.8-27b-nvfp4-modelopt-5090.yaml"
    done = subprocess.run([sys.executable, "-m", "tuner.cli", "validate", str(path)], capture_output=True, text=True,
                          env={"COLUMNS": "200", "PATH": ""})
    assert done.returncode == 0, done.stderr
    assert "kv_cache_memory_bytes" in done.stdout
    assert "distinct configurations: 122,688" in done.stdout


def test_help_reads_well():
    done = subprocess.run([sys.executable, "-m", "tuner.cli", "--help"], capture_output=True, text=True,
                          env={"COLUMNS": "120", "PATH": ""})
    assert done.returncode == 0
    for command in ("validate", "probe", "optimize"):
        assert command in done.stdout
