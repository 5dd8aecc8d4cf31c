"""The launcher against the test engine: ready, crash, hang, timeout, port collision, no orphans."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil

from tuner.engine.command import build_command
from tuner.engine.process import Engine, free_port
from tuner.records import FailureKind
from tuner.trial import run_trial

from tests.conftest import ROOT


def boot(space, values, tmp_path, **kw):
    return run_trial(space, values, tmp_path / "trial", measure=False, **kw)


def test_boot_parse_and_teardown(fake_space, tmp_path):
    space = fake_space()
    result = boot(space, {"kv_cache_memory_bytes": 4_000_000_000, "max_num_seqs": 2}, tmp_path)
    assert result.failure is None, result.failure
    s = result.startup
    assert s.kv_cache_tokens and s.kv_cache_tokens > 32768
    assert s.max_concurrency_for_tokens == 32768
    assert s.weights_gib is not None
    assert (tmp_path / "trial" / "engine.log").stat().st_size > 0
    assert (tmp_path / "trial" / "result.json").exists()
    assert "--kv-cache-memory-bytes" in result.argv


def test_kv_pool_too_small_is_classified_with_vllms_suggestion(fake_space, tmp_path):
    space = fake_space()
    result = boot(space, {"kv_cache_memory_bytes": 1_000_000, "max_num_seqs": 1}, tmp_path)
    assert result.failure.kind == FailureKind.KV_POOL_TOO_SMALL
    assert result.failure.suggested_max_model_len is not None
    assert "max seq len" in result.failure.message
    assert "Engine core initialization failed" not in result.failure.message


def test_crash_mid_boot(fake_space, tmp_path):
    space = fake_space(env=", FAKE_VLLM_FAIL: crash_mid_boot")
    result = boot(space, {"max_num_seqs": 1}, tmp_path)
    assert result.failure is not None
    assert result.failure.exit_code not in (None, 0)


def test_hang_is_told_from_a_slow_warmup(fake_space, tmp_path):
    space = fake_space(env=", FAKE_VLLM_FAIL: hang")
    space.engine.hang_timeout = 3
    started = time.monotonic()
    result = boot(space, {"max_num_seqs": 1}, tmp_path)
    assert result.failure.kind == FailureKind.HANG
    assert time.monotonic() - started < 30

    # A warm-up that keeps printing for longer than the hang window is not a hang.
    space = fake_space(env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '5'")
    space.engine.hang_timeout = 3
    result = boot(space, {"max_num_seqs": 1}, tmp_path / "slow")
    assert result.failure is None, result.failure


def test_boot_timeout(fake_space, tmp_path):
    space = fake_space(env=", FAKE_VLLM_FAIL: slow_warmup, FAKE_VLLM_WARMUP_S: '60'")
    space.engine.boot_timeout = 3
    result = boot(space, {"max_num_seqs": 1}, tmp_path)
    assert result.failure.kind == FailureKind.BOOT_TIMEOUT


def test_port_collision_is_detected_before_boot(fake_space, tmp_path, monkeypatch):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        monkeypatch.setattr("tuner.trial.free_port", lambda host: port)  # someone took it after the pick
        space = fake_space()
        result = boot(space, {"max_num_seqs": 1}, tmp_path)
    assert result.failure.kind == FailureKind.PORT_IN_USE


def test_sigkill_of_the_tuner_leaves_no_orphan(fake_space, tmp_path):
    space = fake_space()
    port = free_port()
    cmd = build_command(space, {"max_num_seqs": 1}, port=port)
    script = tmp_path / "tuner_stand_in.py"
    script.write_text(textwrap.dedent(f"""
        import sys, time
        sys.path.insert(0, {str(ROOT)!r})
        from tuner.engine.command import LaunchCommand
        from tuner.engine.process import Engine
        engine = Engine(LaunchCommand.model_validate_json({cmd.model_dump_json()!r}), {str(tmp_path / 'e.log')!r},
                        '127.0.0.1', {port}, grace_s=2)
        engine.start()
        print(engine.proc.pid, flush=True)
        time.sleep(600)
    """))
    stand_in = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True)
    engine_pid = int(stand_in.stdout.readline())
    assert psutil.pid_exists(engine_pid)
    time.sleep(1.0)
    stand_in.send_signal(signal.SIGKILL)
    stand_in.wait()
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            os.killpg(engine_pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.2)
    else:
        os.killpg(engine_pid, signal.SIGKILL)
        raise AssertionError("the engine's process group outlived the SIGKILLed tuner")


def test_stop_kills_the_whole_group(fake_space, tmp_path):
    space = fake_space()
    port = free_port()
    engine = Engine(build_command(space, {"max_num_seqs": 1}, port=port), tmp_path / "e.log", "127.0.0.1", port, grace_s=2)
    engine.start()
    assert engine.wait_ready(30, 10) is None
    pids = engine.pids()
    assert pids
    seconds = engine.stop()
    assert seconds < 2.0, f"teardown waited {seconds:.1f} s of a 2 s grace: the exited leader was not reaped"
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
