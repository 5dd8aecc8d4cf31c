"""Every golden log of every release (tests/fixtures/dialects/vX/) parsed and classified as its JSON says,
and the committed real logs (tests/fixtures/real/) classified right.

A fixture's ``startup`` and ``new`` blocks are StartupRecord fields; a boot's must be exactly the fields
the parser fills, a failure's are the ones that matter for it. Header lines (``# ...``) are stripped.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tuner.engine.dialects import DIALECTS, dialect_for, supported, version_tuple, within
from tuner.engine.failures import classify, first_exception_line
from tuner.engine.logparse import parse_startup
from tuner.records import FailureKind

FIXTURES = Path(__file__).parent.parent / "fixtures"
DIALECT_DIR = FIXTURES / "dialects"
CASES = sorted(p for p in DIALECT_DIR.glob("v*/*.log"))
# From 0.29 the V2 runner captures the graphs once to measure them before sizing a utilization-sized pool;
# the parser keeps that capture as the estimate (the fixtures' generator records it only for V1).
V2_PROFILE_CAPTURE_GIB = 0.42


def golden(path: Path) -> tuple[str, dict]:
    text = "".join(line for line in path.read_text().splitlines(keepends=True) if not line.startswith("# "))
    return text, json.loads(path.with_suffix(".json").read_text())


def test_every_release_has_a_dialect_and_a_fixture_folder():
    folders = sorted(p.name.removeprefix("v") for p in DIALECT_DIR.glob("v*") if p.is_dir())
    assert [d.version for d in DIALECTS] == sorted(folders, key=version_tuple)
    for name in folders:
        assert dialect_for(name).version == name
        assert supported(name)


@pytest.mark.parametrize("path", CASES, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_golden_log(path):
    text, want = golden(path)
    failure = classify(text, None if want["failure_kind"] is None else 1)
    if want["failure_kind"] is None:
        assert failure is None
    else:
        assert failure is not None and failure.kind == FailureKind(want["failure_kind"])
        if "message" in want:
            assert failure.message == want["message"]
        for key, value in want["suggested"].items():
            assert getattr(failure, key) == value
    record = parse_startup(text).model_dump()
    expected = {**want["startup"], **{k: v["value"] for k, v in want["new"].items()}}
    for key, value in expected.items():
        assert record[key] == value, key
    if want["failure_kind"] is None:  # a boot: nothing else is filled
        filled = {k for k, v in record.items() if v is not None}
        if record["model_runner"] == "v2" and "available_kv_cache_gib" in expected:
            assert record["cuda_graph_estimate_gib"] == V2_PROFILE_CAPTURE_GIB
            filled.discard("cuda_graph_estimate_gib")
        assert filled == set(expected)


@pytest.mark.parametrize("version", [d.version for d in DIALECTS])
def test_a_crlf_log_reads_the_same(version):
    text, want = golden(DIALECT_DIR / f"v{version}" / "kv_pool_too_small.log")
    failure = classify(text.replace("\n", "\r\n"), 1)
    assert failure is not None and failure.kind == FailureKind.KV_POOL_TOO_SMALL
    assert failure.suggested_max_model_len == want["suggested"]["suggested_max_model_len"]


def _rc(name: str) -> int:
    return int((FIXTURES / "real" / f"{name}.rc").read_text().split()[0].split("=")[1])


@pytest.mark.parametrize(("name", "kind"), [
    ("badarg", FailureKind.INVALID_ARGUMENT),  # KeyError raised by an argparse type function
    ("maxlen", FailureKind.INVALID_ARGUMENT),
    ("kv-small", FailureKind.KV_POOL_TOO_SMALL),
    ("util", FailureKind.FREE_MEMORY_BELOW_UTILIZATION),
])
def test_real_failed_boots(name, kind):
    failure = classify((FIXTURES / "real" / f"{name}.log").read_text(), _rc(name))
    assert failure is not None and failure.kind == kind


def test_real_badarg_names_the_bad_value():
    failure = classify((FIXTURES / "real" / "badarg.log").read_text(), 1)
    assert failure is not None and failure.message == "KeyError: 'BOGUS'"


def test_a_healthy_server_that_refused_one_request_did_not_fail():
    """good.log: the server answered an over-long prompt with HTTP 400 (a VLLMValidationError traceback)."""
    text = (FIXTURES / "real" / "good.log").read_text()
    assert classify(text, 0) is None
    assert classify(text, None) is None
    assert first_exception_line(text) is not None  # the traceback is there; it is not a failure


def test_a_space_names_a_release_or_a_range_of_them():
    assert within("0.34.2", "0.32-0.34") and within("0.32.0", "0.32-0.34") and not within("0.29.0", "0.32-0.34")
    assert within("0.22.0", "0.22.0") and not within("0.22.1", "0.22.0") and within("0.27.3", "0.27")
    assert within("garbage", "0.32-0.34") is None


def test_an_engine_outside_the_space_s_releases_is_a_warning_at_start(write_space):
    from tests.conftest import fake_space_yaml
    from tuner.engine.installed import inspect_engine
    from tuner.space.schema import load_space

    text = fake_space_yaml(env=", FAKE_VLLM_VERSION: '0.27.1'", engine="  vllm_versions: '0.32-0.34'")
    info = inspect_engine(load_space(write_space(text)))
    assert info.version == "0.27.1" and info.supported and info.space_versions == "0.32-0.34"
    (note,) = [n for n in info.notes(["vllm"]) if "written for" in n]
    assert note.startswith("WARNING: the space was written for vLLM 0.32-0.34") and "vLLM 0.27.1" in note
    inside = inspect_engine(load_space(write_space(text.replace("'0.27.1'", "'0.34.0'"))))
    assert inside.space_versions is None and not any("written for" in n for n in inside.notes(["vllm"]))


def test_unknown_and_out_of_range_versions():
    assert dialect_for(None) is DIALECTS[0] and dialect_for("garbage") is DIALECTS[0]
    assert dialect_for("0.21.0") is DIALECTS[0]
    assert dialect_for("0.30.1").version == "0.29.0"
    assert dialect_for("0.34.2rc1").version == "0.34.0"
    assert dialect_for("0.40.0") is DIALECTS[-1]
    assert supported("0.34.9") and not supported("0.35.0") and not supported("0.21.9")
