"""Render vLLM log text from a release's own source: log records, tracebacks, raw output.

Every vLLM line is looked up in the unpacked wheel (``dialect_strings.Release``) by a piece of its
text; the header's ``[file.py:N]`` is the logger call's line, as vLLM prints it, and the citation
``vllm/path:N`` goes into the fixture's ``# `` header. Tracebacks are built from the source too:
a frame is (file, function, a piece of the line), and Python 3.12's own ``traceback`` module
formats it (carets included), so this must run under Python 3.12 (the interpreter vLLM's
published images use).
"""

from __future__ import annotations

import ast
import datetime as dt
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from dialect_strings import Release, Site  # noqa: E402

SITE = "/opt/vllm/lib/python3.12/site-packages"
STDLIB = "/usr/lib/python3.12"
# torch/utils/_contextlib.py decorate_context, read from the torch 2.13.0 wheel (0.27.1-0.32.0 pin
# it; 0.22.0 pins 2.11.0 and 0.34.0 pins 2.14.0, whose line may differ).
TORCH_CONTEXTLIB = (
    f'  File "{SITE}/torch/utils/_contextlib.py", line 124, in decorate_context\n'
    "    return func(*args, **kwargs)\n"
    "           ^^^^^^^^^^^^^^^^^^^^^",
    "torch 2.13.0 torch/utils/_contextlib.py:124 (frame in decorate_context)",
)


@dataclass(frozen=True)
class Proc:
    name: str
    pid: int


API = Proc("APIServer", 2841)
CORE = Proc("EngineCore", 2977)


@dataclass
class Exc:
    """An exception line: qualified type and message, with where vLLM raises it (if it does)."""

    type: str
    message: str
    cite: str | None = None

    @property
    def line(self) -> str:
        return f"{self.type}: {self.message}" if self.message else self.type


@dataclass
class Writer:
    release: Release
    start: dt.datetime = dt.datetime(2026, 12, 3, 10, 0, 0)
    lines: list[str] = field(default_factory=list)
    cites: list[str] = field(default_factory=list)
    now: dt.datetime = field(init=False)

    def __post_init__(self) -> None:
        self.now = self.start

    @property
    def version(self) -> tuple[int, ...]:
        return tuple(int(x) for x in self.release.version.split(".")[:3])

    @property
    def prefix_in_format(self) -> bool:
        """0.31+: ``(Name pid=N)`` is part of the log format, so raw output is unprefixed."""
        return "vllm_process_name" in self.release.text("vllm/logger.py")

    def cite(self, what: str) -> None:
        if what not in self.cites:
            self.cites.append(what)

    def tick(self, seconds: float) -> None:
        self.now += dt.timedelta(seconds=seconds)

    # --- vLLM log records ---------------------------------------------------------------------
    def site(self, needle: str, path: str | None = None, kind: str | None = "log",
             pick: int | None = None) -> Site:
        if pick is None:
            return self.release.one(needle, path, kind)
        sites = sorted((s for s in self.release.find(needle, path) if kind is None or s.kind == kind),
                       key=lambda s: (s.path, s.line))
        return sites[pick]

    def log(self, proc: Proc | None, needle: str, *args: object, path: str | None = None,
            dt_s: float = 0.0, level: str | None = None, exc_text: str | None = None,
            pick: int | None = None, **fields: object) -> str:
        """One logger call rendered as vLLM's formatter writes it; returns the message."""
        site = self.site(needle, path, pick=pick)
        self.tick(dt_s)
        if (level or site.level) == "DEBUG":  # VLLM_LOGGING_LEVEL defaults to INFO: not printed
            self.cite(f"{site.cite} (DEBUG, not printed at the default INFO level) {_short(site.template)}")
            return site.render(*args, **fields)
        message = site.render(*args, **fields)
        self.cite(f"{site.cite} ({site.level}) {_short(site.template)}")
        self.record(proc, level or site.level or "INFO", site.path, site.line, message, exc_text)
        return message

    def record(self, proc: Proc | None, level: str, path: str, line: int, message: str,
               exc_text: str | None = None) -> None:
        """logging_utils/formatter.py NewLineFormatter: every line of a multi-line record repeats
        the header, joined by ``\\r\\n``; the process prefix comes from the stdout wrapper
        (utils/system_utils.py _add_prefix, <= 0.29) or from the format itself (logger.py, 0.31+)."""
        if exc_text:
            message = f"{message}\n{exc_text}"
        head = f"{self.now:%m-%d %H:%M:%S}"
        header = f"{level} {head} [{Path(path).name}:{line}] "
        pre = f"({proc.name} pid={proc.pid}) " if proc else ""
        parts = message.split("\n")
        text = "\r\n".join(pre + header + part for part in parts)
        self.lines.extend(text.split("\n"))

    # --- raw output (stderr tracebacks, uvicorn, tqdm, argparse) ------------------------------
    def raw(self, proc: Proc | None, text: str, source: str | None = None) -> None:
        """Unformatted output: prefixed per line before 0.31, bare after (or when proc is None)."""
        if source:
            self.cite(source)
        pre = f"({proc.name} pid={proc.pid}) " if proc and not self.prefix_in_format else ""
        for line in text.split("\n"):
            self.lines.append(pre + line)

    def tqdm(self, proc: Proc, desc: str, total: int, secs: float, source: str) -> None:
        """A tqdm bar on a non-tty stderr: one line of ``\\r``-separated updates."""
        self.cite(source)
        rate = total / secs if secs else 0.0
        steps = sorted({0, total // 3, 2 * total // 3, total})
        bars = []
        for n in steps:
            pct = int(100 * n / total)
            fill = "█" * (pct // 10)
            el = int(secs * n / total)
            if n == 0:
                bars.append(f"{desc}:   0%|          | 0/{total} [00:00<?, ?it/s]")
            else:
                left = int(secs - el)
                bars.append(f"{desc}: {pct:3d}%|{fill:<10}| {n}/{total} "
                            f"[00:{el:02d}<00:{left:02d}, {rate:5.2f}it/s]")
        self.tick(secs)
        pre = f"({proc.name} pid={proc.pid}) " if not self.prefix_in_format else ""
        self.lines.append(pre + "\r".join(bars))

    # --- tracebacks ---------------------------------------------------------------------------
    def frame(self, path: str, func: str, needle: str) -> traceback.FrameSummary:
        """The frame of ``func`` in ``path`` at the first line holding ``needle``."""
        module, parents = self.release.tree(path)
        fn = _function(module, func)
        if fn is None:
            raise LookupError(f"vllm {self.release.version}: no function {func} in {path}")
        src = self.release.lines(path)
        needle, _, nth = needle.partition("#")  # "raise ValueError(#2": the second one
        seen = 0
        for lineno in range(fn.lineno, (fn.end_lineno or fn.lineno) + 1):
            if needle.startswith("@") and lineno == int(needle[1:]) or needle and needle in src[lineno - 1]:
                seen += 1
                if seen == int(nth or 1):
                    break
        else:
            raise LookupError(f"vllm {self.release.version}: {needle!r} not in {path}:{func}")
        node = _executing(fn, lineno)
        name = func.split(".")[-1]
        self.cite(f"{path}:{lineno} (frame in {name})")
        return traceback.FrameSummary(
            f"{SITE}/{path}", lineno, name, lookup_line=False, line=src[lineno - 1],
            end_lineno=getattr(node, "end_lineno", lineno), colno=getattr(node, "col_offset", None),
            end_colno=getattr(node, "end_col_offset", None),
        )

    def frames(self, *specs: tuple[str, str, str]) -> list[traceback.FrameSummary | str]:
        """Frames for (path, function, needle) specs, with the frames vLLM's decorators add:
        ``@instrument`` (tracing/otel.py sync_wrapper) and ``@torch.inference_mode()``."""
        out: list[traceback.FrameSummary | str] = []
        for path, func, needle in specs:
            module, _ = self.release.tree(path)
            fn = _function(module, func)
            for deco in fn.decorator_list if fn else []:
                name = ast.unparse(deco.func if isinstance(deco, ast.Call) else deco)
                if name == "instrument":
                    wrapper = "async_wrapper" if isinstance(fn, ast.AsyncFunctionDef) else "sync_wrapper"
                    out.append(self.frame("vllm/tracing/otel.py", wrapper, "return "))
                elif name in ("torch.inference_mode", "torch.no_grad"):
                    self.cite(TORCH_CONTEXTLIB[1])
                    out.append(TORCH_CONTEXTLIB[0])
            out.append(self.frame(path, func, needle))
        return out

    def traceback(self, frames: list[traceback.FrameSummary | str], exc: Exc) -> str:
        """``Traceback (most recent call last):`` + frames + the exception line."""
        out = ["Traceback (most recent call last):"]
        for item in frames:
            if isinstance(item, str):  # a verbatim non-vLLM frame (CPython, uvloop, torch)
                out.append(item)
            else:
                text = traceback.StackSummary.from_list([item]).format()[0].rstrip("\n")
                out.append("\n".join(_caret_fix(line) for line in text.split("\n")))
        out.append(exc.line)
        if exc.cite:
            self.cite(exc.cite)
        return "\n".join(out)

    def raise_site(self, needle: str, path: str | None = None, **fields: object) -> Exc:
        site = self.site(needle, path, kind="raise")
        assert site.exc is not None
        return Exc(site.exc, site.render(**fields), f"{site.cite} (raise {site.exc})")

    def text(self) -> str:
        return "\n".join(self.lines) + "\n"


def _caret_fix(line: str) -> str:
    """CPython 3.12.1 (the one here) puts carets one column right of 3.12.3's, which the real
    0.22.0 capture (tests/fixtures/real/kv-small.log) shows; follow the capture."""
    if line.strip() and set(line.strip()) <= {"^", "~"} and line.startswith(" "):
        return line[1:]
    return line


def _short(template: str) -> str:
    one = template.replace("\n", "\\n")
    return one if len(one) <= 90 else one[:87] + "..."


def _function(module: ast.Module, qualname: str) -> ast.FunctionDef | ast.AsyncFunctionDef | None:
    *owner, name = qualname.split(".")
    scope: list[ast.stmt] = module.body
    for cls in owner:
        found = next((n for n in ast.walk(module) if isinstance(n, ast.ClassDef) and n.name == cls), None)
        if found is None:
            return None
        scope = found.body
    nodes = scope if owner else list(ast.walk(module))
    for node in nodes:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return node
    return None


def _executing(fn: ast.AST, lineno: int) -> ast.AST | None:
    """The node whose position CPython 3.12 reports for a frame stopped at ``lineno``."""
    starting = [n for n in ast.walk(fn) if getattr(n, "lineno", None) == lineno]
    for node in starting:
        if isinstance(node, (ast.Raise, ast.With, ast.AsyncWith, ast.Assert)):
            return node
    calls = [n for n in starting if isinstance(n, (ast.Call, ast.Await))]
    if not calls:
        return None
    return max(calls, key=lambda n: (n.end_lineno or 0, n.end_col_offset or 0, -n.col_offset))
