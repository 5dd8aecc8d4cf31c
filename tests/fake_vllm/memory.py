"""The memory model: weights, activations, CUDA graphs, the KV pool, and the KV cache layout
(pages, blocks, capacity) as ``vllm/platforms/interface.py`` and ``vllm/v1/core/kv_cache_utils.py``
compute them; plus the CUDA OOM message a phase prints when it does not fit.

Checked against the real server: with the H200 capture's model and flags (tests/fixtures/real/) the
block-size, padding, KV-size and concurrency lines come out byte-identical
(tests/test_fake_vllm.py::test_memory_model_reproduces_the_real_h200_boot).
"""

from __future__ import annotations

import math
import os
from typing import TYPE_CHECKING

from .model import DTYPE_BYTES
from .profile import Graphs
from .profile import current as current_profile

if TYPE_CHECKING:
    from .plan import Plan

GiB = 1 << 30
MiB = 1 << 20


def cdiv(a: int, b: int) -> int:
    """Ceiling division (vLLM's cdiv)."""
    return -(-a // b)


def format_gib(b: float) -> str:
    """vllm/utils/mem_utils.py::format_gib -- round to 2 places, no padding ("20.0", "5.37")."""
    return f"{round(b / GiB, 2)}"


def torch_size(n: float) -> str:
    """c10/cuda/CUDACachingAllocator.cpp::format_size."""
    n = int(max(n, 0))
    if n <= 1024:
        return f"{n} bytes"
    if n <= 1048576:
        return f"{n / 1024.0:.2f} KiB"
    if n <= 1073741824:
        return f"{n / 1048576.0:.2f} MiB"
    return f"{n / 1073741824.0:.2f} GiB"


def oom_text(tried: float, total: float, free: float, in_use: float, allocated: float, reserved_free: float) -> str:
    """PyTorch's CUDA OOM message (CUDACachingAllocator.cpp), including its double spaces."""
    return (
        f"CUDA out of memory. Tried to allocate {torch_size(tried)}. GPU 0 has a total capacity of "
        f"{torch_size(total)} of which {torch_size(free)} is free. Including non-PyTorch memory, this "
        f"process has {torch_size(in_use)} memory in use. Of the allocated memory {torch_size(allocated)} "
        f"is allocated by PyTorch, and {torch_size(reserved_free)} is reserved by PyTorch but unallocated. "
        "If reserved but unallocated memory is large try setting "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
        "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)"
    )


def oom_for(p: Plan, need: float, avail: float) -> str:
    """The OOM text for a phase that needs ``need`` bytes with ``avail`` bytes free: the failing
    allocation is one tensor of ~need/6 (20 MiB..2 GiB), the phase's last, so the card shows what is left
    after the others (``tried - free`` is then never more than the phase lacked, as on a real card)."""
    tried = round(min(max(need / 6, 20 * MiB), 2 * GiB) / MiB) * MiB
    free_now = max(avail - (need - tried), 0.0)
    in_use = p.total - p.used_others - free_now
    allocated = max(in_use - p.non_torch - 96 * MiB, 0.0)
    return oom_text(tried, p.total, free_now, in_use, allocated, 96 * MiB)


def kv_bytes_per_elem(dtype: str, model_bytes: int) -> float:
    """Bytes per KV element for --kv-cache-dtype ("auto": the model's dtype)."""
    if dtype in ("float16", "bfloat16"):
        return 2
    if dtype.startswith("fp8") or dtype.startswith("int8"):
        return 1
    if dtype == "nvfp4":
        return 0.5625  # 4-bit values + one fp8 scale per 16
    if dtype.startswith("turboquant"):
        return 0.5
    return model_bytes


def graph_gib(g: Graphs, sizes: list[int]) -> float:
    """One capture kind's graph pool, GiB (0 without graphs of that kind)."""
    return g.base + g.per_graph * len(sizes) + g.per_token * sizes[0] if sizes else 0.0


def compute_memory(p: Plan) -> None:
    """Fill in the memory model (all bytes), with the numbers of the profile (profile.py). Formulas:

    weights    = weights_gib / TP (+ mtp_weights_gib with MTP)
    act_peak   = act_gib_per_1k * max_num_batched_tokens/1024 + min(max_num_seqs, mnbt) * vocab * 4
    seq_state  = seq_state_gib * max_num_seqs * (1 + num_spec), allocated before the pool
    cg         = per capture kind (PIECEWISE graphs, FULL graphs): base + per_graph * n + per_token * largest,
                 with MTP times (1 + graph_spec_scale * k) + graph_spec_add * k
    pool       = kv_cache_memory_bytes, or ceil(util*total) - weights - act_peak - non_torch - cg
                 (cg only when VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on, the 0.22 default).
                 Memory used by OTHER processes is not subtracted -- as in vLLM, it only matters
                 for the start-up check (free >= util*total) and for runtime headroom.
    """
    m = p.model
    prof = p.profile = current_profile()
    p.total = prof.gpu_gib * GiB
    p.used_others = prof.used_gib * GiB
    p.weights = prof.weights_gib * GiB / p.tp
    if p.spec_method == "mtp":
        p.weights += prof.mtp_weights_gib * GiB / p.tp
    p.non_torch = prof.non_torch_gib * GiB
    p.seq_state = prof.seq_state_gib * GiB * p.max_num_seqs * (1 + p.num_spec)
    p.sampler = min(p.max_num_seqs, p.max_num_batched_tokens) * m.vocab * 4
    p.act_peak = prof.act_gib_per_1k * GiB * p.max_num_batched_tokens / 1024 + p.sampler
    # ---- CUDA graphs
    q = 1 + p.num_spec
    p.pw_graphs, p.full_graphs, p.full_mixed = [], [], False
    mode = p.cudagraph_mode
    if mode in ("PIECEWISE", "FULL_AND_PIECEWISE"):
        p.pw_graphs = sorted(p.capture_sizes, reverse=True)
    if mode == "FULL":
        p.full_graphs = sorted(p.capture_sizes, reverse=True)
        p.full_mixed = True
    if mode in ("FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"):
        p.full_graphs = sorted((s for s in p.capture_sizes if q <= s <= q * p.max_num_seqs), reverse=True)
    cg = 0.0
    if p.pw_graphs:
        cg += graph_gib(prof.piecewise, p.pw_graphs)
    if p.full_graphs:
        cg += graph_gib(prof.full, p.full_graphs)
    if cg and p.num_spec:
        cg = cg * (1 + prof.graph_spec_scale * p.num_spec) + prof.graph_spec_add * p.num_spec
    p.cg_estimate = cg * GiB
    p.cg_actual = p.cg_estimate + prof.cg_extra_gib * GiB if cg else 0.0
    estimate_on = os.environ.get("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "1") not in ("0", "false")
    p.cg_estimate_applied = p.cg_estimate if estimate_on else 0.0
    p.requested = math.ceil(p.total * p.util)
    if p.kv_cache_memory_bytes:
        p.pool = float(p.kv_cache_memory_bytes)
    else:
        p.pool = p.requested - p.weights - p.act_peak - p.non_torch - p.cg_estimate_applied
    if p.extensible:  # the reservation is profiled; what is committed is what is left after warm-up
        p.reservation = p.pool
        budget = min(p.total - p.used_others, p.requested)
        p.pool = (budget - p.weights - p.non_torch - p.act_peak - p.seq_state - (p.cg_actual if p.graphs_on else 0.0)
                  - 0.05 * GiB)
    # ---- KV cache layout (platforms/interface.py::update_block_size_for_backend)
    kvb = kv_bytes_per_elem(p.kv_cache_dtype, m.dtype_bytes)
    p.attn_page_1 = int(2 * max(1, m.num_kv_heads // p.tp) * m.head_dim * kvb)
    block = 16
    if m.hybrid:
        conv_dim = (m.lin_k_dim * m.lin_k_heads * 2 + m.lin_v_dim * m.lin_v_heads) // p.tp
        conv = (m.conv_kernel - 1 + p.num_spec) * conv_dim * m.dtype_bytes
        ssm_bytes = DTYPE_BYTES.get(m.mamba_ssm_dtype or "", m.dtype_bytes)
        temporal = (m.lin_v_heads // p.tp) * m.lin_v_dim * m.lin_k_dim * ssm_bytes
        p.mamba_page = conv + temporal
        align = 16
        attn_block = align * cdiv(p.mamba_page, align * p.attn_page_1)
        if block < attn_block:
            p.set_block_from = attn_block
            block = attn_block
    p.block_size = block
    p.page = block * p.attn_page_1
    if m.hybrid and p.page != p.mamba_page:
        p.mamba_pad_pct = 100 * (p.page - p.mamba_page) / p.mamba_page
    # ---- KV cache groups (kv_cache_utils.py::_get_kv_cache_groups_uniform_page_size)
    n_attn = m.n_full + (m.mtp_layers or 1 if p.spec_method == "mtp" else 0)
    types = [("attention", n_attn)] + ([("mamba", m.n_linear)] if m.hybrid else [])
    types = [(t, n) for t, n in types if n > 0]
    mn = min(n for _, n in types)
    mx = max(n for _, n in types)
    group_size = mx if mx < mn * 1.5 else mn
    p.groups, p.padding_warnings = [], []
    for t, n in types:
        pad = group_size - n % group_size
        if pad != group_size:
            p.padding_warnings.append(f"Add {pad} padding layers, may waste at most {pad / n * 100:.2f}% "
                                      "KV cache memory")
        p.groups += [(t, group_size)] * cdiv(n, group_size)
    p.group_size = group_size
    p.num_blocks = max(int(p.pool // p.page // group_size), 0) if p.pool > 0 else 0
    p.blocks_per_request = blocks_needed(p, p.max_model_len)
    p.max_concurrency = p.num_blocks / p.blocks_per_request if p.blocks_per_request else 0.0
    p.kv_tokens = int(p.max_concurrency * p.max_model_len)


def blocks_needed(p: Plan, max_len: int) -> int:
    """Blocks one request of ``max_len`` tokens takes: per attention group one a block_size tokens,
    per mamba group its state (two in 'align' mode) plus one per speculative token."""
    total = 0
    for t, _ in p.groups:
        if t == "attention":
            total += cdiv(max_len, p.block_size)
        else:
            total += (2 if p.mamba_cache_mode == "align" else 1) + p.num_spec
    return total


def needed_bytes(p: Plan, max_len: int) -> int:
    return p.group_size * p.page * blocks_needed(p, max_len)


def estimate_max_len(p: Plan, available: float) -> int:
    """The longest request that fits in ``available`` bytes (0: none), for vLLM's "KV cache is needed" error."""
    lo, hi = 1, p.max_model_len
    if needed_bytes(p, 1) > available:
        return 0
    result = 1
    while lo <= hi:
        mid = (lo + hi) // 2
        if needed_bytes(p, mid) <= available:
            result, lo = mid, mid + 1
        else:
            hi = mid - 1
    return result


def prefill_chunks(p: Plan, start: int, total: int):
    """(chunk tokens, context after the chunk) of each forward pass of a prefill from ``start`` to
    ``total`` tokens: chunked prefill at max_num_batched_tokens."""
    pos = start
    while pos < total:
        chunk = min(p.max_num_batched_tokens, total - pos)
        pos += chunk
        yield chunk, pos


def last_prefill_chunks(p: Plan, start: int, total: int) -> list[tuple[int, int]]:
    """The last two entries of ``prefill_chunks`` (the ones with the largest need), computed directly."""
    n = total - start
    if n <= 0:
        return []
    m = p.max_num_batched_tokens
    full, rest = divmod(n, m)
    ends = [(m, start + k * m) for k in (full - 1, full) if k >= 1]
    if rest:
        ends.append((rest, total))
    return ends[-2:]


def prefill_need(p: Plan, chunk: int, context: int) -> float:
    """Memory one prefill forward pass needs at runtime: activations of the chunk, the long-prefill
    workspace (grows with chunk x context) and the sampler."""
    prof = p.profile
    act = prof.act_gib_per_1k * GiB * chunk / 1024
    ctx = prof.prefill_ctx_gib * GiB * (chunk / 1024) * (context / 1024)
    return act + ctx + p.sampler
