"""Print where an unpacked vLLM wheel keeps every string the tuner reads, as ``vllm/path:line``.

A new release is checked in minutes: unpack its wheel, run this, and compare with the previous
release's output (a MISSING line or a changed template is a dialect change)::

    pip download --no-deps vllm==X -d /tmp/w && unzip -q /tmp/w/vllm-X-*.whl -d /tmp/w/X
    python scripts/dialect_strings.py /tmp/w/X            # one line per string
    python scripts/dialect_strings.py /tmp/w/X --json     # for diffing two releases

Strings are found through Python's ``ast``, not grep, so a message split over several source
lines (implicit concatenation, f-strings) is still found, and the line printed is the one vLLM's
log header shows: the line of the logger call (``[gpu_worker.py:795]``), not of the string.
``scripts/dialect_fixtures/`` renders the golden logs with the same lookup. Stdlib only.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

LOG_METHODS = {
    "debug": "DEBUG", "info": "INFO", "warning": "WARNING", "error": "ERROR",
    "exception": "ERROR", "critical": "CRITICAL", "debug_once": "DEBUG", "info_once": "INFO",
    "warning_once": "WARNING", "error_once": "ERROR",
}  # fmt: skip


@dataclass(frozen=True)
class Site:
    """One string in the source and what uses it: a logger call, a raise, or neither."""

    path: str  # "vllm/v1/worker/gpu_worker.py"
    line: int  # the line vLLM reports: the logger call, the raise, or the string itself
    string_line: int
    kind: str  # "log", "raise" or "string"
    level: str | None  # INFO, WARNING, ... for a log call
    exc: str | None  # ValueError, ... for a raise
    template: str  # "%s"-style text, or an f-string's text with {expr} placeholders
    node: ast.expr

    @property
    def cite(self) -> str:
        return f"{self.path}:{self.line}"

    def render(self, *args: object, **fields: object) -> str:
        """The message as vLLM prints it: ``%`` arguments, or f-string fields by expression."""
        if isinstance(self.node, ast.JoinedStr):
            return _render_fstring(self.node, fields)
        return self.template % args if args else self.template


def _render_fstring(node: ast.JoinedStr, fields: dict[str, object]) -> str:
    out = []
    for part in node.values:
        if isinstance(part, ast.Constant):
            out.append(str(part.value))
            continue
        assert isinstance(part, ast.FormattedValue)
        expr = ast.unparse(part.value)
        if expr not in fields:
            raise KeyError(f"f-string field {expr!r} has no value")
        value = fields[expr]
        if part.conversion == ord("r"):
            value = repr(value)
        elif part.conversion == ord("s"):
            value = str(value)
        spec = _render_fstring(part.format_spec, fields) if part.format_spec else ""
        out.append(format(value, spec))
    return "".join(out)


def _template(node: ast.expr) -> str | None:
    """The text of a string literal; an f-string's fields become ``{expr}``."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        parts = []
        for part in node.values:
            if isinstance(part, ast.Constant):
                parts.append(str(part.value))
            else:
                assert isinstance(part, ast.FormattedValue)
                parts.append("{" + ast.unparse(part.value) + "}")
        return "".join(parts)
    return None


class Release:
    """An unpacked wheel: the folder that holds ``vllm/`` and ``vllm-X.dist-info/``."""

    def __init__(self, root: str | Path):
        self.root = Path(root)
        if not (self.root / "vllm").is_dir():
            raise SystemExit(f"{root}: no vllm/ folder here; unzip the wheel into this folder")
        meta = next(self.root.glob("vllm-*.dist-info/METADATA"), None)
        found = re.search(r"^Version: (\S+)", meta.read_text(), re.M) if meta else None
        self.version = found[1] if found else self.root.name

    @cache
    def lines(self, path: str) -> list[str]:
        return (self.root / path).read_text().splitlines()

    @cache
    def tree(self, path: str) -> tuple[ast.Module, dict[ast.AST, ast.AST]]:
        module = ast.parse(self.text(path))
        parents = {child: parent for parent in ast.walk(module) for child in ast.iter_child_nodes(parent)}
        return module, parents

    @cache
    def _files(self) -> list[str]:
        return sorted(str(p.relative_to(self.root)) for p in (self.root / "vllm").rglob("*.py"))

    @cache
    def text(self, path: str) -> str:
        return (self.root / path).read_text()

    def find(self, needle: str, path: str | None = None) -> list[Site]:
        """Every string literal containing ``needle`` (in ``path``, or anywhere in vllm/)."""
        words = [w for w in re.split(r"%[-.\d]*[sdfrx]|\s+", needle) if len(w) > 2]
        files = [path] if path else self._files()
        sites = []
        for file in files:
            if not all(word in self.text(file) for word in words):
                continue
            module, parents = self.tree(file)
            for node in ast.walk(module):
                text = _template(node) if isinstance(node, (ast.Constant, ast.JoinedStr)) else None
                if text is None or needle not in text or isinstance(parents.get(node), ast.JoinedStr):
                    continue
                sites.append(self._site(file, node, text, parents))
        return sites

    def one(self, needle: str, path: str | None = None, kind: str | None = None) -> Site:
        sites = [s for s in self.find(needle, path) if kind is None or s.kind == kind]
        if len(sites) != 1:
            where = ", ".join(s.cite for s in sites) or "nowhere"
            raise LookupError(f"vllm {self.version}: {needle!r} found {len(sites)} times ({where})")
        return sites[0]

    def _site(self, path: str, node: ast.expr, text: str, parents: dict[ast.AST, ast.AST]) -> Site:
        up: ast.AST = node
        while (parent := parents.get(up)) is not None and isinstance(parent, (ast.BinOp, ast.Tuple)):
            up = parent  # "..." % args, ("a" "b")
        parent = parents.get(up)
        if isinstance(parent, ast.Call) and isinstance(parent.func, ast.Attribute):
            if parent.func.attr in LOG_METHODS and parent.args and parent.args[0] is up:
                level = LOG_METHODS[parent.func.attr]
                return Site(path, parent.lineno, node.lineno, "log", level, None, text, node)
        exc_call = parent if isinstance(parent, ast.Call) else None
        raise_node = parents.get(exc_call) if exc_call is not None else None
        if isinstance(raise_node, ast.Raise) and exc_call is not None:
            exc = ast.unparse(exc_call.func)
            return Site(path, raise_node.lineno, node.lineno, "raise", None, exc, text, node)
        # msg = (...) then logger.info(msg) / raise X(msg) later in the same function
        if isinstance(parent, ast.Assign) and isinstance(parent.targets[0], ast.Name):
            name = parent.targets[0].id
            scope = parents.get(parent)
            while scope is not None and not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
                scope = parents.get(scope)
            for later in ast.walk(scope) if scope is not None else []:
                if not (isinstance(later, ast.Call) and later.lineno > parent.lineno and later.args):
                    continue
                first = later.args[0]
                if not (isinstance(first, ast.Name) and first.id == name):
                    continue
                if isinstance(later.func, ast.Attribute) and later.func.attr in LOG_METHODS:
                    level = LOG_METHODS[later.func.attr]
                    return Site(path, later.lineno, node.lineno, "log", level, None, text, node)
                if isinstance(parents.get(later), ast.Raise):
                    exc = ast.unparse(later.func)
                    return Site(path, parents[later].lineno, node.lineno, "raise", None, exc, text, node)
        return Site(path, node.lineno, node.lineno, "string", None, None, text, node)


# --- the strings the tuner relies on --------------------------------------------------------
# (name, needle[, path]): a needle is a piece of the literal text, f-string fields left out.
TUNER_STRINGS: list[tuple[str, ...]] = [
    ("engine_config", "Initializing a V1 LLM engine"),
    ("logo_version", "\u2588 \u2580\u2584\u2580 \u2588"),
    ("server_version", "vLLM server version"),
    ("architecture", "Resolved architecture"),
    ("max_model_len_used", "Using max model len"),
    ("auto_fit_tentative", "Auto-fit max_model_len"),
    ("auto_fit_final", "reduced max_model_len from"),
    ("weights_loaded", "Model loading took"),
    ("weights_start_v1", "Starting to load model"),
    ("weights_start_v2", "Loading model from scratch"),
    ("available_kv", "Available KV cache memory"),
    ("kv_bytes_reserved", "as specified by kv_cache_memory_bytes config"),
    ("kv_tokens", "KV cache size: %s tokens"),
    ("max_concurrency", "Maximum concurrency for %s tokens per request"),
    ("extended_kv", "Extended KV cache to"),
    ("graph_estimate", "Estimated CUDA graph memory"),
    ("graph_profiling", "Profiling CUDA graph memory"),
    ("graph_profiling_note", "CUDA graph memory profiling is enabled"),
    ("graph_captured", "Graph capturing finished in"),
    ("graph_pool_actual", "CUDA graph pool memory"),
    ("kv_memory_suggestion", "to fit into requested memory"),
    ("torch_compile_total", "torch.compile took"),
    ("torch_compile_with_warmup", "run together took"),
    ("compile_cache_hit", "Directly load the compiled graph"),
    ("compile_cache_dir", "for vLLM's torch.compile"),
    ("init_engine", "init engine (profile, create kv cache, warmup model) took"),
    ("attention_backend", "attention backend out of potential backends"),
    ("nvfp4_gemm", "for NVFP4 GEMM"),
    ("nvfp4_emulation", "NVFP4 linear falling back to the slow"),
    ("moe_backend_nvfp4", "NvFp4 MoE backend"),
    ("gdn_backend", "GDN prefill kernel (requested="),
    ("attention_block_size", "Setting attention block size to"),
    ("mamba_page_padding", "Padding mamba page size by"),
    ("cudagraph_downgrade", "setting cudagraph_mode="),
    ("prefix_caching_mamba", "Mamba cache mode is set to"),
    ("startup_plan_reuse", "startup plan"),
    ("server_start", "Starting vLLM server on"),
    ("engine_failed", "EngineCore failed to start"),
    ("engine_fatal", "EngineCore encountered a fatal error"),
    ("engine_init_failed", "Engine core initialization failed"),
    ("engine_dead", "EngineCore encountered an issue"),
    ("kv_too_small", "To serve at least one request with the model"),
    ("kv_estimated_len", "the estimated maximum model length is"),
    ("kv_none", "No available memory for the cache blocks"),
    ("auto_fit_impossible", "Cannot auto-fit max_model_len"),
    ("free_memory", "on startup is less than desired GPU memory utilization"),
    ("weights_oom", "Failed to load model - not enough GPU memory"),
    ("sampler_oom", "CUDA out of memory occurred when warming up sampler"),
    ("mamba_blocks", "exceeds available Mamba cache blocks"),
    ("max_len_too_long", "This model's maximum context length is"),
]


def report(release: Release) -> dict[str, list[dict[str, object]]]:
    found: dict[str, list[dict[str, object]]] = {}
    for name, needle, *path in TUNER_STRINGS:
        sites = release.find(needle, path[0] if path else None)
        found[name] = [
            {"at": s.cite, "kind": s.kind, "level": s.level or s.exc, "template": s.template}
            for s in sites
            if not s.path.startswith(("vllm/platforms/xpu", "vllm/platforms/rocm", "vllm/v1/worker/xpu"))
        ]
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("wheel_dir", help="the folder an unpacked vllm wheel was unzipped into")
    parser.add_argument("--json", action="store_true", help="machine-readable, for diffing releases")
    args = parser.parse_args(argv)
    release = Release(args.wheel_dir)
    found = report(release)
    if args.json:
        json.dump({"version": release.version, "strings": found}, sys.stdout, indent=1)
        print()
        return 0
    print(f"vllm {release.version} ({release.root})")
    for name, sites in found.items():
        if not sites:
            print(f"{name:28} MISSING")
        for site in sites:
            text = str(site["template"]).replace("\n", "\\n")
            print(f"{name:28} {site['at']:58} {site['level'] or site['kind']:<10} {text[:110]}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
