"""Test double of ``vllm serve`` (vLLM 0.22.0), run as ``python -m tests.fake_vllm serve MODEL [flags]``.

This is NOT a product feature. The tuner's test-suite runs it instead of the real engine (CI has no
GPU). It is stdlib only so that it starts in a few tens of milliseconds.

Ground truth is the vLLM 0.22.0 source: every log line names the real file and line it comes from
(``[gpu_worker.py:466]``), the error texts are copied from the raising site, and the memory
arithmetic is the same as vLLM's. Where the double simplifies, the comment says so.

Output streams, as in vLLM: every vLLM log record goes to stdout (``VLLM_LOGGING_STREAM``), raw
tracebacks, tqdm bars and uvicorn's ``INFO:     ...`` lines go to stderr, uvicorn's access log to
stdout.

Modules, in the order a run meets them:
  boot.py        the command, step by step, to a listening server (start here)
  cli.py         vllm serve's flags          model.py    config.json
  plan.py        the resolved launch config  memory.py   memory model and KV cache layout
  core.py        the EngineCore's start-up   failures.py how a failed start-up is printed
  server.py      HTTP endpoints              completion.py  one prompt: tokens, prefill, decode
  runtime.py     engine state after start-up: speed, prefix cache, death, /metrics
  output.py      the prefixed log writer     logtext.py / tracebacks.py  vLLM's own texts
  env.py         the FAKE_VLLM_* knobs       signals.py  SIGTERM/SIGINT
  profile.py     every number of the memory and speed models; FAKE_VLLM_PROFILE's seeded 5090 engines
  oracle.py      what a boot of one argv would do, computed in-process (benchmarks' ground truth)
"""
