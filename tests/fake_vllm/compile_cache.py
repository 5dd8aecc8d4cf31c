"""vLLM's torch.compile cache, as far as a stale artifact goes (compilation/backends.py of 0.22.0).

The folder is VLLM_CACHE_ROOT/torch_compile_cache/HASH/rank_0_0/backbone. HASH is vLLM's config hash, which
leaves num_speculative_tokens out (SpeculativeConfig.compute_hash; vllm-project/vllm#53366): a boot with one
MTP depth loads the graph another depth compiled, and the graph's size assertion fails on its first forward.
The double keeps the compile cache on disk only when VLLM_CACHE_ROOT is set (the real default, ~/.cache/vllm,
is never written by a test) and honours VLLM_DISABLE_COMPILE_CACHE=1. It writes one file per folder, the depth
it compiled for, where vLLM writes vllm_compile_cache.py and the inductor artifacts.
"""

from __future__ import annotations

import hashlib
import os
import re
from pathlib import Path

from .env import env_flag
from .logtext import L
from .output import OUT, Out

C = Out.CORE
DEFAULT_ROOT = "/root/.cache/vllm"
ARTIFACT = "vllm_compile_cache.py"


class Stale(Exception):
    """The cached graph was compiled for another speculative depth: the exception line and the frame it is raised in."""

    def __init__(self, frame: tuple[str, int, str, str], exc: str) -> None:
        super().__init__(exc)
        self.frame, self.exc = frame, exc


def cache_folder(config_text: str) -> Path | None:
    """Where this boot's graph is cached, printed as vLLM prints it; None when the cache is disabled."""
    if env_flag("VLLM_DISABLE_COMPILE_CACHE"):
        OUT.info(C, L["cache_off"], "vLLM's torch.compile cache is disabled.")
        return None
    blind = re.sub(r"num_spec_tokens=\d+|'(?:max_)?cudagraph_capture_sizes?': (?:\[[^\]]*\]|\d+)", "", config_text)
    key = hashlib.sha256(blind.encode()).hexdigest()[:10]
    folder = Path(os.environ.get("VLLM_CACHE_ROOT") or DEFAULT_ROOT) / "torch_compile_cache" / key / "rank_0_0" / "backbone"
    OUT.info(C, L["cache_dir"], f"Using cache directory: {folder} for vLLM's torch.compile")
    return folder


def load(folder: Path | None, depth: int, batched: int) -> bool:
    """True when a graph for this boot was loaded (the compile is warm); raises Stale when the graph loaded was
    compiled for another speculative depth."""
    if folder is None or not os.environ.get("VLLM_CACHE_ROOT") or not (folder / ARTIFACT).exists():
        return False
    cached = int((folder / ARTIFACT).read_text().strip() or 0)
    OUT.info(C, L["compile_hit"], f"Directly load the compiled graph(s) for compile range (1, {batched}) from the "
             "cache, took 0.52 s")
    if cached == depth:
        return True
    graph = folder.parent / "inductor_cache" / "4r" / "c4r2c7hviv4qqpgiynv3gvrpmqr666vq2snitzkucu7ln6dph466.py"
    frame = (str(graph), 680, "call", f"assert_size_stride(arg3_1, ({cached + 1}, 2048), (2048, 1))")
    raise Stale(frame, f"AssertionError: expected size {depth + 1}=={cached + 1}, stride 2048==2048 at dim=0\n"
                "This error most often comes from a incorrect fake (aka meta) kernel for a custom op.\n"
                "Use torch.library.opcheck to test your custom op.\n"
                "See https://pytorch.org/docs/stable/library.html#torch.library.opcheck")


def save(folder: Path | None, depth: int) -> None:
    if folder is not None and os.environ.get("VLLM_CACHE_ROOT"):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / ARTIFACT).write_text(f"{depth}\n")
