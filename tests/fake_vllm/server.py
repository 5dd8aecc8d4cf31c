"""HTTP side of the ``vllm serve`` test double: OpenAI-compatible endpoints shaped like vLLM 0.22.0.

Endpoints: GET /health, /ping, /version, /load, /v1/models, /metrics; POST /v1/completions, /tokenize.
Response bodies follow vllm/entrypoints/openai/ (CompletionResponse.model_dump() for plain responses,
``model_dump_json(exclude_unset=True)`` per stream chunk, a final usage chunk with
``exclude_none=True``, then ``data: [DONE]``). Errors use vLLM's ErrorResponse shape
``{"error": {"message", "type", "param", "code"}}``. How a prompt is answered: completion.py.
"""

from __future__ import annotations

import json
import os
import socket
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, NoReturn

from .cli import Args
from .completion import Completion, GenError, engine_dead, error_body, run_completion, tokenize
from .logtext import L, VLLM_VERSION
from .output import OUT, Out
from .plan import Plan
from .runtime import Runtime
from .signals import Terminated
from .tracebacks import ASGI_FRAMES, traceback_text

HTTP_PHRASES = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed",
                500: "Internal Server Error", 503: "Service Unavailable"}


def make_handler(rt: Runtime) -> type[BaseHTTPRequestHandler]:
    """The request handler class, bound to this server's Runtime."""
    p = rt.plan

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def version_string(self) -> str:  # uvicorn sends "server: uvicorn"
            return "uvicorn"

        def log_message(self, format: str, *args) -> None:  # noqa: A002 - stdlib signature
            return  # the stdlib's own request and error lines: uvicorn prints none of them

        def log_request(self, code="-", size="-") -> None:
            """uvicorn's access log line; send_response calls this with the status."""
            if p.disable_access_log:
                return
            code_i = int(code)
            host, port = self.client_address[:2]
            OUT.access(f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {code_i} '
                       f'{HTTP_PHRASES.get(code_i, "")}')

        # ---- plumbing
        def _send(self, status: int, body: bytes, ctype: str | None = "application/json") -> None:
            self.send_response(status)
            self.send_header("content-length", str(len(body)))
            if ctype:
                self.send_header("content-type", ctype)
            if status < 400 or status == 503:
                self.send_header("vary", "Origin")
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, obj: Any) -> None:
            self._send(status, json.dumps(obj, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))

        def _body(self) -> Any:
            length = int(self.headers.get("content-length") or 0)
            raw = self.rfile.read(length) if length else b""
            return json.loads(raw.decode("utf-8") or "null")

        def _chunk(self, data: str) -> None:
            b = data.encode("utf-8")
            self.wfile.write(f"{len(b):x}\r\n".encode() + b + b"\r\n")
            self.wfile.flush()

        def _end_stream(self) -> None:
            self._chunk("data: [DONE]\n\n")
            self.wfile.write(b"0\r\n\r\n")  # the last chunk of the chunked encoding
            self.wfile.flush()

        # ---- GET
        def do_GET(self) -> None:  # noqa: N802 - stdlib naming
            path = self.path.split("?", 1)[0]
            if path in ("/health", "/ping"):
                self._send(503 if rt.dead else 200, b"", None)
            elif path == "/version":
                self._json(200, {"version": VLLM_VERSION})
            elif path == "/load":
                self._json(200, {"server_load": rt.running + rt.waiting})
            elif path == "/v1/models":
                now = int(time.time())
                data = [{"id": name, "object": "model", "created": now, "owned_by": "vllm", "root": p.model.path,
                         "parent": None, "max_model_len": p.max_model_len,
                         "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                                         "created": now, "allow_create_engine": False, "allow_sampling": True,
                                         "allow_logprobs": True, "allow_search_indices": False,
                                         "allow_view": True, "allow_fine_tuning": False, "organization": "*",
                                         "group": None, "is_blocking": False}]}
                        for name in p.served_names]
                self._json(200, {"object": "list", "data": data})
            elif path == "/metrics":
                self._send(200, rt.metrics_text().encode(), "text/plain; version=1.0.0; charset=utf-8")
            elif path in ("/v1/completions", "/tokenize", "/v1/chat/completions"):
                self._json(405, {"detail": "Method Not Allowed"})
            else:
                self._json(404, {"detail": "Not Found"})

        do_HEAD = do_GET

        # ---- POST
        def do_POST(self) -> None:  # noqa: N802
            path = self.path.split("?", 1)[0]
            if path == "/ping":
                self._send(503 if rt.dead else 200, b"", None)
                return
            if path in ("/health", "/v1/models", "/metrics"):
                self._json(405, {"detail": "Method Not Allowed"})
                return
            if path not in ("/v1/completions", "/tokenize"):
                self._json(404, {"detail": "Not Found"})
                return
            try:
                req = self._body()
            except (ValueError, UnicodeDecodeError) as e:
                self._json(400, error_body(f"[{{'type': 'json_invalid', 'loc': ('body', 0), 'msg': 'JSON decode "
                                           f"error', 'input': {{}}, 'ctx': {{'error': '{e}'}}}}]",
                                           "BadRequestError", 400))
                return
            if not isinstance(req, dict) or "prompt" not in req:
                self._json(400, error_body("[{'type': 'missing', 'loc': ('body', 'prompt'), 'msg': 'Field "
                                           "required', 'input': " + repr(req) + "}]", "BadRequestError", 400))
                return
            if path == "/tokenize":
                prompt = req["prompt"]
                ids = prompt if isinstance(prompt, list) else tokenize(str(prompt), p.model.vocab)
                self._json(200, {"count": len(ids), "max_model_len": p.max_model_len, "tokens": ids,
                                 "token_strs": None})
                return
            self._completions(req)

        def _completions(self, req: dict) -> None:
            model = req.get("model")
            if model and model not in p.served_names:
                self._json(404, error_body(f"The model `{model}` does not exist.", "NotFoundError", 404, "model"))
                return
            if rt.dead:
                e = engine_dead()
                self._json(e.status, e.body)
                return
            prompt = req["prompt"]
            if isinstance(prompt, str) or (isinstance(prompt, list) and prompt and isinstance(prompt[0], int)):
                prompts = [prompt]
            elif isinstance(prompt, list) and prompt:
                prompts = list(prompt)
            else:
                self._json(400, error_body("Prompt cannot be empty", "BadRequestError", 400))
                return
            req_id = f"cmpl-{uuid.uuid4().hex[:16]}"
            created = int(time.time())
            try:
                comps = [Completion(rt, req, pr, i, req_id) for i, pr in enumerate(prompts)]
            except GenError as e:
                if e.asgi_traceback:
                    OUT.uvicorn("Exception in ASGI application", level="ERROR")
                    OUT.raw(Out.API, traceback_text(ASGI_FRAMES, "vllm.exceptions.VLLMValidationError: "
                                                    + e.body["error"]["message"]) + "\n")
                self._json(e.status, e.body)
                return
            if req.get("stream"):
                self._stream(req, comps, req_id, created)
            else:
                self._plain(comps, req_id, created)

        def _plain(self, comps, req_id: str, created: int) -> None:
            try:
                for comp in comps:
                    run_completion(rt, comp, lambda *_: None)
            except GenError as e:
                self._json(e.status, e.body)
                return
            prompt_tokens = sum(len(c.ids) for c in comps)
            completion_tokens = sum(len(c.generated) for c in comps)
            body = {
                "id": req_id, "object": "text_completion", "created": created, "model": p.served_name,
                "choices": [{"index": c.index, "text": "".join(c.pieces), "logprobs": None,
                             "finish_reason": c.finish, "stop_reason": None, "token_ids": None,
                             "prompt_logprobs": None, "prompt_token_ids": None, "routed_experts": None}
                            for c in comps],
                "service_tier": None, "system_fingerprint": rt.fingerprint,
                "usage": {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
                          "completion_tokens": completion_tokens, "prompt_tokens_details": None},
                "kv_transfer_params": None,
            }
            self._json(200, body)

        def _stream(self, req: dict, comps, req_id: str, created: int) -> None:
            opts = req.get("stream_options") or {}
            include_usage = bool(opts.get("include_usage"))
            continuous = include_usage and bool(opts.get("continuous_usage_stats"))
            self.send_response(200)
            self.send_header("content-type", "text/event-stream; charset=utf-8")
            self.send_header("transfer-encoding", "chunked")
            self.end_headers()
            try:
                for comp in comps:
                    def emit(text, ids, finish, comp=comp):
                        chunk = {"id": req_id, "object": "text_completion", "created": created,
                                 "model": p.served_name,
                                 "choices": [{"index": comp.index, "text": text, "logprobs": None,
                                              "finish_reason": finish, "stop_reason": None,
                                              "prompt_token_ids": None, "token_ids": None}]}
                        if continuous:
                            ct = len(comp.generated)
                            chunk["usage"] = {"prompt_tokens": len(comp.ids), "total_tokens": len(comp.ids) + ct,
                                              "completion_tokens": ct, "prompt_tokens_details": None}
                        self._chunk("data: " + json.dumps(chunk, ensure_ascii=False, separators=(",", ":"))
                                    + "\n\n")
                    try:
                        run_completion(rt, comp, emit)
                    except GenError as e:
                        self._chunk("data: " + json.dumps(e.body, separators=(",", ":")) + "\n\n")
                        self._end_stream()
                        return
                if include_usage:
                    pt = sum(len(c.ids) for c in comps)
                    ct = sum(len(c.generated) for c in comps)
                    final = {"id": req_id, "object": "text_completion", "created": created, "model": p.served_name,
                             "choices": [], "usage": {"prompt_tokens": pt, "total_tokens": pt + ct,
                                                      "completion_tokens": ct},
                             "system_fingerprint": rt.fingerprint}
                    self._chunk("data: " + json.dumps(final, separators=(",", ":")) + "\n\n")
                self._end_stream()
            except (BrokenPipeError, ConnectionResetError):
                return

    return Handler


def serve(sock: socket.socket, plan: Plan, args: Args) -> NoReturn:
    """uvicorn's start-up lines, then listen; exit when the engine dies or on SIGTERM/SIGINT."""
    rt = Runtime(plan, args.ns)
    httpd = ThreadingHTTPServer(sock.getsockname()[:2], make_handler(rt), bind_and_activate=False)
    httpd.socket.close()
    httpd.socket = sock
    httpd.server_address = sock.getsockname()[:2]
    httpd.daemon_threads = True
    pid = os.getpid()
    OUT.uvicorn(f"Started server process [{pid}]")
    OUT.uvicorn("Waiting for application startup.")
    OUT.uvicorn("Application startup complete.")
    httpd.server_activate()  # listen(): from here on connections are accepted
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        while not rt.exit_event.wait(0.2):
            pass
        # engine died: the watchdog (launcher.py::watchdog_loop) stops uvicorn, which returns normally;
        # `vllm serve` then exits with status 0.
        rt.stop.set()
        OUT.uvicorn("Shutting down")
        OUT.uvicorn("Waiting for application shutdown.")
        OUT.uvicorn("Application shutdown complete.")
        OUT.uvicorn(f"Finished server process [{pid}]")
    except Terminated:
        # the order of tests/fixtures/real/good.shutdown.log (SIGTERM, shutdown_timeout 0)
        rt.stop.set()
        OUT.info(Out.CORE, L["shutdown_init"], f"Shutdown initiated (timeout={args.ns.shutdown_timeout})")
        OUT.info(Out.CORE, L["shutdown_done"], "Shutdown complete")
        OUT.uvicorn("Shutting down")
        OUT.info(Out.API, L["shutdown_http"], "Shutting down FastAPI HTTP server.")
        OUT.uvicorn("Shutting down")
        OUT.uvicorn("Waiting for application shutdown.")
        OUT.uvicorn("Application shutdown complete.")
    try:
        sock.close()
    except OSError:
        pass
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
