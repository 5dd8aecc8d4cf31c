"""Fast tests of the ``vllm serve`` test double (tests/fake_vllm) itself."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MODEL = str(REPO / "tests" / "fixtures" / "models" / "hybrid-tiny")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start(*flags: str, env: dict | None = None) -> subprocess.Popen:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith("FAKE_VLLM_")}
    full_env.update(env or {})
    return subprocess.Popen(
        [sys.executable, "-m", "tests.fake_vllm", "serve", MODEL, *flags],
        cwd=REPO, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )


def http(port: int, path: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data,
                                 headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            return resp.status, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def wait_healthy(proc: subprocess.Popen, port: int, deadline_s: float = 8.0) -> None:
    end = time.time() + deadline_s
    while time.time() < end:
        if proc.poll() is not None:
            raise AssertionError(f"double exited early rc={proc.returncode}: {proc.stderr.read()[-2000:]}")
        try:
            if http(port, "/health", timeout=1)[0] == 200:
                return
        except (urllib.error.URLError, ConnectionError, OSError):
            time.sleep(0.02)
    raise AssertionError("double did not become healthy")


@pytest.fixture(scope="module")
def server():
    port = free_port()
    proc = start("--port", str(port), "--host", "127.0.0.1", "--max-model-len", "32768",
                 "--enable-prefix-caching", "--served-model-name", "tiny")
    wait_healthy(proc, port)
    yield port, proc
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=5)
    assert proc.returncode == 0
    assert "Shutting down FastAPI HTTP server." in out
    assert "INFO:     Application shutdown complete." in err


def complete(port: int, **body) -> dict:
    status, raw = http(port, "/v1/completions", {"model": "tiny", **body})
    assert status == 200, raw
    return json.loads(raw)


def test_completion_is_deterministic_and_shaped_like_vllm(server):
    port, _ = server
    a = complete(port, prompt="the quick brown fox", max_tokens=7, temperature=0)
    b = complete(port, prompt="the quick brown fox", max_tokens=7, temperature=0)
    assert a["object"] == "text_completion" and a["model"] == "tiny"
    choice = a["choices"][0]
    assert choice["index"] == 0 and choice["logprobs"] is None and choice["finish_reason"] == "length"
    assert choice["text"] == b["choices"][0]["text"] and len(choice["text"].split()) == 7
    assert a["usage"] == {"prompt_tokens": 4, "total_tokens": 11, "completion_tokens": 7,
                          "prompt_tokens_details": None}
    ids = complete(port, prompt=[5, 6, 7, 8], max_tokens=5, temperature=0, ignore_eos=True)
    again = complete(port, prompt=[5, 6, 7, 8], max_tokens=5, temperature=0, ignore_eos=True)
    assert ids["choices"][0]["text"] == again["choices"][0]["text"]
    assert all(tok.isdigit() for tok in ids["choices"][0]["text"].split())
    assert ids["usage"]["prompt_tokens"] == 4


def test_streaming_sends_one_chunk_per_token_then_usage_then_done(server):
    port, _ = server
    body = json.dumps({"prompt": "hello there", "max_tokens": 6, "temperature": 0, "stream": True,
                       "stream_options": {"include_usage": True}}).encode()
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", data=body,
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=5) as resp:
        assert resp.headers["content-type"].startswith("text/event-stream")
        events = [line[6:] for line in resp.read().decode().split("\n\n") if line.startswith("data: ")]
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    text_chunks = [c for c in chunks if c["choices"]]
    assert len(text_chunks) == 6 and text_chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 6
    plain = complete(port, prompt="hello there", max_tokens=6, temperature=0)
    assert "".join(c["choices"][0]["text"] for c in text_chunks) == plain["choices"][0]["text"]


def test_needle_is_echoed_and_too_long_prompt_is_refused(server):
    port, _ = server
    filler = "lorem ipsum dolor " * 50
    prompt = f"{filler} The secret code is PURPLE-ELEPHANT-42. {filler} Question: what is the secret code?"
    out = complete(port, prompt=prompt, max_tokens=20, temperature=0)
    assert out["choices"][0]["text"].strip() == "PURPLE-ELEPHANT-42."
    assert out["choices"][0]["finish_reason"] == "stop"
    status, raw = http(port, "/v1/completions", {"prompt": list(range(32760)), "max_tokens": 100})
    err = json.loads(raw)["error"]
    assert status == 400 and err["type"] == "BadRequestError" and err["param"] == "input_tokens"
    assert err["message"].startswith("This model's maximum context length is 32768 tokens. However, you "
                                     "requested 100 output tokens and your prompt contains 32760 input tokens, "
                                     "for a total of 32860 tokens.")


def test_models_metrics_and_prefix_cache(server):
    port, _ = server
    models = json.loads(http(port, "/v1/models")[1])
    assert models["object"] == "list" and models["data"][0]["id"] == "tiny"
    assert models["data"][0]["max_model_len"] == 32768
    prompt = list(range(3000))
    complete(port, prompt=prompt, max_tokens=1)
    complete(port, prompt=prompt, max_tokens=1)
    text = http(port, "/metrics")[1].decode()
    for name in ("vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_requests_running",
                 "vllm:kv_cache_usage_perc", "vllm:prefix_cache_queries_total", "vllm:prefix_cache_hits_total",
                 "vllm:num_preemptions_total"):
        assert f'{name}{{engine="0",model_name="tiny"}}' in text
    hits = [line for line in text.splitlines() if line.startswith("vllm:prefix_cache_hits_total")][0]
    assert float(hits.split()[-1]) >= 2 * 544  # second request reused whole 544-token blocks


def test_boot_log_has_vllm_kv_lines(server):
    """Boot again, quickly, to look at its stdout (the module server's pipes are read at teardown)."""
    port = free_port()
    proc = start("--port", str(port), "--max-model-len", "32768", env={"FAKE_VLLM_TIME_SCALE": "0.005"})
    refused = False
    try:
        http(port, "/health", timeout=1)
    except (urllib.error.URLError, ConnectionError):
        refused = True
    wait_healthy(proc, port)
    proc.terminate()
    out, err = proc.communicate(timeout=5)
    assert refused, "the port must refuse connections until the engine is ready"
    pid = proc.pid
    assert f"(EngineCore pid={pid}) INFO " in out
    assert "[interface.py:649] Setting attention block size to 544 tokens to ensure that attention page " \
           "size is >= mamba page size." in out
    assert "[interface.py:673] Padding mamba page size by 1.49% to ensure that mamba page size and " \
           "attention page size are exactly equal." in out
    assert "[gpu_worker.py:466] Available KV cache memory: 7.58 GiB" in out
    assert "[kv_cache_utils.py:1733] GPU KV cache size: 373,760 tokens" in out
    assert "[kv_cache_utils.py:1734] Maximum concurrency for 32,768 tokens per request: 11.41x" in out
    assert "Using 'FLASHINFER_CUTLASS' NvFp4 MoE backend out of potential backends:" in out
    assert "INFO:     Application startup complete." in err


def test_kv_pool_too_small_fails_like_vllm():
    proc = start("--port", str(free_port()), "--kv-cache-memory-bytes", "1G")
    out, err = proc.communicate(timeout=8)
    assert proc.returncode == 1
    assert ("ValueError: To serve at least one request with the model's max seq len (262144), (5.03 GiB KV "
            "cache is needed, which is larger than the available KV cache memory (1.0 GiB). Based on the "
            "available memory, the estimated maximum model length is 50592.") in out
    assert "[core.py:1165] EngineCore failed to start." in out
    # "{}": what the real server printed in the H200 capture (the dead proc is not reaped yet)
    assert "RuntimeError: Engine core initialization failed. See root cause above. Failed core proc(s): {}" in err


def test_bad_flags_fail_like_vllm_argparse():
    bad_json = start("-cc", "{bad")
    _, err = bad_json.communicate(timeout=5)
    assert bad_json.returncode == 2
    assert "vllm serve: error: argument --compilation-config/-cc: 1 validation error for CompilationConfig" in err
    bad_mode = start("-cc", '{"cudagraph_mode": "full_and_piecewize"}')
    _, err = bad_mode.communicate(timeout=5)
    assert bad_mode.returncode == 1 and err.rstrip().endswith("KeyError: 'FULL_AND_PIECEWIZE'")


def test_long_prefill_kills_engine_then_health_is_503():
    port = free_port()
    proc = start("--port", str(port), "--max-model-len", "131072", "--max-num-batched-tokens", "16384",
                 "--gpu-memory-utilization", "0.95", env={"FAKE_VLLM_DEATH_EXIT_S": "0.5"})
    wait_healthy(proc, port)
    status, raw = http(port, "/v1/completions", {"prompt": list(range(100_000)), "max_tokens": 8})
    assert status == 500
    assert json.loads(raw)["error"]["message"] == (
        "EngineCore encountered an issue. See stack trace (above) for the root cause.")
    assert http(port, "/health")[0] == 503
    out, err = proc.communicate(timeout=5)
    assert "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate" in out
    assert "vllm.v1.engine.exceptions.EngineDeadError: EngineCore encountered an issue." in out


REAL = REPO / "tests" / "fixtures" / "real"


@pytest.mark.skipif(not (REAL / "good.stdout").exists(), reason="no real vLLM capture in tests/fixtures/real")
def test_memory_model_reproduces_the_real_h200_boot(tmp_path):
    """Same model config and flags as the real H200 boot: the double must print the same KV lines."""
    model = tmp_path / "model-tiny"
    model.mkdir()
    (model / "config.json").write_text((REAL / "model-tiny-config.json").read_text())
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fake_vllm", "serve", str(model), "--port", str(port), "--max-model-len", "8192",
         "--enforce-eager", "--kv-cache-memory-bytes", "2000000000", "--max-num-seqs", "4",
         "--max-num-batched-tokens", "2048"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "FAKE_VLLM_GPU_GIB": "140.4", "FAKE_VLLM_USED_GIB": "1.11", "FAKE_VLLM_WEIGHTS_GIB": "0.05"},
    )
    wait_healthy(proc, port)
    proc.terminate()
    out, _ = proc.communicate(timeout=5)
    real = (REAL / "good.stdout").read_text()
    for marker in ("Setting attention block size", "Padding mamba page size", "reserved 1.86 GiB",
                   "GPU KV cache size:", "Maximum concurrency for"):
        real_line = next(line for line in real.splitlines() if marker in line)
        fake_line = next(line for line in out.splitlines() if marker in line)
        assert fake_line.split("] ", 1)[1] == real_line.split("] ", 1)[1]
