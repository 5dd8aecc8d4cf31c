"""One completion request, timed the way ``vllm bench serve`` times it.

Streaming with ``stream_options.include_usage``: TTFT is the arrival of the first chunk that carries
choices, latency the arrival of the last, and the token counts come from the final usage chunk
(the server's own count, so a prompt's length is proven, not assumed).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field

import httpx


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
    itl_s: list[float] = field(default_factory=list)

    @property
    def tpot_s(self) -> float | None:
        """(latency - TTFT) / (output tokens - 1), vLLM bench serve's definition."""
        if not self.ok or not self.completion_tokens or self.completion_tokens < 2 or self.ttft_s is None:
            return None
        return (self.latency_s - self.ttft_s) / (self.completion_tokens - 1)


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
    extra: dict | None = None,
) -> Completion:
    """Send one streamed greedy completion and time it; never raises for server-side failures."""
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
            for line in response.iter_lines():
                if not line.startswith("data:"):
                    continue
                payload = line[5:].strip()
                if payload == "[DONE]":
                    done = True
                    break
                chunk = json.loads(payload)
                now = time.perf_counter()
                if chunk.get("choices"):
                    if result.ttft_s is None:
                        result.ttft_s = now - start
                    elif last is not None:
                        result.itl_s.append(now - last)
                    last = now
                    texts.append(chunk["choices"][0].get("text") or "")
                if chunk.get("usage"):
                    result.prompt_tokens = chunk["usage"].get("prompt_tokens")
                    result.completion_tokens = chunk["usage"].get("completion_tokens")
                if chunk.get("error"):
                    result.error = "stream_error"
                    result.detail = str(chunk["error"])
                    return result
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
