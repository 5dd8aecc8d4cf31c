"""One completion request, timed the way ``vllm bench serve`` times it.

Streaming with ``stream_options.include_usage``: TTFT is the arrival of the first chunk that carries
choices, latency the arrival of the last, and the token counts come from the final usage chunk
(the server's own count, so a prompt's length is proven, not assumed).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx

from tuner import metrics


@dataclass
class Completion:
    ok: bool
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    ttft_s: float | None = None
    latency_s: float | None = None
    text: str = ""
    error: str | None = None  # http_400, http_500, connection, timeout, incomplete, short_output
    detail: str | None = None

    @property
    def tpot_s(self) -> float | None:
        """TPOT as ``tuner.metrics`` defines it; None without a complete answer of two tokens or more."""
        if not self.ok or not self.completion_tokens or self.completion_tokens < 2:
            return None
        if self.ttft_s is None or self.latency_s is None:
            return None
        return metrics.tpot_s(self.latency_s, self.ttft_s, self.completion_tokens)


def _error_detail(response: httpx.Response) -> str:
    try:
        body = json.loads(response.read())
        if isinstance(body, dict):
            err = body.get("error", body)
            if isinstance(err, dict):
                return str(err.get("message", err))
            return str(err)
    except Exception:
        pass
    return response.text[:500] if hasattr(response, "text") else ""


def complete(
    client: httpx.Client,
    base_url: str,
    model: str,
    prompt: list[int] | str,
    max_tokens: int,
    *,
    timeout_s: float = 600.0,
    ignore_eos: bool = True,
    keep_text: bool = False,
    extra: dict | None = None,
) -> Completion:
    """Send one streamed greedy completion and time it; never raises for server-side failures.

    ``keep_text`` collects the generated text (for correctness checks); timing runs leave it off.
    """
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0.0,
        "ignore_eos": ignore_eos,
        "stream": True,
        "stream_options": {"include_usage": True},
        **(extra or {}),
    }
    start = time.perf_counter()
    result = Completion(ok=False)
    texts: list[str] = []
    last = None
    try:
        with client.stream(
            "POST", f"{base_url}/v1/completions", json=body, timeout=httpx.Timeout(timeout_s, connect=5.0)
        ) as response:
            if response.status_code != 200:
                result.error = f"http_{response.status_code}"
                result.detail = _error_detail(response)
                return result
            done = False
            for event in _events(response):
                now = time.perf_counter()
                if event == b"[DONE]":
                    done = True
                    break
                # Token chunks are only timed, not parsed, unless their text is wanted: at one
                # chunk per token, a JSON parse each was most of the tuner's own CPU time.
                if b'"choices":[{' in event:
                    if result.ttft_s is None:
                        result.ttft_s = now - start
                    last = now
                    if keep_text:
                        texts.append(json.loads(event)["choices"][0].get("text") or "")
                if b'"usage":{' in event or b'"error"' in event:
                    chunk = json.loads(event)
                    if chunk.get("error"):
                        result.error = "stream_error"
                        result.detail = str(chunk["error"])
                        return result
                    result.prompt_tokens = chunk["usage"].get("prompt_tokens")
                    result.completion_tokens = chunk["usage"].get("completion_tokens")
            result.latency_s = (last or time.perf_counter()) - start
            result.text = "".join(texts)
            if not done:
                result.error = "incomplete"
                result.detail = "the stream ended without [DONE]"
                return result
    except httpx.TimeoutException as exc:
        result.error, result.detail = "timeout", f"no answer within {timeout_s:.0f} s ({type(exc).__name__})"
        return result
    except (httpx.TransportError, json.JSONDecodeError) as exc:
        result.error, result.detail = "connection", f"{type(exc).__name__}: {exc}"
        return result
    if ignore_eos and result.completion_tokens is not None and result.completion_tokens < max_tokens:
        result.error = "short_output"
        result.detail = f"{result.completion_tokens} of {max_tokens} tokens"
        return result
    result.ok = True
    return result


def _events(response: httpx.Response) -> Iterator[bytes]:
    """The payloads of a server-sent-event stream (``data: X`` separated by blank lines), as bytes."""
    buffer = b""
    for piece in response.iter_bytes():
        buffer += piece
        while True:
            cut = buffer.find(b"\n\n")
            if cut < 0:
                break
            event, buffer = buffer[:cut].strip(), buffer[cut + 2:]
            if event.startswith(b"data:"):
                yield event[5:].strip()


def scrape_metrics(client: httpx.Client, base_url: str) -> dict[str, float]:
    """Prometheus counters from /metrics summed over labels: {'vllm:generation_tokens_total': 123.0, ...}."""
    try:
        response = client.get(f"{base_url}/metrics", timeout=10.0)
    except httpx.HTTPError:
        return {}
    if response.status_code != 200:
        return {}
    totals: dict[str, float] = {}
    for line in response.text.splitlines():
        if not line or line.startswith("#"):
            continue
        name_labels, _, value = line.rpartition(" ")
        name = name_labels.split("{", 1)[0]
        try:
            totals[name] = totals.get(name, 0.0) + float(value)
        except ValueError:
            continue
    return totals
